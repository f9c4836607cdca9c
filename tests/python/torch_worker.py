"""One rank of the torch backend tests (tests/python/torch_backend_test.py).

    python3 torch_worker.py SCENARIO     # rank and world from torch's env vars

Each scenario checks results against Gloo run in the same process on the
same inputs (a gloo group beside the reducer one), or, where Gloo lacks the
operation, against the value computed here from every rank's inputs. A
failed check raises; the process exits non-zero with the traceback.
Every rank prints "job=<reducer job name>" for each reducer group it used.
"""

import datetime
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

import reducer
import reducer.torch  # noqa: F401  (registers the backend)
import torch_exit
import torch_paths

TIMEOUT = datetime.timedelta(seconds=30)
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
BIT_OPS = [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.uint8, torch.int32, torch.int64]


def rank_input(rank, dtype, n=6):
    """Small integers, so every op is exact in every dtype and order."""
    return ((torch.arange(n) % 3) + rank + 1).to(dtype)


def report_job(group):
    print(f"job={reducer.torch.backend_of(group).job}", flush=True)


def check_equal(got, want, what):
    if got.dtype != want.dtype or not torch.equal(got, want):
        raise AssertionError(f"rank {dist.get_rank()}: {what}: reducer {got} != gloo {want}")


_REFERENCE_OPS = {
    dist.ReduceOp.SUM: lambda s: s.sum(0),
    dist.ReduceOp.PRODUCT: lambda s: s.prod(0),
    dist.ReduceOp.MIN: lambda s: s.min(0).values,
    dist.ReduceOp.MAX: lambda s: s.max(0).values,
}
_REFERENCE_BIT_OPS = {
    dist.ReduceOp.BAND: torch.bitwise_and,
    dist.ReduceOp.BOR: torch.bitwise_or,
    dist.ReduceOp.BXOR: torch.bitwise_xor,
}
GLOO_LACKS = set()  # dtypes Gloo refused ("Invalid scalar type")


def reference_all_reduce(inputs, op):
    """The reduction of every rank's input, computed here (exact in float64)."""
    if op in _REFERENCE_BIT_OPS:
        out = inputs[0]
        for t in inputs[1:]:
            out = _REFERENCE_BIT_OPS[op](out, t)
        return out
    return _REFERENCE_OPS[op](torch.stack([t.to(torch.float64) for t in inputs])).to(
        inputs[0].dtype)


def all_reduce_both(x, op, gloo, async_op=False, inputs=None):
    """(reducer's in-place all_reduce of x, Gloo's); where Gloo lacks the dtype,
    the reference from `inputs` (every rank's x) stands in for Gloo."""
    mine, theirs = x.clone(), x.clone()
    work = dist.all_reduce(mine, op=op, async_op=async_op)
    if async_op:
        torch_paths.check_work(work)
        work.wait()
        assert work.is_completed()
    if x.dtype in GLOO_LACKS:
        return mine, reference_all_reduce(inputs, op)
    try:
        dist.all_reduce(theirs, op=op, group=gloo)
    except RuntimeError as e:
        if "Invalid scalar type" not in str(e) or inputs is None:
            raise
        GLOO_LACKS.add(x.dtype)  # every rank fails alike, so all stay in step
        return mine, reference_all_reduce(inputs, op)
    return mine, theirs


