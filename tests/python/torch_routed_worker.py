"""One rank of the torch backend's routed-collective tests
(tests/python/torch_routed_test.py): reduce, gather, scatter, all_to_all,
all_to_all_single, send/recv and what torch builds on them.

    python3 torch_routed_worker.py SCENARIO   # rank and world from torch's env vars

Results are checked against Gloo in the same processes where Gloo has the
operation (reduce, gather, scatter, all_to_all_single, send/recv), else
against the closed form computed here from every rank's inputs. A failed
check raises; the process exits non-zero with the traceback.
"""

import datetime
import sys

import torch
import torch.distributed as dist

import reducer.torch  # noqa: F401  (registers the backend)
import torch_exit

TIMEOUT = datetime.timedelta(seconds=30)
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8]


def rank_input(rank, dtype, shape=(4, 3)):
    """Small integers, so every op is exact in every dtype and order."""
    n = 1
    for d in shape:
        n *= d
    return ((torch.arange(n) % 5) + rank + 1).to(dtype).reshape(shape)


def check_equal(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError(f"rank {dist.get_rank()}: {what}: reducer {got} != {want}")


def collectives():
    """reduce, gather, scatter and all_to_all_single against Gloo, every
    root; all_to_all against the closed form; the object collectives."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    for dtype in DTYPES:
        x = rank_input(rank, dtype)
        for root in range(world):
            for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
                mine, theirs = x.clone(), x.clone()
                dist.reduce(mine, dst=root, op=op)
                dist.reduce(theirs, dst=root, op=op, group=gloo)
                # Gloo leaves a non-root's tensor in an unspecified state;
                # Reducer leaves it untouched.
                check_equal(mine, theirs if rank == root else x, f"reduce {op} root {root} {dtype}")

            mine = [torch.zeros_like(x) for _ in range(world)] if rank == root else None
            theirs = [torch.zeros_like(x) for _ in range(world)] if rank == root else None
            dist.gather(x, mine, dst=root)
            dist.gather(x, theirs, dst=root, group=gloo)
            for a, b in zip(mine or [], theirs or []):
                check_equal(a, b, f"gather root {root} {dtype}")

            parts = [rank_input(rank * world + i, dtype) for i in range(world)]
            mine, theirs = torch.zeros_like(x), torch.zeros_like(x)
            dist.scatter(mine, parts if rank == root else None, src=root)
            dist.scatter(theirs, parts if rank == root else None, src=root, group=gloo)
            check_equal(mine, theirs, f"scatter root {root} {dtype}")
            check_equal(mine, rank_input(root * world + rank, dtype), f"scatter root {root} closed form")

        inp = rank_input(rank, dtype, (world * 2, 3))
        mine, theirs = torch.zeros_like(inp), torch.zeros_like(inp)
        dist.all_to_all_single(mine, inp)
        dist.all_to_all_single(theirs, inp, group=gloo)
        check_equal(mine, theirs, f"all_to_all_single {dtype}")

        # The list form against the closed form.
        ins = [rank_input(rank * world + j, dtype, (2, 2)) for j in range(world)]
        outs = [torch.zeros((2, 2), dtype=dtype) for _ in range(world)]
        dist.all_to_all(outs, ins)
        for i, out in enumerate(outs):
            check_equal(out, rank_input(i * world + rank, dtype, (2, 2)), f"all_to_all from {i}")

    # async forms return at once and complete on wait().
    x = rank_input(rank, torch.float32)
    work = dist.reduce(x, dst=0, async_op=True)
    work.wait()
    want = sum(rank_input(r, torch.float32) for r in range(world))
    check_equal(x, want if rank == 0 else rank_input(rank, torch.float32), "reduce async")

    # torch's object collectives, built on the kinds above.
    gathered = [None] * world if rank == 1 else None
    dist.gather_object({"rank": rank, "sq": rank * rank}, gathered, dst=1)
    if rank == 1:
        assert gathered == [{"rank": r, "sq": r * r} for r in range(world)], gathered
    out = [None]
    dist.scatter_object_list(out, [f"part {i}" for i in range(world)] if rank == 0 else None,
                             src=0)
    assert out == [f"part {rank}"], out

    # Uneven all-to-all (mixture-of-experts routing): rank r sends
    # (j + r) % 3 rows, zero included, to rank j, against Gloo; the list
    # form with parts of different sizes against the closed form.
    for dtype in DTYPES:
        send = [(j + rank) % 3 for j in range(world)]
        recv = [(rank + i) % 3 for i in range(world)]
        inp = rank_input(rank, dtype, (sum(send), 3))
        mine = torch.zeros((sum(recv), 3), dtype=dtype)
        theirs = torch.zeros_like(mine)
        dist.all_to_all_single(mine, inp, recv, send)
        dist.all_to_all_single(theirs, inp, recv, send, group=gloo)
        check_equal(mine, theirs, f"all_to_all_single uneven {dtype}")
        ins = [rank_input(rank * world + j, dtype, (j + 1,)) for j in range(world)]
        outs = [torch.zeros((rank + 1,), dtype=dtype) for _ in range(world)]
        dist.all_to_all(outs, ins)
        for i, out in enumerate(outs):
            check_equal(out, rank_input(i * world + rank, dtype, (rank + 1,)),
                        f"all_to_all of uneven parts from {i}")
    # Split sizes that disagree fail every rank, naming both ranks.
    recv = [(rank + i) % 3 for i in range(world)]
    if rank == 0:
        recv[1] += 1
    try:
        send = [(j + rank) % 3 for j in range(world)]
        dist.all_to_all_single(torch.zeros((sum(recv), 3)), torch.zeros((sum(send), 3)),
                               recv, send)
        raise AssertionError("all_to_all_single with disagreeing split sizes did not raise")
    except reducer.FailedPrecondition as e:
        assert "rank 1 sends 1 row to rank 0, but rank 0 expects 2 from rank 1" in str(e), e

    # recv from any source: rank 0 takes every other rank's send, each once,
    # with the sender named by the work's _source_rank(), as Gloo does.
    for group in (None, gloo):
        if rank == 0:
            got = {}
            for _ in range(world - 1):
                t = torch.zeros(2)
                work = dist.irecv(t, group=group)
                work.wait()
                got[work._source_rank()] = t
            assert sorted(got) == list(range(1, world)), sorted(got)
            for source, t in got.items():
                check_equal(t, torch.full((2,), float(source)), f"recv any from {source}")
        else:
            dist.send(torch.full((2,), float(rank)), dst=0, group=group)
    dist.barrier()
    dist.destroy_process_group()


def point_to_point():
    """send/recv, isend/irecv and batch_isend_irecv against Gloo: a ring
    where every rank sends first (buffered by reducerd, so no deadlock),
    tags matched in call order, and a pipeline pass."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world, (rank - 1) % world

    for dtype in DTYPES:
        x = rank_input(rank, dtype)
        dist.send(x, dst=right)
        got = torch.zeros_like(x)
        dist.recv(got, src=left)
        check_equal(got, rank_input(left, dtype), f"ring send/recv {dtype}")

    # Two tags, sent in one order, received in the other: each matches its own.
    dist.send(torch.full((3,), 10.0 + rank), dst=right, tag=1)
    dist.send(torch.full((3,), 20.0 + rank), dst=right, tag=2)
    b, a = torch.zeros(3), torch.zeros(3)
    dist.recv(b, src=left, tag=2)
    dist.recv(a, src=left, tag=1)
    check_equal(a, torch.full((3,), 10.0 + left), "tag 1")
    check_equal(b, torch.full((3,), 20.0 + left), "tag 2")

    # Against Gloo: isend/irecv in both directions.
    for group in (None, gloo):
        out, back = torch.zeros(5), torch.zeros(5)
        works = [dist.isend(torch.arange(5.0) * (rank + 1), dst=right, group=group),
                 dist.irecv(out, src=left, group=group),
                 dist.isend(torch.arange(5.0) - rank, dst=left, group=group),
                 dist.irecv(back, src=right, group=group)]
        for w in works:
            w.wait()
        check_equal(out, torch.arange(5.0) * (left + 1), f"irecv from left, group {group}")
        check_equal(back, torch.arange(5.0) - right, f"irecv from right, group {group}")

    got = torch.zeros(4, dtype=torch.int64)
    ops = [dist.P2POp(dist.isend, torch.full((4,), rank, dtype=torch.int64), right),
           dist.P2POp(dist.irecv, got, left)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check_equal(got, torch.full((4,), left, dtype=torch.int64), "batch_isend_irecv")

    # A pipeline pass: rank 0 starts, each rank adds its rank + 1 and passes on.
    acc = torch.zeros(6, dtype=torch.float64)
    if rank > 0:
        dist.recv(acc, src=rank - 1)
    acc += rank + 1
    if rank < world - 1:
        dist.send(acc, dst=rank + 1)
    else:
        check_equal(acc, torch.full((6,), world * (world + 1) / 2, dtype=torch.float64),
                    "pipeline")

    # A received tensor of another dtype or size raises, naming both.
    if rank == 0:
        dist.send(torch.zeros(3), dst=1)
    elif rank == 1:
        try:
            dist.recv(torch.zeros(4), src=0)
            raise AssertionError("recv of the wrong size did not raise")
        except ValueError as e:
            assert "received" in str(e) and "[4]" in str(e), e
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    {"collectives": collectives, "point_to_point": point_to_point}[sys.argv[1]]()
    torch_exit.release_process_groups()
