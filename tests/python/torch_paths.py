"""Test support: the torch backend's two paths for all_reduce.

"native" is the all-reduce in C++ of reducer._torch_c's Backend; "python"
is BackendOps' Python path, which every other collective always takes and
all_reduce takes with reducer.torch._native_all_reduce off. Tests run
scenarios on both:

    @pytest.mark.parametrize("path", torch_paths.params())
    def test_x(server, path):
        run_ranks(WORKER, "x", ..., extra_env=torch_paths.env(path))

and each worker calls torch_paths.choose() before init_process_group, then
torch_paths.check_work(work) on a work its all_reduce returned.
"""

import os

ENV = "REDUCER_TEST_TORCH_PATH"

_chosen = None  # in a worker: the path choose() chose


def params():
    """Both paths, as pytest parameters."""
    return ["native", "python"]


def env(path):
    return {ENV: path}


def choose():
    """In a worker: makes the backend take the path the test asked for (by
    default native where available); SystemExit when native was asked for
    and the package has none."""
    global _chosen
    import reducer.torch
    path = os.environ.get(ENV, "native")
    reducer.torch._native_all_reduce = path == "native"
    _chosen = path
    return path


def check_work(work, group=None):
    """Asserts that `group`'s backend (default: the default group's) takes
    the path choose() chose for its all_reduce (`work`, one of its works,
    is torch's Work either way)."""
    import torch
    import torch.distributed as dist
    if _chosen is None:
        raise AssertionError("torch_paths.check_work before torch_paths.choose")
    if not isinstance(work, dist.Work):
        raise AssertionError(f"all_reduce returned a {type(work).__name__}, not a Work")
    group = group if group is not None else dist.group.WORLD
    native = group._get_backend(torch.device("cpu")).native
    if native != (_chosen == "native"):
        raise AssertionError(f"the {_chosen} path was chosen but the backend's C++ "
                             f"all-reduce is {'on' if native else 'off'}")
