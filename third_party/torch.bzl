"""A repository rule that picks the Python interpreter of the project's
Python tests and finds its torch's C++ headers and libraries, or records
that there are none.

`torch_cc(name = "torch_cc")` creates:
- `@torch_cc//:torch`: compile and link flags for a Python extension that
  subclasses torch's C++ types (c10d::Work): the pybind11 ABI tags torch was
  built with (so the extension shares torch's pybind11 types), the torch
  include directories and the libraries torch, torch_cpu, c10 and
  torch_python; without torch's headers, an empty library.
- `@torch_cc//:defs.bzl`, exporting `HAVE_TORCH_CC` (True when found),
  `TORCH_VERSION` (torch.__version__; empty without) and `PYTHON` (the
  interpreter's path), for BUILD files that build the extension only where
  it can be and for the tests that run Python.

The interpreter is $REDUCER_PYTHON where set; else the venv that
tools/pinned_venv.sh builds from python/requirements-dev.txt (torch from the
package index, pinned), made here the first time (pip downloads about 3 GB
into its cache once). torch's C++ side is found when that interpreter
imports torch and one of torch.utils.cpp_extension's include directories
holds torch/csrc/distributed/c10d/Work.hpp, with the headers' version
(TORCH_VERSION_MAJOR and _MINOR) of the same major.minor as torch.__version__ (pip's torch
ships both). `--repo_env=REDUCER_PYTHON=/usr/bin/python3` runs the tests
under Debian's Python instead, without torch's C++ side unless that Python
has it.
"""

_PROBE = """
import json, os, sys
try:
    import pybind11
    pybind11_include = pybind11.get_include()
except Exception:
    pybind11_include = ""
try:
    import torch
    from torch.utils import cpp_extension
except Exception as e:
    print(json.dumps({"error": "torch cannot be imported: %s" % e,
                      "pybind11_include": pybind11_include}))
    sys.exit(0)
includes = [p for p in cpp_extension.include_paths()
            if os.path.isfile(os.path.join(p, "torch/csrc/distributed/c10d/Work.hpp"))]
if not includes:
    print(json.dumps({"error": "torch's C++ headers are not installed",
                      "pybind11_include": pybind11_include}))
    sys.exit(0)
root = os.path.realpath(includes[0])
# The headers' version: TORCH_VERSION_MAJOR and _MINOR, defined in
# torch/headeronly/version.h from torch 2.9 on, in the C++ API's version.h
# before.
numbers = {}
for header in ("torch/headeronly/version.h", "torch/csrc/api/include/torch/version.h"):
    path = os.path.join(root, header)
    if os.path.isfile(path):
        for line in open(path):
            words = line.split()
            if len(words) == 3 and words[0] == "#define" and words[1] in (
                    "TORCH_VERSION_MAJOR", "TORCH_VERSION_MINOR"):
                numbers.setdefault(words[1], words[2])
header_version = "%s.%s" % (numbers.get("TORCH_VERSION_MAJOR", "?"),
                            numbers.get("TORCH_VERSION_MINOR", "?"))
print(json.dumps({
    "pybind11_include": pybind11_include,
    "version": torch.__version__,
    "header_version": header_version,
    "include": root,
    "api_include": os.path.join(root, "torch/csrc/api/include"),
    "libdirs": [os.path.realpath(p) for p in cpp_extension.library_paths()
                if os.path.isfile(os.path.join(p, "libtorch_python.so"))],
    "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
    # pybind11 2's ABI tags (pybind11 3, in torch 2.15, derives its own from
    # the compiler and standard library, and torch no longer exports them).
    "pybind11_abi": [getattr(torch._C, "_PYBIND11_" + name, None)
                     for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI")],
}))
"""

def _major_minor(version):
    return ".".join(version.split("+")[0].split(".")[:2])

