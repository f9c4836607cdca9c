"""PyTorch-Ignite on the backend "reducer": `import reducer.ignite`.

    import ignite.distributed as idist
    import reducer.ignite  # noqa: F401  (at module level: see spawn below)

    def training(local_rank):
        model = idist.auto_model(model)        # DistributedDataParallel
        ...

    with idist.Parallel(backend="reducer") as parallel:   # under torchrun
        parallel.run(training)

Ignite's idist knows torch's native backends by name: its native model
takes the names in `_NativeDistModel.available_backends` (nccl, gloo, mpi
where torch has them) and refuses any other in idist.Parallel,
idist.initialize and idist.spawn; idist.auto_model wraps a model in
DistributedDataParallel only for nccl, gloo and mpi, and returns it
unwrapped for any other backend, so gradients would silently stay local.
Importing this module (after `reducer.torch`, which it imports) does two
things, once:

- it adds "reducer" to the native model's backend names, so idist.Parallel,
  idist.initialize and idist.spawn accept it and create the group with
  dist.init_process_group("reducer") as they do for gloo;
- it makes idist.auto_model wrap the model in DistributedDataParallel on a
  group of the backend "reducer" of more than one rank (with `sync_bn` and
  the keyword arguments as for gloo; on CUDA, device_ids=[local rank]), and
  leaves every other case to Ignite's own auto_model.

Without it, a group initialized before Ignite does anything distributed
(dist.init_process_group("reducer")) is picked up by idist all the same
(idist.get_world_size(), idist.all_reduce, the metrics' sync); only the
three entry points above refuse the name, and auto_model does not wrap.

idist.spawn (idist.Parallel with nproc_per_node) starts its processes with
the "spawn" start method: they import the main module again, so import this
module at the main module's top level for them to know the name too.
"""

import functools

import torch

import reducer.torch  # noqa: F401  (registers the backend with torch)
from reducer._torch_backend import BACKEND_NAME

try:
    import ignite.distributed as idist
    from ignite.distributed import auto as _ignite_auto
    from ignite.distributed.comp_models import native as _ignite_native
except ImportError as e:
    raise ImportError(f"reducer.ignite needs PyTorch-Ignite (pip install pytorch-ignite): "
                      f"{e}") from None

__all__ = ["BACKEND_NAME", "auto_model"]

_ignite_auto_model = _ignite_auto.auto_model


@functools.wraps(_ignite_auto_model)
def auto_model(model, sync_bn=False, **kwargs):
    """idist.auto_model, which also wraps the model in
    DistributedDataParallel on the backend "reducer" (see the module
    docstring); Ignite's own for every other backend."""
    if idist.get_world_size() <= 1 or idist.backend() != BACKEND_NAME:
        return _ignite_auto_model(model, sync_bn=sync_bn, **kwargs)
    device = idist.device()
    if any(p.device != device for p in model.parameters()):
        model.to(device)
    if sync_bn:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    if torch.cuda.is_available():
        if "device_ids" in kwargs:
            raise ValueError(f"Argument kwargs should not contain 'device_ids', but got {kwargs}")
        kwargs["device_ids"] = [idist.get_local_rank()]
    return torch.nn.parallel.DistributedDataParallel(model, **kwargs)


def _register():
    native = getattr(_ignite_native, "_NativeDistModel", None)
    if native is None:  # torch without torch.distributed: nothing to add to
        return
    if BACKEND_NAME not in native.available_backends:
        native.available_backends = (*native.available_backends, BACKEND_NAME)
    # idist.auto_model is the same function under two names; both callers'
    # spellings (idist.auto_model, ignite.distributed.auto.auto_model) get ours.
    for module in (idist, _ignite_auto):
        if getattr(module, "auto_model", None) is _ignite_auto_model:
            module.auto_model = auto_model


_register()
