"""Checks of the `reducer` package as pip installed it into a venv
(//tests/python:pip_install_test; tests/python/pip_install_test.sh installs it and
runs this file with the venv's python, from outside the source tree).

Environment (set by the driver):
    REDUCER_VENV              the venv; the package must come from its site-packages
    REDUCER_PREFIX            where the client library's install tree was extracted
    REDUCER_EXPECTED_VERSION  the Version of that tree's reducer.pc
    REDUCERD                  the reducerd binary (reducerd_process.py)
"""

import datetime
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import reducer
from module_testing import server, time_limit  # noqa: F401  (fixtures)
from reducerd_process import new_job, run_ranks

VENV = Path(os.environ["REDUCER_VENV"]).resolve()
PREFIX = Path(os.environ["REDUCER_PREFIX"]).resolve()


def in_venv_site_packages(path):
    path = Path(path).resolve()
    return (path.is_relative_to(VENV / "lib")
            and path.parent.parent.name == "site-packages")


def test_the_venv_is_running_this():
    assert Path(sys.prefix).resolve() == VENV


def test_package_and_extension_come_from_the_venv():
    import reducer._reducer
    assert in_venv_site_packages(reducer.__file__), reducer.__file__
    assert in_venv_site_packages(reducer._reducer.__file__), reducer._reducer.__file__


def test_version_is_the_client_library_version():
    assert reducer.__version__ == os.environ["REDUCER_EXPECTED_VERSION"]


def test_client_library_is_found_through_the_rpath():
    # The driver unsets LD_LIBRARY_PATH: the extension's rpath leads to the prefix.
    assert "LD_LIBRARY_PATH" not in os.environ
    with open("/proc/self/maps") as f:
        loaded = {Path(line.split()[-1]) for line in f if "libreducer_client" in line}
    assert loaded, "libreducer_client is not loaded"
    for path in loaded:
        assert path.resolve().is_relative_to(PREFIX / "lib"), path


def test_all_reduce_between_two_ranks(server):
    inputs = [np.arange(12, dtype=np.float32).reshape(3, 4) * (r + 1) for r in range(2)]
    expected = np.arange(12, dtype=np.float32).reshape(3, 4) * 3  # 1x + 2x
    results = run_ranks(2, server.target, new_job(),
                        lambda c: c.all_reduce(inputs[c.rank], op="sum"))
    for r, result in enumerate(results):
        assert isinstance(result, np.ndarray)
        assert result.dtype == np.float32
        np.testing.assert_array_equal(result, expected, err_msg=f"rank {r}")


def test_torch_backend(server, monkeypatch):
    import torch
    import torch.distributed as dist

    import reducer.torch  # noqa: F401  (registers the backend)

    monkeypatch.setenv("REDUCER_TARGET", server.target)
    dist.init_process_group("reducer", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        t = torch.tensor([1.0, 2.0, 3.0])
        dist.all_reduce(t)
        assert torch.equal(t, torch.tensor([1.0, 2.0, 3.0]))
        # pip built reducer._torch_c against the venv's torch (pip's ships
        # its C++ headers): the group's backend is its Backend, with the
        # all-reduce in C++ on.
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        assert type(backend).__module__ == "reducer._torch_c", type(backend)
        assert backend.native
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        assert work.is_completed()
    finally:
        dist.destroy_process_group()
