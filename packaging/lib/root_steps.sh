# Shared by the tests that install a package into a bare Debian root
# (packaging/deb_test.sh, packaging/wheel_test.sh): steps with a JUnit
# record (packaging/lib/steps.sh), the root and the daemon they start, and
# the Debian mirror this machine's apt uses. Sourced as
#
#   suite=packaging/deb_test   # the JUnit suite and class name
#   source packaging/lib/root_steps.sh "$@"
#
# which reads the script's arguments ([--junit=FILE]: the JUnit file to
# write at the end; see steps.sh) and sets `work` (a scratch folder, removed
# at exit), `rootfs` (the root's place in it) and `daemon_pid` (a process
# the steps started, killed at exit). A script that sets `keep_root` to a
# path has the root moved there at exit (unmounted) instead of removed.

source packaging/lib/steps.sh "$@"
rootfs="$work/root"
daemon_pid=""
keep_root=""

cleanup() {
  if [[ -n "$daemon_pid" ]]; then
    kill -KILL "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  unmount_root "$rootfs"
  if [[ -n "$keep_root" && -d "$rootfs" ]]; then
    mv "$rootfs" "$keep_root" || echo "could not keep the root at $keep_root" >&2
  fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# The Debian mirror apt uses here: the first URI serving the bookworm suite
# in /etc/apt/sources.list or /etc/apt/sources.list.d (one-line and deb822
# formats). Prints "URI FILE".
find_mirror() {
  local file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$file" ]] || continue
    awk -v f="$file" '$1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == "bookworm") { print $i, f; exit } }' "$file"
  done
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$file" ]] || continue
    # deb822: stanzas separated by blank lines.
    awk -v f="$file" 'BEGIN { RS = ""; FS = "\n" }
      { uri = ""; bookworm = 0; deb = 0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/) { split(substr($i, 6), u, " "); uri = u[1] }
          if ($i ~ /^Suites:/) { n = split(substr($i, 8), s, " ")
            for (j = 1; j <= n; j++) if (s[j] == "bookworm") bookworm = 1 }
          if ($i ~ /^Types:/ && (substr($i, 7) " ") ~ /[ \t]deb[ \t]/) deb = 1
        }
        if (uri != "" && bookworm && deb) { print uri, f; exit } }' "$file"
  done | head -1
}

# make_root ROOT: a bare Debian 12 (debootstrap --variant=minbase bookworm)
# at ROOT from this machine's mirror, whose apt uses this machine's sources
# and name server, with /proc mounted (unmount_root undoes it).
make_root() {
  local root=$1 mirror mirror_file
  read -r mirror mirror_file < <(find_mirror)
  if [[ -z "${mirror:-}" ]]; then
    echo "no Debian mirror serving bookworm in /etc/apt/sources.list{,.d}" >&2
    return 1
  fi
  echo "==> mirror $mirror (from $mirror_file)"
  timeout 900 debootstrap --variant=minbase bookworm "$root" "$mirror" || return 1
  echo "==> $(du -sm "$root" | cut -f1) MB root, $(chroot "$root" dpkg-query -f '.\n' -W | wc -l) packages"
  rm -f "$root/etc/apt/sources.list"
  cp "$mirror_file" "$root/etc/apt/$( [[ $mirror_file == *.sources ]] && echo sources.list.d/debian.sources || echo sources.list)"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc"
}

# unmount_root ROOT: unmounts everything under ROOT (deepest first), so that
# `rm -rf --one-file-system` can remove it.
unmount_root() {
  [[ -d "$1" ]] || return 0
  findmnt -rn -o TARGET | grep -F "$1" | sort -r |
    while read -r target; do umount -l "$target"; done
}

# await_serving [NOTE]: waits up to kServeLimit seconds (the script's) for
# the reducerd a step started (daemon_pid, its output in $work/reducerd.log)
# to say that it listens on 127.0.0.1:$port; then prints that line and NOTE
# after "==> ". Fails, printing its log, when it does not in time or exits.
await_serving() {
  local note=${1:+ $1}
  for _ in $(seq $((kServeLimit * 10))); do
    if grep -q "reducerd listening on 127.0.0.1:$port" "$work/reducerd.log"; then
      echo "==> $(grep "listening on" "$work/reducerd.log")$note"
      return 0
    fi
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "reducerd did not serve on 127.0.0.1:$port:" >&2
  cat "$work/reducerd.log" >&2
  return 1
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
