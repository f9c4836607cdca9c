"""What every test of python/tests/ shares: a hard time limit per test.

A test that runs past TEST_TIME_LIMIT_S seconds (60) dumps every thread's
stack and ends the process, so a hang fails the test instead of stalling
`bazel test` until its own timeout.
"""

import faulthandler

import pytest

TEST_TIME_LIMIT_S = 60


@pytest.fixture(autouse=True)
def time_limit():
    faulthandler.dump_traceback_later(TEST_TIME_LIMIT_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
