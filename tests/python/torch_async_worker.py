"""One rank of tests/python/torch_async_test.py: the backend's Work objects and
DistributedDataParallel on the "reducer" backend.

    python3 torch_async_worker.py futures
    python3 torch_async_worker.py ddp HOOK     # HOOK: none, fp16 or bf16

Expected values come from a closed form (rank r contributes r + 1) or from
the same model trained on a gloo group in the same process. A failed check
raises, so the process exits non-zero with the traceback.
"""

import datetime
import hashlib
import sys
import time
import warnings

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import reducer
import reducer.torch  # noqa: F401  (registers the backend)
import torch_exit
import torch_paths

TIMEOUT = datetime.timedelta(seconds=60)
# How long the other ranks sleep before each call in `futures`: rank 0's
# calls must return, and their futures be chained, well before that.
SLOW_S = 1.5
PROMPT_S = 0.5  # "at once": far below SLOW_S, far above a call's own cost


def closed_sum(world, n=4, dtype=torch.float32):
    return torch.full((n,), world * (world + 1) / 2, dtype=dtype)


def mine(rank, n=4, dtype=torch.float32):
    return torch.full((n,), rank + 1, dtype=dtype)


def started_at_once(kind, start):
    """Runs start() -> work on rank 0 while the other ranks sleep; checks it
    returned at once, that is_completed() is False and returns at once, and
    that get_future() returns at once with a chain that runs when the
    collective ends. Returns (work, chained future, chain's record)."""
    t0 = time.monotonic()
    work = start()
    started = time.monotonic() - t0
    t1 = time.monotonic()
    completed = work.is_completed()
    polled = time.monotonic() - t1
    ran = []
    t2 = time.monotonic()
    chained = work.get_future().then(lambda f: ran.append(time.monotonic()) or f.value())
    futured = time.monotonic() - t2
    for what, took in (("start", started), ("is_completed()", polled),
                       ("get_future().then()", futured)):
        if took > PROMPT_S:
            raise AssertionError(f"{kind}: {what} took {took:.3f} s while a peer slept "
                                 f"{SLOW_S} s: it waited for the collective")
    if completed:
        raise AssertionError(f"{kind}: is_completed() was True before the peers came")
    if ran:
        raise AssertionError(f"{kind}: the chained callback ran before the peers came")
    return work, chained, ran


def futures():
    dist.init_process_group("reducer", timeout=TIMEOUT)
    rank, world = dist.get_rank(), dist.get_world_size()
    total = closed_sum(world)

    def call(kind, start):
        """rank 0 starts at once; the others after SLOW_S. Returns the work."""
        if rank != 0:
            time.sleep(SLOW_S)
            work = start()
            work.wait()
            return work
        t0 = time.monotonic()
        work, chained, ran = started_at_once(kind, start)
        chained.wait()
        if not ran or ran[0] - t0 < SLOW_S * 0.8:
            raise AssertionError(f"{kind}: the chain ran at {ran}, before the peers came")
        work.wait()
        if not work.is_completed() or not work.is_success():
            raise AssertionError(f"{kind}: not completed and successful after wait()")
        return work

    x = mine(rank)
    torch_paths.check_work(call("all_reduce", lambda: dist.all_reduce(x, async_op=True)))
    assert torch.equal(x, total), (x, total)

    # all_reduce_coalesced(async_op=True) hands back the work's future.
    xs = [mine(rank), mine(rank, n=3)]
    with warnings.catch_warnings():  # torch deprecates all_reduce_coalesced
        warnings.simplefilter("ignore")
        if rank != 0:
            time.sleep(SLOW_S)
        t0 = time.monotonic()
        future = dist.all_reduce_coalesced(xs, async_op=True)
        if rank == 0 and (time.monotonic() - t0 > PROMPT_S or future.done()):
            raise AssertionError("all_reduce_coalesced waited for the peers")
        future.wait()
    assert torch.equal(xs[0], total) and torch.equal(xs[1], closed_sum(world, 3))

    parts = [torch.zeros(4) for _ in range(world)]
    call("all_gather", lambda: dist.all_gather(parts, mine(rank), async_op=True))
    for r, part in enumerate(parts):
        assert torch.equal(part, mine(r)), (r, part)

    flat = torch.zeros(world * 4)
    call("all_gather_into_tensor",
         lambda: dist.all_gather_into_tensor(flat, mine(rank), async_op=True))
    assert torch.equal(flat, torch.cat([mine(r) for r in range(world)]))

    b = mine(rank) if rank == world - 1 else torch.zeros(4)
    call("broadcast", lambda: dist.broadcast(b, src=world - 1, async_op=True))
    assert torch.equal(b, mine(world - 1)), b

    out = torch.zeros(4)
    call("reduce_scatter", lambda: dist.reduce_scatter(
        out, [mine(rank) * (j + 1) for j in range(world)], async_op=True))
    assert torch.equal(out, total * (rank + 1)), out

    out = torch.zeros(4)
    call("reduce_scatter_tensor", lambda: dist.reduce_scatter_tensor(
        out, torch.cat([mine(rank) * (j + 1) for j in range(world)]), async_op=True))
    assert torch.equal(out, total * (rank + 1)), out

    call("barrier", lambda: dist.barrier(async_op=True))

    # wait(timeout) raises at its timeout; the collective goes on and a
    # wait() without one then gives its result.
    x = mine(rank)
    if rank == 0:
        work = dist.all_reduce(x, async_op=True)
        t0 = time.monotonic()
        try:
            work.wait(timeout=datetime.timedelta(seconds=0.3))
        except reducer.DeadlineExceeded as e:
            took = time.monotonic() - t0
            assert 0.25 < took < 1.0, took
            assert "all_reduce in job" in str(e) and "timed out" in str(e), str(e)
            assert isinstance(e, RuntimeError)
        else:
            raise AssertionError("wait(timeout=0.3 s) returned while a peer slept")
        assert not torch.equal(x, total), "the tensor changed before the result came"
        work.wait()
    else:
        time.sleep(SLOW_S)
        dist.all_reduce(x)
    assert torch.equal(x, total), x
    print(f"rank {rank}: futures ok", flush=True)
    dist.destroy_process_group()


