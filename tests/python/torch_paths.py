"""Test support: the torch backend's two paths for all_reduce.

"native" is reducer._torch_c, the C++ all-reduce the package carries where
torch's C++ headers were there to build it; "python" is the backend's own
Python path, which every other collective always takes and all_reduce takes
where the package has no _torch_c. Tests run scenarios on both:

    @pytest.mark.parametrize("path", torch_paths.params())
    def test_x(server, path):
        run_ranks(WORKER, "x", ..., extra_env=torch_paths.env(path))

and each worker calls torch_paths.choose() before init_process_group, then
torch_paths.check_work(work) on a work its all_reduce returned.
"""

import importlib.util
import os

ENV = "REDUCER_TEST_TORCH_PATH"

_chosen = None  # in a worker: the path choose() chose


def native_available():
    """Whether the package under test carries reducer._torch_c."""
    return importlib.util.find_spec("reducer._torch_c") is not None


def params():
    """Both paths as pytest parameters, native skipped where unavailable."""
    import pytest  # test processes only
    return [pytest.param("native", marks=pytest.mark.skipif(
                not native_available(),
                reason="the package has no reducer._torch_c (torch's C++ headers "
                       "were not installed when it was built)")),
            "python"]


def env(path):
    return {ENV: path}


def choose():
    """In a worker: makes the backend take the path the test asked for (by
    default native where available); SystemExit when native was asked for
    and the package has none."""
    global _chosen
    import reducer.torch
    path = os.environ.get(ENV, "native" if reducer.torch._torch_c else "python")
    if path == "python":
        reducer.torch._torch_c = None
    elif reducer.torch._torch_c is None:
        raise SystemExit(f"{ENV}=native but the package has no reducer._torch_c")
    _chosen = path
    return path


def check_work(work):
    """Asserts that an all_reduce work came from the path choose() chose."""
    from reducer._torch_work import TorchWork
    if _chosen is None:
        raise AssertionError("torch_paths.check_work before torch_paths.choose")
    if isinstance(work, TorchWork) != (_chosen == "python"):
        raise AssertionError(f"the {_chosen} path was chosen but all_reduce returned a "
                             f"{type(work).__module__}.{type(work).__name__}")
