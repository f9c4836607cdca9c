#!/usr/bin/env bash
# Installs, idempotently, the Debian packages a Reducer command needs.
#
#   tools/setup.sh          what `bazel build` / `bazel run //server:reducerd`
#                           needs: Bazel 4, g++, pkg-config, gRPC, protobuf,
#                           Abseil, prometheus-cpp and OpenSSL's headers
#   tools/setup.sh --test   also what `bazel test //...` needs (tools/test.sh
#                           passes it): GoogleTest, Google Benchmark, Python's
#                           headers, venv and pip, pybind11, the Prometheus
#                           server and promtool, openssl, iproute2, procps,
#                           nftables, cmake, make, dpkg-dev, systemd
#   tools/setup.sh --ci     also what .ci/run's own stages need beyond the
#                           tests': clang and its sanitizer runtimes,
#                           clang-format, debootstrap, systemd-container
#   tools/setup.sh --bench  also what bench/run.sh needs beyond the build's:
#                           Open MPI, Google Benchmark, python3-venv (the
#                           benchmarks run under the project's venv, whose
#                           torch brings Gloo)
#   tools/setup.sh --deploy also what deploy/test.sh needs (podman and runc,
#                           CA certificates for the image, python3-venv for
#                           deploy/validate's pinned venv, and kubectl
#                           where the machine has none)
#   tools/setup.sh --python also what tools/install_python.sh needs to build
#                           and install the `reducer` package with pip
#
# Flags combine (tools/setup.sh --test --ci). Run as root on Debian 12.
# Packages already present are not reinstalled, and apt's lists are
# refreshed only when something is missing.
#
# Nothing it installs starts a service: while apt runs, a policy-rc.d
# refuses every start (invoke-rc.d and deb-systemd-invoke ask it), and
# afterwards the services, sockets and timers of the packages it newly
# installed (Debian's prometheus, for one, would serve on port 9090 from
# every boot) are stopped and disabled, systemd's and SysV init's.
set -euo pipefail

# The workspace's pkg-config repository (third_party/system_libs.bzl) needs
# every library reducerd links; the tests' libraries are --test's.
build_packages=(
  bazel-bootstrap g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev
  prometheus-cpp-dev  # server/metrics
  libssl-dev          # SHA-256 of tokens
)
test_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev iproute2 procps
  nftables  # tests/campaign: blackholed hosts
  # python/: the extension module and its torch backend, built and tested
  # in the venv of python/requirements-dev.txt (tools/pinned_venv.sh, run by
  # the first build: torch and the rest from the package index)
  pybind11-dev python3 python3-dev python3-venv python3-pip
  # tests/observability_test: the Prometheus server (/usr/bin/prometheus)
  # scrapes reducerd, promtool checks a scrape. Its service stays disabled.
  prometheus
  openssl  # tests/make_test_certs.sh
  # Packaging (//packaging/debian:deb_contents_test,
  # tests/client_package_test): dpkg-shlibdeps, systemd-analyze, the
  # CMake consumer build.
  dpkg-dev systemd cmake make
)
# .ci/run: the clang thread-safety build and the fuzzers (clang, its
# sanitizer runtimes), tools/check_format.sh, packaging/deb_test.sh and
# wheel_test.sh (debootstrap), packaging/systemd_test.sh (systemd-nspawn).
ci_packages=(
  clang libclang-rt-14-dev clang-format
  debootstrap debian-archive-keyring systemd-container
)
# tools/install_python.sh: pip builds the package offline (no build
# isolation) with these, against the client library found by pkg-config.
python_packages=(
  python3-pip python3-venv python3-dev g++ pkg-config libabsl-dev
)
# bench/: torch (Gloo) and numpy come from the venv of
# python/requirements-dev.txt, as for the Python tests (tools/pinned_venv.sh:
# python3-venv, pip); the plots are drawn only where that Python has
# matplotlib (it is not pinned). //bench:reduce_kernel_bench links Google
# Benchmark.
bench_packages=(openmpi-bin libopenmpi-dev libbenchmark-dev python3-venv python3-pip)
# deploy/: podman builds and runs the image with runc; kubectl (Debian's
# kubernetes-client, installed only where no kubectl is present) renders
# the kustomize overlays; deploy/validate runs in a venv of
# /usr/bin/python3 (tools/pinned_venv.sh: python3-venv, whose ensurepip
# brings pip) with the packages of its requirements.txt from the package
# index; deploy/image/torch/build_base.sh installs the PyTorch image's
# packages with Debian's pip (python3-pip).
deploy_packages=(podman runc ca-certificates iproute2 python3 python3-venv python3-pip)
command -v kubectl >/dev/null || deploy_packages+=(kubernetes-client)

