#!/usr/bin/env bash
# The reducer Debian package's systemd unit under a real systemd: a Debian
# 12 root with the package and systemd installed, booted with
# `systemd-nspawn --boot` (systemd as PID 1 in its own PID namespace,
# sharing the host's network), then, all inside it:
#   - reducerd.service, enabled by the package, started at boot
#     (Type=notify: active once reducerd said READY=1);
#   - it serves TLS whose files are root's alone in /etc/reducer/credentials
#     and reach reducerd, a dynamic user, only through LoadCredential=
#     ($CREDENTIALS_DIRECTORY), with job tokens from /etc/reducer/job_tokens,
#     readable by the group reducer-tokens reducerd joins and by no other
#     user: reducerctl status with the token answers, a wrong token is
#     refused;
#   - the same-host path works for a worker running as uid 1000, the uid
#     docs/packaging.md tells users to admit (two ranks of
#     tests/fault_worker with --shared_memory=required, every all-reduce
#     equal to its closed form, and reducerd's journal naming their uid);
#   - a job's line added to /etc/reducer/job_tokens, then `systemctl
#     reload`: the same reducerd (MainPID) serves the new job's token at
#     once, in reducerctl status and a fault_worker all-reduce, the first
#     token still works, and its journal says what it re-read;
#   - `systemctl stop` drains it: exit status 0, Result=success.
#
#   packaging/systemd_test.sh [--root=DIR] [--junit=FILE]
#
# --root=DIR takes over a root where packaging/deb_test.sh --keep-root=DIR
# installed the package (it is moved here and removed at the end); without
# it, or when DIR holds no installed package, the test makes its own root
# with debootstrap as deb_test.sh does. Run as root on Debian 12 with
# systemd-container and debootstrap (tools/setup.sh --ci). Everything stays
# in one temporary directory, removed at the end (after the container is
# powered off), even on failure. --junit writes one test case per step.
# Prints how long each step took. Exits 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."

# Hard limits, in seconds, of the steps that wait.
readonly kInstallLimit=600
readonly kBootLimit=90
readonly kWorkerLimit=120
readonly kStopLimit=40
# The uid docs/packaging.md's --shared_memory_allowed_uids example admits.
readonly kWorkerUid=1000
readonly kCaInRoot=/usr/local/share/reducer-test/ca.pem

reuse_root=""
args=()
for arg in "$@"; do
  case $arg in
    --root=*) reuse_root=${arg#--root=} ;;
    *) args+=("$arg") ;;
  esac
done
suite=packaging/systemd_test
usage="[--root=DIR] [--junit=FILE]"
# `source` with no arguments would pass on the script's own.
set -- "${args[@]}"
source packaging/lib/root_steps.sh "$@"
planned_steps=(build root systemd_in_root configure boot unit_started_at_boot
  serves_tls_with_tokens same_host_as_uid_$kWorkerUid reload_takes_new_token stop_exit_0)

nspawn_pid=""
leader=""
# Powers the container off (systemd-nspawn turns SIGTERM into an orderly
# shutdown), killing it only when that takes too long; then root_steps.sh's
# cleanup unmounts and removes everything.
stop_container() {
  [[ -n "$nspawn_pid" ]] || return 0
  kill -TERM "$nspawn_pid" 2>/dev/null
  for _ in $(seq 300); do
    kill -0 "$nspawn_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$nspawn_pid" 2>/dev/null
  wait "$nspawn_pid" 2>/dev/null
  nspawn_pid=""
}
trap 'stop_container; cleanup' EXIT

# in_container COMMAND...: runs COMMAND in the container's namespaces, as
# root (its systemctl talks to the container's systemd).
in_container() {
  nsenter --target "$leader" --all "$@"
}
# as_worker COMMAND...: the same as uid/gid kWorkerUid, no other groups.
as_worker() {
  in_container setpriv --reuid="$kWorkerUid" --regid="$kWorkerUid" --clear-groups "$@"
}

build() {
  bazel build //packaging/debian:deb //tests:fault_worker
}

