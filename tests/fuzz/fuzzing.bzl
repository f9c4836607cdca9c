"""Bazel macro for the project's libFuzzer targets: reducer_fuzzer, the
three targets of one fuzzer, so that each is declared once with what it
links.

    load("//tests/fuzz:fuzzing.bzl", "reducer_fuzzer")

    reducer_fuzzer(
        name = "core_validation",  # core_validation_fuzzer.cc,
        deps = ["//core:validate"], # corpus/core_validation
    )
"""

def reducer_fuzzer(name, deps):
    """The fuzzer NAME, whose LLVMFuzzerTestOneInput is in NAME_fuzzer.cc
    (linking `deps`), as three targets:

    NAME_fuzz_target: that entry point, a testonly cc_library linked
    always (alwayslink) so that a main finds it.
    NAME_corpus_test: a small cc_test that replays the seed corpus
    corpus/NAME through it with corpus_main.cc (any compiler).
    NAME_fuzzer: the libFuzzer binary (-fsanitize=fuzzer: clang only,
    hence tagged "manual", out of `//...` builds); run_fuzzers.sh builds
    and runs it."""
    target = ":" + name + "_fuzz_target"
    native.cc_library(
        name = name + "_fuzz_target",
        testonly = True,
        srcs = [name + "_fuzzer.cc"],
        deps = deps,
        alwayslink = True,
    )
    native.cc_test(
        name = name + "_corpus_test",
        size = "small",
        srcs = ["corpus_main.cc"],
        args = ["$(location corpus/%s)" % name],
        data = ["corpus/" + name],
        deps = [target],
    )
    native.cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
        deps = [target],
    )
