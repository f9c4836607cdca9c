"""Bazel macro for the smoke forms of the Python benchmarks:
bench_smoke_test, an sh_test of NAME.sh run with the project's Python
(PYTHON: the venv of python/requirements-dev.txt) as its first argument,
which sources bench/smoke_lib.sh for its setup, its run and its checks.

    load("//bench:smoke_test.bzl", "bench_smoke_test")

    bench_smoke_test(
        name = "cpu_per_gib_smoke_test",  # srcs: cpu_per_gib_smoke_test.sh
        data = ["cpu_per_gib.py"],         # and run_bench.py, reducerd, ...
    )
"""

load("@torch_cc//:defs.bzl", "PYTHON")

# What every smoke test's script runs besides its own benchmark: the
# functions it sources (smoke_lib.sh), the benchmarks' shared driver
# (run_bench.py, which imports same_host_model.py) and reducerd.
_SMOKE_TEST_DATA = [
    "run_bench.py",
    "smoke_lib.sh",
    "same_host_model.py",
    "//server:reducerd",
]

def bench_smoke_test(name, data = [], size = "medium", tags = ["exclusive", "no-asan"], **kwargs):
    """An sh_test of NAME.sh given PYTHON as its first argument, with
    smoke_lib.sh (the functions the script sources), run_bench.py,
    same_host_model.py and //server:reducerd besides `data`.
    Size medium unless said; tagged "exclusive" (timing runs) and "no-asan"
    (Python drives it, as the Python tests) unless `tags` says otherwise.
    Other arguments pass through."""
    native.sh_test(
        name = name,
        size = size,
        srcs = [name + ".sh"],
        args = [PYTHON],
        data = data + [d for d in _SMOKE_TEST_DATA if d not in data],
        tags = tags,
        **kwargs
    )
