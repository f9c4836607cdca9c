#!/usr/bin/env bash
# //tests/python:pip_install_test: `pip install ./python` as a user runs it, offline,
# against the client library's install tree, into a fresh venv.
#
#   pip_install_test.sh INSTALL_TREE_TAR VERSION PYTHON     (from the sh_test)
#
# 1. Extracts the tar into $TEST_TMPDIR/prefix and copies python/'s pip
#    sources into $TEST_TMPDIR/src (pip builds in place; runfiles stay as
#    they are).
# 2. Creates a venv (/usr/bin/python3) that also sees the packages of
#    PYTHON's venv (the project's: pip's torch, numpy, pytest, setuptools,
#    pybind11; through a .pth file, as if installed there, without copying
#    3 GB) and pip installs the package into it with
#    PKG_CONFIG_PATH=prefix/lib/pkgconfig, reducer._torch_c against that torch.
# 3. From a directory outside the sources, runs tests/python/pip_install_test.py
#    with the venv's python: where the package comes from, __version__, the
#    rpath, a 2-rank all_reduce against reducerd, the torch backend.
# 4. pip uninstall: `import reducer` is as before the install (fails, unless
#    the machine's Python has a reducer of its own), and nothing named
#    reducer* is left in the venv's site-packages.
# 5. With no reducer.pc on pkg-config's path, pip install fails with
#    setup.py's message.
# Every step that could hang has a timeout. Exit code 0 = pass.
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 INSTALL_TREE_TAR VERSION PYTHON" >&2
  exit 2
fi
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
tar_file="${root}/$1"
bazel_version=$2
project_python=$3

step() { echo "=== pip_install_test: $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# Hermetic pip and Python: caches under TEST_TMPDIR (HOME may be unset or
# read-only), no index, no config file or PIP_* setting of the machine, no
# user site-packages, no library path.
while read -r var; do unset "$var"; done < <(compgen -e | grep '^PIP_' || true)
unset PYTHONPATH PYTHONHOME LD_LIBRARY_PATH PKG_CONFIG_PATH PKG_CONFIG_LIBDIR
export HOME="${TEST_TMPDIR}/home"
export XDG_CACHE_HOME="${TEST_TMPDIR}/cache"
export PIP_CACHE_DIR="${TEST_TMPDIR}/cache/pip"
export PIP_CONFIG_FILE=/dev/null
export PIP_NO_INDEX=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PIP_NO_INPUT=1
export PYTHONNOUSERSITE=1
mkdir -p "$HOME" "$PIP_CACHE_DIR"

prefix="${TEST_TMPDIR}/prefix"
src="${TEST_TMPDIR}/src"
venv="${TEST_TMPDIR}/venv"
elsewhere="${TEST_TMPDIR}/elsewhere"
rm -rf "$prefix" "$src" "$venv" "$elsewhere"
mkdir -p "$prefix" "$src" "$elsewhere"

step "1. install tree and sources"
tar -C "$prefix" -xf "$tar_file"
pc_version=$(sed -n 's/^Version: *//p' "$prefix/lib/pkgconfig/reducer.pc")
[[ -n $pc_version ]] || fail "no Version in the install tree's reducer.pc"
[[ $pc_version == "$bazel_version" ]] ||
  fail "reducer.pc says $pc_version, packaging/version.bzl $bazel_version"
cp -rL "$root/python/pyproject.toml" "$root/python/setup.py" "$root/python/src" \
  "$root/python/csrc" "$src/"
chmod -R u+w "$src"

step "2. venv and pip install"
timeout 120 /usr/bin/python3 -m venv "$venv"
python="$venv/bin/python"
"$project_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
  >"$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/project-venv.pth"
# What `import reducer` finds without the package: normally nothing.
import_origin() {
  (cd "$elsewhere" && timeout 60 "$python" -c \
    'import importlib.util as u; s = u.find_spec("reducer"); print(s.origin if s else "none")')
}
before=$(import_origin)
[[ $before == none ]] || echo "note: the machine's Python has a reducer of its own: $before"
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" timeout 600 \
  "$python" -m pip install --no-build-isolation --no-index "$src"

step "3. the installed package, from outside the sources"
(
  cd "$elsewhere"
  export REDUCER_VENV="$venv" REDUCER_PREFIX="$prefix" REDUCER_EXPECTED_VERSION="$pc_version"
  export REDUCERD="$root/server/reducerd"
  export PYTHONPATH="$root/tests/python"  # the test helpers only
  export PYTHONDONTWRITEBYTECODE=1
  timeout 300 "$python" -m pytest -p no:cacheprovider -q -ra \
    "$root/tests/python/pip_install_test.py"
)

step "4. pip uninstall"
site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
platsite=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
timeout 120 "$python" -m pip uninstall -y reducer
after=$(import_origin)
[[ $after == "$before" ]] || fail "after pip uninstall, import reducer finds $after"
left=$(find "$site" "$platsite" -maxdepth 1 -iname 'reducer*')
[[ -z $left ]] || fail "pip uninstall left: $left"

step "5. pip install without the client library"
nowhere="${TEST_TMPDIR}/nowhere"
log="${TEST_TMPDIR}/pip-install-without-library.log"
# PKG_CONFIG_LIBDIR too: pkg-config's default path must not find a reducer.pc
# installed on the machine.
if PKG_CONFIG_PATH="$nowhere" PKG_CONFIG_LIBDIR="$nowhere" timeout 300 \
  "$python" -m pip install --no-build-isolation --no-index "$src" >"$log" 2>&1; then
  cat "$log"
  fail "pip install succeeded without reducer.pc"
fi
grep -q "pkg-config cannot find the Reducer client library" "$log" ||
  { cat "$log"; fail "pip install failed without setup.py's message"; }
grep -q "tools/install_python.sh" "$log" ||
  { cat "$log"; fail "setup.py's message does not name tools/install_python.sh"; }
[[ $(import_origin) == "$before" ]] || fail "the failed pip install installed something"

echo "PASS"
