"""DistributedDataParallel on the "reducer" backend, started by torchrun.

    torchrun --nproc_per_node=2 examples/torch_ddp.py [--steps=50] [--hook=fp16]
        [--backend=gloo] [--params_out=FILE]

reducerd's address comes from REDUCER_TARGET (default 127.0.0.1:50051). Each
rank trains the same small regression model on its own shard of a synthetic
data set; DDP all-reduces the gradients bucket by bucket while the backward
pass goes on. After training, the mean squared error over every rank's
validation shard is synced with reducer.MetricSync (Reducer's out-of-place
form: the local sums are left as they are), and rank 0 prints it with a
checksum of the parameters, which is the same on every rank.

--backend=gloo trains the same on torch's own gloo backend (the validation
sums then go through dist.all_reduce): the reference that a run on
"reducer" is compared against (deploy/torch_exercise.sh). With
--params_out, rank 0 also saves the trained parameters there (torch.save
of the list of tensors), for a comparison within a tolerance: beyond two
ranks, gloo adds the gradients in another order, so the last bits differ.
"""

import argparse
import gc
import hashlib

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import reducer
import reducer.torch  # noqa: F401  (registers the backend "reducer")


def shard(rank, n, generator_seed):
    """n samples of y = x @ w + noise, different on every rank."""
    g = torch.Generator().manual_seed(generator_seed + rank)
    w = torch.linspace(-1, 1, 16).reshape(16, 1).repeat(1, 4)
    x = torch.randn(n, 16, generator=g)
    return x, x @ w + 0.01 * torch.randn(n, 4, generator=g)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--hook", choices=["none", "fp16"], default="none")
    parser.add_argument("--backend", choices=["reducer", "gloo"], default="reducer")
    parser.add_argument("--params_out", help="rank 0 saves the trained parameters here")
    args = parser.parse_args()

    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    if args.hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    x, y = shard(rank, 256, generator_seed=1)
    for step in range(args.steps):
        batch = slice((step * 32) % 256, (step * 32) % 256 + 32)
        loss = torch.nn.functional.mse_loss(ddp(x[batch]), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()

    # Validation MSE over all ranks: one round trip for both sums.
    vx, vy = shard(rank, 64, generator_seed=1000)
    with torch.no_grad():
        squared = ((model(vx) - vy) ** 2).sum().reshape(1).double()
    count = torch.tensor([vy.numel()], dtype=torch.float64)
    if args.backend == "reducer":
        sync = reducer.MetricSync(reducer.torch.backend_of().client)
        sync.add("squared", squared)
        sync.add("count", count)
        totals = sync.reduce()
    else:
        for t in (squared, count):
            dist.all_reduce(t)
        totals = {"squared": squared, "count": count}
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    if rank == 0:
        mse = (totals["squared"] / totals["count"]).item()
        print(f"validation mse={mse:.6f} over {int(totals['count'].item())} values; "
              f"params sha256={digest.hexdigest()[:16]}", flush=True)
        if args.params_out:
            torch.save([p.detach().clone() for p in model.parameters()], args.params_out)
    # DDP holds the process group (in reference cycles, hence the collect):
    # drop it first, so that destroying the group stops its threads now. A
    # Gloo group left to the interpreter's exit can abort the process
    # ("terminate called without an active exception") when its thread
    # frees a finished work's tensors then.
    del ddp, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
