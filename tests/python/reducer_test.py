"""Tests of the `reducer` Python module against a real reducerd.

Ranks are threads of this process, one reducer.Client each (the GIL is
released while a call waits, which the tests depend on and one proves).
Expected values come from numpy on the ranks' inputs, computed here.
"""

import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import reducer
import module_testing
from module_testing import read_only, server, time_limit  # noqa: F401  (fixtures)
from reducerd_process import new_job, run_ranks

W = 4

NUMPY_DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32,
                np.int64, np.bool_]
TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool]


def run(server, fn, world_size=W, **kwargs):
    return module_testing.run(server, fn, world_size, **kwargs)


def rank_input(rank, dtype, shape=(3, 2)):
    """Rank r's input: small values so that every op is exact in every dtype."""
    return module_testing.rank_input(rank, dtype, shape, period=3)


NUMPY_OPS = {
    "sum": lambda xs: np.sum(xs, axis=0, dtype=xs[0].dtype),
    "product": lambda xs: np.prod(xs, axis=0, dtype=xs[0].dtype),
    "min": lambda xs: np.min(xs, axis=0),
    "max": lambda xs: np.max(xs, axis=0),
    "bit_and": lambda xs: np.bitwise_and.reduce(xs, axis=0),
    "bit_or": lambda xs: np.bitwise_or.reduce(xs, axis=0),
    "bit_xor": lambda xs: np.bitwise_xor.reduce(xs, axis=0),
}


def ops_for(dtype):
    if np.dtype(dtype).kind == "f":
        return ["sum", "product", "min", "max", "avg"]
    if np.dtype(dtype) == np.bool_:
        return ["min", "max", "bit_and", "bit_or", "bit_xor"]
    return ["sum", "product", "min", "max", "bit_and", "bit_or", "bit_xor"]


def expected(op, inputs):
    if op == "avg":
        return (np.sum(np.stack(inputs).astype(np.float64), axis=0) / len(inputs)).astype(
            inputs[0].dtype)
    return NUMPY_OPS[op](np.stack(inputs))


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_all_reduce_every_op_out_of_place_and_in_place(server, dtype):
    inputs = [read_only(rank_input(r, dtype)) for r in range(W)]
    ops = ops_for(dtype)

    def body(c):
        out = {}
        for op in ops:
            x = inputs[c.rank]
            result = c.all_reduce(x, op=op)
            inout = x.copy()
            assert c.all_reduce_(inout, op=op) is inout
            out[op] = (result, inout)
        return out

    for rank, out in enumerate(run(server, body)):
        for op in ops:
            result, inout = out[op]
            want = expected(op, inputs)
            assert isinstance(result, np.ndarray)
            assert result.dtype == want.dtype and result.shape == want.shape, (rank, op)
            np.testing.assert_array_equal(result, want, err_msg=f"rank {rank} op {op}")
            np.testing.assert_array_equal(inout, result, err_msg=f"rank {rank} op {op}")
    for r in range(W):  # read-only inputs: numpy would have refused a write
        np.testing.assert_array_equal(inputs[r], rank_input(r, dtype))


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_tensors_in_torch_tensors_out(server, dtype):
    inputs = [torch.from_numpy(rank_input(r, np.int64)).to(dtype) for r in range(W)]
    if dtype == torch.bool:
        inputs = [torch.from_numpy(rank_input(r, np.bool_)) for r in range(W)]
    op = "max" if dtype == torch.bool else "sum"

    def body(c):
        x = inputs[c.rank]
        before = x.clone()
        result = c.all_reduce(x, op=op)
        assert torch.equal(x, before)
        inout = x.clone()
        c.all_reduce_(inout, op=op)
        gathered = c.all_gather(x)
        bcast = c.broadcast(x if c.rank == 1 else None, root=1, kind="torch")
        return result, inout, gathered, bcast

    stacked = torch.stack(inputs)
    want = stacked.max(0).values if dtype == torch.bool else stacked.to(torch.float64).sum(0).to(dtype)
    for rank, (result, inout, gathered, bcast) in enumerate(run(server, body)):
        assert isinstance(result, torch.Tensor) and result.dtype == dtype
        assert torch.equal(result, want), rank
        assert torch.equal(inout, want), rank
        assert torch.equal(gathered, torch.cat(inputs)), rank
        assert bcast.dtype == dtype and torch.equal(bcast, inputs[1]), rank


