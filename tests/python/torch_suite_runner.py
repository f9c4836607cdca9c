"""torch's own distributed tests (torch.testing._internal.distributed.
distributed_test: DistributedTest._DistTestBase, the suite torch runs on gloo
and nccl) on the backend "reducer" or on gloo, on the CPU, at any world size.

    python3 torch_suite_runner.py --backend=reducer --world-size=3 \\
        --jsonl=reducer.jsonl [--reducerd=PATH] [--tests NAME ...] \\
        [--tests-file FILE] [-k SUBSTRING] [--timeout=SECONDS] [--require-pass] \\
        [--start=fork|spawn]
    python3 torch_suite_runner.py --compare gloo.jsonl reducer.jsonl

Without --tests, --tests-file or -k the whole suite runs (285 tests in torch
2.15). For the reducer backend, REDUCER_TARGET names a running reducerd;
without it the runner starts the reducerd binary of --reducerd (default:
$REDUCERD, else bazel-bin/server/reducerd) on a free loopback port.

Each test prints one line when it ends ("PASS test_x 4.1s", "FAIL ...",
"SKIP ... (reason)"), then the counts close the run:

    torch_suite reducer W=3: 80 passed, 19 failed, 186 skipped (103 s)

--jsonl writes one JSON object per test as it ends, {"test", "backend",
"world_size", "outcome" ("pass", "fail" or "skip"), "reason" (a skip's reason;
for a failure its exception line, then the end of its report), "seconds"},
then one {"summary": ...} line with the counts. Exit status 0 unless a test
failed, or, with --require-pass, unless a test did not pass (skipped
included). --compare prints two such files' counts and the tests the first
passed that the second did not.

How torch runs the suite (its test/distributed/test_distributed_spawn.py):
a class deriving from TestDistBackend and _DistTestBase whose setUp spawns
WORLD_SIZE processes; each imports the test file again, joins a file://
group and runs one test method. This runner's class is the same, but by
default it forks its processes (--start=fork), which then start with torch,
reducer.torch and the suite already imported: about 0.5 s per test instead
of 15 to 25 s on 2 cores; --start=spawn is torch's way (each process
imports this file again, so `import reducer.torch` registers the backend
there too).
BACKEND and WORLD_SIZE are read from the environment when torch's test
module is imported, so the runner sets them first and its processes
inherit them.

What a backend out of torch's tree declares, as torch's test helpers expect
(common_distributed.DistTestCases.backend_feature), before the suite is
imported (its skip decorators read these sets then): "reducer" is a
"plugin" (a registered third-party backend, which require_backend_is_available
accepts), supports "ddp" (DistributedDataParallel), "subgroup" (new_group
of any ranks) and "gpu" and "cuda" (CUDA tensors, staged through host
memory). It is in none of DistTestCases.skip_collective's sets, so torch's
cases of reduce, CPU barrier, all_gather_coalesced and recv from any source
run on it (docs/python.md lists the cases that do not pass, and why).

Some of torch's skips name gloo itself rather than a feature
(require_backend_is_available({"gloo"}), "Only gloo backend supports
timeouts", "get_future is only supported on mpi, nccl and gloo", ...), and
torch runs its CPU all-to-all cases on MPI alone ("Only MPI supports CPU
all_to_all_single"). So that every test torch runs on gloo, and the CPU
all-to-alls, run on reducer too, the runner imports torch's test module
again as BACKEND=gloo and as BACKEND=mpi see it and, on reducer, runs every
test that either of those imports does not skip: its skip is a backend's
name alone (its own checks at run time, such as a GPU count, still apply).
Such a test's JSON line carries "torch_skip", the reason torch gave for
skipping it on reducer. gloo runs exactly what torch runs on gloo.
"""

import argparse
import json
import multiprocessing
import os
import re
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("reducer", "gloo")
# DistTestCases.backend_feature sets the reducer backend belongs to (see above).
REDUCER_FEATURES = ("plugin", "ddp", "subgroup", "gpu", "cuda")
# The backends whose view of the suite the reducer run adopts (see above).
ADOPTED_VIEWS = ("gloo", "mpi")


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        description="torch's distributed_test suite on reducer or gloo")
    parser.add_argument("--backend", choices=BACKENDS,
                        default=os.environ.get("BACKEND", "reducer"))
    parser.add_argument("--world-size", type=int,
                        default=int(os.environ.get("WORLD_SIZE", "3")))
    parser.add_argument("--tests", nargs="+", default=[], metavar="NAME",
                        help="test method names (test_...) to run")
    parser.add_argument("--tests-file", help="a file of test names, one a line "
                        "(# starts a comment)")
    parser.add_argument("-k", dest="substrings", action="append", default=[],
                        help="run the tests whose name contains this (repeatable)")
    parser.add_argument("--jsonl", help="write per-test outcomes here (JSON lines)")
    parser.add_argument("--timeout", type=int, default=300,
                        help="seconds per test before torch kills its processes "
                        "(torch's DISTRIBUTED_TESTS_DEFAULT_TIMEOUT)")
    parser.add_argument("--reducerd", default=os.environ.get(
        "REDUCERD", "bazel-bin/server/reducerd"),
        help="reducerd to start when REDUCER_TARGET is not set")
    parser.add_argument("--require-pass", action="store_true",
                        help="fail unless every selected test passes (no skips)")
    parser.add_argument("--start", choices=("fork", "spawn"), default="fork",
                        help="how each test's processes start: fork (the "
                        "default: they inherit the imported modules) or spawn "
                        "(torch's way: each imports torch and this file again)")
    parser.add_argument("--list", action="store_true",
                        help="print the selected test names and exit")
    return parser.parse_args(argv)


