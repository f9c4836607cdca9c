#!/usr/bin/env bash
# Starts what the rendered manifests declare, for real, with the image:
#
#   deploy/exercise.sh SHARDS.yaml [WORKERS.yaml]
#
# SHARDS.yaml is a rendered shard overlay (its StatefulSet's pod template),
# WORKERS.yaml a rendered worker Job overlay (worker-job against the
# secure default, worker-job-open against open). In a network namespace of
# its own (loopback only, so the template's ports are used as declared),
# one shard runs with exactly the template's command, args, env, user,
# read-only root, dropped capabilities, ConfigMap volumes and Secret volumes
# (deploy/validate/pod_run.py). The Secrets are made here as
# docs/deployment.md has operators make them: one job token, its hash in
# the shards' reducer-job-tokens and the token itself in the workers'
# metric-sync-token; and with deploy/k8s/bootstrap-tls.sh the shards'
# reducer-tls, the workers' reducer-ca and a worker's client certificate
# worker-tls, read back from the YAML it writes. Checks: the readiness and
# liveness gRPC probes pass, plaintext, on the ports they declare; the gRPC
# port serves as the template's args say: with --tls_cert_file, TLS with
# the certificate checked against reducer-ca for the first shard's name
# (NAME-0.SERVICE) and plaintext refused, with --tls_client_ca_file also a
# client without a certificate refused; with --job_tokens_file, a call
# without the job's token or with another refused and one with it taken;
# with --allow_unauthenticated, a plaintext call without a token taken.
# With WORKERS.yaml: every rank of the worker Job, with its container's
# command, args, env and Secrets, REDUCER_TARGET pointed at the shard's gRPC
# port on loopback (and, where it verifies TLS, --tls_server_name the
# first shard's name, which the certificate holds), REDUCER_JOB the token's
# job and the rank as its completion index, reduces through it; and the
# declared metrics port serves the flagfile's memory budget and counts the
# job. Then SIGTERM with the template's grace period ends the shard with
# exit code 0; and the same command with one flag reducerd does not know
# fails.
#
# Prints "==> " per check; exits 0 when all passed. Needs root (ip netns),
# openssl, the image (deploy/image/build.sh) and bazel-bin/tools/reducerctl.
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/image/podman.sh

[[ $# -eq 1 || $# -eq 2 ]] || { echo "usage: $0 SHARDS.yaml [WORKERS.yaml]" >&2; exit 2; }
shards=$1 workers=${2:-}
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

first=$(fact "$shard_facts" first)

# The Secrets docs/deployment.md has operators create: the job's token,
# hashed for the shards and as it is for the workers; the certificates from
# bootstrap-tls.sh's YAML. A template that mounts no Secret of these names
# leaves it unused.
readonly job=exercise
secrets=$work/secrets
mkdir -p "$secrets/reducer-job-tokens" "$secrets/metric-sync-token"
token=$(openssl rand -hex 32)
printf '%s %s\n' "$job" "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$secrets/reducer-job-tokens/tokens"
printf %s "$token" >"$secrets/metric-sync-token/token"
deploy/k8s/bootstrap-tls.sh --client=worker "$work/tls" >/dev/null
"${pod_run[@]}" secrets "$work/tls/secrets.yaml" "$secrets"
secret_args=()
for d in "$secrets"/*; do secret_args+=(--secret="$(basename "$d")=$d"); done
mapfile -t run_args < <("${pod_run[@]}" run "$shards" StatefulSet \
  --network="ns:/run/netns/$ns" --name="$shard" --volumes_dir="$work/volumes" "${secret_args[@]}")
has_arg() { printf '%s\n' "${run_args[@]}" | grep -Eq "^--$1"; }
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

# Who may call, over what. ctl: reducerctl status on the gRPC port, with
# the CA and the first shard's name where the port serves TLS.
tls_args=()
if has_arg 'tls_cert_file='; then
  tls_args=(--tls_ca_file="$secrets/reducer-ca/ca.crt" --tls_server_name="$first")
fi
ctl() { in_ns bazel-bin/tools/reducerctl --target="127.0.0.1:$grpc_port" --timeout=3s "$@" status >/dev/null 2>&1; }
client_cert=()
if has_arg 'tls_client_ca_file='; then
  client_cert=(--tls_cert_file="$secrets/worker-tls/tls.crt" --tls_key_file="$secrets/worker-tls/tls.key")
  ! ctl "${tls_args[@]}" --token="$token" || fail "the gRPC port takes a client without a certificate"
  echo "==> gRPC port $grpc_port: mutual TLS (a client without a certificate refused)"
fi
if [[ ${#tls_args[@]} -gt 0 ]]; then
  ctl "${tls_args[@]}" "${client_cert[@]}" --token="$token" ||
    fail "status over TLS (CA reducer-ca, name $first) with the job's token fails"
  ! ctl --token="$token" || fail "the gRPC port answers plaintext"
  echo "==> gRPC port $grpc_port: TLS with bootstrap-tls.sh's certificate for $first (plaintext refused)"
fi
if has_arg 'job_tokens_file='; then
  ctl "${tls_args[@]}" "${client_cert[@]}" --token="$token" || fail "status with the job's token fails"
  ! ctl "${tls_args[@]}" "${client_cert[@]}" || fail "the gRPC port takes a call without a token"
  ! ctl "${tls_args[@]}" "${client_cert[@]}" --token="not-$token" || fail "the gRPC port takes a call with another token"
  echo "==> gRPC port $grpc_port: job tokens from the mounted Secret (no token, another token refused)"
elif has_arg 'allow_unauthenticated(=true)?$'; then
  [[ ${#tls_args[@]} -eq 0 ]] || fail "--allow_unauthenticated with TLS: not the open overlay"
  ctl || fail "status without a token fails, with --allow_unauthenticated"
  echo "==> gRPC port $grpc_port: serves anyone, plaintext, without a token (--allow_unauthenticated)"
else
  fail "the template has neither --job_tokens_file nor --allow_unauthenticated in its args"
fi

if [[ -n "$workers" ]]; then
# The worker Job, one container per completion index, all at once, each
# with the job's token from its Secret.
worker_facts=$("${pod_run[@]}" facts "$workers" Job)
completions=$(fact "$worker_facts" completions)
pids=()
for ((rank = 0; rank < completions; rank++)); do
  mapfile -t wargs < <("${pod_run[@]}" run "$workers" Job --network="ns:/run/netns/$ns" \
    --name="reducer-exercise-rank$rank-$$" --rank=$rank --env=REDUCER_TARGET="127.0.0.1:$grpc_port" \
    --env=REDUCER_JOB="$job" --volumes_dir="$work/volumes-rank$rank" \
    "${secret_args[@]}")
  # The certificate names the shards, not the loopback address dialled here.
  if printf '%s\n' "${wargs[@]}" | grep -q '^--tls_ca_file='; then wargs+=(--tls_server_name="$first"); fi
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
fi  # workers

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
