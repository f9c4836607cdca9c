"""One rank of the torch backend's training tests
(tests/python/torch_training_test.py): FSDP and DDP's less common modes on
the backend "reducer", each against the same training on a gloo group in
the same processes.

    python3 torch_training_worker.py SCENARIO   # rank and world from torch's env vars

Every scenario trains one small model from one seed twice, once over the
default (reducer) group and once over a gloo group of the same ranks, with
the same per-rank batches, and checks that the trained parameters agree
(to float32 rounding: the two sum in different orders). A failed check
raises; the process exits non-zero with the traceback.
"""

import contextlib
import datetime
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import fully_shard

import reducer.torch  # noqa: F401  (registers the backend)
import torch_exit

TIMEOUT = datetime.timedelta(seconds=30)
STEPS = 4


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


def batches(rank, count=STEPS):
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(8, 16, generator=g) for _ in range(count)]


def train(m, inputs, context=contextlib.nullcontext()):
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    with context:
        for x in inputs:
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()


def check_close(mine, theirs, what):
    """The parameters trained over reducer and over gloo agree."""
    assert len(mine) == len(theirs), (len(mine), len(theirs))
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            raise AssertionError(f"rank {dist.get_rank()}: {what}: parameter {i} differs "
                                 f"by {(a - b).abs().max().item():g}")


def fsdp1_params(group):
    m = FSDP(model(), process_group=group, device_id=torch.device("cpu"),
             use_orig_params=True)
    train(m, batches(dist.get_rank()))
    with FSDP.summon_full_params(m):
        return [p.detach().clone() for p in m.parameters()]


def fsdp2_params(mesh):
    m = model()
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    train(m, batches(dist.get_rank()))
    return [p.full_tensor().detach().clone() for p in m.parameters()]


def fsdp():
    """FSDP (full sharding) and fully_shard over a 1-D mesh, and hybrid
    sharding (fully_shard over a 2-D mesh: replicas of shards) at W = 4."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo")
    world = dist.get_world_size()
    check_close(fsdp1_params(None), fsdp1_params(gloo), "FSDP full sharding")
    reducer_mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    gloo_mesh = DeviceMesh.from_group(gloo, "cpu")
    check_close(fsdp2_params(reducer_mesh), fsdp2_params(gloo_mesh), "fully_shard")
    if world % 2 == 0:
        meshes = []
        for backend in ("reducer", "gloo"):
            # The 2-D mesh's groups: shards within rows, replicas across.
            ranks = torch.arange(world).view(2, world // 2)
            shard = [dist.new_group(row.tolist(), backend=backend) for row in ranks]
            replicate = [dist.new_group(col.tolist(), backend=backend) for col in ranks.t()]
            row, col = divmod(dist.get_rank(), world // 2)
            meshes.append(DeviceMesh.from_group(
                [replicate[col], shard[row]], "cpu", mesh=ranks,
                mesh_dim_names=("replicate", "shard")))
        check_close(fsdp2_params(meshes[0]), fsdp2_params(meshes[1]), "hybrid sharding")
    print("fsdp ok", flush=True)
    dist.destroy_process_group()


def ddp_params(group, static_graph, uneven):
    ddp = torch.nn.parallel.DistributedDataParallel(model(), process_group=group,
                                                    static_graph=static_graph)
    rank = dist.get_rank()
    # Uneven inputs: rank r has STEPS + r batches; Join shadows the
    # collectives of the ranks that ran out.
    inputs = batches(rank, STEPS + rank if uneven else STEPS)
    train(ddp, inputs, Join([ddp]) if uneven else contextlib.nullcontext())
    return [p.detach().clone() for p in ddp.parameters()]


def ddp():
    """DDP with static_graph, and DDP under Join with uneven inputs."""
    dist.init_process_group("reducer", timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo")
    check_close(ddp_params(None, True, False), ddp_params(gloo, True, False),
                "DDP static_graph")
    check_close(ddp_params(None, False, True), ddp_params(gloo, False, True),
                "DDP under Join, uneven inputs")
    print("ddp ok", flush=True)
    dist.destroy_process_group()


SCENARIOS = {"fsdp": fsdp, "ddp": ddp}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
    torch_exit.release_process_groups()
