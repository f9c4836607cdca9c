"""torch.distributed Work objects over Reducer's asynchronous calls.

Every collective of the "reducer" backend starts at once (its place in the
group's call order taken, its contribution sent) and returns a TorchWork.
Its outcome is collected by exactly one thread, whichever asks first:

- wait() without a timeout collects it on the calling thread, which then
  reads the answer itself (no hand-off between threads, which on a small
  collective costs more than the rest of the call);
- get_future(), wait(timeout) and an is_completed() that finds the answer
  ready hand it to the group's Completer, a thread that collects its works
  one after another and completes their futures.

Why each group keeps its works alive: a work that torch's C++ side asks for
(DDP's buckets, its parameter checks, broadcast_coalesced) reaches C++ as a
pointer to the C++ base object, and its Python object would be freed at
once; C++'s later wait() or getFuture() would then find no Python method
and run the base class's, which waits forever. So the group's Completer
holds every work from its start until wait() has returned or its future
has been completed; one that is neither waited for nor asked for its
future lives until its group is destroyed.

Collecting runs `finish`, which writes the result into torch's output
tensors, so outputs change only once the whole result has arrived (all or
nothing), and only then does the work count as completed. A future's value
is the list of output tensors, as torch's own backends give it, so DDP's
communication hooks and torch.futures chains run as soon as the collective
ends, overlapping with whatever the caller computes meanwhile.
"""

import atexit
import datetime
import queue
import threading
import time
import weakref

import torch
import torch.distributed as dist

import reducer

# Guards every TorchWork's claim, completion and future (held for a few
# statements; one lock for all, since a work is made for every call).
_STATE_LOCK = threading.Lock()


def _seconds(timeout):
    """A wait's limit in seconds, or None for none (torch passes a zero or
    negative timedelta when the caller gave none)."""
    if timeout is None:
        return None
    seconds = (timeout.total_seconds() if isinstance(timeout, datetime.timedelta)
               else float(timeout))
    return seconds if seconds > 0 else None


# Every Completer made, so that the process closes them and waits for
# their threads at exit.
_COMPLETERS = weakref.WeakSet()
# How long exit waits, in all, for completer threads still collecting.
_EXIT_JOIN_S = 10.0


