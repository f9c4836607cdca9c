"""reducer_shared_library: a versioned shared library of cc_library targets.

A cc_binary(linkshared = 1) links its dependencies' archives the usual way:
only object files that something already references are pulled in, and a
library nothing inside references comes out empty. This rule links every
archive of this workspace in the dependencies' closure whole (as alwayslink
would), so the public API is in the library, and lets a version script say
which symbols are exported. System libraries (gRPC, protobuf, Abseil) stay
dynamic dependencies through their link flags.

    reducer_shared_library(
        name = "reducer_client_so",
        soname = "libreducer_client.so.0",
        version_script = "reducer_client.lds",
        deps = ["//client:reducer_client"],
    )

The output is one file named after `soname` plus the full version when
`version` is set (libreducer_client.so.0.1.0).
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _whole_archive(ctx, feature_configuration, cc_toolchain, library):
    """The same archive as `library`, linked whole (alwayslink)."""
    return cc_common.create_library_to_link(
        actions = ctx.actions,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        static_library = library.static_library,
        pic_static_library = library.pic_static_library,
        alwayslink = True,
    )

def _reducer_shared_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )

    linker_inputs = []
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            libraries = []
            for library in linker_input.libraries:
                ours = linker_input.owner.workspace_name == ""
                archive = library.pic_static_library or library.static_library
                if ours and archive:
                    libraries.append(_whole_archive(
                        ctx,
                        feature_configuration,
                        cc_toolchain,
                        library,
                    ))
                else:
                    libraries.append(library)
            linker_inputs.append(cc_common.create_linker_input(
                owner = linker_input.owner,
                libraries = depset(libraries),
                user_link_flags = depset(linker_input.user_link_flags),
                additional_inputs = depset(linker_input.additional_inputs),
            ))

    # "libreducer_client.so.0" -> "reducer_client": cc_common.link names
    # its output lib<name>.so.
    base = ctx.attr.soname.split(".so")[0]
    linking_outputs = cc_common.link(
        actions = ctx.actions,
        name = base[3:] if base.startswith("lib") else base,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        linking_contexts = [cc_common.create_linking_context(
            linker_inputs = depset(linker_inputs),
        )],
        output_type = "dynamic_library",
        user_link_flags = [
            "-Wl,-soname," + ctx.attr.soname,
            "-Wl,--version-script," + ctx.file.version_script.path,
            "-Wl,--no-undefined",
        ],
        additional_inputs = [ctx.file.version_script],
    )
    library = linking_outputs.library_to_link
    linked = library.resolved_symlink_dynamic_library or library.dynamic_library

    name = ctx.attr.soname
    if ctx.attr.version:
        name = ctx.attr.soname.split(".so.")[0] + ".so." + ctx.attr.version
    out = ctx.actions.declare_file(name)
    ctx.actions.symlink(output = out, target_file = linked)
    return [DefaultInfo(
        files = depset([out]),
        runfiles = ctx.runfiles(files = [out]),
    )]

reducer_shared_library = rule(
    implementation = _reducer_shared_library_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "soname": attr.string(mandatory = True),
        "version": attr.string(),
        "version_script": attr.label(allow_single_file = [".lds"], mandatory = True),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