def _pinned_venv_python(ctx):
    """The pinned venv's interpreter, building the venv if needed; fails the
    build, with pip's output, when it cannot be built."""
    script = ctx.path(Label("//tools:pinned_venv.sh"))
    requirements = ctx.path(Label("//python:requirements-dev.txt"))
    ctx.report_progress("the pinned Python venv (python/requirements-dev.txt)")
    result = ctx.execute(["bash", str(script), str(requirements)], timeout = 3600, quiet = False)
    if result.return_code != 0:
        fail("tools/pinned_venv.sh %s failed (exit %d):\n%s" %
             (requirements, result.return_code, result.stderr[-3000:]))
    return result.stdout.strip() + "/bin/python"

def _torch_cc_impl(ctx):
    python = ctx.os.environ.get("REDUCER_PYTHON", "") or _pinned_venv_python(ctx)
    found = None
    pybind11_include = ""
    reason = "%s not found" % python
    if ctx.path(python).exists:
        result = ctx.execute([python, "-c", _PROBE], timeout = 120)
        if result.return_code != 0:
            reason = "the probe failed: " + result.stderr.strip()[-300:].replace("\n", " ")
        else:
            probe = json.decode(result.stdout.strip().splitlines()[-1])
            pybind11_include = probe["pybind11_include"]
            if "error" in probe:
                reason = probe["error"]
            elif _major_minor(probe["header_version"]) != _major_minor(probe["version"]):
                reason = "torch %s but headers of %s" % (probe["version"], probe["header_version"])
            else:
                found = probe
    content = ['# torch\'s C++ side for %s (generated by third_party/torch.bzl).' % python]
    # Header folders are linked into the repository and exported through
    # `includes` (-isystem for every dependent), ahead of /usr/include.
    pybind11_includes = []
    if pybind11_include:
        ctx.symlink(pybind11_include, "pybind11_include")
        pybind11_includes = ["pybind11_include"]
    content.append("""
# The interpreter's pybind11 headers, ahead of Debian's (whose 2.10 predates
# numpy 2's ABI); none: Debian's, found in /usr/include.
cc_library(
    name = "pybind11",
    hdrs = glob(["pybind11_include/**/*.h"]),
    includes = %s,
    visibility = ["//visibility:public"],
)
""" % repr(pybind11_includes))
    if found:
        ctx.symlink(found["include"], "torch_include")
        defines = ["_GLIBCXX_USE_CXX11_ABI=%d" % found["cxx11_abi"]]
        for name, value in zip(["COMPILER_TYPE", "STDLIB", "BUILD_ABI"], found["pybind11_abi"]):
            if value != None:
                defines.append("PYBIND11_%s=\\\"%s\\\"" % (name, value))
        content.append("""
cc_library(
    name = "torch",
    hdrs = glob(["torch_include/**/*.h", "torch_include/**/*.hpp", "torch_include/**/*.cuh"]),
    includes = ["torch_include", "torch_include/torch/csrc/api/include"],
    defines = %s,
    linkopts = %s + ["-ltorch", "-ltorch_cpu", "-lc10", "-ltorch_python"],
    visibility = ["//visibility:public"],
)
""" % (repr(defines),
       str(["-L" + d for d in found["libdirs"]] +
           ["-Wl,-rpath," + d for d in found["libdirs"]])))
    else:
        content.append("""
# None (%s): an empty library, so that targets may depend on it anyway.
cc_library(
    name = "torch",
    visibility = ["//visibility:public"],
)
""" % reason)
    ctx.file("BUILD", "\n".join(content))
    ctx.file("defs.bzl", "\n".join([
        '"""Whether torch\'s C++ side was found (generated by third_party/torch.bzl)."""',
        "HAVE_TORCH_CC = %s" % ("True" if found else "False"),
        'TORCH_VERSION = "%s"' % (found["version"] if found else ""),
        'PYTHON = "%s"' % python,
        "",
    ]))

torch_cc = repository_rule(
    implementation = _torch_cc_impl,
    local = True,
    environ = ["REDUCER_PYTHON"],
)
