"""Work, what the *_async methods return; _result_dtype, the dtype name of
a result array whose dtype the caller did not give."""

import numpy as np

from reducer import _arrays


def _result_dtype(array):
    # Reducer has no int16: an int16 result carries bfloat16 bits.
    if array.dtype == np.int16:
        return "bfloat16"
    return _arrays._NUMPY_DTYPES[array.dtype]


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
