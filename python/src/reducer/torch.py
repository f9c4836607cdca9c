"""torch.distributed backend "reducer": `import reducer.torch` registers it.

    import torch.distributed as dist
    import reducer.torch  # noqa: F401

    dist.init_process_group("reducer")   # env://, tcp://, file://, torchrun
    dist.all_reduce(grad)                # torch's contract: in place

Configuration comes from the environment, read at each group's creation:

    REDUCER_TARGET            reducerd's address (default 127.0.0.1:50051)
    REDUCER_JOB               the job name prefix (default "torch")
    REDUCER_TOKEN             the job's token, for reducerd with
    REDUCER_TOKEN_FILE          --job_tokens_file (one of the two; the file's
                                contents, stripped)
    REDUCER_TLS_CA_FILE       TLS: the CA that signed reducerd's certificate
    REDUCER_TLS_CERT_FILE     mutual TLS: this worker's certificate and key
    REDUCER_TLS_KEY_FILE
    REDUCER_TLS_SERVER_NAME   the name to check in reducerd's certificate
    REDUCER_SHARED_MEMORY     auto (default), off or required: the client
                                library's own override of the data path, for
                                the whole process, read at its first
                                connection (checked here, so a typo raises)

Each process group becomes a Reducer job of its own, named
REDUCER_JOB/<uuid> with a fresh uuid that the group's rank 0 puts in torch's
store, so one tokens-file line for REDUCER_JOB covers every group of the
run. A value that cannot work (both token variables, an unreadable file)
raises ValueError naming the variable from init_process_group / new_group.

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
reduce_scatter_tensor (_reduce_scatter_base), barrier, and those whose bytes
reducerd routes to some ranks only (reducer._torch_routed): reduce, gather,
scatter, all_to_all (equal parts), all_to_all_single (even splits), send
and recv (so isend, irecv, batch_isend_irecv and the object collectives);
ReduceOp SUM, PRODUCT, MIN, MAX, AVG (floating types), BAND, BOR, BXOR.
Every collective is asynchronous: it returns its Work at once; the Work's
get_future() returns at once a future completed when the collective ends
(DDP's communication hooks and torch.futures chains overlap with
computation), wait(timeout) honours its timeout, is_completed() never blocks
(reducer._torch_work; an all_reduce of one contiguous CPU tensor runs in
C++, reducer._torch_c, where the package has it). Not supported, each
raising RuntimeError naming it: recv from any source, all_gather_coalesced,
monitored_barrier, PREMUL_SUM, all_to_all with uneven parts.
Tensors: CPU or CUDA (staged through host memory, after the work queued on
the current stream), contiguous, one per call.

Beside torch's API, two extensions (reducer._torch_quorum):
all_reduce_quorum(tensor, op, min_ranks, grace, group), a fault-tolerant
step that ends without a dead or late rank, and done(group) for uneven
inputs: the group's collectives go on without a rank out of data.
"""

import collections
import os
import uuid
import weakref

import torch
import torch.distributed as dist

import reducer
from reducer import _arrays
from reducer._torch_args import _check_parts, _one, _op_name, _reduce_op, _timeout
from reducer._torch_quorum import all_reduce_quorum, done  # noqa: F401  (extensions)
from reducer._torch_routed import RoutedOps
from reducer._torch_work import Completer, TorchWork

try:
    # The all-reduce in C++ (python/csrc/torch/), built where torch's C++
    # headers matched the torch it was compiled for; absent, every
    # collective goes through Python (same results, more time per call).
    from reducer import _torch_c
except ImportError:
    _torch_c = None

BACKEND_NAME = "reducer"
TARGET_ENV = "REDUCER_TARGET"

# group name -> how many process groups of that name this process created.
_incarnations = collections.Counter()


