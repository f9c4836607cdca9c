#!/usr/bin/env bash
# Checks the Reducer image holds exactly the files build.sh put there, then
# runs it as Kubernetes runs a restricted pod and checks it serves:
#
#   deploy/image/image_test.sh [IMAGE]      default reducer:latest (build.sh)
#
# reducerd runs as uid 65532 with a read-only root filesystem, every
# capability dropped and no new privileges, on the host network with
# loopback ports picked free. Checks, in order: the health port answers
# SERVING (reducerctl on the host, and the image's own reducerctl); a W = 2
# metric-sync job on the host reduces through it (rank 0's global count is
# ranks x epochs' batches x batch size); the image's default command (no
# arguments) serves 0.0.0.0:50051; `podman stop -t GRACE` (SIGTERM)
# ends it with exit code 0 before GRACE runs out. Each check prints "==> "
# on success. Exits 0 when all passed. Needs bazel-bin/ from build.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/image/podman.sh

image=${1:-reducer:latest}
readonly kGraceSeconds=20   # podman stop's grace period; above --drain_budget
readonly kDrainBudget=5s
name="reducer-image-test-$$"
log=$(mktemp /tmp/reducer-image-test.XXXXXX)
cleanup() {
  podman rm -f "$name" >/dev/null 2>&1 || true
  podman rm -f "$name-default" >/dev/null 2>&1 || true
  rm -f "$log"
}
trap cleanup EXIT

fail() {
  echo "image_test: $*" >&2
  echo "image_test: reducerd's log:" >&2
  podman logs "$name" 2>&1 | tail -20 | sed 's/^/  | /' >&2
  exit 1
}

# The root filesystem holds exactly the files contents.txt lists (binaries,
# libraries, CA certificates) and the four the image makes itself; no shell.
podman create --name "$name" "$image" >/dev/null
podman export --output "$log.tar" "$name"
podman rm "$name" >/dev/null
tar -tf "$log.tar" | grep -v '/$' | sort >"$log.files"
tar -xOf "$log.tar" usr/share/reducer/contents.txt | awk '{print substr($1, 2)}' |
  cat - <(printf '%s\n' etc/passwd etc/group etc/nsswitch.conf usr/share/reducer/contents.txt) |
  sort >"$log.expected"
extra=$(comm -23 "$log.files" "$log.expected")
missing=$(comm -13 "$log.files" "$log.expected")
files=$(wc -l <"$log.files")
passwd=$(tar -xOf "$log.tar" etc/passwd)
rm -f "$log.tar" "$log.files" "$log.expected"
[[ -z "$extra" && -z "$missing" ]] || fail "files not in contents.txt: ${extra:-none}; listed but absent: ${missing:-none}"
grep -q '^reducer:x:65532:65532:' <<<"$passwd" || fail "/etc/passwd names no user reducer of uid 65532"
echo "==> the image holds exactly the $files files contents.txt and build.sh name (no shell)"

mapfile -t ports < <(python3 deploy/lib/free_port.py 3)
grpc_port=${ports[0]} health_port=${ports[1]} metrics_port=${ports[2]}

podman run -d --name "$name" --user 65532 --read-only --cap-drop=ALL \
  --security-opt=no-new-privileges --network=host "$image" \
  --listen="127.0.0.1:$grpc_port" --health_listen="127.0.0.1:$health_port" \
  --metrics_listen="127.0.0.1:$metrics_port" --drain_budget="$kDrainBudget" \
  --memory_budget_bytes=$((256 << 20)) >/dev/null

# Health: reducerd takes a moment to serve; give it up to 20 s.
healthy=0
for _ in $(seq 40); do
  if bazel-bin/tools/reducerctl --target="127.0.0.1:$health_port" --timeout=1s health \
      >/dev/null 2>&1; then
    healthy=1
    break
  fi
  [[ $(podman inspect --format '{{.State.Running}}' "$name") == true ]] || fail "reducerd exited"
  sleep 0.5
done
[[ $healthy -eq 1 ]] || fail "health port 127.0.0.1:$health_port never answered SERVING"
echo "==> health port answers SERVING (reducerctl on the host)"
user=$(podman inspect --format '{{.Config.User}}' "$name")
[[ "$user" == 65532 ]] || fail "container runs as '$user', not 65532"
podman run --rm --user 65532 --read-only --cap-drop=ALL --network=host \
  --entrypoint /usr/bin/reducerctl "$image" --target="127.0.0.1:$health_port" health \
  || fail "the image's reducerctl does not see SERVING"
echo "==> the image's own reducerctl sees SERVING, as uid 65532, read-only"

# A W = 2 job from the host. 2 ranks x 20 batches x 32 samples per epoch.
readonly kWorld=2 kBatches=20 kBatchSize=32
expected=$((kWorld * kBatches * kBatchSize))
pids=()
for rank in 0 1; do
  bazel-bin/examples/metric_sync_worker --target="127.0.0.1:$grpc_port" \
    --job="image-test-$$" --rank=$rank --world_size=$kWorld --epochs=2 \
    --batches=$kBatches --batch_size=$kBatchSize >"$log.$rank" 2>&1 &
  pids+=($!)
done
for rank in 0 1; do
  wait "${pids[$rank]}" || { cat "$log.$rank" >&2; rm -f "$log".?; fail "rank $rank failed"; }
done
count=$(grep -c "global accuracy .* over $expected examples" "$log.0" || true)
rm -f "$log".?
[[ $count -eq 2 ]] || fail "rank 0 printed $count epochs over $expected examples, not 2"
echo "==> a W = 2 metric-sync job reduced through it: $expected examples per epoch"

# The default command (no arguments): every interface, plaintext, no tokens,
# which reducerd serves only because the CMD says --allow_unauthenticated.
default_cmd="$name-default"
podman run -d --name "$default_cmd" --user 65532 --read-only --cap-drop=ALL \
  --security-opt=no-new-privileges --network=none "$image" >/dev/null
listening=0
for _ in $(seq 40); do
  if podman logs "$default_cmd" 2>&1 | grep -q 'listening on 0.0.0.0:50051'; then listening=1; break; fi
  [[ $(podman inspect --format '{{.State.Running}}' "$default_cmd") == true ]] || break
  sleep 0.5
done
default_log=$(podman logs "$default_cmd" 2>&1 | tail -5)
podman rm -f "$default_cmd" >/dev/null 2>&1 || true
[[ $listening -eq 1 ]] || fail "the default command does not serve 0.0.0.0:50051: $default_log"
echo "==> the default command serves 0.0.0.0:50051 (plaintext, --allow_unauthenticated)"

# SIGTERM: podman stop waits kGraceSeconds before SIGKILL (exit code 137).
t0=$(date +%s%N)
podman stop -t "$kGraceSeconds" "$name" >/dev/null
t1=$(date +%s%N)
code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
elapsed_ms=$(((t1 - t0) / 1000000))
[[ "$code" == 0 ]] || fail "exit code $code after SIGTERM (137: killed at the grace period)"
((elapsed_ms < kGraceSeconds * 1000)) || fail "stop took ${elapsed_ms} ms, the grace period is ${kGraceSeconds} s"
echo "==> SIGTERM: exit code 0 after ${elapsed_ms} ms (grace period ${kGraceSeconds} s)"
