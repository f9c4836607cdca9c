"""A repository rule that binds Debian's system libraries through pkg-config.

`system_libs(name = "system")` creates `@system//:<name>` cc_library targets
(for example `@system//:grpc++`) whose link options come from
`pkg-config --libs`. Headers live in /usr/include, which the toolchain already
searches, so the targets carry no include paths.
"""

# Bazel target name -> the pkg-config modules it links, or raw linker flags.
_PKG_CONFIG_LIBS = {
    "grpc++": ["grpc++"],
    "prometheus_core": ["prometheus-cpp-core"],
    "prometheus_pull": ["prometheus-cpp-pull", "prometheus-cpp-core"],
    "protobuf": ["protobuf"],
    "absl_base": ["absl_base"],
    "absl_flags": ["absl_flags", "absl_flags_parse", "absl_flags_usage"],
    "absl_flat_hash_map": ["absl_flat_hash_map"],
    "absl_flat_hash_set": ["absl_flat_hash_set"],
    "absl_random": ["absl_random_random"],
    "absl_span": ["absl_span"],
    "absl_status": ["absl_status", "absl_statusor"],
    "absl_strings": ["absl_strings", "absl_str_format"],
    "absl_synchronization": ["absl_synchronization"],
    "absl_time": ["absl_time"],
    "absl_cleanup": ["absl_cleanup"],
    "gtest": ["gtest"],
    "gmock": ["gmock", "gtest"],
    "benchmark": ["benchmark"],
    "openssl": ["libssl", "libcrypto"],
}

_EXTRA_LIBS = {
    # Debian ships no pkg-config file for gRPC's reflection service.
    "grpc++_reflection": ["-lgrpc++_reflection"],
    "gtest_main": ["-lgtest_main", "-lgtest", "-lpthread"],
    "gmock_main": ["-lgmock_main", "-lgmock", "-lgtest", "-lpthread"],
    "benchmark_main": ["-lbenchmark_main", "-lbenchmark", "-lpthread"],
}

def _pkg_config_libs(ctx, modules):
    result = ctx.execute(["pkg-config", "--libs"] + modules)
    if result.return_code != 0:
        fail("pkg-config --libs %s failed: %s\nRun tools/setup.sh to install the system packages." %
             (" ".join(modules), result.stderr))
    return result.stdout.strip().split(" ")

def _target(name, linkopts):
    return """
cc_library(
    name = "{name}",
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
""".format(name = name, linkopts = repr(linkopts))

# Python's C headers (for extension modules, which do not link libpython):
# each directory `pkg-config --cflags-only-I python3` names is linked into the
# repository and exported as an include path of @system//:python3_headers.
def _python_headers(ctx):
    result = ctx.execute(["pkg-config", "--cflags-only-I", "python3"])
    if result.return_code != 0:
        fail("pkg-config --cflags-only-I python3 failed: %s\nRun tools/setup.sh to install the system packages." %
             result.stderr)
    includes = []
    for i, flag in enumerate(result.stdout.strip().split(" ")):
        if not flag.startswith("-I"):
            continue
        link = "python3_include/%d" % i
        ctx.symlink(flag[2:], link)
        includes.append(link)
    return """
cc_library(
    name = "python3_headers",
    hdrs = glob(["python3_include/**/*.h"]),
    includes = {includes},
    visibility = ["//visibility:public"],
)
""".format(includes = repr(includes))

def _system_libs_impl(ctx):
    if ctx.which("pkg-config") == None:
        fail("pkg-config not found. Run tools/setup.sh to install the system packages.")
    content = ["# Debian system libraries bound through pkg-config (generated)."]
    for name, modules in _PKG_CONFIG_LIBS.items():
        content.append(_target(name, _pkg_config_libs(ctx, modules)))
    for name, flags in _EXTRA_LIBS.items():
        content.append(_target(name, flags))
    content.append(_python_headers(ctx))
    content.append("""
exports_files(["protoc", "grpc_cpp_plugin"], visibility = ["//visibility:public"])
""")
    ctx.file("BUILD", "\n".join(content))
    for tool in ["protoc", "grpc_cpp_plugin"]:
        path = ctx.which(tool)
        if path == None:
            fail("%s not found. Run tools/setup.sh to install the system packages." % tool)
        ctx.symlink(path, tool)

system_libs = repository_rule(
    implementation = _system_libs_impl,
    local = True,
    environ = ["PATH", "PKG_CONFIG_PATH"],
)
