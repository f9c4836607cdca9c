"""Bazel macros for the project's GoogleTest tests: reducer_cc_test, and
reducerd_test for a test that starts reducerd processes, fault_test for
one of fault_worker ranks under the fault fixture, and rank_worker for the
binary of one rank
(tests/py_testing.bzl has reducer_py_test, apart, so that only the packages
with Python tests need the Python venv).

    load("//tests:testing.bzl", "fault_test", "reducer_cc_test", "reducerd_test")

    reducer_cc_test(
        name = "job_tokens_test",     # srcs: job_tokens_test.cc
        deps = [":job_tokens"],
    )

    reducerd_test(
        name = "fault_mismatch_test", # large, moderate, "exclusive"
        data = [":fault_worker"],     # and //server:reducerd
        deps = [":fault_test_base"],  # and the process harness, ...
    )

    fault_test(
        name = "fault_many_jobs_test", # the same: fault_worker ranks
    )
"""

# What every unit test links: GoogleTest's main and gMock's matchers.
_UNIT_TEST_DEPS = [
    "@system//:gmock",
    "@system//:gtest_main",
]

# What a test that starts reducerd links besides its own deps: the process
# harness that starts and stops it, GoogleTest, and the Abseil libraries
# every such test speaks (statuses, strings, durations).
_REDUCERD_TEST_DEPS = [
    "//tests:process_harness",
    "@system//:absl_status",
    "@system//:absl_strings",
    "@system//:absl_time",
    "@system//:gtest",
]

def _local(label):
    """LABEL as a BUILD file of its own package writes it (":x")."""
    package, _, target = label.partition(":")
    if package == "//" + native.package_name():
        return ":" + target
    return label

def _add_missing(deps, more):
    """DEPS followed by those of MORE it does not name already."""
    return deps + [_local(d) for d in more if _local(d) not in deps]

def reducer_cc_test(name, deps = [], srcs = None, size = "small", **kwargs):
    """A GoogleTest test: a cc_test of NAME.cc (unless `srcs` says
    otherwise), size small unless said, linking GoogleTest's main and gMock
    besides `deps`. Other arguments (data, tags, timeout, ...) pass through."""
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs if srcs != None else [name + ".cc"],
        deps = _add_missing(deps, _UNIT_TEST_DEPS),
        **kwargs
    )

def reducerd_test(
        name,
        data = [],
        deps = [],
        size = "large",
        timeout = None,
        tags = ["exclusive"],
        own_main = False,
        grpc_path_only = False,
        **kwargs):
    """A GoogleTest test that starts reducerd (and the binaries in `data`,
    its workers): a cc_test of NAME.cc (unless `srcs` says otherwise) with
    //server:reducerd after `data`.

    Size large unless said, and then timeout moderate unless said: every
    such test holds its own hard limit well inside it. Tagged "exclusive"
    unless `tags` says otherwise: its processes time themselves on the
    cores. Links the process harness, GoogleTest, gMock and Abseil's status,
    strings and time besides `deps`, and GoogleTest's main unless
    `own_main` (a test whose main() reads flags of its own).
    `grpc_path_only`: its clients take the gRPC path even on one host
    (REDUCER_SHARED_MEMORY=off), for a test that cuts, slows or counts TCP
    connections or gRPC calls. Other arguments (args, env, shard_count, ...)
    pass through."""
    if timeout == None and size == "large":
        timeout = "moderate"
    if grpc_path_only:
        kwargs["env"] = dict(kwargs.get("env", {}), REDUCER_SHARED_MEMORY = "off")
    more_deps = _REDUCERD_TEST_DEPS + ["@system//:gmock"]
    if not own_main:
        more_deps = more_deps + ["@system//:gtest_main"]
    native.cc_test(
        name = name,
        size = size,
        timeout = timeout,
        srcs = kwargs.pop("srcs", [name + ".cc"]),
        data = data + ["//server:reducerd"],
        tags = tags,
        deps = _add_missing(deps, more_deps),
        **kwargs
    )

def fault_test(name, data = [], deps = [], **kwargs):
    """A reducerd_test of fault_worker ranks under the fault fixture
    (tests/fault_test_base.h): //tests:fault_worker after `data` and
    //tests:fault_test_base besides `deps`. Other arguments pass through to
    reducerd_test."""
    reducerd_test(
        name = name,
        data = _add_missing(data, ["//tests:fault_worker"]),
        deps = _add_missing(deps, ["//tests:fault_test_base"]),
        **kwargs
    )

# What a rank process of a multi-process test links besides its own deps:
# the rank flags (worker_flags.h), the closed forms it checks results
# against, the process harness, the client library, and the core types and
# Abseil libraries every rank speaks.
_RANK_WORKER_DEPS = [
    "//tests:worker_flags",
    "//tests:closed_form",
    "//tests:process_harness",
    "//client:reducer_client",
    "//core:data_type",
    "//core:tensor",
    "@system//:absl_flags",
    "@system//:absl_status",
    "@system//:absl_strings",
    "@system//:absl_time",
]

def rank_worker(name, deps = [], **kwargs):
    """One rank of a multi-process test: a testonly cc_binary of NAME.cc
    linking the rank flags, the closed forms, the process harness, the
    client library and the core types besides `deps`. Other arguments pass
    through."""
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = [name + ".cc"],
        deps = _add_missing(deps, _RANK_WORKER_DEPS),
        **kwargs
    )