def compare(first_path, second_path):
    """Prints each run's counts, then every test the first run passed that the
    second did not, with the second's outcome and reason. Returns 0."""
    runs = []
    for path in (first_path, second_path):
        tests, summary = {}, {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if "summary" in record:
                    summary = record["summary"]
                else:
                    tests[record["test"]] = record
        runs.append((tests, summary))
    (first, first_summary), (second, second_summary) = runs
    for summary in (first_summary, second_summary):
        print(f"{summary.get('backend')} W={summary.get('world_size')}: "
              f"{summary.get('passed')} passed, {summary.get('failed')} failed, "
              f"{summary.get('skipped')} skipped")
    lost = [name for name in sorted(first) if first[name]["outcome"] == "pass"
            and second.get(name, {}).get("outcome") != "pass"]
    a, b = first_summary.get("backend"), second_summary.get("backend")
    print(f"{len(lost)} tests pass on {a} but not on {b}:")
    for name in lost:
        other = second.get(name, {"outcome": "missing", "reason": ""})
        why = other["reason"].strip().splitlines()[0][:160] if other["reason"].strip() else ""
        print(f"  {name}: {other['outcome']} {why}".rstrip())
    return 0


if __name__ == "__main__" and "--compare" in sys.argv[1:2]:
    if len(sys.argv) != 4:
        sys.exit("usage: torch_suite_runner.py --compare FIRST.jsonl SECOND.jsonl")
    sys.exit(compare(sys.argv[2], sys.argv[3]))

if __name__ == "__main__":
    ARGS = _parse_args(sys.argv[1:])
    # Read by torch's test modules at import, here and in every spawned process.
    os.environ["BACKEND"] = ARGS.backend
    os.environ["WORLD_SIZE"] = str(ARGS.world_size)
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(ARGS.timeout)
    os.environ["TORCH_SUITE_START"] = ARGS.start
BACKEND = os.environ.setdefault("BACKEND", "reducer")
os.environ.setdefault("WORLD_SIZE", "3")

if BACKEND == "reducer":
    import reducer.torch  # noqa: E402,F401  (registers "reducer" in every process)
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND == "reducer":
    for _feature in REDUCER_FEATURES:
        DistTestCases.backend_feature[_feature].add(BACKEND)

from torch.testing._internal import common_utils  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestTorchSuite(TestDistBackend, DistributedTest._DistTestBase):
    """torch's TestDistBackendWithSpawn, for any backend."""

    def setUp(self):
        super().setUp()
        if os.environ.get("TORCH_SUITE_START") == "fork":
            # The processes inherit the imported modules instead of importing
            # torch again: seconds less per test. CPU only.
            self._start_processes(multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()


def _skipped(cls, name):
    return getattr(getattr(cls, name), "__unittest_skip__", False)


def skipped_on(backend):
    """The names of the tests whose decorators skip them when torch's test
    module is imported with BACKEND=`backend` (imported again, under another
    module name, for that)."""
    import importlib.util
    from torch.testing._internal.distributed import distributed_test
    spec = importlib.util.spec_from_file_location(f"_distributed_test_as_{backend}",
                                                  distributed_test.__file__)
    view = importlib.util.module_from_spec(spec)
    saved = os.environ["BACKEND"]
    os.environ["BACKEND"] = backend
    try:
        spec.loader.exec_module(view)
    finally:
        os.environ["BACKEND"] = saved
    base = view.DistributedTest._DistTestBase
    return {n for n in dir(base) if n.startswith("test_") and _skipped(base, n)}


def run_what_views_run(names, views=ADOPTED_VIEWS):
    """Clears the skip of each of `names` that torch skips on this backend but
    not on one of `views`; returns {name: torch's reason for skipping it
    here}."""
    skipped_everywhere = set.intersection(*(skipped_on(v) for v in views))
    cleared = {}
    for name in names:
        function = DistributedTest._DistTestBase.__dict__.get(name)
        if (function is None or not _skipped(TestTorchSuite, name)
                or name in skipped_everywhere):
            continue
        cleared[name] = function.__unittest_skip_why__
        function.__unittest_skip__ = False
    return cleared


ALL_TESTS = sorted(n for n in dir(DistributedTest._DistTestBase)
                   if n.startswith("test_") and callable(getattr(TestTorchSuite, n)))


def _read_names(path):
    names = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(line)
    return names


def select(args):
    """The selected test names, in the suite's order; SystemExit naming any
    that the suite does not have."""
    wanted = list(args.tests) + (_read_names(args.tests_file) if args.tests_file else [])
    missing = sorted(set(wanted) - set(ALL_TESTS))
    if missing:
        sys.exit(f"torch's distributed_test has no {missing}")
    if not wanted and not args.substrings:
        return list(ALL_TESTS)
    return [n for n in ALL_TESTS
            if n in wanted or any(s in n for s in args.substrings)]


_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Exit)\b")
_REPRO_HINT = "To execute this test, run the following"


def _failure_reason(report, limit=1500):
    """A failure's exception line (the last one in the report, which for a
    test of several processes is a process's), then the report's end."""
    report = report.split(_REPRO_HINT, 1)[0].strip()
    lines = [x for x in report.splitlines() if _EXCEPTION_LINE.match(x)]
    tail = report if len(report) <= limit else "..." + report[-limit:]
    return (lines[-1] + "\n" + tail) if lines else tail


class RecordingResult(unittest.TextTestResult):
    """A TextTestResult that also records each test's outcome, prints a line
    per test and writes it as a JSON line."""

    def __init__(self, stream, descriptions, verbosity, *, backend, world_size, jsonl,
                 torch_skips):
        super().__init__(stream, descriptions, verbosity)
        self.torch_skips = torch_skips
        self.backend = backend
        self.world_size = world_size
        self.jsonl = jsonl
        self.records = []
        self._started = {}

    def startTest(self, test):
        self._started[test.id()] = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, reason=""):
        name = test.id().rsplit(".", 1)[-1]
        seconds = time.monotonic() - self._started.get(test.id(), time.monotonic())
        record = {"test": name, "backend": self.backend, "world_size": self.world_size,
                  "outcome": outcome, "reason": reason, "seconds": round(seconds, 1)}
        if name in self.torch_skips:
            record["torch_skip"] = self.torch_skips[name]
        self.records.append(record)
        first = reason.strip().splitlines()[0] if reason.strip() else ""
        detail = f" ({first[:200]})" if outcome != "pass" and first else ""
        print(f"{outcome.upper()} {name} {seconds:.1f}s{detail}", flush=True)
        if self.jsonl is not None:
            self.jsonl.write(json.dumps(record) + "\n")
            self.jsonl.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "fail", _failure_reason(self.failures[-1][1]))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "fail", _failure_reason(self.errors[-1][1]))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skip", str(reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "fail", "unexpected success")