class ProcessGroupReducer(RoutedOps, dist.ProcessGroup):
    """One torch process group as one Reducer job. Thread-safe as
    reducer.Client; collectives must be issued in the same order on every rank
    of the group (torch's rule). Every collective returns at once with a
    TorchWork (see reducer._torch_work), except an all_reduce that
    reducer._torch_c takes, which returns its C++ work of the same
    contract."""

    def __init__(self, client, job, rank, size):
        super().__init__(rank, size)
        self._client = client
        self.job = job  # the Reducer job name agreed through the store
        self._where = f"in job {job} (rank {rank})"  # for errors
        self._completer = Completer(f"reducer-futures-{job}")
        self._native = (_torch_c.Group(client._client, self._where)
                        if _torch_c is not None else None)
        # The completer's thread ends when the group is dropped.
        weakref.finalize(self, self._completer.close)

    @property
    def client(self):
        """The group's reducer.Client, for Reducer's explicit forms
        (all_reduce vs all_reduce_, MetricSync) on the same job."""
        return self._client

    def getBackendName(self):
        return BACKEND_NAME

    def _work(self, pending, finish, what):
        return TorchWork(self._completer, pending, finish, what, self._where)

    def allreduce(self, tensors, opts=None):
        if self._native is not None:
            # A torch Work of C++ (reducer._torch_c) for one contiguous CPU
            # tensor; None for what it leaves to the code below.
            work = self._native.allreduce(tensors, opts)
            if work is not None:
                return work
        tensor = _one(tensors, "all_reduce")
        op = _op_name(opts.reduceOp if isinstance(opts, dist.AllreduceOptions)
                      else opts if opts is not None else dist.ReduceOp.SUM)
        # The extension's handle itself (its wait() returns None once the
        # tensor holds the result): the hot path of DDP and metric code, one
        # Python layer less than reducer.Work's.
        array, dtype, _ = _arrays.to_array(tensor)
        pending = self._client._client.all_reduce_async(array, dtype, op, True,
                                                        timeout=_timeout(opts))
        result = [tensor]
        return self._work(pending, lambda _: result, "all_reduce")

    def allreduce_coalesced(self, tensors, opts=None):
        pending = self._client.all_reduce_many_async(tensors, _reduce_op(opts),
                                                     timeout=_timeout(opts))

        def finish(results):
            for tensor, result in zip(tensors, results):
                tensor.copy_(result)
            return tensors
        return self._work(pending, finish, "all_reduce_coalesced")

    def allgather(self, output_tensors, input_tensors, opts=None):
        tensor = _one(input_tensors, "all_gather")
        outputs = _one(output_tensors, "all_gather")
        _check_parts(outputs, self.size(), tensor, "all_gather", "output")
        n = tensor.numel()
        pending = self._client.all_gather_async(tensor.reshape(-1),
                                                timeout=_timeout(opts))

        def finish(gathered):
            for i, out in enumerate(outputs):
                out.copy_(gathered[i * n:(i + 1) * n].view(out.shape))
            return output_tensors
        return self._work(pending, finish, "all_gather")

    def _allgather_base(self, output, input, opts=None):
        if output.numel() != self.size() * input.numel() or output.dtype != input.dtype:
            raise ValueError(f"all_gather_into_tensor output is {output.dtype} "
                             f"{list(output.shape)}; expected {input.dtype} with "
                             f"{self.size()} x {input.numel()} elements")
        pending = self._client.all_gather_async(input.reshape(-1),
                                                timeout=_timeout(opts))

        def finish(gathered):
            output.copy_(gathered.view(output.shape))
            return [output]
        return self._work(pending, finish, "all_gather_into_tensor")

    def broadcast(self, tensors, opts=None):
        tensor = _one(tensors, "broadcast")
        root = opts.rootRank if opts is not None else 0
        pending = self._client.broadcast_async(tensor, root, timeout=_timeout(opts))
        is_root = root == self.rank()

        def finish(result):
            if not is_root:
                tensor.copy_(result)
            return [tensor]
        return self._work(pending, finish, "broadcast")

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        output = _one(output_tensors, "reduce_scatter")
        inputs = _one(input_tensors, "reduce_scatter")
        _check_parts(inputs, self.size(), output, "reduce_scatter", "input")
        stacked = torch.cat([x.reshape(-1) for x in inputs])
        pending = self._client.reduce_scatter_async(stacked, _reduce_op(opts),
                                                    timeout=_timeout(opts))

        def finish(result):
            output.copy_(result.view(output.shape))
            return [output]
        return self._work(pending, finish, "reduce_scatter")

    def _reduce_scatter_base(self, output, input, opts=None):
        if input.numel() != self.size() * output.numel() or output.dtype != input.dtype:
            raise ValueError(f"reduce_scatter_tensor input is {input.dtype} "
                             f"{list(input.shape)}; expected {output.dtype} with "
                             f"{self.size()} x {output.numel()} elements")
        pending = self._client.reduce_scatter_async(input.reshape(-1), _reduce_op(opts),
                                                    timeout=_timeout(opts))

        def finish(result):
            output.copy_(result.view(output.shape))
            return [output]
        return self._work(pending, finish, "reduce_scatter_tensor")

    def barrier(self, opts=None):
        pending = self._client.barrier_async(timeout=_timeout(opts))
        return self._work(pending, lambda _: [], "barrier")

    def _unsupported(name, why):
        def method(self, *args, **kwargs):
            raise RuntimeError(f"the reducer backend does not support {name}: {why}")
        method.__name__ = name
        return method

    allgather_coalesced = _unsupported(
        "all_gather_coalesced", "call all_gather once per tensor")
    recv_anysource = _unsupported(
        "recv from any source", "Reducer matches a receive by its source; pass src=")
    monitored_barrier = _unsupported(
        "monitored_barrier", "use barrier, whose timeout names the ranks that "
        "did not arrive")
    del _unsupported


