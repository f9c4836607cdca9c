#!/usr/bin/env bash
# Checks the PyTorch worker image: what it holds, and that it trains as
# Kubernetes runs a restricted pod:
#
#   deploy/image/torch/image_test.sh [IMAGE]    default reducer-torch:latest
#
# Checks, each printing "==> " when it passed:
#   pins      requirements.txt pins exactly the versions
#             python/requirements-dev.txt does, for every package it names
#   contents  no shell; the user is 65532; the pip packages the image has
#             are exactly requirements.txt's and reducer, at those
#             versions (reducer at packaging/version.bzl's release); every
#             host library contents.txt lists is in the image
#   imports   as uid 65532 with a read-only root (a tmpfs /tmp, as the
#             Job's emptyDir), no capabilities and no new privileges:
#             torch, reducer and the backend "reducer" import, with no
#             network
#   ddp       the image's default command (torchrun, 2 ranks,
#             examples/torch_ddp.py) trains against a reducerd on the
#             host's loopback (host network, --steps=10), and the same on
#             gloo prints the same validation error and parameter checksum
# Exits 0 when all passed. Needs bazel-bin/server/reducerd (bazel build
# //server:reducerd).
set -euo pipefail
cd "$(dirname "$0")/../../.."
source deploy/image/podman.sh

image=${1:-reducer-torch:latest}
readonly kRequirements=deploy/image/torch/requirements.txt
readonly kTrainLimit=240
work=$(mktemp -d /tmp/reducer-torch-image-test.XXXXXX)
daemon=""
cleanup() {
  [[ -z "$daemon" ]] || kill "$daemon" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "image_test: $*" >&2; exit 1; }

# pins: the same versions as the project's environment.
pins() { grep -E '^[A-Za-z0-9_.-]+==' "$1" | sort -f; }
mismatch=$(awk -F'==' '
  NR == FNR { if ($0 ~ /^[A-Za-z0-9_.-]+==/) dev[tolower($1)] = $2; next }
  $0 ~ /^[A-Za-z0-9_.-]+==/ && dev[tolower($1)] != $2 {
    print $0 " (python/requirements-dev.txt: " (tolower($1) in dev ? dev[tolower($1)] : "none") ")" }' \
  python/requirements-dev.txt "$kRequirements")
[[ -z "$mismatch" ]] || fail "requirements.txt pins other versions than python/requirements-dev.txt: $mismatch"
echo "==> pins: $(pins "$kRequirements" | wc -l) packages at python/requirements-dev.txt's versions"

# run ARGS...: the image as a restricted pod runs it, no network.
run() {
  podman run --rm --network=none --user=65532:65532 --read-only --tmpfs=/tmp --cap-drop=ALL \
    --security-opt=no-new-privileges "$@"
}

# contents: no shell, the user, the packages, the libraries.
[[ $(podman image inspect --format '{{.Config.User}}' "$image") == 65532:65532 ]] ||
  fail "the image's user is not 65532:65532"
! run --entrypoint=/bin/sh "$image" -c true 2>/dev/null || fail "the image has a shell"
release=$(sed -n 's/^REDUCER_VERSION = "\(.*\)"$/\1/p' packaging/version.bzl)
run --entrypoint=/usr/bin/python3 "$image" -c '
import importlib.metadata as m
for d in sorted(m.distributions(), key=lambda d: d.metadata["Name"].lower()):
    print(d.metadata["Name"].lower() + "==" + d.version)' >"$work/installed.txt"
{ pins "$kRequirements" | tr '[:upper:]' '[:lower:]' | tr _ -; echo "reducer==$release"; } | sort >"$work/expected.txt"
tr _ - <"$work/installed.txt" | sort >"$work/installed-normalized.txt"
diff "$work/expected.txt" "$work/installed-normalized.txt" >&2 ||
  fail "the image's pip packages (>) are not requirements.txt's and reducer (<)"
run --entrypoint=/usr/bin/python3 "$image" -c 'print(open("/usr/share/reducer/contents.txt").read(), end="")' \
  >"$work/contents.txt"
mapfile -t host_files < <(awk '$1 ~ /^\/(usr\/)?lib/ && $1 !~ /\/$/ {print $1}' "$work/contents.txt")
[[ ${#host_files[@]} -gt 0 ]] || fail "contents.txt lists no library"
run --entrypoint=/usr/bin/python3 "$image" -c '
import os, sys
missing = [f for f in sys.argv[1:] if not os.path.isfile(f)]
sys.exit(f"missing: {missing}" if missing else 0)' "${host_files[@]}" ||
  fail "libraries contents.txt lists are missing"
echo "==> contents: no shell, user 65532, $(wc -l <"$work/expected.txt") pip packages as pinned," \
  "${#host_files[@]} host files each with its Debian package"

# imports, restricted, offline.
out=$(run --entrypoint=/usr/bin/python3 "$image" -c '
import torch, reducer, reducer.torch, torch.distributed as dist
assert "reducer" in dist.Backend.backend_list
print(torch.__version__, reducer.__version__)') || fail "torch or reducer does not import"
# torch's version carries its build's local label (+cu132): the pin does not.
[[ "$(sed 's/+[^ ]*//' <<<"$out")" == "$(sed -n 's/^torch==//p' "$kRequirements") $release" ]] ||
  fail "torch and reducer are $out, not the pinned torch and reducer $release"
echo "==> imports: torch $out (torch, reducer), read-only root, uid 65532"

# ddp: the default command on reducer, then on gloo.
port=$(python3 deploy/lib/free_port.py)
[[ -x bazel-bin/server/reducerd ]] || fail "no bazel-bin/server/reducerd: bazel build //server:reducerd"
bazel-bin/server/reducerd --listen="127.0.0.1:$port" >"$work/reducerd.log" 2>&1 &
daemon=$!
for _ in $(seq 50); do
  python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$port" \
    2>/dev/null && break
  kill -0 "$daemon" 2>/dev/null || { cat "$work/reducerd.log" >&2; fail "reducerd exited"; }
  sleep 0.2
done
train() {
  timeout "$kTrainLimit" podman run --rm --network=host --user=65532:65532 --read-only --tmpfs=/tmp \
    --cap-drop=ALL --security-opt=no-new-privileges --env=REDUCER_TARGET="127.0.0.1:$port" "$image" \
    --nproc_per_node=2 --master_addr=127.0.0.1 --master_port="$(python3 deploy/lib/free_port.py)" \
    torch_ddp.py --steps=10 "$@"
}
train >"$work/reducer.log" 2>&1 || { cat "$work/reducer.log" >&2; fail "DDP on reducer failed"; }
train --backend=gloo >"$work/gloo.log" 2>&1 || { cat "$work/gloo.log" >&2; fail "DDP on gloo failed"; }
result() { grep -ho 'validation mse=[0-9.]* over 512 values; params sha256=[0-9a-f]*' "$1" || true; }
[[ -n "$(result "$work/reducer.log")" ]] || { cat "$work/reducer.log" >&2; fail "no result on reducer"; }
[[ "$(result "$work/reducer.log")" == "$(result "$work/gloo.log")" ]] ||
  fail "reducer: $(result "$work/reducer.log"); gloo: $(result "$work/gloo.log")"
echo "==> ddp: 2 ranks on reducer as on gloo: $(result "$work/reducer.log")"