installed_in() {
  chroot "$1" dpkg-query -W -f='${Status}' reducer 2>/dev/null | grep -q "install ok installed"
}

# The root: deb_test.sh's, when given and the package is installed there;
# else a new one. Either way the package just built is (re)installed.
root() {
  if [[ -n "$reuse_root" && -d "$reuse_root" ]] && installed_in "$reuse_root"; then
    unmount_root "$reuse_root"
    mv "$reuse_root" "$rootfs" || return 1
    mount -t proc proc "$rootfs/proc"
    echo "==> packaging/deb_test.sh's root, with the package installed"
  else
    [[ -z "$reuse_root" ]] || echo "no root with the package at $reuse_root; making one"
    make_root "$rootfs" || return 1
    timeout "$kInstallLimit" chroot "$rootfs" apt-get update -q || return 1
  fi
  cp "$deb" "$rootfs/root/"
  timeout "$kInstallLimit" chroot "$rootfs" /bin/sh -c \
    "cd /root && DEBIAN_FRONTEND=noninteractive apt-get install -y --reinstall ./$(basename "$deb")" ||
    return 1
  installed_in "$rootfs" || { echo "reducer is not installed" >&2; return 1; }
}

# systemd as the root's init. The package enabled reducerd.service when it
# was installed (deb-systemd-helper), so systemd starts it at boot.
systemd_in_root() {
  timeout "$kInstallLimit" chroot "$rootfs" /bin/sh -c \
    "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd systemd-sysv" ||
    return 1
  [[ -L "$rootfs/etc/systemd/system/multi-user.target.wants/reducerd.service" ]] ||
    { echo "reducerd.service is not enabled in the root" >&2; return 1; }
  echo "==> $(chroot "$rootfs" systemctl --version | head -1); reducerd.service enabled by the package"
  umount "$rootfs/proc"  # the container mounts its own
}

# A line of the job tokens file: JOB SHA256_OF_TOKEN.
token_line() {
  echo "$1 $(printf %s "$2" | sha256sum | cut -d' ' -f1)"
}

# The flag file as an operator following docs/packaging.md writes it (a
# free loopback port, TLS from /etc/reducer/credentials, job tokens from
# /etc/reducer/job_tokens, the same-host path for kWorkerUid), the
# credential files (root's alone), the tokens file (root's, group
# reducer-tokens, 0640), the CA for clients, and the test worker. The
# tokens file's second line is a comment as long as the line that
# reload_takes_new_token writes over it.
configure() {
  local certs="$work/certs" credentials="$rootfs/etc/reducer/credentials"
  port=$(free_port)
  job="systemd-test"
  token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  new_job="systemd-test-added"
  new_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  tests/make_test_certs.sh "$certs" >/dev/null || return 1
  [[ -d "$credentials" ]] || { echo "the package did not make $credentials" >&2; return 1; }
  install -m 0600 "$certs/server.pem" "$credentials/tls.crt"
  install -m 0600 "$certs/server.key" "$credentials/tls.key"
  local new_line placeholder
  new_line=$(token_line "$new_job" "$new_token")
  placeholder=$(printf '%*s' "${#new_line}" '' | tr ' ' '#')
  printf '%s\n%s\n' "$(token_line "$job" "$token")" "$placeholder" >"$rootfs/etc/reducer/job_tokens"
  chroot "$rootfs" chown root:reducer-tokens /etc/reducer/job_tokens || return 1
  chmod 0640 "$rootfs/etc/reducer/job_tokens"
  install -D -m 0644 "$certs/ca.pem" "$rootfs$kCaInRoot"
  install -m 0755 bazel-bin/tests/fault_worker "$rootfs/usr/local/bin/fault_worker"
  local flags="$rootfs/etc/reducer/reducerd.flags"
  sed -i "s/^--listen=.*/--listen=127.0.0.1:$port/" "$flags"
  grep -qx -- "--listen=127.0.0.1:$port" "$flags" || { echo "no --listen line in $flags" >&2; return 1; }
  # The flag file's own commented examples, switched on.
  sed -i -e "s/^#--shared_memory_allowed_uids=.*/--shared_memory_allowed_uids=$kWorkerUid/" \
    -e 's/^#\(--tls_cert_file=reducer_tls.crt\)$/\1/' \
    -e 's/^#\(--tls_key_file=reducer_tls.key\)$/\1/' \
    -e 's|^#\(--job_tokens_file=/etc/reducer/job_tokens\)$|\1|' "$flags"
  local line
  for line in "--shared_memory_allowed_uids=$kWorkerUid" --tls_cert_file=reducer_tls.crt \
      --tls_key_file=reducer_tls.key --job_tokens_file=/etc/reducer/job_tokens; do
    grep -qx -- "$line" "$flags" || { echo "$flags has no example line for $line" >&2; return 1; }
  done
  echo "==> 127.0.0.1:$port, TLS from /etc/reducer/credentials, job tokens from /etc/reducer/job_tokens, same-host path for uid $kWorkerUid"
}

