"""reducer.Client's routed collectives (reduce, gather, scatter, all_to_all,
all_to_all_v, send, recv and recv_any) against a real reducerd.

Ranks are threads of this process, one reducer.Client each. Expected values
come from numpy on the ranks' inputs, computed here.
"""

import threading
import time

import numpy as np
import pytest
import torch

import reducer
import module_testing
from module_testing import read_only, server, time_limit  # noqa: F401  (fixtures)

W = 4
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]


def run(server, fn, world_size=W, **kwargs):
    return module_testing.run(server, fn, world_size, **kwargs)


def rank_input(rank, dtype, shape=(4, 3)):
    return module_testing.rank_input(rank, dtype, shape, period=5)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_reduce_only_the_root_gets_it_out_of_place_and_in_place(server, dtype):
    inputs = [read_only(rank_input(r, dtype)) for r in range(W)]
    op = "max" if np.dtype(dtype) == np.bool_ else "sum"
    total = (np.max if op == "max" else np.sum)(np.stack(inputs), axis=0).astype(dtype)

    def body(c):
        results = []
        for root in range(W):
            new = c.reduce(inputs[c.rank], op=op, root=root)
            buf = inputs[c.rank].copy()
            assert c.reduce_(buf, op=op, root=root) is buf
            results.append((new, buf))
        return results

    for rank, results in enumerate(run(server, body)):
        for root, (new, buf) in enumerate(results):
            if rank == root:
                assert new.dtype == total.dtype
                np.testing.assert_array_equal(new, total)
                np.testing.assert_array_equal(buf, total)
            else:
                assert new is None
                np.testing.assert_array_equal(buf, inputs[rank])  # untouched


def test_gather_dim0_may_differ_and_only_the_root_gets_it(server):
    inputs = [read_only(rank_input(r, np.int64, (r + 1, 2))) for r in range(W)]
    for rank, out in enumerate(run(server, lambda c: c.gather(inputs[c.rank], root=2))):
        if rank == 2:
            np.testing.assert_array_equal(out, np.concatenate(inputs))
        else:
            assert out is None


def test_scatter_rank_i_gets_part_i_with_and_without_its_dtype(server):
    root_value = read_only(rank_input(9, np.float64, (W * 2, 3)))

    def body(c):
        got = c.scatter(root_value if c.rank == 1 else None, root=1)
        as_torch = c.scatter(root_value if c.rank == 1 else None, root=1, kind="torch")
        return got, as_torch

    for rank, (got, as_torch) in enumerate(run(server, body)):
        want = root_value[2 * rank:2 * rank + 2]
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, want)
        assert isinstance(as_torch, torch.Tensor) and as_torch.dtype == torch.float64
        np.testing.assert_array_equal(as_torch.numpy(), want)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_all_to_all_part_j_of_rank_i_goes_to_rank_j(server, dtype):
    inputs = [read_only(rank_input(r, dtype, (W * 2, 3))) for r in range(W)]
    for rank, out in enumerate(run(server, lambda c: c.all_to_all(inputs[c.rank]))):
        want = np.concatenate([inputs[i][2 * rank:2 * rank + 2] for i in range(W)])
        assert out.dtype == want.dtype
        np.testing.assert_array_equal(out, want)


def test_send_recv_ring_sends_first_and_tags_match_in_call_order(server):
    def body(c):
        right, left = (c.rank + 1) % W, (c.rank - 1) % W
        c.send(np.full(3, c.rank, np.int32), destination=right)        # buffered
        c.send(np.full(2, 10.0 + c.rank), destination=right, tag=7)
        c.send(np.full(2, 20.0 + c.rank), destination=right, tag=7)
        first = c.recv(source=left)
        buf = np.zeros(2)
        c.recv_(buf, source=left, tag=7)
        second = c.recv(source=left, tag=7, kind="torch")
        return first, buf, second

    for rank, (first, buf, second) in enumerate(run(server, body)):
        left = (rank - 1) % W
        assert first.dtype == np.int32
        np.testing.assert_array_equal(first, np.full(3, left))
        np.testing.assert_array_equal(buf, np.full(2, 10.0 + left))
        assert isinstance(second, torch.Tensor)
        np.testing.assert_array_equal(second.numpy(), np.full(2, 20.0 + left))


def test_async_forms(server):
    def body(c):
        x = read_only(rank_input(c.rank, np.float32, (W, 2)))
        works = [c.reduce_async(x, root=0), c.gather_async(x, root=3),
                 c.scatter_async(x if c.rank == 2 else None, root=2),
                 c.all_to_all_async(x),
                 c.send_async(x, destination=(c.rank + 1) % W),
                 c.recv_async(source=(c.rank - 1) % W)]
        return [w.wait() for w in works]

    inputs = [rank_input(r, np.float32, (W, 2)) for r in range(W)]
    for rank, (red, gat, sca, a2a, sent, got) in enumerate(run(server, body)):
        if rank == 0:
            np.testing.assert_array_equal(red, np.sum(np.stack(inputs), axis=0))
        else:
            assert red is None
        if rank == 3:
            np.testing.assert_array_equal(gat, np.concatenate(inputs))
        else:
            assert gat is None
        np.testing.assert_array_equal(sca, inputs[2][rank:rank + 1])
        np.testing.assert_array_equal(a2a, np.concatenate([x[rank:rank + 1] for x in inputs]))
        assert sent is None
        np.testing.assert_array_equal(got, inputs[(rank - 1) % W])


