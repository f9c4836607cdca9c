"""pytest plugin: PyTorch-Ignite's own distributed tests on the backend
"reducer", as Ignite's CI runs them on gloo.

From the root of Ignite's sdist (tools/pinned_sdist.sh fetches it), with
reducerd at REDUCER_TARGET and this directory and the reducer package on
PYTHONPATH:

    WORLD_SIZE=4 python -m pytest -p ignite_on_reducer -m distributed \\
        --dist=each --tx 4*popen//python=python tests/ignite/distributed

(Ignite's tests/run_cpu_tests.sh runs `-m distributed` so, with
WORLD_SIZE=4: each of the 4 pytest-xdist workers runs every test as one
rank, and Ignite's fixtures make the group from WORLD_SIZE and the worker's
number.)

In each worker, a default process group asked for on "gloo" is made on
"reducer" instead: Ignite's fixtures
(distributed_context_single_node_gloo, `distributed` with gloo_cpu),
idist.initialize("gloo"), idist.Parallel(backend="gloo") and
_NativeDistModel.create_from_backend("gloo") alike. Groups asked for on
gloo by name beside it (dist.new_group(backend="gloo"), which Ignite's own
idist uses to count processes per node) stay on gloo.

`--reducer-name=gloo` (the default) has torch.distributed.get_backend
answer "gloo" for such a group, the name the test asked for, so that
Ignite's name checks (`assert idist.backend() == "gloo"`) and the branches
Ignite takes by name behave as for gloo while every collective runs on
reducer; `--reducer-name=reducer` leaves the real name, to see which tests
check it. `--on=gloo` substitutes nothing: the same run on gloo, to
compare with. In both, a test body that raises has the default group it
made destroyed and the environment it changed restored afterwards, so that
its failure does not make every later test fail ("trying to initialize the
default process group twice"). Each test's report carries two user
properties: `ran_on`, the backend of the default group its body ran on
(reducer, gloo, none), and `reducer_groups`, how many default groups the
test made on reducer in place of gloo (Ignite's class-scoped `distributed`
fixture makes one for a whole class). reducer.ignite is imported, as a
user would, before the tests.
Processes a test starts (idist.spawn, torchrun) are not substituted; with
WORLD_SIZE set, Ignite skips the tests that start them.
"""

import weakref

import pytest

# How many default groups this process made on "reducer" in place of gloo,
# and the last of them (weakly: a group kept alive would keep its store's
# port bound after destroy_process_group).
_made = {"count": 0, "last": None}


def install(name_as_asked):
    """Substitutes "reducer" for gloo in this process's init_process_group;
    with `name_as_asked`, get_backend answers "gloo" for those groups."""
    import torch.distributed as dist

    import reducer.ignite  # noqa: F401  (registers with torch and with Ignite)

    if getattr(dist.init_process_group, "_reducer_substitute", False):
        return
    init_process_group, get_backend = dist.init_process_group, dist.get_backend

    def substituted_init(backend=None, *args, **kwargs):
        if backend is not None and str(backend).lower() == "gloo":
            backend = "reducer"
            init_process_group(backend, *args, **kwargs)
            _made["count"] += 1
            _made["last"] = weakref.ref(dist.group.WORLD)
            return None
        return init_process_group(backend, *args, **kwargs)

    def named_as_asked(group=None):
        name = get_backend(group)
        last = _made["last"]() if _made["last"] is not None else None
        asked = dist.group.WORLD if group is None else group
        if name == "reducer" and last is not None and last is asked:
            return "gloo"
        return name

    substituted_init._reducer_substitute = True
    dist.init_process_group = substituted_init
    if name_as_asked:
        dist.get_backend = named_as_asked


def pytest_addoption(parser):
    parser.addoption("--reducer-name", choices=("gloo", "reducer"), default="gloo",
                     help="the name torch.distributed.get_backend gives for a group "
                          "made on reducer in place of gloo")
    parser.addoption("--on", choices=("reducer", "gloo"), default="reducer",
                     help="gloo: substitute nothing (the same run on gloo, with the "
                          "same isolation of failed tests, to compare with)")


