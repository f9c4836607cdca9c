"""Bazel macro for the project's GoogleTest tests: reducer_cc_test
(tests/py_testing.bzl has reducer_py_test, apart, so that only the packages
with Python tests need the Python venv).

    load("//tests:testing.bzl", "reducer_cc_test")

    reducer_cc_test(
        name = "job_tokens_test",     # srcs: job_tokens_test.cc
        deps = [":job_tokens"],
    )
"""

# What every unit test links: GoogleTest's main and gMock's matchers.
_UNIT_TEST_DEPS = [
    "@system//:gmock",
    "@system//:gtest_main",
]

def reducer_cc_test(name, deps = [], srcs = None, size = "small", **kwargs):
    """A GoogleTest test: a cc_test of NAME.cc (unless `srcs` says
    otherwise), size small unless said, linking GoogleTest's main and gMock
    besides `deps`. Other arguments (data, tags, timeout, ...) pass through."""
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs if srcs != None else [name + ".cc"],
        deps = deps + [d for d in _UNIT_TEST_DEPS if d not in deps],
        **kwargs
    )