boot() {
  local options=(--quiet --directory="$rootfs" --boot --machine="reducer-test-$$" --console=pipe)
  # Without systemd on the host there is no machined to register with and
  # no unit manager to make a scope: the container stays in this one.
  [[ -d /run/systemd/system ]] || options+=(--register=no --keep-unit)
  systemd-nspawn "${options[@]}" </dev/null >"$work/console.log" 2>&1 &
  nspawn_pid=$!
  # The container's PID 1 is systemd-nspawn's child once it ran systemd.
  local child=""
  for _ in $(seq 100); do
    child=$(ps -o pid= --ppid "$nspawn_pid" | head -1 | tr -d ' ')
    [[ -n "$child" && "$(cat "/proc/$child/comm" 2>/dev/null)" == systemd ]] && break
    kill -0 "$nspawn_pid" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n "$child" && "$(cat "/proc/$child/comm" 2>/dev/null)" == systemd ]] && leader=$child
  if [[ -z "$leader" ]]; then
    echo "systemd-nspawn started no systemd:" >&2
    cat "$work/console.log" >&2
    return 1
  fi
  # is-system-running says "initializing", then "starting", until the boot
  # is done; before systemd listens, systemctl cannot connect at all.
  local state=""
  for _ in $(seq $((kBootLimit * 5))); do
    state=$(in_container systemctl is-system-running 2>/dev/null)
    [[ $state == running || $state == degraded ]] && break
    kill -0 "$nspawn_pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "==> systemd booted as PID 1 of the container: ${state:-no answer}"
  if [[ $state != running ]]; then
    in_container systemctl --failed --no-pager
    [[ $state == degraded ]] || { tail -30 "$work/console.log"; return 1; }
  fi
}