def collectives():
    """Every collective, op and dtype of this file on the reducer backend
    equals Gloo's (torch_routed_worker.py has reduce, gather, scatter,
    all-to-all and send/recv); errors and an unsupported op."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    report_job(dist.group.WORLD)
    assert dist.get_backend() == "reducer"
    GLOO_LACKS.clear()
    gloo = dist.new_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    for dtype in DTYPES:
        ops = OPS + (BIT_OPS if not dtype.is_floating_point else [])
        for op in ops:
            x = rank_input(rank, dtype)
            inputs = [rank_input(r, dtype) for r in range(world)]
            for async_op in (False, True):
                mine, theirs = all_reduce_both(x, op, gloo, async_op, inputs)
                check_equal(mine, theirs, f"all_reduce {op} {dtype} async={async_op}")
    for dtype in (torch.float32, torch.float64):  # Gloo has no AVG: SUM / world
        mine = rank_input(rank, dtype)
        theirs = mine.clone()
        dist.all_reduce(mine, op=dist.ReduceOp.AVG)
        dist.all_reduce(theirs, group=gloo)
        check_equal(mine, theirs / world, f"all_reduce AVG {dtype}")
    for op in (dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.BAND, dist.ReduceOp.BOR):
        inputs = [rank_input(r, torch.int64) % 2 == 0 for r in range(world)]
        mine, theirs = all_reduce_both(inputs[rank], op, gloo, inputs=inputs)
        check_equal(mine, theirs, f"all_reduce {op} bool")

    print(f"gloo lacks {sorted(map(str, GLOO_LACKS))}: checked against the reference",
          flush=True)

    # all_reduce_coalesced
    mine = [rank_input(rank, torch.float32), rank_input(rank, torch.float32, 3)]
    theirs = [t.clone() for t in mine]
    with warnings.catch_warnings():  # "will be deprecated"
        warnings.simplefilter("ignore")
        dist.all_reduce_coalesced(mine)
    for t in theirs:
        dist.all_reduce(t, group=gloo)
    for a, b in zip(mine, theirs):
        check_equal(a, b, "all_reduce_coalesced")

    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8):
        # Where Gloo lacks the dtype, Gloo runs on float32 copies (exact here).
        carrier = torch.float32 if dtype in GLOO_LACKS else dtype
        x = rank_input(rank, dtype).reshape(2, 3)
        mine = [torch.zeros_like(x) for _ in range(world)]
        theirs = [torch.zeros_like(x, dtype=carrier) for _ in range(world)]
        dist.all_gather(mine, x)
        dist.all_gather(theirs, x.to(carrier), group=gloo)
        theirs = [t.to(dtype) for t in theirs]
        for a, b in zip(mine, theirs):
            check_equal(a, b, f"all_gather {dtype}")
        out = torch.zeros((world * 2, 3), dtype=dtype)
        dist.all_gather_into_tensor(out, x)
        check_equal(out, torch.cat(theirs), f"all_gather_into_tensor {dtype}")

        for root in (0, world - 1):
            mine, theirs = x.clone() * (rank + 1), (x.clone() * (rank + 1)).to(carrier)
            dist.broadcast(mine, src=root)
            dist.broadcast(theirs, src=root, group=gloo)
            check_equal(mine, theirs.to(dtype), f"broadcast root {root} {dtype}")

        # Against gloo's all_reduce, sliced (gloo's reduce_scatter lacks
        # some of these dtypes).
        inputs = [rank_input(rank + i, dtype).reshape(2, 3) for i in range(world)]
        total = [t.to(carrier, copy=True) for t in inputs]
        for t in total:
            dist.all_reduce(t, group=gloo)
        total = [t.to(dtype) for t in total]
        out = torch.zeros_like(inputs[0])
        dist.reduce_scatter(out, inputs)
        check_equal(out, total[rank], f"reduce_scatter {dtype}")
        out = torch.zeros_like(inputs[0])
        dist.reduce_scatter_tensor(out, torch.cat(inputs))
        check_equal(out, total[rank], f"reduce_scatter_tensor {dtype}")

    coalesced(gloo)
    dist.barrier()
    dist.barrier(group=gloo)
    dist.barrier(device_ids=[0])
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=10))

    # Errors: a mismatched shape fails every rank, the tensor keeps its values.
    x = torch.ones(3 + (rank == 1))
    try:
        dist.all_reduce(x)
        raise AssertionError("mismatched shapes did not raise")
    except reducer.FailedPrecondition as e:
        assert "mismatched shapes" in str(e), e
        assert isinstance(e, RuntimeError)
    check_equal(x, torch.ones(3 + (rank == 1)), "all_reduce after an error")

    x = torch.ones(2)
    try:
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(2.0))
        raise AssertionError("PREMUL_SUM did not raise")
    except (RuntimeError, ValueError) as e:
        assert "ReduceOp" in str(e) or "PREMUL" in str(e), e

    # The rest of the job still works after the errors.
    mine, theirs = all_reduce_both(rank_input(rank, torch.int32), dist.ReduceOp.SUM, gloo)
    check_equal(mine, theirs, "all_reduce after errors")
    dist.destroy_process_group()


def coalesced(gloo):
    """The coalesced forms (one round trip each on reducer) against gloo's."""
    rank, world = dist.get_rank(), dist.get_world_size()
    inputs = [rank_input(rank, torch.float32, 4), rank_input(rank + 1, torch.float32, 6)]

    def coalesced_into(group, op, outs, xs):
        """op(out, x) for each pair, coalesced; returns outs once done."""
        with dist._coalescing_manager(group=group, async_ops=True) as cm:
            for out, x in zip(outs, xs):
                op(out, x, group=group)
        cm.wait()
        return outs

    def gather_into(group):
        outs = [torch.zeros(world * x.numel()) for x in inputs]
        return coalesced_into(group, dist.all_gather_into_tensor, outs, inputs)

    def scatter_into(group):
        big = [rank_input(rank, torch.float32, world * 2),
               rank_input(rank + 2, torch.float32, world * 3)]
        outs = [torch.zeros(2), torch.zeros(3)]
        return coalesced_into(group, dist.reduce_scatter_tensor, outs, big)

    def gather_lists(group):
        outs = [[torch.zeros_like(x) for x in inputs] for _ in range(world)]
        dist.all_gather_coalesced(outs, inputs, group=group)
        return [t for per_rank in outs for t in per_rank]

    def reduce_many(group):
        ts = [x.clone() for x in inputs]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            dist.all_reduce_coalesced(ts, group=group)
        return ts

    for name, call in [("all_gather_into_tensor coalesced", gather_into),
                       ("reduce_scatter_tensor coalesced", scatter_into),
                       ("all_gather_coalesced", gather_lists),
                       ("all_reduce_coalesced", reduce_many)]:
        mine, theirs = call(None), call(gloo)
        for i, (a, b) in enumerate(zip(mine, theirs)):
            check_equal(a, b, f"{name} tensor {i}")