class Net(torch.nn.Module):
    """Two layers, so DDP makes more than one bucket with a small bucket_cap."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def bf16_hook(state, bucket):
    """torch's bf16_compress_hook under another name: DDP refuses that name
    unless NCCL is the backend, although the hook only needs all_reduce."""
    return default_hooks.bf16_compress_hook(state, bucket)


HOOKS = {"none": None, "fp16": default_hooks.fp16_compress_hook, "bf16": bf16_hook}
# Reducer and Gloo differ only in summation order and, with the compress
# hooks, in rounding (Reducer accumulates 16-bit floats in float32 and rounds
# once; Gloo adds float16 in float16 and has no bfloat16, so bf16 is held to
# Gloo's uncompressed run, within bfloat16's 8 bits of precision).
TOLERANCE = {"none": 1e-5, "fp16": 2e-3, "bf16": 2e-2}


def train(model, group, hook, rank, steps=6):
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=0.01)
    if HOOKS[hook] is not None:
        ddp.register_comm_hook(group, HOOKS[hook])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rank)
    for _ in range(steps):
        x = torch.randn(16, 32, generator=data)
        y = torch.randn(16, 8, generator=data)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def ddp(hook):
    dist.init_process_group("reducer", timeout=TIMEOUT)
    rank = dist.get_rank()
    gloo = dist.new_group(backend="gloo")
    # Different initial weights per rank: DDP must broadcast rank 0's.
    torch.manual_seed(rank)
    on_reducer = Net()
    on_gloo = Net()
    on_gloo.load_state_dict(on_reducer.state_dict())
    t0 = time.monotonic()
    train(on_reducer, None, hook, rank)
    print(f"rank {rank}: reducer ddp {hook} took {time.monotonic() - t0:.3f} s", flush=True)
    # Gloo has no bfloat16 all-reduce: its reference for bf16 is uncompressed.
    train(on_gloo, gloo, "none" if hook == "bf16" else hook, rank)
    for (name, p), q in zip(on_reducer.named_parameters(), on_gloo.parameters()):
        if not torch.allclose(p, q, rtol=TOLERANCE[hook], atol=TOLERANCE[hook]):
            raise AssertionError(f"rank {rank}: {name} differs from Gloo's by "
                                 f"{(p - q).abs().max().item():g} (hook {hook})")
    digest = hashlib.sha256()
    for p in on_reducer.parameters():
        digest.update(p.detach().numpy().tobytes())
    print(f"params_sha256={digest.hexdigest()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    scenario = sys.argv[1]
    torch_paths.choose()
    if scenario == "futures":
        futures()
    elif scenario == "ddp":
        ddp(sys.argv[2])
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    torch_exit.release_process_groups()
