"""numpy arrays and torch tensors to and from the extension's form.

The extension takes a C-contiguous numpy array plus a Reducer dtype name.
A torch CPU tensor travels as a numpy view of its memory (bfloat16 as int16
bits); a torch CUDA tensor as a _reducer.DeviceArray naming its memory, its
device and the current stream of that device (the collective waits for the
work queued on it). Results come back as the kind that was given, a CUDA
result on the input's device without a copy (through
__cuda_array_interface__). torch is imported only when a tensor is given;
the module works without torch installed.
"""

import sys

import numpy as np

from reducer import _reducer

NUMPY = "numpy"
TORCH = "torch"

_NUMPY_DTYPES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float64): "float64",
    np.dtype(np.float16): "float16",
    np.dtype(np.int8): "int8",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.bool_): "bool",
}


_TORCH_DTYPES = {}  # torch dtype -> Reducer dtype name, filled on first use


def _torch_dtypes(torch):
    if not _TORCH_DTYPES:
        _TORCH_DTYPES.update({
            torch.float32: "float32",
            torch.float64: "float64",
            torch.float16: "float16",
            torch.bfloat16: "bfloat16",
            torch.int8: "int8",
            torch.uint8: "uint8",
            torch.int32: "int32",
            torch.int64: "int64",
            torch.bool: "bool",
        })
    return _TORCH_DTYPES


def to_array(x, what="input"):
    """(numpy array sharing x's memory, dtype name, kind) for x.

    TypeError for something that is not a numpy array or torch tensor, or
    whose dtype Reducer does not carry; ValueError for a non-contiguous
    array, a tensor not on the CPU, or a sparse tensor.
    """
    if isinstance(x, np.ndarray):
        dtype = _NUMPY_DTYPES.get(x.dtype)
        if dtype is None:
            raise TypeError(
                f"reducer: {what} has numpy dtype {x.dtype}, which Reducer does not "
                f"carry; supported: {', '.join(_NUMPY_DTYPES.values())}")
        if not x.flags.c_contiguous:
            raise ValueError(
                f"reducer: {what} (numpy, shape {list(x.shape)}) is not C-contiguous; "
                "pass numpy.ascontiguousarray(x)")
        return x, dtype, NUMPY
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        # Every check is an attribute read: this runs on every call.
        dtype = _torch_dtypes(torch).get(x.dtype)
        if dtype is None:
            raise TypeError(f"reducer: {what} has torch dtype {x.dtype}, which Reducer "
                            "does not carry")
        if not x.is_cuda and x.device.type != "cpu":
            raise ValueError(f"reducer: {what} is on {x.device}; only CPU and CUDA "
                             "tensors are supported")
        if x.layout != torch.strided:
            raise ValueError(f"reducer: {what} has layout {x.layout}; only dense "
                             "(strided) tensors are supported")
        if not x.is_contiguous():
            raise ValueError(
                f"reducer: {what} (torch, shape {list(x.shape)}) is not contiguous; "
                "pass x.contiguous()")
        t = x.detach() if x.requires_grad else x
        if t.is_neg():  # a lazily negated view: its memory holds -x
            t = t.resolve_neg()
        if t.is_cuda:
            stream = torch.cuda.current_stream(t.device).cuda_stream
            return (_reducer.DeviceArray(t.data_ptr(), list(t.shape), t.device.index,
                                         stream, t), dtype, TORCH)
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        return t.numpy(), dtype, TORCH
    raise TypeError(f"reducer: {what} must be a numpy.ndarray or a torch.Tensor, "
                    f"not {type(x).__name__}")


def from_array(array, dtype, kind):
    """The result `array` (of Reducer dtype `dtype`) as `kind`, no copy."""
    if isinstance(array, _reducer.DeviceArray):
        import torch
        t = torch.as_tensor(array, device=f"cuda:{array.device}")
        if dtype == "bfloat16":
            t = t.view(torch.bfloat16)
        return t
    if kind == NUMPY:
        if dtype == "bfloat16":
            raise TypeError("reducer: the result is bfloat16, which numpy cannot "
                            "hold; ask for kind='torch'")
        return array
    import torch
    t = torch.from_numpy(array)
    if dtype == "bfloat16":
        t = t.view(torch.bfloat16)
    return t
