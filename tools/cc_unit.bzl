"""Bazel macro for the project's C++ units: reducer_cc_library, the
cc_library of one header and its source file named after the target, and
with `test_deps` that unit's GoogleTest test beside it.

    load("//tools:cc_unit.bzl", "reducer_cc_library")

    reducer_cc_library(
        name = "quorum_rule",          # quorum_rule.h, quorum_rule.cc
        deps = ["@system//:absl_time"],
        test_deps = [                  # quorum_rule_test: quorum_rule_test.cc
            "//tests:status_matchers", # linking :quorum_rule, gtest, gmock
        ],
    )
"""

load("//tests:testing.bzl", "reducer_cc_test")

def reducer_cc_library(
        name,
        srcs = None,
        hdrs = None,
        test_deps = None,
        test_size = "small",
        **kwargs):
    """A cc_library of NAME.h and NAME.cc (unless `hdrs` or `srcs` says
    otherwise: srcs = [] for a header-only unit).

    With `test_deps` (a list, [] too), also NAME_test: a reducer_cc_test
    of NAME_test.cc, size `test_size` (small unless said), linking this
    library, `test_deps`, GoogleTest's main and gMock. Other arguments
    (deps, visibility, testonly, ...) pass through to the cc_library."""
    native.cc_library(
        name = name,
        srcs = srcs if srcs != None else [name + ".cc"],
        hdrs = hdrs if hdrs != None else [name + ".h"],
        **kwargs
    )
    if test_deps != None:
        reducer_cc_test(
            name = name + "_test",
            size = test_size,
            deps = [":" + name] + [d for d in test_deps if d != ":" + name],
        )
