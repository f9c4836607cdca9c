"""Reducer's Python client: every collective, out of place or in place.

    import numpy as np
    import reducer

    client = reducer.Client(target="127.0.0.1:50051", job="eval-7",
                            rank=rank, world_size=4)
    total = client.all_reduce(local_counts)           # new array; input untouched
    client.all_reduce_(grad, op="avg")                 # written into grad
    n = client.all_reduce(3, op="sum")                 # scalars: a new int/float
    result, contributors = client.all_reduce_quorum(grad, min_ranks=3)  # see _quorum

Inputs are numpy arrays or torch CPU tensors (float32, float64, float16,
bfloat16 (torch only), int8, uint8, int32, int64, bool), C-contiguous; each
call returns the kind it was given. Methods without a trailing underscore
never write to their input; those with one write the result into it, all or
nothing (on error it keeps its old contents) and return it.

Every collective takes the keyword-only CallOptions: `group` (the ranks taking
part, default all), `name` (match by name instead of call order) and
`timeout` (seconds; default the client's). Ops: "sum", "product", "min",
"max", "avg" (floating types), "bit_and", "bit_or", "bit_xor" (integers and
bool).

Errors: a ReducerError subclass named after the status code (DeadlineExceeded,
Aborted, FailedPrecondition, InvalidArgument, ...), carrying the message;
TypeError/ValueError for an input that cannot be sent, before anything is
sent. While a call waits, the GIL is released.

Thread safety: a Client may be used from several threads; collectives issued
concurrently must then be named, since call order is not defined. A
MetricSync and an async handle belong to one thread.
"""

import numbers
import os

import numpy as np

from reducer import _arrays
from reducer import _reducer
from reducer._errors import *  # noqa: F401,F403  (the exception classes)
from reducer._errors import ERROR_CLASSES, ReducerError
from reducer._quorum import QuorumResult, QuorumSteps
from reducer._routed import RoutedCollectives
from reducer._work import Work, _call_from_root
from reducer._version import __version__

__all__ = ["Client", "MetricSync", "QuorumResult", "Work", "ReducerError",
           "__version__"] + [
    c.__name__ for c in ERROR_CLASSES]

DEFAULT_TARGET = "127.0.0.1:50051"


def _ops(ops, count):
    if isinstance(ops, str):
        return [ops] * count
    ops = list(ops)
    if len(ops) != count:
        raise ValueError(f"reducer: {count} tensors but {len(ops)} ops")
    return ops


LOCAL_WORLD_SIZE_ENV = "LOCAL_WORLD_SIZE"


def local_world_size_from_env():
    """LOCAL_WORLD_SIZE (torchrun's count of this host's ranks) as an int, 0
    when unset or empty; ValueError naming the variable when it is not a
    whole number, not negative."""
    value = os.environ.get(LOCAL_WORLD_SIZE_ENV, "").strip()
    if not value:
        return 0
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"reducer: {LOCAL_WORLD_SIZE_ENV}={value!r} is not a "
                         "whole number of ranks")
    return count


