"""How the torch backend reads torch's collective arguments: ops, timeouts,
the one tensor per call it takes, lists of parts."""

import torch.distributed as dist

_OP_NAMES = [
    (dist.ReduceOp.SUM, "sum"),
    (dist.ReduceOp.PRODUCT, "product"),
    (dist.ReduceOp.MIN, "min"),
    (dist.ReduceOp.MAX, "max"),
    (dist.ReduceOp.AVG, "avg"),
    (dist.ReduceOp.BAND, "bit_and"),
    (dist.ReduceOp.BOR, "bit_or"),
    (dist.ReduceOp.BXOR, "bit_xor"),
]


def _op_name(op):
    for torch_op, name in _OP_NAMES:
        if op == torch_op:
            return name
    raise RuntimeError(f"the reducer backend does not support ReduceOp {op!r} "
                       "(supported: SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR)")


def _timeout(opts):
    # torch's "unset" timeout is negative: the client's default applies.
    timeout = getattr(opts, "timeout", None)
    if timeout is None or timeout.total_seconds() <= 0:
        return None
    return timeout.total_seconds()


def _reduce_op(opts):
    """The Reducer op of torch's options (SUM when none are given)."""
    return _op_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)


def _check_parts(parts, count, like, what, role):
    """Checks that `parts` holds `count` tensors of `like`'s dtype and size."""
    if len(parts) != count:
        raise ValueError(f"{what} needs {count} {role} tensors, got {len(parts)}")
    n = like.numel()
    for i, x in enumerate(parts):
        if x.numel() != n or x.dtype != like.dtype:
            raise ValueError(f"{what} {role} {i} is {x.dtype} {list(x.shape)}; "
                             f"expected {like.dtype} with {n} elements")


def _check_world_times(whole, part, world, what, role):
    """Checks that `whole` (the `role` tensor of `what`: "output", "input 2")
    has `part`'s dtype and `world` times its elements: an all-gather's output
    against its input, a reduce-scatter's input against its output."""
    if whole.numel() != world * part.numel() or whole.dtype != part.dtype:
        raise ValueError(f"{what} {role} is {whole.dtype} {list(whole.shape)}; "
                         f"expected {part.dtype} with {world} x {part.numel()} elements")


def _check_coalesced(wholes, parts, world, what, role):
    """Checks that there are as many `wholes` as `parts` and each pair as
    _check_world_times does (role "output": the wholes are the outputs)."""
    inputs, outputs = (parts, wholes) if role == "output" else (wholes, parts)
    if len(outputs) != len(inputs):
        raise ValueError(f"{what}: {len(inputs)} inputs but {len(outputs)} outputs")
    for k, (whole, part) in enumerate(zip(wholes, parts)):
        _check_world_times(whole, part, world, what, f"{role} {k}")


def _one(tensors, what):
    if len(tensors) != 1:
        raise ValueError(f"the reducer backend takes one tensor per {what}, "
                         f"got {len(tensors)}")
    return tensors[0]


def _same_dtype(tensors, what):
    """Checks that `tensors` share one dtype (a coalesced call sends them as
    one tensor)."""
    dtypes = sorted({str(x.dtype) for x in tensors})
    if len(dtypes) > 1:
        raise ValueError(f"{what} takes tensors of one dtype, got {', '.join(dtypes)}")
