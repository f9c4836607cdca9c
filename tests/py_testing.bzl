"""Bazel macro for the project's Python tests: reducer_py_test (pytest
against the Bazel-built `reducer` package, under the project's Python).

    load("//tests:py_testing.bzl", "reducer_py_test")

    reducer_py_test(
        name = "reducer_test",
        test = "tests/reducer_test.py",
        data = ["//server:reducerd"],
    )
"""

load("@torch_cc//:defs.bzl", "PYTHON")

def reducer_py_test(name, test, data = [], tags = [], **kwargs):
    """A pytest file (`test`, in this package) run by python/testing/run_pytest.sh
    under the project's Python (@torch_cc//:defs.bzl's PYTHON: the pinned
    venv with pip's torch) against the Bazel-built `reducer` package and the
    Python test helpers, besides `data`. Tagged "no-asan": the extension
    built under --config=asan would need libasan preloaded into python3.
    Other arguments (size, timeout, ...) pass through."""
    native.sh_test(
        name = name,
        srcs = ["//python:testing/run_pytest.sh"],
        args = [PYTHON, native.package_name() + "/" + test],
        data = [test] + data + ["//python:reducer", "//python:testing"],
        tags = tags + [t for t in ["no-asan"] if t not in tags],
        **kwargs
    )
