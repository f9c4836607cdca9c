#!/usr/bin/env bash
# Installs, idempotently, every Debian package Reducer's build and tests need.
#
#   tools/setup.sh          build and test packages
#   tools/setup.sh --bench  also what bench/run_bench.py needs beyond the
#                           build's: Open MPI (the benchmarks run under the
#                           project's venv, whose torch brings Gloo)
#   tools/setup.sh --deploy also what deploy/test.sh needs (podman and runc,
#                           CA certificates for the image, python3-venv for
#                           deploy/validate's pinned venv, and kubectl
#                           where the machine has none)
#   tools/setup.sh --python also what tools/install_python.sh needs to build
#                           and install the `reducer` package with pip
#
# Flags combine (tools/setup.sh --bench --deploy).
# Run as root on Debian 12. Packages already present are not reinstalled, and
# apt's lists are refreshed only when something is missing.
set -euo pipefail

build_packages=(
  bazel-bootstrap g++ clang libclang-rt-14-dev pkg-config python3
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev iproute2 procps
  nftables  # tests/campaign: blackholed hosts
  # python/: the extension module and its torch backend, built and tested
  # in the venv of python/requirements-dev.txt (tools/pinned_venv.sh, run by
  # the first build: torch and the rest from the package index)
  pybind11-dev python3-dev python3-venv python3-pip
  # server/ metrics (prometheus-cpp) and the Prometheus server its test scrapes with
  prometheus-cpp-dev prometheus
  libssl-dev openssl  # TLS: SHA-256 of tokens, the client's TLS probe, test certificates
  clang-format  # tools/check_format.sh: changed C++ lines against .clang-format
)
# tools/install_python.sh: pip builds the package offline (no build
# isolation) with these, against the client library found by pkg-config.
# All are build packages too; the list says what the pip build itself needs.
python_packages=(
  python3-pip python3-venv python3-dev g++ pkg-config libabsl-dev
)
# bench/: torch (Gloo) and numpy come from the venv of
# python/requirements-dev.txt, as for the Python tests; the plots are drawn
# only where that Python has matplotlib (it is not pinned).
bench_packages=(openmpi-bin libopenmpi-dev)

packages=("${build_packages[@]}")
# Packaging (packaging/, tests/client_package_test, packaging/deb_test.sh):
# the CMake consumer build, dpkg-shlibdeps, systemd-analyze, debootstrap.
packages+=(cmake make dpkg-dev systemd debootstrap debian-archive-keyring)
# deploy/: podman builds and runs the image with runc; kubectl (Debian's
# kubernetes-client, installed only where no kubectl is present) renders
# the kustomize overlays; deploy/validate runs in a venv of
# /usr/bin/python3 (tools/pinned_venv.sh: python3-venv, whose ensurepip
# brings pip) with the packages of its requirements.txt from the package
# index; deploy/image/torch/build_base.sh installs the PyTorch image's
# packages with Debian's pip (python3-pip).
deploy_packages=(podman runc ca-certificates iproute2 python3 python3-venv python3-pip)
command -v kubectl >/dev/null || deploy_packages+=(kubernetes-client)

for arg in "$@"; do
  case $arg in
    --bench) packages+=("${bench_packages[@]}") ;;
    --deploy) packages+=("${deploy_packages[@]}") ;;
    --python) packages+=("${python_packages[@]}") ;;
    *) echo "usage: $0 [--bench] [--deploy] [--python]" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "tools/setup.sh: missing packages: ${missing[*]}; run as root to install them" >&2
    exit 1
  fi
  echo "tools/setup.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