# reducerd.service came up at boot and told systemd it serves.
unit_started_at_boot() {
  local active status pid uid
  active=$(in_container systemctl is-active reducerd.service)
  status=$(in_container systemctl show -P StatusText reducerd.service)
  pid=$(in_container systemctl show -P MainPID reducerd.service)
  in_container journalctl -b -u reducerd.service --no-pager
  [[ $active == active ]] || { echo "reducerd.service is $active" >&2; return 1; }
  [[ $status == "serving on 127.0.0.1:$port" ]] ||
    { echo "status '$status', want 'serving on 127.0.0.1:$port'" >&2; return 1; }
  uid=$(in_container awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
  echo "==> reducerd.service active since boot (pid $pid, dynamic uid $uid): $status"
  ((uid != 0)) || { echo "reducerd runs as root" >&2; return 1; }
}

# TLS with the certificate reducerd read from its credentials, and the
# tokens it read from /etc/reducer/job_tokens.
serves_tls_with_tokens() {
  local ctl=(/usr/bin/reducerctl --target="127.0.0.1:$port" --tls_ca_file="$kCaInRoot")
  as_worker "${ctl[@]}" --token="$token" status || return 1
  echo "==> reducerctl status over TLS with the job's token: exit 0"
  local refused
  refused=$(as_worker "${ctl[@]}" --token=not-the-token status 2>&1) &&
    { echo "a wrong token was accepted: $refused" >&2; return 1; }
  grep -q UNAUTHENTICATED <<<"$refused" || { echo "wrong token: $refused" >&2; return 1; }
  echo "==> a wrong token: UNAUTHENTICATED"
  # The files stay root's: reducerd (a dynamic user) reads its copies of
  # the credentials, and the tokens file through its group alone.
  as_worker cat /etc/reducer/credentials/tls.key >/dev/null 2>&1 &&
    { echo "/etc/reducer/credentials/tls.key is readable by uid $kWorkerUid" >&2; return 1; }
  as_worker cat /etc/reducer/job_tokens >/dev/null 2>&1 &&
    { echo "/etc/reducer/job_tokens is readable by uid $kWorkerUid" >&2; return 1; }
  local mode
  mode=$(in_container stat -c '%a %U:%G' /etc/reducer/job_tokens)
  [[ $mode == "640 root:reducer-tokens" ]] ||
    { echo "/etc/reducer/job_tokens is $mode, want 640 root:reducer-tokens" >&2; return 1; }
  return 0
}

# Two ranks as kWorkerUid that must use the same-host path.
same_host() {
  local rank pids=() rc=0 out
  for rank in 0 1; do
    timeout "$kWorkerLimit" nsenter --target "$leader" --all \
      setpriv --reuid="$kWorkerUid" --regid="$kWorkerUid" --clear-groups \
      /usr/local/bin/fault_worker --target="127.0.0.1:$port" --job="$job" --rank=$rank \
      --world_size=2 --shared_memory=required --tls_ca_file="$kCaInRoot" --token="$token" \
      --steps='allreduce:shape=1000;allreduce:dtype=int64,shape=77;allreduce:shape=786437' \
      >"$work/rank$rank.out" 2>&1 &
    pids+=($!)
  done
  for rank in 0 1; do
    wait "${pids[$rank]}" || { echo "rank $rank exited $?" >&2; rc=1; }
    out="$work/rank$rank.out"
    cat "$out"
    # The connect and three all-reduces, each OK, each result its closed form.
    [[ $(grep -c '^RESULT .* code=OK ' "$out") -eq 4 && $(grep -c 'check=ok' "$out") -eq 3 ]] ||
      { echo "rank $rank: not every call OK and equal to its closed form" >&2; rc=1; }
  done
  local sessions
  sessions=$(in_container journalctl -u reducerd.service --no-pager |
    grep -c "same-host session of job $job rank [01] started (pid [0-9]*, uid $kWorkerUid,")
  [[ $sessions -eq 2 ]] ||
    { echo "reducerd's journal shows $sessions same-host sessions of uid $kWorkerUid, want 2" >&2; rc=1; }
  [[ $rc -eq 0 ]] && echo "==> 2 ranks as uid $kWorkerUid on the same-host path: 3 all-reduces each, closed forms"
  return $rc
}

# A job added to the tokens file is served after `systemctl reload`, by
# the same reducerd. Its line is written in place over the comment of its
# length and the file's modification time set back, so that the file keeps
# the inode, size and mtime reducerd's own once-a-second look compares:
# only the reload can take it.
reload_takes_new_token() {
  local file="$rootfs/etc/reducer/job_tokens" before after stamp refused
  local ctl=(/usr/bin/reducerctl --target="127.0.0.1:$port" --tls_ca_file="$kCaInRoot")
  before=$(in_container systemctl show -P MainPID reducerd.service)
  stamp=$(stat -c '%i %s %y' "$file")
  touch -r "$file" "$work/job_tokens.stamp"
  local first_line
  first_line=$(head -1 "$file")
  token_line "$new_job" "$new_token" | tr -d '\n' |
    dd of="$file" bs=1 seek=$((${#first_line} + 1)) conv=notrunc status=none || return 1
  touch -r "$work/job_tokens.stamp" "$file"
  [[ $(stat -c '%i %s %y' "$file") == "$stamp" ]] ||
    { echo "the tokens file changed inode, size or mtime: $stamp, now $(stat -c '%i %s %y' "$file")" >&2; return 1; }
  grep -qx "$(token_line "$new_job" "$new_token")" "$file" || { cat "$file"; return 1; }
  # Past reducerd's own refresh interval (1 s): it looked, and saw no change.
  sleep 1.5
  refused=$(as_worker "${ctl[@]}" --token="$new_token" status 2>&1) &&
    { echo "the new token was accepted before the reload: $refused" >&2; return 1; }
  grep -q UNAUTHENTICATED <<<"$refused" || { echo "new token before reload: $refused" >&2; return 1; }

  in_container systemctl reload reducerd.service || { echo "systemctl reload failed" >&2; return 1; }
  # systemctl reload returns once the signal is sent (ExecReload= is kill):
  # wait for reducerd's line saying what it re-read, and for active again.
  local want="reload: re-read --job_tokens_file /etc/reducer/job_tokens: 2 jobs" logged="" active=""
  for _ in $(seq 50); do
    logged=$(in_container journalctl -u reducerd.service --no-pager -o cat | grep -F "$want")
    active=$(in_container systemctl is-active reducerd.service)
    [[ -n "$logged" && $active == active ]] && break
    sleep 0.2
  done
  in_container journalctl -u reducerd.service --no-pager -n 3
  [[ -n "$logged" ]] || { echo "no journal line '$want'" >&2; return 1; }
  [[ $active == active ]] || { echo "reducerd.service is $active after the reload" >&2; return 1; }
  after=$(in_container systemctl show -P MainPID reducerd.service)
  [[ $before == "$after" ]] || { echo "reducerd changed: pid $before, now $after" >&2; return 1; }

  as_worker "${ctl[@]}" --token="$new_token" status >/dev/null ||
    { echo "reducerctl status with the new token failed after the reload" >&2; return 1; }
  as_worker "${ctl[@]}" --token="$token" status >/dev/null ||
    { echo "reducerctl status with the first token failed after the reload" >&2; return 1; }
  local out="$work/new_job.out"
  timeout "$kWorkerLimit" nsenter --target "$leader" --all \
    setpriv --reuid="$kWorkerUid" --regid="$kWorkerUid" --clear-groups \
    /usr/local/bin/fault_worker --target="127.0.0.1:$port" --job="$new_job" --rank=0 \
    --world_size=1 --tls_ca_file="$kCaInRoot" --token="$new_token" \
    --steps='allreduce:shape=1000' >"$out" 2>&1 || { cat "$out"; return 1; }
  cat "$out"
  [[ $(grep -c '^RESULT .* code=OK ' "$out") -eq 2 && $(grep -c 'check=ok' "$out") -eq 1 ]] ||
    { echo "the new job's worker: not every call OK and equal to its closed form" >&2; return 1; }
  echo "==> systemctl reload: pid $after still serving, the new job's token accepted, the first one too"
}

stop_exit_0() {
  timeout "$kStopLimit" nsenter --target "$leader" --all systemctl stop reducerd.service ||
    { echo "systemctl stop failed" >&2; return 1; }
  local shown
  shown=$(in_container systemctl show -p ActiveState -p Result -p ExecMainCode -p ExecMainStatus \
    reducerd.service | sort | tr '\n' ' ')
  in_container journalctl -u reducerd.service --no-pager -n 5
  # ExecMainCode 1: CLD_EXITED (it exited rather than being killed).
  [[ $shown == "ActiveState=inactive ExecMainCode=1 ExecMainStatus=0 Result=success " ]] ||
    { echo "after stop: $shown" >&2; return 1; }
  echo "==> systemctl stop: $shown"
}

step build build
deb=$(ls -t bazel-bin/packaging/debian/reducer_*_amd64.deb | head -1)
step root root
step systemd_in_root systemd_in_root
step configure configure
step boot boot
step unit_started_at_boot unit_started_at_boot
step serves_tls_with_tokens serves_tls_with_tokens
step "same_host_as_uid_$kWorkerUid" same_host
step reload_takes_new_token reload_takes_new_token
step stop_exit_0 stop_exit_0
finish
