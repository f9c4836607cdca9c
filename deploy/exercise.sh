#!/usr/bin/env bash
# Starts what the rendered manifests declare, for real, with the image:
#
#   deploy/exercise.sh SHARDS.yaml WORKERS.yaml
#   deploy/exercise.sh --tls TLS.yaml
#
# SHARDS.yaml is a rendered shard overlay (its StatefulSet's pod template),
# WORKERS.yaml the rendered worker-job overlay. In a network namespace of
# its own (loopback only, so the template's ports are used as declared),
# one shard runs with exactly the template's command, args, env, user,
# read-only root, dropped capabilities, ConfigMap volumes and Secret volumes
# (deploy/validate/pod_run.py). The Secrets are made here: one job token,
# its hash in the shards' reducer-job-tokens and the token itself in the
# workers' metric-sync-token. Checks: the readiness and liveness gRPC
# probes pass on the ports they declare; the gRPC port refuses a call
# without the job's token and takes one with it (or, for an overlay with
# --allow_unauthenticated, takes a call without a token); every rank of the
# worker Job, with its container's command, args, env and token,
# REDUCER_TARGET pointed at the shard's gRPC port on loopback, REDUCER_JOB
# the token's job and the rank as its completion index, reduces through
# it; the declared metrics port serves the flagfile's memory budget and
# counts the job; SIGTERM with the template's grace period ends the shard
# with exit code 0; and the same command with one flag reducerd does not
# know fails.
#
# With --tls, TLS.yaml is the rendered tls overlay: its Secrets are made
# here (tests/make_test_certs.sh's CA, server and client certificates, the
# job token) and mounted as kubelet would; instead of the worker Job,
# reducerctl checks that the gRPC port serves mutual TLS with tokens only
# (status with the client certificate and token works; plaintext, no client
# certificate, or no token is refused) while the probes stay plaintext.
#
# Prints "==> " per check; exits 0 when all passed. Needs root (ip netns),
# the image (deploy/image/build.sh) and bazel-bin/tools/reducerctl.
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/image/podman.sh

