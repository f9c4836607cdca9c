#!/usr/bin/env bash
# The reducer Debian package, installed for real: a bare Debian 12 root made
# with `debootstrap --variant=minbase bookworm` from this machine's
# configured Debian mirror, `apt-get install ./reducer_VERSION_amd64.deb` in
# it (apt pulls gRPC, protobuf and Abseil through the package's Depends),
# reducerd started there as an unprivileged user from the installed flag
# file (edited to a free loopback port, as an operator would), two ranks of
# tests/e2e_worker on the host reducing through it (all-reduces of every
# dtype against their closed forms, and a metric sync), then SIGTERM and
# exit 0. The chroot shares the host's network, so its loopback is the
# host's.
#
#   packaging/deb_test.sh [--junit=FILE] [--keep-root=DIR]
#
# Run as root (debootstrap, chroot, mount). Everything it downloads stays
# in one temporary directory, removed at the end (after unmounting), even
# on failure, except with --keep-root=DIR: the root (with the package
# installed, when that step passed) is then moved to DIR, for
# packaging/systemd_test.sh --root=DIR. --junit writes one test case per
# step, for .ci/run's count.
# Prints how long each step took. Exits 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."

# Hard limits of the steps, in seconds (debootstrap's is root_steps.sh's):
# debootstrap and apt download about 60 MB from the mirror.
readonly kInstallLimit=600
readonly kServeLimit=30
readonly kWorkerLimit=120
readonly kStopLimit=30

keep=""
args=()
for arg in "$@"; do
  case $arg in
    --keep-root=*) keep=${arg#--keep-root=} ;;
    *) args+=("$arg") ;;
  esac
done
suite=packaging/deb_test
usage="[--junit=FILE] [--keep-root=DIR]"
# `source` with no arguments would pass on the script's own.
set -- "${args[@]}"
source packaging/lib/root_steps.sh "$@"
keep_root=$keep

build() {
  bazel build //packaging/debian:deb //tests:e2e_worker
}

install_package() {
  cp "$deb" "$rootfs/root/"
  timeout "$kInstallLimit" chroot "$rootfs" apt-get update -q || return 1
  timeout "$kInstallLimit" chroot "$rootfs" /bin/sh -c \
    "cd /root && DEBIAN_FRONTEND=noninteractive apt-get install -y ./$(basename "$deb")" |
    tee "$work/apt.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || return 1
  echo "==> $(grep -E '^[0-9]+ upgraded, [0-9]+ newly installed' "$work/apt.log")"
  chroot "$rootfs" dpkg-query -W -f='${Package} ${Version} ${Status}\n' reducer |
    grep -q "install ok installed" || { echo "reducer is not installed" >&2; return 1; }
  for path in /usr/bin/reducerd /usr/bin/reducerctl /lib/systemd/system/reducerd.service /etc/reducer/reducerd.flags; do
    [[ -e "$rootfs$path" ]] || { echo "the package did not install $path" >&2; return 1; }
  done
  # postinst enables the unit as dh_installsystemd does (systemd itself does
  # not run in the root, so nothing starts).
  if chroot "$rootfs" sh -c 'command -v deb-systemd-helper' >/dev/null; then
    [[ -L "$rootfs/etc/systemd/system/multi-user.target.wants/reducerd.service" ]] ||
      { echo "postinst did not enable reducerd.service" >&2; return 1; }
    echo "==> reducerd.service enabled (multi-user.target.wants)"
  else
    echo "==> no deb-systemd-helper in the root: reducerd.service not enabled"
  fi
  # Every shared library reducerd needs came with the package's Depends.
  if chroot "$rootfs" ldd /usr/bin/reducerd /usr/bin/reducerctl | grep "not found"; then
    echo "libraries missing in the root" >&2
    return 1
  fi
}

serve() {
  port=$(free_port)
  flags="$rootfs/etc/reducer/reducerd.flags"
  sed -i "s/^--listen=.*/--listen=127.0.0.1:$port/" "$flags"
  grep -qx -- "--listen=127.0.0.1:$port" "$flags" || { echo "no --listen line in $flags" >&2; return 1; }
  # nobody:nogroup, as unprivileged as the unit's dynamic user.
  chroot --userspec=65534:65534 "$rootfs" /usr/bin/reducerd \
    --flagfile=/etc/reducer/reducerd.flags >"$work/reducerd.log" 2>&1 &
  daemon_pid=$!
  await_serving "(uid 65534, in the root)"
}

# run_ranks SCENARIO [FLAGS...]: two e2e_worker ranks on the host against
# the chroot's reducerd; both must exit 0 (every result matched).
run_ranks() {
  local scenario=$1; shift
  local pids=() rank rc=0
  for rank in 0 1; do
    timeout "$kWorkerLimit" bazel-bin/tests/e2e_worker --target="127.0.0.1:$port" \
      --job="deb-$scenario" --rank=$rank --world_size=2 --scenario="$scenario" "$@" &
    pids+=($!)
  done
  for rank in 0 1; do
    wait "${pids[$rank]}" || { echo "rank $rank of $scenario failed" >&2; rc=1; }
  done
  return $rc
}

stop() {
  kill -TERM "$daemon_pid"
  local rc
  for _ in $(seq $((kStopLimit * 10))); do
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  wait "$daemon_pid"
  rc=$?
  daemon_pid=""
  cat "$work/reducerd.log"
  [[ $rc -eq 0 ]] || { echo "reducerd exited $rc after SIGTERM" >&2; return 1; }
}

step build build
deb=$(ls -t bazel-bin/packaging/debian/reducer_*_amd64.deb | head -1)
step debootstrap make_root "$rootfs"
step apt_install install_package
step serve_from_flag_file serve
step all_reduce run_ranks all_ops --sizes=1,1000 --big_size=786437 --big_all_pairs=false
step metric_sync run_ranks metric_sync
step reducerctl_health chroot "$rootfs" /usr/bin/reducerctl --target="127.0.0.1:$port" health
step sigterm_exit_0 stop
finish
