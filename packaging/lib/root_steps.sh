# Shared by the tests that install a package into a bare Debian root
# (packaging/deb_test.sh, packaging/wheel_test.sh): steps with a JUnit
# record, the root and the daemon they start, and the Debian mirror this
# machine's apt uses. Sourced as
#
#   suite=packaging/deb_test   # the JUnit suite and class name
#   source packaging/lib/root_steps.sh "$@"
#
# which reads the script's arguments ([--junit=FILE]: the JUnit file to
# write at the end) and sets `work` (a scratch folder, removed at exit),
# `rootfs` (the root's place in it) and `daemon_pid` (a process the steps
# started, killed at exit).

junit=""
for arg in "$@"; do
  case $arg in
    --junit=*) junit=${arg#--junit=} ;;
    *) echo "usage: $0 [--junit=FILE]" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d "/tmp/reducer-${suite##*/}.XXXXXX")
rootfs="$work/root"
daemon_pid=""
cases=()  # junit <testcase> elements
failed=0
started=$(date +%s)

cleanup() {
  if [[ -n "$daemon_pid" ]]; then
    kill -KILL "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  unmount_root "$rootfs"
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

xml_escape() { sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g'; }

# step NAME COMMAND...: runs one step, timing it; on success prints the
# lines of its log that start with "==> ", on failure the end of its log,
# and stops the test (later steps need this one).
step() {
  local name=$1; shift
  local log="$work/$name.log" t0 t1 rc classname=${suite//\//.}
  t0=$(date +%s)
  echo "--- $name"
  "$@" >"$log" 2>&1
  rc=$?
  t1=$(date +%s)
  if [[ $rc -eq 0 ]]; then
    echo "    ok in $((t1 - t0)) s"
    sed -n 's/^==> /    /p' "$log"
    cases+=("<testcase classname=\"$classname\" name=\"$name\" time=\"$((t1 - t0))\"/>")
  else
    echo "    FAILED (exit $rc) after $((t1 - t0)) s; its log ends:"
    tail -40 "$log" | sed 's/^/    | /'
    local message
    message=$(tail -40 "$log" | xml_escape)
    cases+=("<testcase classname=\"$classname\" name=\"$name\" time=\"$((t1 - t0))\"><failure message=\"$name failed (exit $rc)\">$message</failure></testcase>")
    failed=1
    finish
  fi
}

# Writes the JUnit file, prints the outcome and exits (0: every step passed).
finish() {
  local total=$(($(date +%s) - started))
  if [[ -n "$junit" ]]; then
    mkdir -p "$(dirname "$junit")"
    {
      echo "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
      echo "<testsuites><testsuite name=\"$suite\" tests=\"${#cases[@]}\" time=\"$total\">"
      printf '%s\n' "${cases[@]}"
      echo "</testsuite></testsuites>"
    } >"$junit"
  fi
  if [[ $failed -eq 0 ]]; then
    echo "${suite##*/}: passed in $total s"
  else
    echo "${suite##*/}: FAILED after $total s"
  fi
  exit $failed
}

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

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
