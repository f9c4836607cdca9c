"""What the tests of the `reducer` module (reducer_test.py, routed_test.py,
quorum_test.py, security_test.py, torch_work_test.py, pip_install_test.py)
share. A test file imports the fixtures it uses by name:

    from module_testing import rank_input, read_only, run, server, time_limit

  time_limit  autouse: a test that runs past TEST_TIME_LIMIT_S seconds (60)
              dumps every thread's stack and ends the process, so a hang
              fails the test instead of stalling `bazel test` until its own
              timeout.
  server      a reducerd (ReducerdProcess) for the test file.
  run         the ranks of a new job as threads of this process, one
              reducer.Client each (run_ranks).
  rank_input  rank r's input: small values, so that every op is exact in
              every dtype.
  read_only   a read-only copy of an array.
"""

import faulthandler

import numpy as np
import pytest

from reducerd_process import ReducerdProcess, new_job, run_ranks

TEST_TIME_LIMIT_S = 60


@pytest.fixture(autouse=True)
def time_limit():
    faulthandler.dump_traceback_later(TEST_TIME_LIMIT_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def server():
    with ReducerdProcess() as s:
        yield s


def run(server, fn, world_size, **kwargs):
    return run_ranks(world_size, server.target, new_job(), fn, **kwargs)


def rank_input(rank, dtype, shape, period):
    """(i % period) + rank + 1 at flat index i; for bool, alternating with
    the rank."""
    n = int(np.prod(shape))
    if np.dtype(dtype) == np.bool_:
        return ((np.arange(n) + rank) % 2 == 0).reshape(shape)
    return ((np.arange(n) % period) + rank + 1).astype(dtype).reshape(shape)


def read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a
