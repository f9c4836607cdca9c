"""One macro that generates C++ from .proto files with the system protoc.

reducer_proto_library(name = "reducer", srcs = ["reducer.proto"]) yields
`reducer_cc_proto` (messages) and `reducer_cc_grpc` (service stubs), both
cc_library targets. Generated files sit beside the .proto in the output tree,
so they are included by workspace path (`proto/reducer/v1/reducer.pb.h`).
"""

def reducer_proto_library(name, srcs, deps = [], visibility = None):
    """Generates `<name>_cc_proto` and `<name>_cc_grpc` from `srcs`.

    Args:
      name: base name of the generated targets.
      srcs: .proto files in this package.
      deps: other `<x>_cc_proto` targets whose .proto files these import.
      visibility: visibility of the generated libraries.
    """
    stems = [s[:-len(".proto")] for s in srcs]
    pb_h = [s + ".pb.h" for s in stems]
    pb_cc = [s + ".pb.cc" for s in stems]
    grpc_h = [s + ".grpc.pb.h" for s in stems]
    grpc_cc = [s + ".grpc.pb.cc" for s in stems]
    native.genrule(
        name = name + "_codegen",
        srcs = srcs,
        outs = pb_h + pb_cc + grpc_h + grpc_cc,
        tools = ["@system//:protoc", "@system//:grpc_cpp_plugin"],
        cmd = " ".join([
            "$(location @system//:protoc)",
            "-I.",
            "-I/usr/include",
            "--cpp_out=$(GENDIR)",
            "--grpc_out=$(GENDIR)",
            "--plugin=protoc-gen-grpc=$(location @system//:grpc_cpp_plugin)",
        ] + ["$(location %s)" % s for s in srcs]),
    )
    native.cc_library(
        name = name + "_cc_proto",
        srcs = pb_cc,
        hdrs = pb_h,
        deps = deps + ["@system//:protobuf"],
        visibility = visibility,
    )
    native.cc_library(
        name = name + "_cc_grpc",
        srcs = grpc_cc,
        hdrs = grpc_h,
        deps = [
            ":" + name + "_cc_proto",
            "@system//:grpc++",
        ],
        visibility = visibility,
    )