def monitored():
    """monitored_barrier: rank 0 waits at most 2 s for a rank that never
    comes and raises naming it; the others (every rank but the last)
    raise too; the last rank arrives only after that."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=10))
    if rank != world - 1:
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=2))
            raise AssertionError("monitored_barrier without the last rank did not raise")
        except RuntimeError as e:
            assert f"rank {world - 1} never arrived" in str(e), e
            assert "monitored_barrier" in str(e), e
    time.sleep(4)
    print("monitored ok", flush=True)


def subgroups():
    """new_group of every subset kind (all, a pair, one rank) beside gloo groups,
    under a gloo default group."""
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank, world = dist.get_rank(), dist.get_world_size()
    for ranks in ([0, 1, 2, 3], [1, 3], [2], [3, 0, 2]):
        mine_group = dist.new_group(ranks, backend="reducer")
        gloo_group = dist.new_group(ranks, backend="gloo")
        if rank not in ranks:
            assert mine_group == dist.GroupMember.NON_GROUP_MEMBER
            continue
        report_job(mine_group)
        assert dist.get_backend(mine_group) == "reducer"
        x = rank_input(rank, torch.float32)
        mine, theirs = x.clone(), x.clone()
        dist.all_reduce(mine, group=mine_group)
        dist.all_reduce(theirs, group=gloo_group)
        check_equal(mine, theirs, f"all_reduce in group {ranks}")
        gathered = [torch.zeros_like(x) for _ in ranks]
        gathered_gloo = [torch.zeros_like(x) for _ in ranks]
        dist.all_gather(gathered, x, group=mine_group)
        dist.all_gather(gathered_gloo, x, group=gloo_group)
        for a, b in zip(gathered, gathered_gloo):
            check_equal(a, b, f"all_gather in group {ranks}")
        root = ranks[-1]  # a global rank, as torch takes it
        mine, theirs = x.clone(), x.clone()
        dist.broadcast(mine, src=root, group=mine_group)
        dist.broadcast(theirs, src=root, group=gloo_group)
        check_equal(mine, theirs, f"broadcast in group {ranks}")
        dist.barrier(group=mine_group)
    dist.destroy_process_group()


def repeated():
    """init_process_group / destroy_process_group three times in one process,
    once per init method (env://, tcp://, file://): a new job each time."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    methods = ["env://", f"tcp://127.0.0.1:{os.environ['SECOND_PORT']}",
               f"file://{os.environ['STORE_FILE']}", "env://"]
    jobs = []
    for i, method in enumerate(methods):
        dist.init_process_group("reducer", init_method=method, rank=rank,
                                world_size=world, timeout=TIMEOUT)
        jobs.append(reducer.torch.backend_of().job)
        report_job(dist.group.WORLD)
        x = torch.full((4,), float(rank + i))
        dist.all_reduce(x)
        want = float(sum(range(world)) + world * i)
        assert torch.equal(x, torch.full((4,), want)), (method, x)
        dist.destroy_process_group()
    assert len(set(jobs)) == len(jobs), jobs


