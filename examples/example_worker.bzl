"""Bazel macro for the example programs: example_worker, a public cc_binary
of NAME.cc on the client library and the examples' flags (example_flags.h).

    load("//examples:example_worker.bzl", "example_worker")

    example_worker(
        name = "quorum_worker",       # srcs: quorum_worker.cc
        deps = ["//core:tensor"],     # and the client library, ...
    )
"""

# What every example links besides its own deps: its flags and main()
# (:example_flags), the client library and the Abseil libraries its main()
# uses (flags, statuses, strings).
_EXAMPLE_DEPS = [
    ":example_flags",
    "//client:reducer_client",
    "@system//:absl_flags",
    "@system//:absl_status",
    "@system//:absl_strings",
]

def _example_flags():
    """The cc_library example_flags (example_flags.h), declared by the first
    example_worker of the package."""
    if native.existing_rule("example_flags"):
        return
    native.cc_library(
        name = "example_flags",
        srcs = ["example_flags.cc"],
        hdrs = ["example_flags.h"],
        deps = [
            "//client:reducer_client",
            "@system//:absl_flags",
            "@system//:absl_status",
            "@system//:absl_strings",
        ],
    )

def example_worker(name, deps = []):
    """A cc_binary of NAME.cc, visible everywhere (tests run the examples),
    linking the examples' flags, the client library and Abseil's flags,
    status and strings besides `deps`."""
    _example_flags()
    native.cc_binary(
        name = name,
        srcs = [name + ".cc"],
        visibility = ["//visibility:public"],
        deps = deps + [d for d in _EXAMPLE_DEPS if d not in deps],
    )