JOB_ENV = "REDUCER_JOB"
DEFAULT_JOB_PREFIX = "torch"
TOKEN_ENV = "REDUCER_TOKEN"
TOKEN_FILE_ENV = "REDUCER_TOKEN_FILE"
# reducer.Client's file arguments and the variables that set them.
_TLS_FILE_ENVS = [
    ("tls_ca_file", "REDUCER_TLS_CA_FILE"),
    ("tls_cert_file", "REDUCER_TLS_CERT_FILE"),
    ("tls_key_file", "REDUCER_TLS_KEY_FILE"),
]
SERVER_NAME_ENV = "REDUCER_TLS_SERVER_NAME"
SHARED_MEMORY_ENV = "REDUCER_SHARED_MEMORY"


def _nonempty_env(name):
    """The variable's value; None when unset; ValueError when set but empty."""
    value = os.environ.get(name)
    if value is not None and not value.strip():
        raise ValueError(f"reducer backend: {name} is set but empty; set it to a "
                         "value or unset it")
    return value


def _token_from_env():
    """REDUCER_TOKEN, or the stripped contents of REDUCER_TOKEN_FILE; None if
    neither is set. Never puts the token in a message."""
    token, token_file = os.environ.get(TOKEN_ENV), os.environ.get(TOKEN_FILE_ENV)
    if token is not None and token_file is not None:
        raise ValueError(f"reducer backend: both {TOKEN_ENV} and {TOKEN_FILE_ENV} are "
                         "set; set one of them")
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read()
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise ValueError(f"reducer backend: {TOKEN_FILE_ENV}={token_file!r} cannot "
                             f"be read: {reason}") from None
        source = f"{TOKEN_FILE_ENV}={token_file!r}"
    else:
        source = TOKEN_ENV
    if token is None:
        return None
    token = token.strip()
    if not token:
        raise ValueError(f"reducer backend: the token from {source} is empty; give "
                         "the job's token (or set neither variable)")
    return token


def _client_settings():
    """(job name prefix, reducer.Client keyword arguments) from the
    environment (see the module docstring). ValueError naming the variable for
    a value that cannot work; files given must be readable now."""
    prefix = _nonempty_env(JOB_ENV) or DEFAULT_JOB_PREFIX
    settings = {
        "target": os.environ.get(TARGET_ENV, reducer.DEFAULT_TARGET),
        "token": _token_from_env(),
        "server_name": _nonempty_env(SERVER_NAME_ENV),
    }
    for argument, name in _TLS_FILE_ENVS:
        path = _nonempty_env(name)
        if path is not None:
            try:
                open(path, "rb").close()
            except OSError as e:
                raise ValueError(f"reducer backend: {name}={path!r} cannot be read: "
                                 f"{e.strerror}") from None
        settings[argument] = path
    # The client library applies this one itself (and ignores a value it
    # does not know): only checked here.
    shared_memory = _nonempty_env(SHARED_MEMORY_ENV)
    if shared_memory not in (None, "auto", "off", "required"):
        raise ValueError(f"reducer backend: {SHARED_MEMORY_ENV}={shared_memory!r} "
                         "is not one of auto, off, required")
    if (settings["tls_cert_file"] is None) != (settings["tls_key_file"] is None):
        raise ValueError("reducer backend: REDUCER_TLS_CERT_FILE and "
                         "REDUCER_TLS_KEY_FILE go together (mutual TLS); set both "
                         "or neither")
    tls_on = any(settings[a] is not None for a, _ in _TLS_FILE_ENVS) or (
        settings["server_name"] is not None)
    if tls_on and settings["tls_ca_file"] is None:
        raise ValueError("reducer backend: TLS settings are given but not "
                         "REDUCER_TLS_CA_FILE, the CA that signed reducerd's "
                         "certificate; set it")
    return prefix, settings


def _create(backend_options, pg_options):
    """torch's creator (extended API): one Reducer job for this group."""
    prefix, settings = _client_settings()
    store = backend_options.store
    rank = backend_options.group_rank
    size = backend_options.group_size
    group_id = backend_options.group_id
    _incarnations[group_id] += 1
    key = f"reducer/job/{_incarnations[group_id]}"
    if rank == 0:
        store.set(key, f"{prefix}/{uuid.uuid4().hex}")
    job = store.get(key).decode()
    client = reducer.Client(job=job, rank=rank, world_size=size,
                            timeout=backend_options.timeout.total_seconds(), **settings)
    return ProcessGroupReducer(client, job, rank, size)


if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True)
