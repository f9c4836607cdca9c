"""Bazel macro for the example programs: example_worker, a public cc_binary
of NAME.cc on the client library.

    load("//examples:example_worker.bzl", "example_worker")

    example_worker(
        name = "quorum_worker",       # srcs: quorum_worker.cc
        deps = ["//core:tensor"],     # and the client library, ...
    )
"""

# What every example links besides its own deps: the client library and the
# Abseil libraries its main() uses (flags, statuses, strings).
_EXAMPLE_DEPS = [
    "//client:reducer_client",
    "@system//:absl_flags",
    "@system//:absl_status",
    "@system//:absl_strings",
]

def example_worker(name, deps = []):
    """A cc_binary of NAME.cc, visible everywhere (tests run the examples),
    linking the client library and Abseil's flags, status and strings
    besides `deps`."""
    native.cc_binary(
        name = name,
        srcs = [name + ".cc"],
        visibility = ["//visibility:public"],
        deps = deps + [d for d in _EXAMPLE_DEPS if d not in deps],
    )