class Client(RoutedCollectives, QuorumSteps):
    """One rank's connection to a job on reducerd.

    Client(target, job, rank, world_size, timeout) returns once all
    world_size ranks have joined (or raises after `timeout` seconds, which is
    also every collective's default deadline). close() (or leaving a `with`
    block) leaves the job.

    For a secured reducerd (docs/security.md):

      token          the job's bearer token, sent on every call (None: none).
                     Needed when reducerd has --job_tokens_file; a line for
                     job J there also covers jobs named J/anything.
      tls_ca_file    PEM file of the CA that signed reducerd's certificate.
                     Giving it (or any TLS argument below) turns TLS on.
      tls_cert_file, tls_key_file
                     this worker's certificate and key, for mutual TLS
                     (reducerd with --tls_client_ca_file); both or neither.
      server_name    the name to check in reducerd's certificate (None: the
                     target's host).
      shared_memory  "auto" (the same-host path when reducerd offers it),
                     "off", or "required" (Connect fails without it);
                     REDUCER_SHARED_MEMORY in the environment overrides it
                     for the whole process.
      local_world_size
                     how many ranks of this job run on this host (None:
                     the LOCAL_WORLD_SIZE environment variable, as torchrun
                     sets it, else 0, unknown); a node-local relay
                     (reducerd --upstream) joins upstream once that many
                     ranks have joined it.

    Files (str or pathlib.Path) must be readable now; they are read again
    when they change. A bad combination or an unreadable file raises
    ValueError naming the argument; reducerd's refusals raise ReducerError
    subclasses (Unauthenticated, PermissionDenied, FailedPrecondition for a
    TLS mismatch). No message or repr ever holds the token.
    """

    def __init__(self, target=DEFAULT_TARGET, job=None, rank=0, world_size=1,
                 timeout=300.0, token=None, tls_ca_file=None, tls_cert_file=None,
                 tls_key_file=None, server_name=None, shared_memory="auto",
                 local_world_size=None):
        if not job:
            raise ValueError("reducer: Client needs a job name, the same on every rank")
        if local_world_size is None:
            local_world_size = local_world_size_from_env()
        self.local_world_size = int(local_world_size)

        def path(p):
            return None if p is None else str(p)

        self._client = _reducer.Client(
            target=target, job=str(job), rank=int(rank), world_size=int(world_size),
            timeout=float(timeout), token=None if token is None else str(token),
            tls_ca_file=path(tls_ca_file), tls_cert_file=path(tls_cert_file),
            tls_key_file=path(tls_key_file),
            server_name=None if server_name is None else str(server_name),
            shared_memory=str(shared_memory), local_world_size=self.local_world_size)

    @property
    def rank(self):
        return self._client.rank

    @property
    def world_size(self):
        return self._client.world_size

    def close(self):
        """Leaves the job; later calls raise ValueError."""
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- all-reduce -------------------------------------------------------

    def all_reduce(self, x, op="sum", **call_options):
        """A new array/tensor (or scalar) holding the reduction; x is only read."""
        if type(x) is not np.ndarray:  # arrays, the common case, skip these checks
            if isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, np.bool_):
                return self._client.all_reduce_int(int(x), op, **call_options)
            if isinstance(x, (numbers.Real, np.floating)) and not isinstance(x, np.bool_):
                return self._client.all_reduce_float(float(x), op, **call_options)
        array, dtype, kind = _arrays.to_array(x)
        return _arrays.from_array(
            self._client.all_reduce(array, dtype, op, **call_options), dtype, kind)

    def all_reduce_(self, x, op="sum", **call_options):
        """Writes the reduction into x (all or nothing) and returns x."""
        array, dtype, _ = _arrays.to_array(x)
        self._client.all_reduce_(array, dtype, op, **call_options)
        return x

    def all_reduce_async(self, x, op="sum", **call_options):
        """Starts an out-of-place all-reduce; Work.wait() returns the result."""
        array, dtype, kind = _arrays.to_array(x)
        handle = self._client.all_reduce_async(array, dtype, op, False, **call_options)
        return Work(handle, lambda result: _arrays.from_array(result, dtype, kind))

    def all_reduce_async_(self, x, op="sum", **call_options):
        """Starts an in-place all-reduce; Work.wait() writes it into x, returns x."""
        array, dtype, _ = _arrays.to_array(x)
        handle = self._client.all_reduce_async(array, dtype, op, True, **call_options)
        return Work(handle, lambda _: x)

    def all_reduce_many_async(self, xs, ops="sum", **call_options):
        """Starts all_reduce_many; Work.wait() returns the list of results."""
        converted = [_arrays.to_array(x, f"input {i}") for i, x in enumerate(xs)]
        handle = self._client.all_reduce_many_async(
            [c[0] for c in converted], [c[1] for c in converted],
            _ops(ops, len(converted)), **call_options)
        return Work(handle, lambda results: [
            _arrays.from_array(r, c[1], c[2]) for r, c in zip(results, converted)])

    def all_reduce_many(self, xs, ops="sum", **call_options):
        """One round trip for many tensors: a list of new results, one op each
        (`ops` a name for all, or one per tensor)."""
        converted = [_arrays.to_array(x, f"input {i}") for i, x in enumerate(xs)]
        results = self._client.all_reduce_many(
            [c[0] for c in converted], [c[1] for c in converted],
            _ops(ops, len(converted)), **call_options)
        return [_arrays.from_array(r, c[1], c[2]) for r, c in zip(results, converted)]

    # --- the other collectives --------------------------------------------

    def all_gather(self, x, **call_options):
        """Every rank's x concatenated along dim 0 in rank order (dim 0 may
        differ between ranks)."""
        array, dtype, kind = _arrays.to_array(x)
        return _arrays.from_array(
            self._client.all_gather(array, dtype, **call_options), dtype, kind)

    def broadcast(self, x, root, kind=None, **call_options):
        """The root's tensor, new, on every rank. A non-root may pass None when it
        does not know dtype or shape; it then gets a numpy array, or a torch
        tensor with kind="torch"."""
        result, convert = _call_from_root(self._client.broadcast, x, root, kind, call_options)
        return convert(result)

    def broadcast_(self, x, root, **call_options):
        """Writes the root's tensor into x (dtype and shape must match) and returns x."""
        array, dtype, _ = _arrays.to_array(x)
        self._client.broadcast_(array, dtype, int(root), **call_options)
        return x

    def reduce_scatter(self, x, op="sum", **call_options):
        """Reduces x over the group; rank i gets slice i of dim 0 (which must
        divide by the group size)."""
        array, dtype, kind = _arrays.to_array(x)
        return _arrays.from_array(
            self._client.reduce_scatter(array, dtype, op, **call_options), dtype, kind)

    # --- asynchronous forms -----------------------------------------------
    # Each starts the collective (its place in the call order taken, its
    # contribution sent) and returns a Work at once; wait() gives what the
    # blocking method returns.

    def all_gather_async(self, x, **call_options):
        """Starts all_gather; Work.wait() returns the concatenation."""
        array, dtype, kind = _arrays.to_array(x)
        handle = self._client.all_gather_async(array, dtype, **call_options)
        return Work(handle, lambda results: _arrays.from_array(results[0], dtype, kind))

    def broadcast_async(self, x, root, kind=None, **call_options):
        """Starts broadcast (x None on a non-root that does not know the
        root's dtype or shape); Work.wait() returns the root's tensor."""
        handle, convert = _call_from_root(self._client.broadcast_async, x, root, kind,
                                          call_options)
        return Work(handle, lambda results: convert(results[0]))

    def reduce_scatter_async(self, x, op="sum", **call_options):
        """Starts reduce_scatter; Work.wait() returns this rank's slice."""
        array, dtype, kind = _arrays.to_array(x)
        handle = self._client.reduce_scatter_async(array, dtype, op, **call_options)
        return Work(handle, lambda results: _arrays.from_array(results[0], dtype, kind))

    def barrier_async(self, **call_options):
        """Starts barrier; Work.wait() returns None once every rank called it."""
        handle = self._client.barrier_async(**call_options)
        return Work(handle, lambda results: None)

    def barrier(self, **call_options):
        """Returns once every rank of the group has called barrier."""
        self._client.barrier(**call_options)


class MetricSync:
    """Ignite's sync_all_reduce / torchmetrics' sync in one round trip.

        sync = reducer.MetricSync(client)
        sync.add("correct", correct)            # arrays/tensors, referenced
        sync.add("loss_sum", loss_sum, op="sum")
        totals = sync.reduce()                   # new values; states untouched
        sync.reduce_()                           # or: states overwritten

    Not thread-safe. The states must stay alive while the MetricSync is used.
    """

    def __init__(self, client):
        self._client = client
        self._sync = _reducer.MetricSync(client._client)
        self._kinds = {}

    def add(self, name, state, op="sum"):
        """Registers `state` under `name` (a repeated name replaces it)."""
        array, dtype, kind = _arrays.to_array(state, f"state '{name}'")
        self._sync.add(name, array, dtype, op)
        self._kinds[name] = (dtype, kind)

    def reduce(self, **call_options):
        """{name: new reduced value}; the registered states are left as they are."""
        results = self._sync.reduce(**call_options)
        return {name: _arrays.from_array(a, *self._kinds[name])
                for name, a in results.items()}

    def reduce_(self, **call_options):
        """Overwrites every registered state with its reduced value (all or none)."""
        self._sync.reduce_(**call_options)
