"""Bazel macro for the project's Python tests: reducer_py_test (pytest
against the Bazel-built `reducer` package, under the project's Python).

    load("//tests:py_testing.bzl", "reducer_py_test")

    reducer_py_test(
        name = "torch_quorum_test",     # runs torch_quorum_test.py
        data = ["torch_quorum_worker.py"],
    )
"""

load("@torch_cc//:defs.bzl", "PYTHON")

def reducer_py_test(name, data = [], tags = [], exclusive = False, **kwargs):
    """The pytest file `name`.py of this package, run by
    tests/python/run_pytest.sh under the project's Python (@torch_cc//:defs.bzl's
    PYTHON: the pinned venv with pip's torch) against the Bazel-built
    `reducer` package, reducerd and the Python test helpers
    (//tests/python:testing), besides `data`.

    exclusive: the test runs worker processes that want the cores to
    themselves: size "large", timeout "moderate" (unless given) and the tag
    "exclusive", which keeps other tests off meanwhile.

    Tagged "no-asan": the extension built under --config=asan would need
    libasan preloaded into python3 (.bazelrc's test:asan filters the tag).
    Other arguments (size, timeout, env, ...) pass through."""
    if exclusive:
        kwargs.setdefault("size", "large")
        kwargs.setdefault("timeout", "moderate")
        tags = tags + ["exclusive"]
    native.sh_test(
        name = name,
        srcs = ["//tests/python:run_pytest.sh"],
        args = [PYTHON, native.package_name() + "/" + name + ".py"],
        data = [name + ".py"] + data + [
            "//python:reducer",
            "//server:reducerd",
            "//tests/python:testing",
        ],
        tags = tags + [t for t in ["no-asan"] if t not in tags],
        **kwargs
    )
