"""Fault-tolerant steps, as methods of reducer.Client (QuorumSteps is one
of its bases): quorum steps and done(). QuorumResult is what a quorum step
returns:

    result, contributors = client.all_reduce_quorum(grad, min_ranks=3, grace=2.0)
    out = client.all_reduce_quorum_(grad)     # grad holds the result; out[0] is grad
    out.joined, out.step                      # ranks back since the last step; its number

A quorum step is an all-reduce that ends over the ranks that arrived within
`grace` seconds of the first arrival, or as soon as every rank not known dead
has arrived, provided at least `min_ranks` did (0: every rank). The result
is reduced over `contributors` only (ascending; "avg" divides by their
count) and is the same bits on each of them. The first step puts the job in
quorum mode: from then on a dead rank no longer ends the job for the others.
Steps are counted by the job, so every rank calls them in the same order.

A rank left out of a step (dead, or later than the grace) gets
reducer.FailedPrecondition on its late call: it must close its Client and
connect a new one to the same job, rank and world size. Its first step after
that lists it in `joined` on every rank; its input counts as the op's
identity. A survivor then hands it the state, e.g. with broadcast_ named
after `step` over contributors + joined (once a job is in quorum mode, its
other collectives must be named: a rank that joined again does not share
the others' count of unnamed calls).

Inputs and ops are all_reduce's, scalars included; the keyword-only
`name` (names the step instead of its number; the same on every rank) and
`timeout` are too, but not `group`: a step is over the whole job. A
min_ranks outside [0, world_size] or a negative or infinite grace raises
ValueError before anything is sent.

client.done() is for uneven inputs (Horovod's join, torch's Join): this rank
has no more data. From then on the job's collectives go on without it (an
all-reduce over the others, "avg" dividing by their count; an all-gather
with an empty part from it; a barrier counting it as arrived), so its peers
never wait for it; done() returns once every rank has called it, and then
every rank takes part again, unnamed calls matching as before.
"""

import numbers

import numpy as np

from reducer import _arrays


class QuorumResult(tuple):
    """(result, contributors), with `joined` (list of ranks) and `step` (int).

    A 2-tuple, so `result, contributors = ...` works; `result` is a new
    array/tensor/scalar, or the input itself for the in-place forms.
    """

    def __new__(cls, result, contributors, joined, step):
        self = super().__new__(cls, (result, contributors))
        self.joined = joined
        self.step = step
        return self

    @property
    def result(self):
        return self[0]

    @property
    def contributors(self):
        return self[1]

    def __getnewargs__(self):
        return (self[0], self[1], self.joined, self.step)

    def __repr__(self):
        return (f"QuorumResult(result={self[0]!r}, contributors={self[1]!r}, "
                f"joined={self.joined!r}, step={self.step!r})")


def _scalar_array(x):
    """x as a 1-element int64 or float64 array when it is a Python or numpy
    scalar (bool excluded, as all_reduce does), else None."""
    if isinstance(x, np.bool_):
        return None
    if isinstance(x, (numbers.Integral, np.integer)):
        return np.array([int(x)], dtype=np.int64)
    if isinstance(x, (numbers.Real, np.floating)):
        return np.array([float(x)], dtype=np.float64)
    return None


class QuorumSteps:
    """Mixin of reducer.Client: needs self._client (a _reducer.Client)."""

    def all_reduce_quorum(self, x, op="sum", min_ranks=0, grace=2.0, **call_options):
        """One quorum step: QuorumResult(new result, contributors) with
        .joined and .step. x is only read; a scalar gives a scalar."""
        if type(x) is not np.ndarray:  # arrays, the common case, skip this
            scalar = _scalar_array(x)
            if scalar is not None:
                result, contributors, joined, step = self._client.all_reduce_quorum(
                    scalar, _arrays._NUMPY_DTYPES[scalar.dtype], op, min_ranks,
                    grace, **call_options)
                return QuorumResult(result[0].item(), contributors, joined, step)
        array, dtype, kind = _arrays.to_array(x)
        result, contributors, joined, step = self._client.all_reduce_quorum(
            array, dtype, op, min_ranks, grace, **call_options)
        return QuorumResult(_arrays.from_array(result, dtype, kind), contributors,
                            joined, step)

    def done(self, **call_options):
        """This rank is out of data: returns once every rank has called done()
        (keyword-only name and timeout, as for other calls; no group)."""
        self._client.done(**call_options)

    def all_reduce_quorum_(self, x, op="sum", min_ranks=0, grace=2.0, **call_options):
        """One quorum step written into x (all or nothing):
        QuorumResult(x, contributors) with .joined and .step."""
        array, dtype, _ = _arrays.to_array(x)
        _, contributors, joined, step = self._client.all_reduce_quorum_(
            array, dtype, op, min_ranks, grace, **call_options)
        return QuorumResult(x, contributors, joined, step)
