"""Test support: a real reducerd on a free loopback port, and ranks as threads.

    with ReducerdProcess() as server:         # $REDUCERD, else bazel-bin's
        results = run_ranks(4, server.target, "job-1", lambda c: c.all_reduce(x))

Every wait has a deadline; a rank thread that does not finish in time fails
the test instead of hanging it.
"""

import os
import socket
import subprocess
import threading
import time
import uuid


def free_port():
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ReducerdProcess:
    """reducerd --listen=127.0.0.1:PORT, started on enter, SIGTERMed on exit."""

    def __init__(self, extra_flags=(), ready_timeout=20.0):
        self.binary = os.environ.get("REDUCERD", "bazel-bin/server/reducerd")
        self.extra_flags = list(extra_flags)
        self.ready_timeout = ready_timeout
        self.process = None
        self.target = None

    def __enter__(self):
        for _ in range(5):  # another process may take the port first
            port = free_port()
            self.process = subprocess.Popen(
                [self.binary, f"--listen=127.0.0.1:{port}"] + self.extra_flags,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            # Other lines (the metrics address) may come first.
            deadline = time.monotonic() + self.ready_timeout
            line = self._read_line_before(deadline)
            while line and "listening on" not in line:
                line = self._read_line_before(deadline)
            if line is not None and "listening on" in line:
                self.target = f"127.0.0.1:{port}"
                return self
            self._stop()
        raise RuntimeError(f"{self.binary} did not start listening in 5 tries")

    def _read_line_before(self, deadline):
        result = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(max(0.0, deadline - time.monotonic()))
        return result[0] if result else None

    def _stop(self):
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def __exit__(self, *exc):
        self._stop()


def new_job():
    return f"pytest-{uuid.uuid4().hex}"


def run_ranks(world_size, target, job, fn, timeout=30.0, client_timeout=20.0,
              client_options=None):
    """Connects `world_size` reducer.Clients (one thread each, with the keyword
    arguments `client_options`, e.g. token and TLS files), runs fn(client)
    on each, and returns the results in rank order. Re-raises the first
    rank's exception; AssertionError if a rank is still running at
    `timeout` seconds."""
    import reducer

    results = [None] * world_size
    errors = [None] * world_size

    def rank_main(rank):
        try:
            with reducer.Client(target=target, job=job, rank=rank,
                                world_size=world_size, timeout=client_timeout,
                                **(client_options or {})) as c:
                results[rank] = fn(c)
        except BaseException as e:  # collected, re-raised in the caller
            errors[rank] = e

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True)
               for r in range(world_size)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for r, t in enumerate(threads):
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            raise AssertionError(f"rank {r} of job {job} still running after {timeout} s")
    for e in errors:
        if e is not None:
            raise e
    return results
