"""Work, what the *_async methods return; _result_dtype, the dtype name of
a result array whose dtype the caller did not give; _call_from_root, the
calls whose x only the root must give (broadcast, scatter)."""

import numpy as np

from reducer import _arrays


def _result_dtype(array):
    # Reducer has no int16: an int16 result carries bfloat16 bits.
    if array.dtype == np.int16:
        return "bfloat16"
    return _arrays._NUMPY_DTYPES[array.dtype]


def _call_from_root(call, x, root, kind, call_options):
    """Runs call(array, dtype, root, **call_options), a _reducer.Client
    method of broadcast's shape (blocking or _async), where x may be None on
    a rank that does not know the root's dtype or shape. Returns what call
    returned and a function from a result array to the caller's result: x's
    kind and dtype, or where x is None the result's own dtype and `kind`
    (default numpy); `kind` given wins over x's."""
    if x is None:
        return (call(None, "float32", int(root), **call_options),
                lambda result: _arrays.from_array(result, _result_dtype(result),
                                                  kind or _arrays.NUMPY))
    array, dtype, given_kind = _arrays.to_array(x)
    return (call(array, dtype, int(root), **call_options),
            lambda result: _arrays.from_array(result, dtype, kind or given_kind))


class Work:
    """A collective in flight, from one of the *_async methods.

    wait() blocks (GIL released) and returns what the blocking method
    returns: a new array or tensor, a list of them (all_reduce_many_async),
    the input now holding the result (in place), or None (barrier_async).
    is_completed() never blocks. The inputs must stay unchanged until wait()
    returns. Not thread-safe: one thread waits on a Work.
    """

    __slots__ = ("_handle", "_finish")

    def __init__(self, handle, finish):
        self._handle = handle
        self._finish = finish

    def wait(self):
        return self._finish(self._handle.wait())

    def is_completed(self):
        return self._handle.is_completed()
