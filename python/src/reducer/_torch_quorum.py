"""reducer.torch.all_reduce_quorum and reducer.torch.done: quorum steps and
uneven inputs on a process group of the "reducer" backend. An extension
beside torch.distributed, not a change to it: torch's own collectives keep
torch's semantics (every rank of the group takes part, a lost rank fails
them), except that a rank that called done() is left out of them.

    import reducer.torch

    dist.init_process_group("reducer")
    _, contributors = reducer.torch.all_reduce_quorum(grad, min_ranks=3)
    # grad now holds the sum over `contributors` only

It runs reducer.Client.all_reduce_quorum_ on the group's own client (the
Reducer job that backs the group; see reducer._quorum for the semantics),
in place, with the group's timeout. A rank left out of a step gets
reducer.FailedPrecondition and can no longer use the group: the survivors
go on with quorum steps, and torch's other collectives on the group, which
need every rank, fail from then on. Coming back means connecting a
reducer.Client to the group's job (`reducer.torch.backend_of(group).job`,
same rank and world size):
the group itself is not reconnected.

    for batch in my_batches:                  # uneven across ranks
        dist.all_reduce(stats)
    reducer.torch.done()                      # the others go on without this rank

done(group) runs reducer.Client.done on the group's client: from then on
the group's collectives go on without this rank (all_reduce over the
others, AVG dividing by their count; all_gather and broadcast as
reducer._quorum says), and done() returns once every rank of the group has
called it. A role like torch's Join context manager, without shadowing
each collective.
"""

import torch.distributed as dist

from reducer._torch_args import _op_name
from reducer._torch_backend import backend_of


def _client_of(group):
    """The reducer.Client behind `group` (None: the default group)."""
    return backend_of(group, "reducer.torch.all_reduce_quorum").client


def all_reduce_quorum(tensor, op=dist.ReduceOp.SUM, min_ranks=0, grace=2.0, group=None):
    """One quorum step over `group` (default: the default group), written into
    `tensor` (all or nothing). Returns reducer.QuorumResult(tensor,
    contributors) with .joined and .step; contributors are the group's
    ranks whose input is in the result, ascending."""
    client = _client_of(group)
    return client.all_reduce_quorum_(tensor, _op_name(op), min_ranks, grace)


def done(group=None):
    """This rank is out of data for `group` (default: the default group):
    returns once every rank of the group has called done()."""
    _client_of(group).done()