def pytest_configure(config):
    if config.getoption("--on") == "reducer":
        install(name_as_asked=config.getoption("--reducer-name") == "gloo")


_BEFORE = pytest.StashKey[int]()
_RAN_ON = pytest.StashKey[set]()


def _default_group_backend():
    """The real backend name of the default group now ("none" without one),
    whatever get_backend answers."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if not dist.is_initialized():
        return "none"
    return str(distributed_c10d.get_backend(dist.group.WORLD))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_BEFORE] = _made["count"]
    item.stash[_RAN_ON] = set()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown":
        made = _made["count"] - item.stash.get(_BEFORE, _made["count"])
        ran_on = item.stash.get(_RAN_ON, set()) - {"none"}
        item.user_properties.append(("reducer_groups", made))
        item.user_properties.append(("ran_on", ",".join(sorted(ran_on)) or "none"))
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Records the backend of the default group the test body ran on (the
    user property `ran_on`: the group of a class-scoped fixture counts for
    every test of the class, a group made in the body for that test).
    After a test body that raised, what it left behind is undone as its
    own last lines would have: a default group it made is destroyed (with
    idist reset) and the environment it changed is restored, so that one
    failure does not fail every test after it (Ignite's fixtures would then
    find a default group and raise "trying to initialize the default
    process group twice")."""
    import os

    import torch.distributed as dist

    environment = dict(os.environ)
    before = dist.group.WORLD if dist.is_initialized() else None
    made = _made["count"]
    ran_on = item.stash.setdefault(_RAN_ON, set())
    ran_on.add(_default_group_backend())
    outcome = yield
    ran_on.add(_default_group_backend())
    if _made["count"] > made:
        ran_on.add("reducer")
    if outcome.excinfo is None:
        return
    if dist.is_initialized() and dist.group.WORLD is not before:
        dist.destroy_process_group()
        from ignite.distributed.utils import _SerialModel, _set_model
        _set_model(_SerialModel())
    if dict(os.environ) != environment:
        os.environ.clear()
        os.environ.update(environment)


# --------------------------------------------------------------------------
# Comparing runs: python3 ignite_on_reducer.py A.xml B.xml (junit files of
# two runs, e.g. --on=gloo and --on=reducer) prints each run's counts (a test
# counts once per rank) and the tests A passes on every rank that B does not;
# exits 1 when there is one.

def outcomes(path):
    """{test: [outcome per rank]} of a junit file; outcome: passed, failed,
    error or skipped. Collection errors of a module count as its error."""
    import xml.etree.ElementTree as ET

    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        for tag, outcome in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            if case.find(tag) is not None:
                break
        else:
            outcome = "passed"
        found.setdefault(name, []).append(outcome)
    return found


def compare(a_path, b_path):
    import collections

    runs = [(path, outcomes(path)) for path in (a_path, b_path)]
    for path, found in runs:
        counts = collections.Counter(o for per_rank in found.values() for o in per_rank)
        ran = [t for t, per_rank in found.items() if set(per_rank) != {"skipped"}]
        print(f"{path}: {len(ran)} tests run, " + ", ".join(
            f"{counts[k]} {k}" for k in ("passed", "failed", "error", "skipped")))
    (a, first), (b, second) = runs
    lost = sorted(t for t, per_rank in first.items()
                  if set(per_rank) == {"passed"} and set(second.get(t, [])) != {"passed"})
    print(f"passed on every rank in {a}, not in {b}: {len(lost)}")
    for t in lost:
        print(f"  {t}: {','.join(second.get(t, ['absent']))}")
    return 1 if lost else 0


if __name__ == "__main__":
    import sys
    sys.exit(compare(*sys.argv[1:3]))
