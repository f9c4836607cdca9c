"""reducer._torch_work in process, through a fake of the started call: who
collects a work, its future, wait(timeout), errors, and the completer's end
(at exit too, in a process of its own).
"""

import subprocess
import sys
import threading
import time

import pytest
import torch

import reducer
from reducer._torch_work import Completer, TorchWork
from module_testing import time_limit  # noqa: F401  (a fixture)


class FakePending:
    """A started call that ends when release() is called (or at once)."""

    def __init__(self, result=None, error=None, ended=False):
        self._ended = threading.Event()
        if ended:
            self._ended.set()
        self.result = result
        self.error = error
        self.waited_on = []  # the threads that waited

    def release(self):
        self._ended.set()

    def wait(self):
        self.waited_on.append(threading.current_thread())
        if not self._ended.wait(10):
            raise AssertionError("the fake call was never released")
        if self.error is not None:
            raise self.error
        return self.result

    def is_completed(self):
        return self._ended.is_set()


def make_work(pending, completer=None, outputs=None):
    out = outputs if outputs is not None else [torch.zeros(2)]

    def finish(value):
        out[0].copy_(value)
        return out
    return TorchWork(completer or Completer("test"), pending, finish, "all_reduce",
                     "in job j (rank 0)")


def test_wait_collects_on_the_calling_thread():
    pending = FakePending(result=torch.ones(2), ended=True)
    work = make_work(pending)
    assert work.wait() is True
    assert pending.waited_on == [threading.current_thread()]
    assert torch.equal(work.result()[0], torch.ones(2))
    assert work.is_completed() and work.is_success() and work.exception() is None


def test_future_is_returned_at_once_and_completed_by_the_completer():
    pending = FakePending(result=torch.full((2,), 3.0))
    work = make_work(pending)
    ran = []
    t0 = time.monotonic()
    future = work.get_future()
    chained = future.then(lambda f: ran.append(f.value()[0].sum().item()) or 7)
    assert time.monotonic() - t0 < 0.5
    assert not future.done() and not ran
    pending.release()
    assert chained.wait() == 7
    assert ran == [6.0]
    assert pending.waited_on[0] is not threading.current_thread()
    assert work.wait() is True  # after the future: returns at once
    assert work.get_future() is future


def test_wait_with_a_timeout_raises_and_the_call_goes_on():
    pending = FakePending(result=torch.ones(2))
    outputs = [torch.zeros(2)]
    work = make_work(pending, outputs=outputs)
    t0 = time.monotonic()
    with pytest.raises(reducer.DeadlineExceeded, match="all_reduce in job j .*timed out"):
        work.wait(timeout=0.2)
    assert 0.15 < time.monotonic() - t0 < 2
    assert torch.equal(outputs[0], torch.zeros(2)), "outputs changed before the end"
    assert not work.is_completed()
    pending.release()
    assert work.wait() is True
    assert torch.equal(outputs[0], torch.ones(2))


def test_an_error_reaches_wait_exception_and_the_future():
    error = reducer.Aborted("job j epoch 1 aborted: rank 2's session was lost")
    pending = FakePending(error=error, ended=True)
    work = make_work(pending)
    future = work.get_future()
    with pytest.raises(reducer.Aborted, match="rank 2"):
        future.wait()
    with pytest.raises(reducer.Aborted):
        work.wait()
    assert work.is_completed() and not work.is_success()
    assert work.exception() is error


def test_is_completed_never_blocks_and_hands_a_ready_call_over():
    pending = FakePending(result=torch.ones(2))
    work = make_work(pending)
    t0 = time.monotonic()
    assert not work.is_completed()
    assert time.monotonic() - t0 < 0.1
    pending.release()
    deadline = time.monotonic() + 5
    while not work.is_completed():
        assert time.monotonic() < deadline, "a ready call never completed"
        time.sleep(0.001)
    assert pending.waited_on[0] is not threading.current_thread()


def test_the_group_keeps_a_work_until_it_was_waited_for():
    completer = Completer("test")
    pending = FakePending(result=torch.ones(2), ended=True)
    work = make_work(pending, completer)
    assert work in completer._live
    work.wait()
    assert work not in completer._live
    futured = make_work(FakePending(result=torch.ones(2)), completer)
    futured.get_future()
    assert futured in completer._live
    futured._pending.release()
    futured.get_future().wait()
    deadline = time.monotonic() + 5
    while futured in completer._live:
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_a_closed_completer_still_collects_what_is_handed_over_later():
    completer = Completer("test")
    first = make_work(FakePending(result=torch.ones(2), ended=True), completer)
    first.get_future().wait()
    completer.close()
    later = make_work(FakePending(result=torch.ones(2), ended=True), completer)
    assert later.get_future().wait()[0].sum().item() == 2.0


# A process that hands a slow work to a completer, closes it and exits at once.
_EXITING_PROCESS = """
import threading, time
import torch
from reducer._torch_work import Completer, TorchWork

class SlowPending:
    def wait(self):
        time.sleep(1.0)
        return torch.ones(2)
    def is_completed(self):
        return False

def finish(value):
    print("collected", value.sum().item(), flush=True)
    return [value]

completer = Completer("exiting")
work = TorchWork(completer, SlowPending(), finish, "all_reduce", "in job j (rank 0)")
work.get_future()  # handed over: the completer thread collects it
completer.close()
print("main thread done", flush=True)
"""


def test_exit_waits_for_a_closed_completer_still_collecting():
    """The completer thread, a daemon, finishes what it was handed before the
    interpreter finalizes (where Python would end it mid-work)."""
    out = subprocess.run([sys.executable, "-c", _EXITING_PROCESS], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["main thread done", "collected 2.0"], out.stdout
