"""torch.distributed backend "reducer": `import reducer.torch` registers it.

    import torch.distributed as dist
    import reducer.torch  # noqa: F401

    dist.init_process_group("reducer")   # env://, tcp://, file://, torchrun
    dist.all_reduce(grad)                # torch's contract: in place

reducerd's address comes from REDUCER_TARGET (default 127.0.0.1:50051).
Nothing else needs configuring: each process group becomes a Reducer job of
its own, named by a fresh uuid that the group's rank 0 puts in torch's store.

Why a job per process group (and not CallOptions.group inside one job of the
default group): torch gives every group its own rank numbering, its own
store prefix and its own call order, which is exactly a Reducer job; the
default group may be of another backend (gloo) with only a subgroup on
Reducer, so there may be no "global" Reducer job to lean on; and a group of
one rank is simply a job of one. The cost is one session per group and
process.

Why the store key carries a per-process counter: torch prefixes each group's
store with the group's name ("0", "1", ... restarting after
destroy_process_group), and the store can outlive a process group (torchrun's
agent store, a reused file:// file). The counter, per group name, counts how
often this process has created a group of that name, so a repeated
init_process_group reads the new uuid, never the old one, and two jobs never
meet as one.

Collectives: all_reduce (in place, all or nothing: the tensor changes only
once the whole result has arrived), all_reduce_coalesced, all_gather,
all_gather_into_tensor (_allgather_base), broadcast, reduce_scatter,
reduce_scatter_tensor (_reduce_scatter_base), barrier; ReduceOp SUM, PRODUCT,
MIN, MAX, AVG (floating types), BAND, BOR, BXOR. all_reduce with
async_op=True is truly asynchronous; the other collectives complete before
they return their work object. Other operations (point-to-point, reduce,
gather, scatter, all_to_all, PREMUL_SUM) raise RuntimeError naming them.
Tensors: CPU or CUDA (staged through host memory, after the work queued on
the current stream), contiguous, one per call.
"""

import collections
import os
import uuid

import torch
import torch.distributed as dist

import reducer

BACKEND_NAME = "reducer"
TARGET_ENV = "REDUCER_TARGET"

_OP_NAMES = [
    (dist.ReduceOp.SUM, "sum"),
    (dist.ReduceOp.PRODUCT, "product"),
    (dist.ReduceOp.MIN, "min"),
    (dist.ReduceOp.MAX, "max"),
    (dist.ReduceOp.AVG, "avg"),
    (dist.ReduceOp.BAND, "bit_and"),
    (dist.ReduceOp.BOR, "bit_or"),
    (dist.ReduceOp.BXOR, "bit_xor"),
]

# group name -> how many process groups of that name this process created.
_incarnations = collections.Counter()


def _op_name(op):
    for torch_op, name in _OP_NAMES:
        if op == torch_op:
            return name
    raise RuntimeError(f"the reducer backend does not support ReduceOp {op!r} "
                       "(supported: SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR)")


def _timeout(opts):
    # torch's "unset" timeout is negative: the client's default applies.
    timeout = getattr(opts, "timeout", None)
    if timeout is None or timeout.total_seconds() <= 0:
        return None
    return timeout.total_seconds()


def _reduce_op(opts):
    """The Reducer op of torch's options (SUM when none are given)."""
    return _op_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)


def _check_parts(parts, count, like, what, role):
    """Checks that `parts` holds `count` tensors of `like`'s dtype and size."""
    if len(parts) != count:
        raise ValueError(f"{what} needs {count} {role} tensors, got {len(parts)}")
    n = like.numel()
    for i, x in enumerate(parts):
        if x.numel() != n or x.dtype != like.dtype:
            raise ValueError(f"{what} {role} {i} is {x.dtype} {list(x.shape)}; "
                             f"expected {like.dtype} with {n} elements")


def _one(tensors, what):
    if len(tensors) != 1:
        raise ValueError(f"the reducer backend takes one tensor per {what}, "
                         f"got {len(tensors)}")
    return tensors[0]


class _Work(dist.Work):
    """A torch Work over a Reducer call. `wait_fn` completes it (None: done)."""

    def __init__(self, wait_fn=None, ready_fn=None, result=()):
        super().__init__()
        self._wait_fn = wait_fn
        self._ready_fn = ready_fn
        self._result = list(result)
        self._exception = None

    def wait(self, timeout=None):
        if self._wait_fn is not None:
            wait_fn, self._wait_fn = self._wait_fn, None
            try:
                wait_fn()
            except Exception as e:  # kept for exception(); raised to the waiter
                self._exception = e
                raise
        elif self._exception is not None:
            raise self._exception
        return True

    def is_completed(self):
        if self._wait_fn is None:
            return True
        return self._ready_fn is None or self._ready_fn()

    def is_success(self):
        return self._wait_fn is None and self._exception is None

    def exception(self):
        return self._exception

    def result(self):
        return self._result

    def get_future(self):
        # Waits for the collective, then hands back a completed future.
        future = torch.futures.Future()
        try:
            self.wait()
            future.set_result(self._result)
        except Exception as e:
            future.set_exception(e)
        return future


