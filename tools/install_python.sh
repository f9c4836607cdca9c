#!/usr/bin/env bash
# Installs the `reducer` Python package from this clone: the client library
# it is built against, then the package itself with pip (offline; with
# --venv, torch and the build's Python packages come from the package index
# first, where the venv lacks them).
#
#   tools/install_python.sh [--prefix DIR] [--venv DIR]
#
#   --prefix DIR  where the client library's install tree goes (include/reducer,
#                 lib/libreducer_client.so*, lib/pkgconfig/reducer.pc, lib/cmake);
#                 default /usr/local
#   --venv DIR    install the package into the virtual environment DIR,
#                 created if missing (with Debian's python3), with torch from
#                 the package index: what DIR lacks of torch, numpy, pybind11,
#                 setuptools and wheel is installed at the versions
#                 python/requirements-dev.txt pins (a torch DIR already has
#                 is kept, and the backend built against it);
#                 default: into the system python3 (/usr/local/lib/python3*/dist-packages),
#                 without the torch backend unless that python3 has torch 2.15+
#
# Run as root on Debian 12 (tools/setup.sh --python installs what the build
# needs; writing a system prefix needs root too). Idempotent: running it again
# rebuilds and reinstalls both. To remove the package:
#   DIR/bin/pip uninstall reducer                                  (--venv DIR)
#   /usr/bin/python3 -m pip uninstall --break-system-packages reducer  (system)
#
# pip builds in place: python/build/ and python/src/reducer.egg-info/ are
# left in the clone (git- and Bazel-ignored).
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

prefix=/usr/local
venv=
while [[ $# -gt 0 ]]; do
  case $1 in
    --prefix) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; prefix=$2; shift 2 ;;
    --venv) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; venv=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
prefix=$(realpath -m -- "$prefix")
[[ -z $venv ]] || venv=$(realpath -m -- "$venv")

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

say() { echo "install_python.sh: $*" >&2; }

tools/setup.sh --python

say "building the client library's install tree"
bazel build //packaging/client:install_tree
tar_file="$(bazel info bazel-bin)/packaging/client/reducer-client.tar"

say "installing the client library under $prefix"
mkdir -p "$prefix"
# --no-overwrite-dir: existing directories (/usr/local/lib) keep their owner
# and mode.
tar -C "$prefix" --no-same-owner --no-overwrite-dir -xf "$tar_file"
case $prefix in
  /usr|/usr/local)
    # The loader's cache: other programs linking libreducer_client find it.
    # (The extension does not need it: it has an rpath to $prefix/lib.)
    if [[ $(id -u) -eq 0 ]]; then ldconfig; fi ;;
esac
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"

pip_flags=(--no-build-isolation --no-index --root-user-action=ignore)
if [[ -n $venv ]]; then
  if [[ ! -x $venv/bin/python ]]; then
    say "creating the virtual environment $venv"
    /usr/bin/python3 -m venv "$venv"
  fi
  python=$venv/bin/python
  # What the build needs, at the pinned versions; what the venv has is kept.
  build_needs=()
  for module_package in torch:torch numpy:numpy pybind11:pybind11 setuptools:setuptools \
      wheel:wheel; do
    if ! "$python" -c "import ${module_package%%:*}" 2>/dev/null; then
      build_needs+=("${module_package##*:}")
    fi
  done
  if [[ ${#build_needs[@]} -gt 0 ]]; then
    say "installing ${build_needs[*]} into $venv from the package index (torch: about 3 GB)"
    "$python" -m pip install --no-input --root-user-action=ignore \
      -c "$root/python/requirements-dev.txt" "${build_needs[@]}"
  fi
else
  python=/usr/bin/python3
  # Debian 12 marks its Python externally managed (PEP 668). The package goes
  # to /usr/local/lib/python3.*/dist-packages, beside (not over) Debian's
  # packages, and `pip uninstall` removes it again.
  pip_flags+=(--break-system-packages)
fi

say "building and installing the reducer package with $python"
# A reinstall replaces the installed package (pip uninstalls it first).
"$python" -m pip install "${pip_flags[@]}" "$root/python"

# From outside the clone, so that the installed package is the one imported.
(cd / && "$python" -c 'import reducer, reducer._version as v
print(f"install_python.sh: reducer {v.__version__} installed at {reducer.__file__}")')

if [[ -n $venv ]]; then
  cat <<EOF
To use it:
  source $venv/bin/activate
  python -c 'import reducer, reducer.torch; print(reducer.__version__)'
To remove it: $venv/bin/pip uninstall reducer
EOF
else
  cat <<EOF
To use it:
  /usr/bin/python3 -c 'import reducer, reducer.torch; print(reducer.__version__)'
To remove it: /usr/bin/python3 -m pip uninstall --break-system-packages reducer
EOF
fi