def smoke():
    """torchrun: init from torchrun's environment, one all_reduce and barrier."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    report_job(dist.group.WORLD)
    x = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(x)
    w = dist.get_world_size()
    assert x.item() == w * (w + 1) / 2, x
    dist.barrier()
    dist.destroy_process_group()


def metric():
    """An Ignite-style Accuracy and mean loss over the ranks' shards of one data
    set, synced through MetricSync and through the backend; equal to one
    process computing them on all the data."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    report_job(dist.group.WORLD)
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(4 * 25 + 3, 5, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 5, (logits.shape[0],), generator=generator)
    shard = slice(rank, None, world)  # uneven shards: 103 samples over 4 ranks

    # Local states, as ignite.metrics.Accuracy / Loss keep them.
    predicted = logits[shard].argmax(dim=1)
    correct = torch.tensor([(predicted == labels[shard]).sum().item()], dtype=torch.int64)
    examples = torch.tensor([labels[shard].numel()], dtype=torch.int64)
    loss_sum = torch.nn.functional.cross_entropy(
        logits[shard], labels[shard], reduction="sum").reshape(1)
    before = [correct.clone(), examples.clone(), loss_sum.clone()]

    # The whole data set in one process: the reference.
    want_accuracy = (logits.argmax(dim=1) == labels).sum().item() / labels.numel()
    want_loss = torch.nn.functional.cross_entropy(logits, labels, reduction="mean").item()

    # 1. MetricSync (one round trip), out of place: local states unchanged.
    sync = reducer.MetricSync(reducer.torch.backend_of().client)
    sync.add("correct", correct)
    sync.add("examples", examples)
    sync.add("loss_sum", loss_sum)
    totals = sync.reduce()
    for a, b in zip([correct, examples, loss_sum], before):
        assert torch.equal(a, b), "MetricSync.reduce changed a local state"
    accuracy = totals["correct"].item() / totals["examples"].item()
    loss = totals["loss_sum"].item() / totals["examples"].item()
    assert accuracy == want_accuracy, (accuracy, want_accuracy)
    assert abs(loss - want_loss) < 1e-12, (loss, want_loss)

    # 2. The backend, as Ignite's sync_all_reduce does it: in place on a copy.
    states = [t.clone() for t in (correct, examples, loss_sum)]
    for t in states:
        dist.all_reduce(t)
    assert states[0].item() / states[1].item() == want_accuracy
    assert abs(states[2].item() / states[1].item() - want_loss) < 1e-12
    for a, b in zip([correct, examples, loss_sum], before):
        assert torch.equal(a, b)

    # 3. MetricSync in place overwrites every state with its global value.
    sync.reduce_()
    assert torch.equal(correct, totals["correct"]) and torch.equal(loss_sum, totals["loss_sum"])
    dist.destroy_process_group()


def secure():
    """Against a reducerd requiring tokens and mutual TLS, configured only by
    the environment (REDUCER_JOB, REDUCER_TOKEN(_FILE), REDUCER_TLS_*): the
    default group and a new_group subgroup [1, 3], each a job of its own
    under REDUCER_JOB/, reduce correctly."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    report_job(dist.group.WORLD)
    rank, world = dist.get_rank(), dist.get_world_size()
    prefix = os.environ["REDUCER_JOB"] + "/"
    assert reducer.torch.backend_of().job.startswith(prefix), reducer.torch.backend_of().job
    x = rank_input(rank, torch.float32)
    dist.all_reduce(x)
    check_equal(x, reference_all_reduce(
        [rank_input(r, torch.float32) for r in range(world)], dist.ReduceOp.SUM),
        "all_reduce on the default group")
    ranks = [1, 3]
    group = dist.new_group(ranks, backend="reducer")
    if rank in ranks:
        report_job(group)
        assert reducer.torch.backend_of(group).job.startswith(prefix) and reducer.torch.backend_of(group).job != reducer.torch.backend_of().job
        x = rank_input(rank, torch.int64)
        dist.all_reduce(x, op=dist.ReduceOp.MAX, group=group)
        check_equal(x, reference_all_reduce(
            [rank_input(r, torch.int64) for r in ranks], dist.ReduceOp.MAX),
            f"all_reduce MAX in group {ranks}")
    dist.barrier()
    dist.destroy_process_group()


def refused():
    """With a token reducerd does not know, init_process_group raises a
    ReducerError naming the job at once; prints "refused=CLASS: MESSAGE". The
    store is the test's own, so that rank 0 (its server) stays until every
    rank has been refused."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), world, rank == 0,
                          timeout=TIMEOUT)
    try:
        dist.init_process_group("reducer", store=store, rank=rank, world_size=world,
                                timeout=TIMEOUT)
        raise AssertionError("init_process_group let a wrong token in")
    except reducer.ReducerError as e:
        print(f"refused={type(e).__name__}: {e}", flush=True)
    store.add("refused", 1)
    if rank == 0:
        while store.add("refused", 0) < world:
            time.sleep(0.05)


SCENARIOS = {f.__name__: f for f in (collectives, monitored, subgroups, repeated, smoke, metric,
                                     secure, refused)}

if __name__ == "__main__":
    torch_paths.choose()
    SCENARIOS[sys.argv[1]]()
    torch_exit.release_process_groups()
    print(f"rank {os.environ.get('RANK')} {sys.argv[1]} ok", flush=True)