usage() { echo "usage: $0 SHARDS.yaml WORKERS.yaml | $0 --tls TLS.yaml" >&2; exit 2; }
tls=0
if [[ "${1:-}" == --tls ]]; then
  [[ $# -eq 2 ]] || usage
  tls=1 shards=$2
else
  [[ $# -eq 2 ]] || usage
  shards=$1 workers=$2
fi
# pod_run.py runs with deploy/validate's pinned packages (the venv
# tools/pinned_venv.sh builds, or finds, from its requirements.txt).
validate_venv=$(tools/pinned_venv.sh deploy/validate/requirements.txt)
pod_run=("$validate_venv/bin/python" deploy/validate/pod_run.py)

ns="reducer-exercise-$$"
work=$(mktemp -d /tmp/reducer-exercise.XXXXXX)
chmod 0755 "$work"
shard="reducer-exercise-shard-$$"
cleanup() {
  podman rm -f "$shard" >/dev/null 2>&1 || true
  for c in $(podman ps -a --format '{{.Names}}' | grep "^reducer-exercise-.*-$$\$" || true); do
    podman rm -f "$c" >/dev/null 2>&1 || true
  done
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "exercise: $*" >&2
  echo "exercise: the shard's log:" >&2
  podman logs "$shard" 2>&1 | tail -20 | sed 's/^/  | /' >&2
  exit 1
}

ip netns add "$ns"
ip -n "$ns" link set lo up
in_ns() { ip netns exec "$ns" "$@"; }

fact() { awk -v k="$2" '$1 == k {print $2}' <<<"$1"; }
shard_facts=$("${pod_run[@]}" facts "$shards" StatefulSet)
readiness=$(fact "$shard_facts" readiness)
liveness=$(fact "$shard_facts" liveness)
grace=$(fact "$shard_facts" grace)
grpc_port=$(tr ',' '\n' <<<"$(fact "$shard_facts" ports)" | sed -n 's/^grpc=//p')
[[ -n "$grpc_port" && "$readiness" != none && "$liveness" != none ]] ||
  fail "the template declares no grpc port or no gRPC probes: $shard_facts"

# The Secrets docs/deployment.md has operators create: the job's token,
# hashed for the shards and as it is for the workers; with --tls, the
# certificates too, from test certificates. A template that mounts no
# Secret of these names leaves it unused.
readonly job=exercise
mkdir -p "$work/secrets/tokens" "$work/secrets/token"
token=$(openssl rand -hex 32)
printf '%s %s\n' "$job" "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$work/secrets/tokens/tokens"
printf %s "$token" >"$work/secrets/token/token"
secret_args=(--secret=reducer-job-tokens="$work/secrets/tokens")
if [[ $tls -eq 1 ]]; then
  tests/make_test_certs.sh "$work/certs" >/dev/null
  mkdir -p "$work/secrets/tls"
  cp "$work/certs/server.pem" "$work/secrets/tls/tls.crt"
  cp "$work/certs/server.key" "$work/secrets/tls/tls.key"
  cp "$work/certs/ca.pem" "$work/secrets/tls/ca.crt"
  secret_args+=(--secret=reducer-tls="$work/secrets/tls")
fi
mapfile -t run_args < <("${pod_run[@]}" run "$shards" StatefulSet \
  --network="ns:/run/netns/$ns" --name="$shard" --volumes_dir="$work/volumes" "${secret_args[@]}")
echo "    podman run ${run_args[*]}"
podman run -d "${run_args[@]}" >/dev/null

# kubelet's probes: gRPC health on the declared ports, from the pod's network.
probe() { in_ns bazel-bin/tools/reducerctl --target="127.0.0.1:$1" --timeout=1s health >/dev/null 2>&1; }
ready=0
for _ in $(seq 40); do
  if probe "$readiness"; then ready=1; break; fi
  [[ $(podman inspect --format '{{.State.Running}}' "$shard") == true ]] || fail "the shard exited"
  sleep 0.5
done
[[ $ready -eq 1 ]] || fail "readiness probe (gRPC, port $readiness) never passed"
probe "$liveness" || fail "liveness probe (gRPC, port $liveness) fails"
echo "==> readiness (port $readiness) and liveness (port $liveness) gRPC probes pass"

if [[ $tls -eq 1 ]]; then
  ctl() { in_ns bazel-bin/tools/reducerctl --target="127.0.0.1:$grpc_port" --timeout=3s "$@" status >/dev/null 2>&1; }
  certs=$work/certs
  ctl --tls_ca_file="$certs/ca.pem" --tls_cert_file="$certs/client.pem" \
    --tls_key_file="$certs/client.key" --token="$token" ||
    fail "status over mutual TLS with the job's token fails"
  ! ctl || fail "the gRPC port answers plaintext"
  ! ctl --tls_ca_file="$certs/ca.pem" --token="$token" || fail "the gRPC port takes a client without a certificate"
  ! ctl --tls_ca_file="$certs/ca.pem" --tls_cert_file="$certs/client.pem" --tls_key_file="$certs/client.key" ||
    fail "the gRPC port takes a call without a token"
  echo "==> gRPC port $grpc_port: mutual TLS and tokens from the mounted Secrets (plaintext, no certificate, no token refused)"
else
# Who may call: with --job_tokens_file only the job's token; with
# --allow_unauthenticated anyone.
ctl() { in_ns bazel-bin/tools/reducerctl --target="127.0.0.1:$grpc_port" --timeout=3s "$@" status >/dev/null 2>&1; }
if printf '%s\n' "${run_args[@]}" | grep -q '^--job_tokens_file='; then
  ctl --token="$token" || fail "status with the job's token fails"
  ! ctl || fail "the gRPC port takes a call without a token"
  ! ctl --token="not-$token" || fail "the gRPC port takes a call with another token"
  echo "==> gRPC port $grpc_port: job tokens from the mounted Secret (no token, another token refused)"
elif printf '%s\n' "${run_args[@]}" | grep -Eq '^--allow_unauthenticated(=true)?$'; then
  ctl || fail "status without a token fails, with --allow_unauthenticated"
  echo "==> gRPC port $grpc_port: serves anyone without a token (--allow_unauthenticated)"
else
  fail "the template has neither --job_tokens_file nor --allow_unauthenticated in its args"
fi

# The worker Job, one container per completion index, all at once, each
# with the job's token from its Secret.
worker_facts=$("${pod_run[@]}" facts "$workers" Job)
completions=$(fact "$worker_facts" completions)
pids=()
for ((rank = 0; rank < completions; rank++)); do
  mapfile -t wargs < <("${pod_run[@]}" run "$workers" Job --network="ns:/run/netns/$ns" \
    --name="reducer-exercise-rank$rank-$$" --rank=$rank --env=REDUCER_TARGET="127.0.0.1:$grpc_port" \
    --env=REDUCER_JOB="$job" --volumes_dir="$work/volumes-rank$rank" \
    --secret=metric-sync-token="$work/secrets/token")
  [[ $rank -eq 0 ]] && echo "    podman run ${wargs[*]}"
  podman run --rm "${wargs[@]}" >"$work/rank$rank.log" 2>&1 &
  pids+=($!)
done
for ((rank = 0; rank < completions; rank++)); do
  wait "${pids[$rank]}" || { sed 's/^/  | /' "$work/rank$rank.log" >&2; fail "rank $rank of the worker Job failed"; }
done
# Each rank sees batches x batch_size samples per epoch, the example's
# defaults 20 and 32 (the Job sets neither), over 3 epochs.
expected=$((completions * 20 * 32))
epochs=$(grep -c "global accuracy .* over $expected examples" "$work/rank0.log" || true)
[[ $epochs -eq 3 ]] || { cat "$work/rank0.log" >&2; fail "rank 0 reported $epochs epochs over $expected examples, not 3"; }
echo "==> the worker Job's $completions ranks reduced through the shard: $expected examples per epoch"

# The declared metrics port, as Prometheus scrapes it: the memory budget is
# the flagfile's, and the job's all-reduces are counted.
metrics_port=$(tr ',' '\n' <<<"$(fact "$shard_facts" ports)" | sed -n 's/^metrics=//p')
budget=$(grep -ho -- '--memory_budget_bytes=[0-9]*' "$work/volumes/"*/* | cut -d= -f2)
if [[ -n "$metrics_port" ]]; then
  in_ns curl -sf "http://127.0.0.1:$metrics_port/metrics" >"$work/metrics.txt" ||
    fail "no metrics on the declared port $metrics_port"
  grep -qx "reducer_memory_budget_bytes $budget" "$work/metrics.txt" ||
    fail "reducer_memory_budget_bytes is not the flagfile's $budget"
  grep -Eq '^reducer_collectives_total\{.*kind="allreduce".*outcome="OK".*\} [1-9]' "$work/metrics.txt" ||
    fail "no successful all-reduce counted"
  echo "==> metrics on port $metrics_port: memory budget $budget, the job's all-reduces counted"
fi
fi  # tls

t0=$(date +%s%N)
podman stop -t "$grace" "$shard" >/dev/null
elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
code=$(podman inspect --format '{{.State.ExitCode}}' "$shard")
[[ "$code" == 0 ]] || fail "exit code $code after SIGTERM"
((elapsed_ms < grace * 1000)) || fail "stopping took $elapsed_ms ms, grace is $grace s"
echo "==> SIGTERM: exit code 0 after $elapsed_ms ms (terminationGracePeriodSeconds $grace)"

podman rm -f "$shard" >/dev/null
set +e
podman run --rm "${run_args[@]}" --no_such_flag_anywhere=1 >"$work/unknown.log" 2>&1
code=$?
set -e
grep -q "Unknown command line flag 'no_such_flag_anywhere'" "$work/unknown.log" && [[ $code -ne 0 ]] ||
  { cat "$work/unknown.log" >&2; fail "reducerd accepted a flag it does not know (exit $code)"; }
echo "==> the template's command with an unknown flag: reducerd refuses it (exit $code)"
