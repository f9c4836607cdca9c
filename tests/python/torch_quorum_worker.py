"""One rank of the torch quorum-step tests (tests/python/torch_quorum_test.py):
reducer.torch.all_reduce_quorum, every rank in time; reducer.torch.done with
uneven batches.

    python3 torch_quorum_worker.py in_time   # rank and world from torch's env vars
    python3 torch_quorum_worker.py uneven

Step s all-reduces g_r(s)[i] = (r + 1) * (s + 1) + i % 7 (float64, exact),
checked against the closed form over every rank. A failed check raises; the
process exits non-zero with the traceback.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import reducer
import reducer.torch
import torch_exit

TIMEOUT = datetime.timedelta(seconds=30)
PARAMS = 8


def gradient(rank, step):
    return (rank + 1.0) * (step + 1) + torch.arange(PARAMS, dtype=torch.float64) % 7


def expected_sum(step, contributors):
    i = torch.arange(PARAMS, dtype=torch.float64)
    return (step + 1.0) * sum(r + 1 for r in contributors) + len(contributors) * (i % 7)


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {dist.get_rank()}: {what}")


def in_time():
    """Quorum steps on the default group, an explicit group and a subgroup of
    the backend, all ranks in time; a gloo group refused; torch's own
    all_reduce unchanged afterwards."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    rank, world = dist.get_rank(), dist.get_world_size()
    everyone = list(range(world))
    gloo = dist.new_group(backend="gloo")
    sub = dist.new_group(everyone)  # the default backend: a Reducer job of its own

    for step in range(3):
        x = gradient(rank, step)
        out = reducer.torch.all_reduce_quorum(x, min_ranks=world if step else 0)
        tensor, contributors = out
        check(isinstance(out, reducer.QuorumResult) and tensor is x, f"step {step}: {out!r}")
        check(contributors == everyone and out.joined == [] and out.step == step,
              f"step {step}: {out!r}")
        check(torch.equal(x, expected_sum(step, everyone)), f"step {step}: {x}")

    x = torch.full((3,), rank + 1.0, dtype=torch.float32)
    out = reducer.torch.all_reduce_quorum(x, op=dist.ReduceOp.AVG, grace=5.0,
                                          group=dist.group.WORLD)
    check(out.step == 3 and torch.equal(x, torch.full((3,), (world + 1) / 2)),
          f"avg: {out!r}")

    x = torch.full((2,), rank + 1, dtype=torch.int64)
    out = reducer.torch.all_reduce_quorum(x, op=dist.ReduceOp.MAX, group=sub)
    check(out.step == 0 and out.contributors == everyone and torch.equal(
        x, torch.full((2,), world, dtype=torch.int64)), f"subgroup: {out!r}")

    try:
        reducer.torch.all_reduce_quorum(torch.zeros(2), group=gloo)
        raise AssertionError("a gloo group was taken")
    except ValueError as e:
        check("\"reducer\" backend" in str(e) and "gloo" in str(e), str(e))

    x = torch.ones(4)
    dist.all_reduce(x)
    check(torch.equal(x, torch.full((4,), float(world))), f"all_reduce: {x}")
    dist.destroy_process_group()


def uneven():
    """Rank r holds r + 1 batches; each batch dist.all_reduce sums a running
    accuracy count over the ranks that still have one; a rank out of batches
    calls reducer.torch.done(). Then every rank takes the largest running
    counts with a plain dist.all_reduce(MAX): the single-process value."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    rank, world = dist.get_rank(), dist.get_world_size()

    def counts(r, b):
        return torch.tensor([(3 * r + 5 * b) % 7, 10], dtype=torch.int64)

    running = torch.zeros(2, dtype=torch.int64)
    for b in range(rank + 1):
        x = counts(rank, b)
        dist.all_reduce(x)
        running += x
    reducer.torch.done()
    dist.all_reduce(running, op=dist.ReduceOp.MAX)
    single = sum(counts(r, b) for r in range(world) for b in range(r + 1))
    check(torch.equal(running, single), f"{running} != {single}")
    dist.destroy_process_group()


SCENARIOS = {f.__name__: f for f in (in_time, uneven)}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
    torch_exit.release_process_groups()
    print(f"rank {os.environ.get('RANK')} {sys.argv[1]} ok", flush=True)