def counts(records):
    return {o: sum(r["outcome"] == o for r in records) for o in ("pass", "fail", "skip")}


def main(args):
    names = select(args)
    if args.list:
        print("\n".join(names))
        return 0
    # common_utils' TestCase reads the globals its own argument parser sets.
    saved_argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        common_utils.parse_cmd_line_args()
    finally:
        sys.argv = saved_argv

    server = None
    if args.backend == "reducer" and not os.environ.get("REDUCER_TARGET"):
        sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "testing"))
        from reducerd_process import ReducerdProcess
        os.environ["REDUCERD"] = args.reducerd
        server = ReducerdProcess().__enter__()
        os.environ["REDUCER_TARGET"] = server.target
    torch_skips = run_what_views_run(names) if args.backend != "gloo" else {}
    jsonl = open(args.jsonl, "w", encoding="utf-8") if args.jsonl else None
    try:
        suite = unittest.TestSuite(TestTorchSuite(n) for n in names)
        runner = unittest.TextTestRunner(
            stream=sys.stderr, verbosity=0,
            resultclass=lambda *a: RecordingResult(
                *a, backend=args.backend, world_size=args.world_size, jsonl=jsonl,
                torch_skips=torch_skips))
        started = time.monotonic()
        result = runner.run(suite)
        total = counts(result.records)
        summary = {"backend": args.backend, "world_size": args.world_size,
                   "passed": total["pass"], "failed": total["fail"],
                   "skipped": total["skip"], "seconds": round(time.monotonic() - started)}
        if jsonl is not None:
            jsonl.write(json.dumps({"summary": summary}) + "\n")
    finally:
        if jsonl is not None:
            jsonl.close()
        if server is not None:
            server.__exit__(None, None, None)
    print(f"torch_suite {args.backend} W={args.world_size}: {total['pass']} passed, "
          f"{total['fail']} failed, {total['skip']} skipped "
          f"({summary['seconds']} s)", flush=True)
    if total["fail"] or (args.require_pass and total["skip"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
