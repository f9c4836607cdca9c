"""A repository rule that binds Debian's system libraries through pkg-config.

`system_libs(name = "system")` creates `@system//:<name>` cc_library targets
(for example `@system//:grpc++`) whose link options come from
`pkg-config --libs`. Headers live in /usr/include, which the toolchain already
searches, so the targets carry no include paths.

Only the libraries reducerd itself links must be present (`tools/setup.sh`
installs them): without one, the repository fails, naming it. The tests'
libraries (_TEST_MODULES: GoogleTest, Google Benchmark, Python's headers;
`tools/setup.sh --test` installs them) may be absent: their targets then
fail only when something being built uses them, saying what to install.
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

# Modules only tests and benchmarks use -> the Debian package that has them.
# A target needing one that pkg-config cannot find (an _EXTRA_LIBS target
# needs the module its name starts with) fails when built.
_TEST_MODULES = {
    "gtest": "libgtest-dev",
    "gmock": "libgmock-dev",
    "benchmark": "libbenchmark-dev",
    "python3": "python3-dev",
}

# The modules pkg-config cannot find, of `modules`.
def _missing_modules(ctx, modules):
    return [m for m in modules if ctx.execute(["pkg-config", "--exists", m]).return_code != 0]

def _pkg_config_libs(ctx, modules):
    result = ctx.execute(["pkg-config", "--libs"] + modules)
    if result.return_code != 0:
        fail("pkg-config --libs %s failed: %s\nRun tools/setup.sh to install the system packages." %
             (" ".join(modules), result.stderr))
    return result.stdout.strip().split(" ")

# A target NAME standing in for one that needs the absent test `modules`:
# building anything that depends on it fails with a message naming the
# packages and `tools/setup.sh --test`.
def _absent_target(name, modules):
    message = "@system//:%s: pkg-config finds no %s; run tools/setup.sh --test (installs %s)" % (
        name,
        " ".join(modules),
        " ".join([_TEST_MODULES[m] for m in modules]),
    )
    return """
genrule(
    name = "{name}_absent",
    outs = ["{name}_absent.cc"],
    cmd = "echo '{message}' >&2; exit 1",
)

cc_library(
    name = "{name}",
    srcs = [":{name}_absent.cc"],
    visibility = ["//visibility:public"],
)
""".format(name = name, message = message)

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
    if _missing_modules(ctx, ["python3"]):
        return _absent_target("python3_headers", ["python3"])
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
    absent = _missing_modules(ctx, _TEST_MODULES.keys())
    for name, modules in _PKG_CONFIG_LIBS.items():
        missing = [m for m in modules if m in absent]
        if missing:
            content.append(_absent_target(name, missing))
        else:
            content.append(_target(name, _pkg_config_libs(ctx, modules)))
    for name, flags in _EXTRA_LIBS.items():
        module = name.split("_")[0]
        if module in absent:
            content.append(_absent_target(name, [module]))
        else:
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