packages=("${build_packages[@]}")
for arg in "$@"; do
  case $arg in
    --test) packages+=("${test_packages[@]}") ;;
    --ci) packages+=("${ci_packages[@]}") ;;
    --bench) packages+=("${bench_packages[@]}") ;;
    --deploy) packages+=("${deploy_packages[@]}") ;;
    --python) packages+=("${python_packages[@]}") ;;
    *) echo "usage: $0 [--test] [--ci] [--bench] [--deploy] [--python]" >&2; exit 2 ;;
  esac
done

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "tools/setup.sh: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi
# A missing package named twice (python3-venv is --test's and --deploy's)
# is one.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

# The packages dpkg has installed, one per line, sorted.
installed_list() {
  dpkg-query -W -f='${Package} ${Status}\n' | awk '$NF == "installed" { print $1 }' | sort
}

# Every service start during the install is refused (exit 101): ours
# replaces any policy-rc.d there was, which is put back afterwards.
readonly policy=/usr/sbin/policy-rc.d
readonly saved_policy=/usr/sbin/policy-rc.d.reducer-setup
restore_policy() {
  if [[ -e $saved_policy ]]; then
    mv -f "$saved_policy" "$policy"
  else
    rm -f "$policy"
  fi
}
[[ -e $policy ]] && mv -f "$policy" "$saved_policy"
trap restore_policy EXIT
printf '#!/bin/sh\n# tools/setup.sh: no service starts while it installs packages.\nexit 101\n' >"$policy"
chmod 0755 "$policy"

before=$(installed_list)
echo "tools/setup.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
new_packages=$(comm -13 <(echo "$before") <(installed_list))

# disable_services PACKAGE: stops and disables the systemd units (services,
# sockets, timers, paths) and SysV init scripts PACKAGE installed, where
# its maintainer scripts enabled them.
disable_services() {
  local file unit name
  while read -r file; do
    case $file in
      /lib/systemd/system/*.service | /lib/systemd/system/*.socket | \
        /lib/systemd/system/*.timer | /lib/systemd/system/*.path | \
        /usr/lib/systemd/system/*.service | /usr/lib/systemd/system/*.socket | \
        /usr/lib/systemd/system/*.timer | /usr/lib/systemd/system/*.path)
        unit=$(basename "$file")
        command -v systemctl >/dev/null || continue
        [[ $unit == *@* ]] && continue  # templates are enabled per instance
        if [[ -d /run/systemd/system ]] && systemctl --quiet is-active "$unit" 2>/dev/null; then
          systemctl stop "$unit"
        fi
        if [[ $(systemctl is-enabled "$unit" 2>/dev/null) == enabled ]]; then
          systemctl --quiet disable "$unit"
          echo "tools/setup.sh: disabled $unit (from $1)" >&2
        fi
        ;;
      /etc/init.d/*)
        name=$(basename "$file")
        # Its rc links exist where the postinst ran update-rc.d defaults.
        if compgen -G "/etc/rc[2-5].d/S[0-9][0-9]$name" >/dev/null; then
          update-rc.d "$name" disable >/dev/null 2>&1
          echo "tools/setup.sh: disabled /etc/init.d/$name (from $1)" >&2
        fi
        ;;
    esac
  done < <(dpkg-query -L "$1" 2>/dev/null)
}
for p in $new_packages; do
  disable_services "$p"
done
