"""PyTorch-Ignite's launcher and auto_model on the backend "reducer", as
docs/python.md shows them (tests/python/ignite_test.py runs it).

    torchrun --nproc_per_node=2 ignite_parallel_worker.py torchrun
    python3 ignite_parallel_worker.py spawn PORT   # idist.Parallel starts 2 processes

Each rank: idist reports the backend "reducer" and the ranks;
idist.auto_model wraps the model in DistributedDataParallel, and three SGD
steps on each rank's half of a batch leave every rank's weights equal to
one process's three steps on the whole batch; idist.auto_dataloader shards
the data set, and Ignite's Accuracy over an Engine run on the shards
equals the accuracy of the whole data set; idist.all_reduce and
idist.all_gather give the ranks' sum and values. Prints "ignite ok RANK".
"""

import sys

import torch

import ignite.distributed as idist
import reducer.ignite  # noqa: F401  (at the top: idist.spawn's processes import it too)
from ignite.engine import Engine
from ignite.metrics import Accuracy

WORLD = 2


def model_and_data():
    g = torch.Generator().manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    x = torch.randn(16, 6, generator=g, dtype=torch.float32)
    y = torch.randint(0, 3, (16,), generator=g)
    return model, x, y


def train(model, x, y, steps=3):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model


def training(local_rank, mode):
    rank, world = idist.get_rank(), idist.get_world_size()
    assert idist.backend() == "reducer", idist.backend()
    assert idist.model_name() == "native-dist"
    assert world == WORLD and local_rank == idist.get_local_rank() == rank, (rank, local_rank)

    # auto_model: DDP on reducer; steps on half batches == one process, whole batch.
    model, x, y = model_and_data()
    ddp = idist.auto_model(model)
    assert isinstance(ddp, torch.nn.parallel.DistributedDataParallel), type(ddp)
    half = slice(rank * 8, (rank + 1) * 8)
    train(ddp, x[half], y[half])
    reference = train(model_and_data()[0], x, y)
    for mine, want in zip(ddp.module.parameters(), reference.parameters()):
        assert torch.allclose(mine, want, rtol=1e-5, atol=1e-6), (mine, want)
        gathered = idist.all_gather(mine.detach().reshape(1, -1))
        assert torch.equal(gathered[0], gathered[1]), "ranks' weights differ"

    # auto_dataloader shards the data; Ignite's Accuracy syncs over reducer.
    data = list(zip(torch.randn(21, 3, generator=torch.Generator().manual_seed(5)),
                    torch.arange(21) % 3))
    loader = idist.auto_dataloader(data, batch_size=4, shuffle=False)
    seen = sum(len(b[1]) for b in loader)
    assert seen == 11, seen  # 21 samples over 2 ranks, padded to 22
    evaluator = Engine(lambda engine, batch: batch)
    Accuracy().attach(evaluator, "accuracy")
    state = evaluator.run(loader)
    # The sampler pads rank 1's shard with sample 0: the whole set plus it.
    xs = torch.stack([d[0] for d in data] + [data[0][0]])
    ys = torch.stack([d[1] for d in data] + [data[0][1]])
    want = (xs.argmax(1) == ys).sum().item() / len(ys)
    assert abs(state.metrics["accuracy"] - want) < 1e-12, (state.metrics, want)

    assert idist.all_reduce(rank + 1) == world * (world + 1) // 2
    assert idist.all_gather(rank) == list(range(world))
    idist.barrier()
    print(f"ignite ok {rank} ({mode})", flush=True)


def main():
    mode = sys.argv[1]
    if mode == "torchrun":
        with idist.Parallel(backend="reducer") as parallel:
            parallel.run(training, mode)
    elif mode == "spawn":
        with idist.Parallel(backend="reducer", nproc_per_node=WORLD,
                            master_port=int(sys.argv[2])) as parallel:
            parallel.run(training, mode)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