def test_recv_whose_send_never_comes_names_the_source(server):
    done = threading.Event()

    def body(c):
        if c.rank == 1:
            start = time.monotonic()
            try:
                with pytest.raises(reducer.DeadlineExceeded, match="rank 0"):
                    c.recv(source=0, tag=3, timeout=1.0)
            finally:
                done.set()
            return time.monotonic() - start
        done.wait(30)  # rank 0 stays in the job, sending nothing
        return None

    waited = run(server, body, world_size=2)[1]
    assert 0.9 <= waited < 10


def test_bad_arguments_are_invalid_argument_naming_them(server):
    def body(c):
        with pytest.raises(reducer.InvalidArgument, match="root"):
            c.reduce(np.ones(2), root=W)
        with pytest.raises(reducer.InvalidArgument, match="destination"):
            c.send(np.ones(2), destination=c.rank)
        with pytest.raises(reducer.InvalidArgument):
            c.all_to_all(np.ones(W + 1))   # dim 0 does not divide by the group
        if c.rank == 0:
            with pytest.raises(reducer.InvalidArgument):
                c.scatter(np.ones(W + 1), root=0, timeout=5.0)
        return True

    assert all(run(server, body, world_size=2))


def test_all_to_all_v_uneven_rows_with_zeros_and_expected_rows(server):
    # send[i][j]: rows rank i sends rank j; a quarter of the pairs send none.
    send = [[(7 * i + 3 * j) % 4 for j in range(W)] for i in range(W)]
    inputs = [read_only(rank_input(i, np.int64, (sum(send[i]), 2))) for i in range(W)]

    def body(c):
        i = c.rank
        recv = [send[k][i] for k in range(W)]
        plain = c.all_to_all_v(inputs[i], send_rows=send[i])
        checked = c.all_to_all_v(inputs[i], send[i], recv_rows=recv)
        waited = c.all_to_all_v_async(inputs[i], send[i]).wait()
        return plain, checked, waited

    for j, results in enumerate(run(server, body)):
        # Rows of rank i for rank j start after those it sends ranks 0..j-1.
        want = np.concatenate([
            inputs[i][sum(send[i][:j]):sum(send[i][:j]) + send[i][j]]
            for i in range(W)])
        for out in results:
            assert out.dtype == np.int64
            assert out.shape == (sum(send[i][j] for i in range(W)), 2)
            np.testing.assert_array_equal(out, want)


def test_all_to_all_v_expected_rows_that_disagree_fail_every_rank(server):
    def body(c):
        send = [1, 1] if c.rank == 0 else [2, 0]
        recv = [3, 0] if c.rank == 1 else None   # rank 0 sends rank 1 one row
        with pytest.raises(reducer.FailedPrecondition,
                           match="rank 0 sends 1 row to rank 1, but rank 1 "
                                 "expects 3 from rank 0"):
            c.all_to_all_v(np.ones((2, 3)), send, recv_rows=recv, timeout=10.0)
        with pytest.raises(reducer.InvalidArgument, match="send_rows"):
            c.all_to_all_v(np.ones((2, 3)), [1, 2])   # do not sum to 2
        return True

    assert all(run(server, body, world_size=2))


def test_recv_any_takes_each_message_once_naming_its_source(server):
    def body(c):
        if c.rank != 0:
            for k in range(2):
                c.send(np.array([c.rank, k], np.int32), destination=0, tag=5)
            return None
        got = [c.recv_any(tag=5) for _ in range(2 * (W - 1) - 1)]
        # A recv from a source after recv_any named it: its next message.
        work = c.recv_any_async(tag=5)
        last, source = work.wait()
        got.append((last, source))
        return got

    got = run(server, body)[0]
    seen = {}
    for array, source in got:
        assert array.dtype == np.int32
        assert array[0] == source
        # Each source's messages in its order, each once.
        assert array[1] == seen.get(source, 0)
        seen[source] = array[1] + 1
    assert seen == {r: 2 for r in range(1, W)}


def test_recv_any_then_recv_from_its_source_gets_the_next_message(server):
    def body(c):
        if c.rank == 1:
            for k in range(3):
                c.send(np.array([float(k)]), destination=0, tag=2)
            return None
        first, source = c.recv_any(tag=2, kind="torch")
        second = c.recv(source=source, tag=2)
        third, again = c.recv_any(tag=2)
        return source, first, second, third, again

    source, first, second, third, again = run(server, body, world_size=2)[0]
    assert source == again == 1
    assert isinstance(first, torch.Tensor)
    assert [first.item(), float(second[0]), float(third[0])] == [0.0, 1.0, 2.0]


def test_recv_any_whose_send_never_comes_says_what_it_waited_for(server):
    done = threading.Event()

    def body(c):
        if c.rank == 1:
            try:
                with pytest.raises(reducer.DeadlineExceeded,
                                   match="no rank sent to rank 1 with tag 6"):
                    c.recv_any(tag=6, timeout=1.0)
            finally:
                done.set()
            return True
        done.wait(30)
        return True

    assert all(run(server, body, world_size=2))