@atexit.register
def _close_completers():
    """Closes every Completer and waits (at most _EXIT_JOIN_S in all) for
    their threads to collect what was handed over before.

    Why: a daemon thread still inside torch when the interpreter begins to
    finalize (completing a future releases and retakes the GIL) is ended by
    pthread_exit, whose unwinding through a noexcept destructor aborts the
    process ("terminate called without an active exception") after its
    work is done. atexit hooks run before that point.
    """
    deadline = time.monotonic() + _EXIT_JOIN_S
    completers = list(_COMPLETERS)  # a running thread keeps its own alive
    for completer in completers:
        completer.close()
    for completer in completers:
        for thread in completer.threads():
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class Completer:
    """A daemon thread that collects handed-over works in the order they came.

    Thread-safe. Holds no reference to its process group, so a group that is
    dropped (destroy_process_group) is freed, and close() (called when it is,
    and at exit, which waits for it: _close_completers) ends the thread once
    the works handed over before it are collected.
    """

    def __init__(self, name):
        self._name = name
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread = None
        self._started = []  # threads started, some perhaps closed but running
        self._live = set()  # works C++ may still call (see the module comment)
        _COMPLETERS.add(self)

    def keep(self, work):
        """Keeps `work` alive until release(work)."""
        self._live.add(work)

    def release(self, work):
        self._live.discard(work)

    def submit(self, work):
        """Collects `work` (claimed by the caller) on the completer thread,
        starting one if there is none (or close() ended it)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name,
                                                daemon=True)
                self._thread.start()
                self._started = [t for t in self._started if t.is_alive()]
                self._started.append(self._thread)
        self._queue.put(work)

    def close(self):
        """Ends the thread once what was handed over before is collected (a
        later submit starts another: whichever thread takes the end marker
        first ends, the other goes on)."""
        self._live.clear()
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread = None

    def threads(self):
        """The threads it started that are still running (closed or not)."""
        with self._lock:
            return [t for t in self._started if t.is_alive()]

    def _loop(self):
        while True:
            work = self._queue.get()
            if work is None:
                return
            work._collect()


def _filling(output):
    """A Work's finish that copies the flat result into `output`, in its
    shape, and returns [output]."""
    def finish(result):
        output.copy_(result.view(output.shape))
        return [output]
    return finish


class TorchWork(dist.Work):
    """One collective of the "reducer" backend, started and not yet collected.

    `pending` is a reducer.Work; `finish(value)` receives what its wait()
    returns, writes it into the output tensors and returns them (the work's
    result). `what` and `where` name the collective and its group in errors.
    Thread-safe.
    """

    def __init__(self, completer, pending, finish, what, where):
        super().__init__()
        self._completer = completer
        self._pending = pending
        self._finish = finish
        self._what = what    # the collective: "all_reduce"
        self._where = where  # its group: "in job J (rank R)"
        # Guarded by _STATE_LOCK:
        self._claimed = False      # a thread collects it, or has
        self._completed = False    # collected: result or exception final
        # Held until collected: a thread other than the collector waits by
        # acquiring it (cheaper to make than a threading.Event, and works are
        # made for every call while few are waited for by another thread).
        self._done = threading.Lock()
        self._done.acquire()
        self._result = []
        self._source_rank = -1  # set by a finish that knows the sender
        self._exception = None
        self._future = None
        completer.keep(self)

    # --- torch's Work API ---------------------------------------------------

    def wait(self, timeout=None):
        """Returns True once the collective has ended and its outputs hold the
        result; raises its error. With a timeout (seconds or a timedelta),
        raises reducer.DeadlineExceeded when it has not ended by then; the
        collective itself goes on."""
        seconds = _seconds(timeout)
        if seconds is None:
            if self._claim():
                self._collect()
            else:
                self._await_done(-1)
        else:
            if self._claim():
                self._completer.submit(self)
            if not self._await_done(seconds):
                raise reducer.DeadlineExceeded(
                    f"{self._what} {self._where}: Work.wait(timeout={seconds:g} s) "
                    "timed out before the collective ended (it goes on; a rank "
                    "that never calls it fails it at the collective's own deadline)")
        self._completer.release(self)
        if self._exception is not None:
            raise self._exception
        return True

    def is_completed(self):
        """Never blocks: True once the outputs hold the result (or it failed)."""
        if self._completed:
            return True
        if self._pending_ready() and self._claim():
            self._completer.submit(self)
        return False

    def is_success(self):
        return self._completed and self._exception is None

    def exception(self):
        return self._exception

    def result(self):
        return self._result

    def source_rank(self):
        """The sender's group rank of a receive from any source, once
        completed; -1 for every other collective (torch's rule)."""
        return self._source_rank

    def get_future(self):
        """A torch.futures.Future, returned at once, completed with the list of
        output tensors (or the error) when the collective ends."""
        with _STATE_LOCK:
            if self._future is not None:
                return self._future
            future = self._future = torch.futures.Future()
            completed = self._completed
            hand_over = not completed and not self._claimed
            self._claimed = True
        if completed:
            self._settle(future)
            self._completer.release(self)
        elif hand_over:
            self._completer.submit(self)
        return future

    def synchronize(self):
        self.wait()

    # --- collecting -------------------------------------------------------

    def _claim(self):
        """True when the caller is now the one thread that collects."""
        with _STATE_LOCK:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def _await_done(self, seconds):
        """True once collected, waiting at most `seconds` (-1: no limit)."""
        if not self._done.acquire(timeout=seconds):
            return False
        self._done.release()  # for the next waiter
        return True

    def _pending_ready(self):
        pending = self._pending
        return pending is not None and pending.is_completed()

    def _collect(self):
        """Waits for the outcome and finishes the outputs; run once, by the
        thread that claimed the work."""
        try:
            self._result = self._finish(self._pending.wait())
        except BaseException as e:  # kept for wait(), exception() and the future
            self._exception = e
        self._pending = None
        self._finish = None
        with _STATE_LOCK:
            self._completed = True
            future = self._future
        self._done.release()
        if future is not None:
            self._settle(future)
            self._completer.release(self)

    def _settle(self, future):
        if self._exception is not None:
            future.set_exception(self._exception)
        else:
            future.set_result(self._result)

