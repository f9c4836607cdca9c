#!/usr/bin/env bash
# The reducer wheel, installed as a user on a machine without Reducer
# would: python/build_wheel.sh makes it; a bare Debian 12 root with only
# Python (python3, python3-venv) gets a venv with pip's torch 2.15 and then
# the wheel; two ranks in that root train examples/torch_ddp.py under
# torchrun against a reducerd on the host (the root shares the host's
# network, so its loopback is the host's). The root has no client library,
# gRPC, protobuf or Abseil of its own: the wheel must carry them.
#
#   packaging/wheel_test.sh [--junit=FILE]
#
# Run as root (debootstrap, chroot, mount), after the project's venv exists
# (tools/pinned_venv.sh python/requirements-dev.txt: the venv in the root
# installs torch from its wheelhouse, offline). The root itself is made
# once and kept as a tarball under ~/.cache/reducer/roots (debootstrap and
# apt download about 70 MB); everything else lives in one temporary
# directory, removed at the end (after unmounting), even on failure.
# --junit writes one test case per step, for .ci/run's count. Exits 0 when
# every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."

# Hard limits of the steps, in seconds.
readonly kBuildLimit=1200
readonly kInstallLimit=600
readonly kServeLimit=30
readonly kTrainLimit=300
readonly kRootCache="${XDG_CACHE_HOME:-$HOME/.cache}/reducer/roots/bookworm-python3.tar"

suite=packaging/wheel_test
source packaging/lib/root_steps.sh "$@"

venv_python="$(tools/pinned_venv.sh python/requirements-dev.txt 2>/dev/null)/bin/python"
wheelhouse="${XDG_CACHE_HOME:-$HOME/.cache}/reducer/wheels"

build() {
  timeout "$kBuildLimit" bazel build //server:reducerd || return 1
  wheel=$(timeout "$kBuildLimit" python/build_wheel.sh --python="$venv_python" "$work/wheels" | tail -1)
  [[ -f "$wheel" ]] || { echo "python/build_wheel.sh made no wheel" >&2; return 1; }
  echo "==> $(basename "$wheel"), $(( $(stat -c %s "$wheel") / 1024 )) KiB"
}

# A bare Debian 12 with python3 and python3-venv: from the cached tarball,
# or made and cached.
python_root() {
  mkdir -p "$rootfs"
  if [[ -f "$kRootCache" ]]; then
    tar -C "$rootfs" -xf "$kRootCache" || return 1
    mount -t proc proc "$rootfs/proc" || return 1
    echo "==> the root from $(basename "$kRootCache"), made $(date -r "$kRootCache" +%F)"
  else
    make_root "$rootfs" || return 1
    timeout "$kInstallLimit" chroot "$rootfs" apt-get update -q || return 1
    timeout "$kInstallLimit" chroot "$rootfs" /bin/sh -c \
      "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv" ||
      return 1
    chroot "$rootfs" apt-get clean
    mkdir -p "$(dirname "$kRootCache")"
    tar -C "$rootfs" --exclude=./proc/* -cf "$kRootCache.tmp" . && mv "$kRootCache.tmp" "$kRootCache"
  fi
  echo "==> $(chroot "$rootfs" python3 --version), $(chroot "$rootfs" dpkg-query -f '.\n' -W | wc -l) packages"
  # What must come from the wheel is nowhere in the root.
  if chroot "$rootfs" /bin/sh -c 'ldconfig -p | grep -E "libgrpc|libprotobuf|libabsl|libreducer"'; then
    echo "the root already has gRPC, protobuf, Abseil or the client library" >&2
    return 1
  fi
  # A machine's own names, as Debian's installer writes them (debootstrap
  # writes no /etc/hosts): torchrun's store and agents use localhost and the
  # host name.
  printf '127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost ip6-loopback\n' \
    "$(hostname)" >"$rootfs/etc/hosts"
  mkdir -p "$rootfs/dev/shm" "$rootfs/wheelhouse" "$rootfs/wheels" "$rootfs/example"
  mount -t tmpfs tmpfs "$rootfs/dev/shm" || return 1
  mount --bind -o ro "$wheelhouse" "$rootfs/wheelhouse" || return 1
  cp "$wheel" "$rootfs/wheels/"
  cp python/requirements-dev.txt "$rootfs/wheels/constraints.txt"
  cp examples/torch_ddp.py "$rootfs/example/"
}

# pip's torch into a fresh venv (from the wheelhouse: the same files the
# package index serves), then the wheel.
install_wheel() {
  timeout "$kInstallLimit" chroot "$rootfs" python3 -m venv /opt/venv || return 1
  timeout "$kInstallLimit" chroot "$rootfs" /opt/venv/bin/pip install -q --no-index \
    --find-links /wheelhouse -c /wheels/constraints.txt torch || return 1
  timeout "$kInstallLimit" chroot "$rootfs" /bin/sh -c \
    "/opt/venv/bin/pip install --no-index --find-links /wheelhouse /wheels/$(basename "$wheel")" ||
    return 1
  echo "==> $(chroot "$rootfs" /opt/venv/bin/pip list 2>/dev/null | grep -E '^(reducer|torch) ' | tr -s ' ' | paste -sd, -)"
  # Every library the extensions need resolves inside the venv (the wheel's
  # reducer.libs, torch's lib) or to the root's base system.
  local missing
  missing=$(chroot "$rootfs" /bin/sh -c \
    'cd /opt/venv/lib/python3*/site-packages && ldd reducer/_reducer*.so' | grep "not found")
  if [[ -n "$missing" ]]; then
    echo "reducer._reducer's libraries are missing: $missing" >&2
    return 1
  fi
  chroot "$rootfs" /bin/sh -c 'cd / && /opt/venv/bin/python -c "import reducer.torch, reducer; print(\"==> imports reducer\", reducer.__version__)"'
}

serve() {
  port=$(free_port)
  bazel-bin/server/reducerd --listen="127.0.0.1:$port" >"$work/reducerd.log" 2>&1 &
  daemon_pid=$!
  await_serving
}

# DDP on 2 ranks in the root; rank 0 prints the parameters' checksum.
train() {
  timeout "$kTrainLimit" chroot "$rootfs" /bin/sh -c \
    "cd /example && REDUCER_TARGET=127.0.0.1:$port /opt/venv/bin/torchrun --nproc_per_node=2 \
       torch_ddp.py --steps=10" >"$work/train.out" 2>&1
  local rc=$?
  cat "$work/train.out"
  [[ $rc -eq 0 ]] || return 1
  echo "==> $(grep -m1 'params sha256=' "$work/train.out")"
  grep -q 'params sha256=' "$work/train.out"
}

step build build
step python_root python_root
step install_wheel install_wheel
step serve serve
step ddp_two_ranks train
finish
