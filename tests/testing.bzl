"""Bazel macros for the project's tests: reducer_cc_test (GoogleTest) and
reducer_py_test (pytest against the Bazel-built `reducer` package).

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

def reducer_py_test(name, test, data = [], tags = [], **kwargs):
    """A pytest file (`test`, in this package) run by python/testing/run_pytest.sh
    under Debian's /usr/bin/python3 against the Bazel-built `reducer` package
    and the Python test helpers, besides `data`. Tagged "no-asan": the
    extension built under --config=asan would need libasan preloaded into
    python3. Other arguments (size, timeout, ...) pass through."""
    native.sh_test(
        name = name,
        srcs = ["//python:testing/run_pytest.sh"],
        args = [native.package_name() + "/" + test],
        data = [test] + data + ["//python:reducer", "//python:testing"],
        tags = tags + [t for t in ["no-asan"] if t not in tags],
        **kwargs
    )
