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
    LOCAL_WORLD_SIZE          torchrun's count of this host's ranks, passed on
                                so that a node-local relay joins upstream once
                                all of them arrived; with RANK and LOCAL_RANK,
                                a subgroup passes on its ranks on this host
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

from reducer._torch_version import SUPPORTED_RANGE, check_torch_version

check_torch_version()

import torch.distributed as dist  # noqa: E402  (after the version check)

import reducer  # noqa: E402
from reducer._torch_backend import BACKEND_NAME, BackendOps, backend_of  # noqa: E402,F401
from reducer._torch_quorum import all_reduce_quorum, done  # noqa: E402,F401  (extensions)

try:
    # The Backend itself (python/csrc/torch/), built against the torch it
    # was compiled for.
    from reducer import _torch_c  # noqa: E402
except ImportError as e:
    raise ImportError(
        f"reducer.torch: this reducer package has no working reducer._torch_c ({e}); "
        "it is built against torch's C++ headers, which pip's torch ships: "
        f"reinstall it (pip install ./python) with {SUPPORTED_RANGE} installed") from None

# Whether a new group's all_reduce of one contiguous CPU tensor runs in C++
# (reducer._torch_c) rather than through BackendOps; the two give the same
# results, the C++ one in less time per call. Tests turn it off to run the
# Python path.
_native_all_reduce = True

# The devices the backend serves: CUDA tensors go through the client
# library's device staging (host memory, after the work queued on the
# current stream).
DEVICES = ["cpu", "cuda"]
TARGET_ENV = "REDUCER_TARGET"

# group name -> how many process groups of that name this process created.
_incarnations = collections.Counter()


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


def _env_int(name):
    """The environment variable `name` as a non-negative int, else None."""
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


def _local_world_size(group_size, global_ranks=()):
    """How many of a group's ranks run on this host, for a relay there
    (ClientOptions::local_world_size); 0 when unknown, which a relay takes
    as every rank of the group. `global_ranks`: the group's global ranks
    (torch's; empty for the group of all WORLD_SIZE ranks).

    torchrun numbers the ranks of each host consecutively, so with RANK and
    LOCAL_RANK this host holds global ranks [RANK - LOCAL_RANK, that +
    LOCAL_WORLD_SIZE): a subgroup counts its ranks among them. A subgroup
    across hosts (FSDP's hybrid mesh, pipeline stages) must not say 0, or
    each host's relay would wait for ranks that are on other hosts. Without
    RANK and LOCAL_RANK only the whole group's count is known."""
    local = reducer.local_world_size_from_env()
    world = _env_int("WORLD_SIZE")
    if local == 0 or world is None:
        return 0
    ranks = list(global_ranks) or (list(range(world)) if group_size == world else [])
    rank, local_rank = _env_int("RANK"), _env_int("LOCAL_RANK")
    if ranks and rank is not None and local_rank is not None and local_rank <= rank:
        first = rank - local_rank
        return sum(1 for r in ranks if first <= r < first + local)
    return local if group_size == world else 0


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
    global_ranks = getattr(backend_options, "global_ranks_in_group", None) or ()
    client = reducer.Client(job=job, rank=rank, world_size=size,
                            timeout=backend_options.timeout.total_seconds(),
                            local_world_size=_local_world_size(size, global_ranks),
                            **settings)
    ops = BackendOps(client, job, rank, size)
    return _torch_c.Backend(rank, size, ops, client._client if _native_all_reduce else None,
                            ops.where)


if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True,
                                  devices=DEVICES)