class ProcessGroupReducer(dist.ProcessGroup):
    """One torch process group as one Reducer job. Thread-safe as
    reducer.Client; collectives must be issued in the same order on every rank
    of the group (torch's rule)."""

    def __init__(self, client, job, rank, size):
        super().__init__(rank, size)
        self._client = client
        self.job = job  # the Reducer job name agreed through the store

    @property
    def client(self):
        """The group's reducer.Client, for Reducer's explicit forms
        (all_reduce vs all_reduce_, MetricSync) on the same job."""
        return self._client

    def getBackendName(self):
        return BACKEND_NAME

    def _call_options(self, opts):
        return {"timeout": _timeout(opts)}

    def allreduce(self, tensors, opts=None):
        tensor = _one(tensors, "all_reduce")
        op = _op_name(opts.reduceOp if isinstance(opts, dist.AllreduceOptions)
                      else opts if opts is not None else dist.ReduceOp.SUM)
        options = self._call_options(opts)
        work = self._client.all_reduce_async_(tensor, op, **options)
        return _Work(work.wait, work.is_completed, [tensor])

    def allreduce_coalesced(self, tensors, opts=None):
        op = _reduce_op(opts)
        results = self._client.all_reduce_many(tensors, op, **self._call_options(opts))
        for tensor, result in zip(tensors, results):
            tensor.copy_(result)
        return _Work(result=tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        tensor = _one(input_tensors, "all_gather")
        outputs = _one(output_tensors, "all_gather")
        _check_parts(outputs, self.size(), tensor, "all_gather", "output")
        n = tensor.numel()
        gathered = self._client.all_gather(tensor.reshape(-1), **self._call_options(opts))
        for i, out in enumerate(outputs):
            out.copy_(gathered[i * n:(i + 1) * n].view(out.shape))
        return _Work(result=outputs)

    def _allgather_base(self, output, input, opts=None):
        if output.numel() != self.size() * input.numel() or output.dtype != input.dtype:
            raise ValueError(f"all_gather_into_tensor output is {output.dtype} "
                             f"{list(output.shape)}; expected {input.dtype} with "
                             f"{self.size()} x {input.numel()} elements")
        gathered = self._client.all_gather(input.reshape(-1), **self._call_options(opts))
        output.copy_(gathered.view(output.shape))
        return _Work(result=[output])

    def broadcast(self, tensors, opts=None):
        tensor = _one(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        self._client.broadcast_(tensor, root, **self._call_options(opts))
        return _Work(result=[tensor])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        output = _one(output_tensors, "reduce_scatter")
        inputs = _one(input_tensors, "reduce_scatter")
        _check_parts(inputs, self.size(), output, "reduce_scatter", "input")
        op = _reduce_op(opts)
        stacked = torch.cat([x.reshape(-1) for x in inputs])
        result = self._client.reduce_scatter(stacked, op, **self._call_options(opts))
        output.copy_(result.view(output.shape))
        return _Work(result=[output])

    def _reduce_scatter_base(self, output, input, opts=None):
        if input.numel() != self.size() * output.numel() or output.dtype != input.dtype:
            raise ValueError(f"reduce_scatter_tensor input is {input.dtype} "
                             f"{list(input.shape)}; expected {output.dtype} with "
                             f"{self.size()} x {output.numel()} elements")
        op = _reduce_op(opts)
        result = self._client.reduce_scatter(input.reshape(-1), op,
                                             **self._call_options(opts))
        output.copy_(result.view(output.shape))
        return _Work(result=[output])

    def barrier(self, opts=None):
        self._client.barrier(**self._call_options(opts))
        return _Work()

    def _unsupported(name):
        def method(self, *args, **kwargs):
            raise RuntimeError(f"the reducer backend does not support {name} "
                               "(supported: all_reduce, all_reduce_coalesced, all_gather, "
                               "all_gather_into_tensor, broadcast, reduce_scatter, "
                               "reduce_scatter_tensor, barrier)")
        method.__name__ = name
        return method

    reduce = _unsupported("reduce")
    gather = _unsupported("gather")
    scatter = _unsupported("scatter")
    alltoall = _unsupported("all_to_all")
    alltoall_base = _unsupported("all_to_all_single")
    allgather_coalesced = _unsupported("all_gather_coalesced")
    send = _unsupported("send")
    recv = _unsupported("recv")
    recv_anysource = _unsupported("recv (any source)")
    monitored_barrier = _unsupported("monitored_barrier")
    del _unsupported


def _create(backend_options, pg_options):
    """torch's creator (extended API): one Reducer job for this group."""
    store = backend_options.store
    rank = backend_options.group_rank
    size = backend_options.group_size
    group_id = backend_options.group_id
    _incarnations[group_id] += 1
    key = f"reducer/job/{_incarnations[group_id]}"
    if rank == 0:
        store.set(key, f"torch-{uuid.uuid4().hex}")
    job = store.get(key).decode()
    client = reducer.Client(target=os.environ.get(TARGET_ENV, reducer.DEFAULT_TARGET),
                            job=job, rank=rank, world_size=size,
                            timeout=backend_options.timeout.total_seconds())
    return ProcessGroupReducer(client, job, rank, size)


if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True)
