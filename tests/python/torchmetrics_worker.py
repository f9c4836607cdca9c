"""One rank of tests/python/torchmetrics_test.py: torchmetrics' distributed
sync on the backend "reducer" against the same metrics synced on gloo.

    python3 torchmetrics_worker.py SCENARIO    # rank and world from torch's env vars

The default group is on "reducer" and a gloo group of the same ranks is
made beside it; every metric is made twice, once syncing over each group
(torchmetrics' `process_group`), fed the same rank-local data, and its
compute() on reducer must equal gloo's, bit for bit; both must also equal
(or, where the summation order differs, be close to) the metric of one
process fed every rank's data. Each rank's data differs in size
(uneven shards). A failed check raises; the process exits non-zero.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
import torchmetrics
from torchmetrics.classification import BinaryAUROC, MulticlassAccuracy, MulticlassAUROC

import reducer.torch  # noqa: F401  (registers the backend)
import torch_exit

TIMEOUT = datetime.timedelta(seconds=60)
CLASSES = 5


def shard(rank):
    """Rank `rank`'s data: 11 + 6 * rank samples (uneven), from a generator
    seeded by the rank, so every rank can make any rank's shard."""
    g = torch.Generator().manual_seed(1000 + rank)
    n = 11 + 6 * rank
    return {
        "logits": torch.randn(n, CLASSES, generator=g),
        "labels": torch.randint(0, CLASSES, (n,), generator=g),
        "scores": torch.rand(n, generator=g),
        "binary": torch.randint(0, 2, (n,), generator=g),
        "regress": torch.randn(n, generator=g, dtype=torch.float64),
        "target": torch.randn(n, generator=g, dtype=torch.float64),
    }


# name -> (make(**kwargs), update(metric, data), exact against one process)
METRICS = {
    "accuracy": (lambda **kw: MulticlassAccuracy(num_classes=CLASSES, average="micro", **kw),
                 lambda m, d: m.update(d["logits"], d["labels"]), True),
    "accuracy_macro": (lambda **kw: MulticlassAccuracy(num_classes=CLASSES, average="macro", **kw),
                       lambda m, d: m.update(d["logits"], d["labels"]), False),
    "mse": (lambda **kw: torchmetrics.MeanSquaredError(**kw),
            lambda m, d: m.update(d["regress"], d["target"]), False),
    "cat": (lambda **kw: torchmetrics.CatMetric(**kw),
            lambda m, d: m.update(d["regress"]), True),
    "sum": (lambda **kw: torchmetrics.SumMetric(**kw),
            lambda m, d: m.update(d["regress"]), False),
    "max": (lambda **kw: torchmetrics.MaxMetric(**kw),
            lambda m, d: m.update(d["regress"]), True),
    "mean": (lambda **kw: torchmetrics.MeanMetric(**kw),
             lambda m, d: m.update(d["regress"]), False),
    "auroc_binary": (lambda **kw: BinaryAUROC(**kw),
                     lambda m, d: m.update(d["scores"], d["binary"]), False),
    "auroc_binary_binned": (lambda **kw: BinaryAUROC(thresholds=50, **kw),
                            lambda m, d: m.update(d["scores"], d["binary"]), True),
    "auroc_multiclass": (lambda **kw: MulticlassAUROC(num_classes=CLASSES, **kw),
                         lambda m, d: m.update(d["logits"].softmax(-1), d["labels"]), False),
}


def check(got, want, what, exact=True):
    if exact:
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    else:
        ok = got.shape == want.shape and torch.allclose(got.double(), want.double(),
                                                        rtol=1e-6, atol=1e-9)
    if not ok:
        raise AssertionError(f"rank {dist.get_rank()}: {what}: {got} != {want}")


def metrics():
    """Every metric of METRICS: reducer's sync equals gloo's bit for bit and
    the one-process value; the local state is back after compute(); a
    second round of updates syncs again."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    assert dist.get_backend() == "reducer"
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo", timeout=TIMEOUT)
    assert dist.get_backend(gloo) == "gloo"
    mine = shard(rank)
    everyone = [shard(r) for r in range(world)]
    for name, (make, update, exact) in METRICS.items():
        # `alone` must not sync: with a default group, every metric would.
        on_reducer, on_gloo = make(), make(process_group=gloo)
        alone = make(sync_on_compute=False)
        for m in (on_reducer, on_gloo):
            update(m, mine)
        for d in everyone:
            update(alone, d)
        got, want = on_reducer.compute(), on_gloo.compute()
        check(got, want, f"{name}: reducer against gloo")
        check(got, alone.compute(), f"{name}: reducer against one process", exact)
        # compute() syncs a copy: the local state is this rank's alone again.
        local = make(sync_on_compute=False)
        update(local, mine)
        assert not on_reducer._is_synced, name
        for state in on_reducer._defaults:
            a, b = getattr(on_reducer, state), getattr(local, state)
            if isinstance(a, list):
                a = torch.cat(a) if a else torch.empty(0)
                b = torch.cat(b) if b else torch.empty(0)
            check(a, b, f"{name}: local state {state} after compute")
        # A second round: more data, a new sync.
        for m in (on_reducer, on_gloo):
            update(m, shard(rank + world))
        check(on_reducer.compute(), on_gloo.compute(), f"{name}: second sync")
        print(f"{name} ok", flush=True)
    # torchmetrics' own all-gather helper, uneven and 0-d.
    from torchmetrics.utilities.distributed import gather_all_tensors
    for x in (torch.arange(3 + rank, dtype=torch.int64).reshape(-1, 1).repeat(1, 2),
              torch.tensor(float(rank))):
        got, want = gather_all_tensors(x), gather_all_tensors(x, group=gloo)
        assert len(got) == len(want) == world
        for a, b in zip(got, want):
            check(a, b, "gather_all_tensors")
    dist.barrier()
    dist.destroy_process_group()


SCENARIOS = {f.__name__: f for f in (metrics,)}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
    torch_exit.release_process_groups()
    print(f"rank {os.environ.get('RANK')} {sys.argv[1]} ok", flush=True)