def test_scalars(server):
    def body(c):
        return (c.all_reduce(c.rank + 1), c.all_reduce(0.5 * (c.rank + 1), op="max"),
                c.all_reduce(np.int64(2), op="product"))

    for ints, floats, prod in run(server, body):
        assert ints == W * (W + 1) // 2 and isinstance(ints, int)
        assert floats == 0.5 * W and isinstance(floats, float)
        assert prod == 2 ** W


def test_local_world_size_comes_from_the_environment(server, monkeypatch):
    """LOCAL_WORLD_SIZE (torchrun's) fills local_world_size unless it is given;
    a value that is not a count raises ValueError naming the variable."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with reducer.Client(target=server.target, job=new_job(), timeout=20) as c:
        assert c.local_world_size == 3
        assert c.all_reduce(2) == 2
    with reducer.Client(target=server.target, job=new_job(), timeout=20,
                        local_world_size=1) as c:
        assert c.local_world_size == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "three")
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE='three'"):
        reducer.Client(target=server.target, job=new_job(), timeout=20)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert reducer.local_world_size_from_env() == 0
    with pytest.raises(ValueError, match="local_world_size must not be negative"):
        reducer.Client(target=server.target, job=new_job(), timeout=20,
                       local_world_size=-1)


def test_all_reduce_many_one_op_each(server):
    a = [read_only(rank_input(r, np.float32)) for r in range(W)]
    b = [read_only(rank_input(r, np.int64, (5,))) for r in range(W)]

    def body(c):
        return c.all_reduce_many([a[c.rank], b[c.rank]], ops=["max", "sum"])

    for ra, rb in run(server, body):
        np.testing.assert_array_equal(ra, np.max(np.stack(a), axis=0))
        np.testing.assert_array_equal(rb, np.sum(np.stack(b), axis=0))


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_all_gather_dim0_may_differ(server, dtype):
    inputs = [read_only(rank_input(r, dtype, (r + 1, 2))) for r in range(W)]
    for out in run(server, lambda c: c.all_gather(inputs[c.rank])):
        np.testing.assert_array_equal(out, np.concatenate(inputs))


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_broadcast_none_and_in_place(server, dtype):
    root_value = read_only(rank_input(2, dtype, (4,)))

    def body(c):
        new = c.broadcast(root_value if c.rank == 2 else None, root=2)
        buf = root_value.copy() if c.rank == 2 else np.zeros(4, dtype)
        c.broadcast_(buf, root=2)
        return new, buf

    for new, buf in run(server, body):
        assert new.dtype == root_value.dtype
        np.testing.assert_array_equal(new, root_value)
        np.testing.assert_array_equal(buf, root_value)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_reduce_scatter_rank_i_gets_slice_i(server, dtype):
    inputs = [read_only(rank_input(r, dtype, (8, 3))) for r in range(W)]
    op = "max" if np.dtype(dtype) == np.bool_ else "sum"
    total = expected(op, inputs)
    for rank, out in enumerate(run(server, lambda c: c.reduce_scatter(inputs[c.rank], op=op))):
        assert out.dtype == total.dtype
        np.testing.assert_array_equal(out, total[2 * rank:2 * rank + 2])


def test_barrier_waits_for_the_last_rank(server):
    arrived = []

    def body(c):
        if c.rank == W - 1:
            time.sleep(0.5)
            arrived.append(time.monotonic())
        c.barrier()
        return time.monotonic()

    for t in run(server, body):
        assert t >= arrived[0]


def test_group_and_name_call_options(server):
    def body(c):
        if c.rank in (1, 3):
            return c.all_reduce(np.array([c.rank], np.int64), group=[1, 3], name="pair")
        return None

    out = run(server, body)
    assert out[0] is None and out[2] is None
    np.testing.assert_array_equal(out[1], [4])
    np.testing.assert_array_equal(out[3], [4])


def test_async_forms_wait_and_is_completed(server):
    def body(c):
        x = read_only(np.full(3, c.rank + 1, np.float32))
        y = np.full(3, c.rank + 1, np.float32)
        if c.rank == 0:
            time.sleep(0.3)
        a = c.all_reduce_async(x)
        b = c.all_reduce_async_(y, op="max")
        ra = a.wait()
        assert b.wait() is y
        assert a.is_completed() and b.is_completed()
        return ra, y

    for ra, y in run(server, body):
        np.testing.assert_array_equal(ra, np.full(3, W * (W + 1) / 2))
        np.testing.assert_array_equal(y, np.full(3, W))


def test_async_not_completed_while_a_rank_is_missing(server):
    job = new_job()
    go = threading.Event()

    def body(c):
        if c.rank == 1:
            go.wait(10)
        work = c.all_reduce_async(np.ones(2, np.float32))
        if c.rank == 0:
            time.sleep(0.3)
            assert not work.is_completed()
            go.set()
        return work.wait()

    for out in run_ranks(2, server.target, job, body):
        np.testing.assert_array_equal(out, [2, 2])


def test_metric_sync_out_of_place_leaves_states_and_in_place_overwrites(server):
    def body(c):
        correct = np.array([c.rank + 1], np.int64)
        loss = torch.tensor([0.5 * (c.rank + 1)], dtype=torch.float64)
        sync = reducer.MetricSync(c)
        sync.add("correct", correct)
        sync.add("loss", loss, op="sum")
        out = sync.reduce()
        assert correct[0] == c.rank + 1 and loss.item() == 0.5 * (c.rank + 1)
        sync.reduce_()
        return out, correct, loss

    for out, correct, loss in run(server, body):
        assert isinstance(out["correct"], np.ndarray) and isinstance(out["loss"], torch.Tensor)
        assert out["correct"][0] == 10 and out["loss"].item() == 5.0
        assert correct[0] == 10 and loss.item() == 5.0


def test_mismatched_shape_is_failed_precondition_for_every_rank(server):
    def body(c):
        x = np.zeros((4, 3 + (c.rank == 2)), np.float32)
        before = x.copy()
        with pytest.raises(reducer.FailedPrecondition) as info:
            c.all_reduce_(x)
        np.testing.assert_array_equal(x, before)  # in place: all or nothing
        return str(info.value), info.value.code

    for message, code in run(server, body):
        assert code == "FAILED_PRECONDITION"
        assert "mismatched shapes" in message and "[4,4]" in message and "[4,3]" in message


def test_timeout_is_deadline_exceeded_naming_the_missing_rank(server):
    def body(c):
        if c.rank == 0:
            with pytest.raises(reducer.DeadlineExceeded) as info:
                c.all_reduce(np.ones(1, np.float32), timeout=0.5)
            return str(info.value)
        time.sleep(1.0)  # rank 1 never makes the call
        return None

    message = run(server, body, world_size=2)[0]
    assert isinstance(reducer.DeadlineExceeded("x"), reducer.ReducerError)
    assert "rank 1" in message, message


def test_killed_rank_is_aborted_naming_it(server):
    """Rank 1 is another process, killed with SIGKILL while rank 0 waits."""
    job = new_job()
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time, reducer\n"
         "c = reducer.Client(target=sys.argv[1], job=sys.argv[2], rank=1, world_size=2)\n"
         "print('joined', flush=True)\n"
         "time.sleep(60)\n", server.target, job],
        stdout=subprocess.PIPE, text=True)
    try:
        c = reducer.Client(target=server.target, job=job, rank=0, world_size=2, timeout=20)
        assert child.stdout.readline().strip() == "joined"
        killer = threading.Timer(0.3, child.kill)
        killer.start()
        start = time.monotonic()
        x = np.ones(2, np.float32)
        with pytest.raises(reducer.Aborted, match="rank 1") as info:
            c.all_reduce_(x)
        assert info.value.code == "ABORTED"
        assert time.monotonic() - start < 10  # seconds, not the 20 s timeout
        np.testing.assert_array_equal(x, [1, 1])
        c.close()
    finally:
        child.kill()
        child.wait()


def test_invalid_op_for_dtype_is_invalid_argument(server):
    def body(c):
        with pytest.raises(reducer.InvalidArgument, match="avg"):
            c.all_reduce(np.ones(2, np.int32), op="avg")

    run(server, body, world_size=2)


def test_bad_inputs_raise_before_anything_is_sent(server):
    def body(c):
        with pytest.raises(ValueError, match="not C-contiguous"):
            c.all_reduce(np.ones((4, 4), np.float32)[:, ::2])
        with pytest.raises(ValueError, match="not contiguous"):
            c.all_reduce(torch.ones(4, 4).t())
        with pytest.raises(TypeError, match="complex128"):
            c.all_reduce(np.ones(2, np.complex128))
        with pytest.raises(TypeError, match="int16"):
            c.all_reduce(torch.ones(2, dtype=torch.int16))
        with pytest.raises(TypeError, match="list"):
            c.all_reduce([1.0, 2.0])
        with pytest.raises(ValueError, match="read-only"):
            c.all_reduce_(read_only(np.ones(2, np.float32)))
        with pytest.raises(ValueError, match="unknown op 'mean'"):
            c.all_reduce(np.ones(2, np.float32), op="mean")
        # Nothing was sent: the next collective is the first one of the job.
        return c.all_reduce(np.array([1], np.int64), name="first")

    for out in run(server, body, world_size=2):
        np.testing.assert_array_equal(out, [2])


def test_device_array_is_refused_up_front_without_a_gpu(server):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: test_torch_cuda_tensors covers it")

    def body(c):
        host = np.ones(4, np.float32)
        on_gpu = reducer._reducer.DeviceArray(host.ctypes.data, [4], 0, 0, host)
        # Built with CUDA, the runtime finds no device; built without, the
        # library says so. Either way nothing is sent.
        with pytest.raises(reducer.FailedPrecondition,
                           match="cuda:0.*(cudaGetDeviceCount|built without CUDA)"):
            c._client.all_reduce(on_gpu, "float32", "sum")
        with pytest.raises(AttributeError, match="only a result DeviceArray"):
            on_gpu.__cuda_array_interface__
        return c.all_reduce(np.array([1], np.int64), name="after")

    for out in run(server, body, world_size=2):
        np.testing.assert_array_equal(out, [2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_cuda_tensors(server, dtype):
    inputs = [torch.from_numpy(rank_input(r, np.int64)).to(dtype) for r in range(W)]
    want = inputs[0].clone()
    for x in inputs[1:]:
        want = torch.maximum(want, x)

    def body(c):
        x = inputs[c.rank].to("cuda:0")
        before = x.clone()
        out = c.all_reduce(x, op="max")
        assert out.device == x.device and out.dtype == dtype
        assert torch.equal(x, before)  # out of place: input untouched
        c.all_reduce_(x, op="max")
        return out.cpu(), x.cpu()

    for out, inplace in run(server, body):
        assert torch.equal(out, want)
        assert torch.equal(inplace, want)


def test_gil_released_while_a_collective_waits(server):
    job = new_job()
    ticks = []
    waiting = threading.Event()
    stop = threading.Event()

    def rank0(c):
        waiting.set()
        return c.all_reduce(np.ones(1, np.float32))  # blocks until rank 1 calls

    def ticker():
        waiting.wait(10)
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    def rank1(c):
        waiting.wait(10)
        time.sleep(0.5)
        n = len(ticks)  # the ticker ran while rank 0 waited inside C++
        return n, c.all_reduce(np.ones(1, np.float32))

    t = threading.Thread(target=ticker, daemon=True)
    t.start()
    out = run_ranks(2, server.target, job, lambda c: rank0(c) if c.rank == 0 else rank1(c))
    stop.set()
    n, result = out[1]
    assert n >= 10, f"only {n} ticks while a collective waited"
    np.testing.assert_array_equal(out[0], [2])
