#!/usr/bin/env bash
# Checks the reducer Debian package without installing it:
#   - its metadata: name, version, architecture, Depends on Debian's gRPC,
#     protobuf and Abseil packages, the flag file as a conffile;
#   - its files: reducerd, the systemd unit, the flag file, the credentials
#     directory (root's alone);
#   - `systemd-analyze verify` on the unit inside the unpacked package (with
#     this machine's systemd units beside it), with no warning at all, and
#     `systemd-analyze security --offline` under an exposure of 2.0;
#   - the unit's contract: Type=notify, dynamic user and hardening, SIGTERM,
#     reload by SIGHUP, TLS files as credentials, the tokens file read
#     through the group reducer-tokens (which postinst creates), no
#     PrivateUsers= (it hides the workers' uids from the same-host path),
#     and TimeoutStopSec above the flag file's --drain_budget;
#   - the packaged reducerd starting from the packaged flag file, serving,
#     and exiting 0 on SIGTERM.
#
#   deb_contents_test.sh PACKAGE.deb
set -uo pipefail

deb=$1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

root=$(mktemp -d)
daemon_pid=""
cleanup() {
  [[ -n "$daemon_pid" ]] && kill -KILL "$daemon_pid" 2>/dev/null
  rm -rf "$root"
}
trap cleanup EXIT

# --- metadata
field() { dpkg-deb -f "$deb" "$1"; }
[[ "$(field Package)" == "reducer" ]] || fail "Package is '$(field Package)', want reducer"
[[ "$(field Architecture)" == "amd64" ]] || fail "Architecture is '$(field Architecture)'"
version=$(field Version)
[[ "$(basename "$deb")" == "reducer_${version}_amd64.deb" ]] ||
  fail "file $(basename "$deb") does not match version $version"
depends=$(field Depends)
depended=$(sed 's/ *([^)]*)//g; s/, */\n/g' <<<"$depends")  # one name a line
for package in libgrpc++1.51 libprotobuf32 libabsl20220623 libc6 libstdc++6 passwd procps; do
  grep -qxF "$package" <<<"$depended" || fail "Depends lacks $package: $depends"
done
conffiles=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles)
[[ "$conffiles" == "/etc/reducer/reducerd.flags" ]] ||
  fail "conffiles is '$conffiles', want /etc/reducer/reducerd.flags"

# --- files
dpkg-deb -x "$deb" "$root" || fail "dpkg-deb -x $deb"
unit="$root/lib/systemd/system/reducerd.service"
flags="$root/etc/reducer/reducerd.flags"
for f in usr/bin/reducerd usr/bin/reducerctl lib/systemd/system/reducerd.service etc/reducer/reducerd.flags; do
  [[ -f "$root/$f" ]] || fail "the package lacks /$f"
done
[[ -x "$root/usr/bin/reducerd" ]] || fail "/usr/bin/reducerd is not executable"
credentials_mode=$(dpkg-deb -c "$deb" | awk '$NF == "./etc/reducer/credentials/" { print $1 " " $2 }')
[[ "$credentials_mode" == "drwx------ root/root" ]] ||
  fail "/etc/reducer/credentials is '$credentials_mode', want drwx------ root/root"

# --- the unit, checked by systemd itself. Its default dependencies
# (sysinit.target, ...) come from this machine's units, and /bin/kill
# (ExecReload=) from this machine's procps, which the package depends on.
mkdir -p "$root/etc/systemd/system"
install -D -m 0755 /bin/kill "$root/bin/kill"
for u in /lib/systemd/system/*; do
  [[ -e "$root/lib/systemd/system/$(basename "$u")" ]] || cp -a "$u" "$root/lib/systemd/system/"
done
verify=$(systemd-analyze verify --root="$root" reducerd.service 2>&1)
rc=$?
[[ $rc -eq 0 && -z "$verify" ]] ||
  fail "systemd-analyze verify reducerd.service (exit $rc): $verify"
# --threshold is in tenths of the printed level: 20 is an exposure of 2.0.
security=$(systemd-analyze security --offline=yes --threshold=20 --root="$root" \
    reducerd.service 2>&1)
rc=$?
exposure=$(grep -o 'Overall exposure level for reducerd.service: [0-9.]*' <<<"$security")
echo "systemd-analyze security: ${exposure:-no score}"
[[ $rc -eq 0 ]] || fail "exposure above 2.0 (exit $rc): $(tail -3 <<<"$security")"

for setting in Type=notify NotifyAccess=main \
    'ExecStart=/usr/bin/reducerd --flagfile=/etc/reducer/reducerd.flags' \
    KillSignal=SIGTERM DynamicUser=yes NoNewPrivileges=yes ProtectSystem=strict \
    PrivateTmp=yes 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' \
    LoadCredential=reducer:/etc/reducer/credentials \
    'ExecReload=/bin/kill -HUP $MAINPID' SupplementaryGroups=reducer-tokens; do
  grep -qxF "$setting" "$unit" || fail "reducerd.service lacks '$setting'"
done
postinst=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./postinst)
grep -q "groupadd --system reducer-tokens" <<<"$postinst" ||
  fail "postinst does not create the group reducer-tokens"
grep -qx -- "#--job_tokens_file=/etc/reducer/job_tokens" "$flags" ||
  fail "the flag file has no example line --job_tokens_file=/etc/reducer/job_tokens"
grep -q '^PrivateUsers=' "$unit" &&
  fail "reducerd.service sets PrivateUsers=: workers' uids would reach reducerd as 65534"

# Seconds in a systemd/Abseil duration: "30s", "2m", "1m30s", "45".
seconds() {
  local value=$1 total=0 number unit
  [[ "$value" =~ ^[0-9]+$ ]] && { echo "$value"; return; }
  while [[ "$value" =~ ^([0-9]+)(min|ms|s|m|h)(.*)$ ]]; do
    number=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]} value=${BASH_REMATCH[3]}
    case $unit in
      ms) ;;
      s) total=$((total + number)) ;;
      m|min) total=$((total + 60 * number)) ;;
      h) total=$((total + 3600 * number)) ;;
    esac
  done
  [[ -z "$value" ]] && echo "$total"
}
stop_timeout=$(seconds "$(sed -n 's/^TimeoutStopSec=//p' "$unit")")
drain_budget=$(seconds "$(sed -n 's/^--drain_budget=//p' "$flags")")
if [[ -z "$stop_timeout" || -z "$drain_budget" ]]; then
  fail "cannot read TimeoutStopSec= ('$stop_timeout') or --drain_budget= ('$drain_budget')"
elif ((stop_timeout <= drain_budget)); then
  fail "TimeoutStopSec=${stop_timeout}s is not above --drain_budget=${drain_budget}s"
fi

# --- the packaged daemon reads the packaged flag file. The port is
# overridden after it (a later flag wins), since tests run side by side.
log="$root/reducerd.log"
"$root/usr/bin/reducerd" --flagfile="$flags" --listen=127.0.0.1:0 >"$log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$log" && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
if grep -q "reducerd listening on 127.0.0.1:" "$log"; then
  kill -TERM "$daemon_pid"
  wait "$daemon_pid"
  rc=$?
  [[ $rc -eq 0 ]] || fail "reducerd exited $rc on SIGTERM: $(cat "$log")"
else
  fail "reducerd with --flagfile=/etc/reducer/reducerd.flags did not serve: $(cat "$log")"
fi
daemon_pid=""

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s) in $deb" >&2
  exit 1
fi
echo "OK: $(basename "$deb"): Depends: $depends"
