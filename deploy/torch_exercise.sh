#!/usr/bin/env bash
# Runs the PyTorch training example as the rendered manifests declare it,
# for real, with the images, and checks that it trains as gloo does:
#
#   deploy/torch_exercise.sh SHARDS.yaml TORCH_JOB.yaml
#
# SHARDS.yaml is the rendered overlays/two-shards (or any shard overlay
# whose replicas the Job's REDUCER_TARGET or relay names), TORCH_JOB.yaml
# the rendered overlays/torch-job (each pod with its relay sidecar; what
# deploy/test.sh runs) or overlays/torch-job-direct (the ranks dial the
# shards themselves).
#
# Every pod gets a network namespace of its own, joined to the others by a
# bridge in one more namespace (addresses 10.244.0.0/24, in these
# namespaces only), and the names the cluster's DNS would give, as
# /etc/hosts lines: reducer-N.reducer for shard N, and the Job's
# NAME-I.SUBDOMAIN for its pod I. Each shard runs with exactly its
# template's command, args, env, user, read-only root, dropped
# capabilities and volumes (deploy/validate/pod_run.py), with the Secrets
# made as docs/deployment.md has operators make them: the job's token
# (its hash the `JOB` line of reducer-job-tokens, JOB the Job's name), and
# bootstrap-tls.sh's reducer-tls and reducer-ca. Each pod of the Job runs
# its relay init container first where it has one (restartPolicy Always:
# a sidecar, started in the pod's namespace and waited for on its
# startupProbe's gRPC port), then its torch container (torchrun, node rank
# the completion index; sharing the relay's network and IPC namespaces, as
# a pod's containers do), all pods at once. Checks: both shards pass their
# readiness probe; every pod's torchrun ends with exit code 0; rank 0
# printed the validation error over every rank's values (NNODES x
# nproc_per_node x 64 x 4) and the parameters' checksum, which every rank
# computed alike; a gloo run of the same script with the same arguments
# and world size, in the same image (one container, torchrun
# --nproc_per_node=WORLD --backend=gloo), ends with the same parameters
# within kTolerance (relative and absolute; gloo adds the four gradients in
# another order than reducerd's rank order, so the last bits may differ)
# and a validation error within kTolerance too. The one argument added to
# the template's is the script's --params_out (rank 0's parameters, to a
# folder mounted for it).
#
# Prints "==> " per check; exits 0 when all passed. Needs root (ip netns),
# openssl, the images (deploy/image/build.sh, deploy/image/torch/build.sh)
# and bazel-bin/tools/reducerctl. About 2 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/image/podman.sh

[[ $# -eq 2 ]] || { echo "usage: $0 SHARDS.yaml TORCH_JOB.yaml" >&2; exit 2; }
shards=$1 job_yaml=$2
readonly kSubnet=10.244.0
readonly kStartLimit=60   # seconds: a shard's readiness, a relay's startup
readonly kTrainLimit=300  # seconds: the Job's pods, and the gloo run
readonly kTolerance=1e-5  # the parameters against gloo's (as tests/python's DDP tests)
validate_venv=$(tools/pinned_venv.sh deploy/validate/requirements.txt)
pod_run=("$validate_venv/bin/python" deploy/validate/pod_run.py)

tag="rte$$"  # in every name this run makes, for the cleanup
work=$(mktemp -d /tmp/reducer-torch-exercise.XXXXXX)
chmod 0755 "$work"
namespaces=()
cleanup() {
  for c in $(podman ps -a --format '{{.Names}}' | grep -- "-$tag\$" || true); do
    podman rm -f -t 0 "$c" >/dev/null 2>&1 || true
  done
  for n in "${namespaces[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "torch_exercise: $*" >&2
  for c in $(podman ps -a --format '{{.Names}}' | grep -- "-$tag\$" || true); do
    echo "torch_exercise: $c's log:" >&2
    podman logs "$c" 2>&1 | tail -15 | sed 's/^/  | /' >&2
  done
  exit 1
}

fact() { awk -v k="$2" '$1 == k {print $2}' <<<"$1"; }

# The cluster's network: a bridge in a namespace of its own; add_pod NAME
# HOST makes the pod namespace NAME-$tag with address $kSubnet.HOST.
switch="switch-$tag"
ip netns add "$switch"
namespaces+=("$switch")
ip -n "$switch" link add br0 type bridge
ip -n "$switch" link set br0 up
add_pod() {
  local ns="$1-$tag"
  ip netns add "$ns"
  namespaces+=("$ns")
  ip -n "$ns" link set lo up
  ip -n "$switch" link add "v$2" type veth peer name eth0 netns "$ns"
  ip -n "$switch" link set "v$2" master br0 up
  ip -n "$ns" addr add "$kSubnet.$2/24" dev eth0
  ip -n "$ns" link set eth0 up
}

shard_facts=$("${pod_run[@]}" facts "$shards" StatefulSet)
job_facts=$("${pod_run[@]}" facts "$job_yaml" Job)
replicas=$("$validate_venv/bin/python" -c 'import sys, yaml
print(next(o for o in yaml.safe_load_all(open(sys.argv[1])) if o and o["kind"] == "StatefulSet")["spec"]["replicas"])' "$shards")
first=$(fact "$shard_facts" first)            # NAME-0.SERVICE
shard_name=${first%%-0.*} service=${first#*.}
readiness=$(fact "$shard_facts" readiness)
job=$(fact "$job_facts" name)
subdomain=$(fact "$job_facts" subdomain)
completions=$(fact "$job_facts" completions)
[[ "$(fact "$job_facts" parallelism)" == "$completions" ]] ||
  fail "the Job's parallelism is not its completions: its pods would not all run at once"
relay=0
if "${pod_run[@]}" facts "$job_yaml" Job --container=relay >/dev/null 2>&1; then relay=1; fi

# Every pod's address, as /etc/hosts lines (--add-host).
hosts=()
for ((i = 0; i < replicas; i++)); do hosts+=(--add-host="$shard_name-$i.$service:$kSubnet.$((10 + i))"); done
for ((i = 0; i < completions; i++)); do hosts+=(--add-host="$job-$i.$subdomain:$kSubnet.$((100 + i))"); done

# The Secrets: the job's token (the Job's name is its tokens-file line),
# the shards' certificate for every shard's name and the workers' CA.
secrets=$work/secrets
token_secret=$("$validate_venv/bin/python" -c 'import sys, yaml
job = next(o for o in yaml.safe_load_all(open(sys.argv[1])) if o and o["kind"] == "Job")
for v in job["spec"]["template"]["spec"]["volumes"]:
    if "secret" in v and v["secret"]["secretName"] != "reducer-ca":
        print(v["secret"]["secretName"])' "$job_yaml")
mkdir -p "$secrets/reducer-job-tokens" "$secrets/$token_secret"
token=$(openssl rand -hex 32)
printf '%s %s\n' "$job" "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$secrets/reducer-job-tokens/tokens"
printf %s "$token" >"$secrets/$token_secret/token"
deploy/k8s/bootstrap-tls.sh --shards="$replicas" --name="$shard_name" "$work/tls" >/dev/null
"${pod_run[@]}" secrets "$work/tls/secrets.yaml" "$secrets"
secret_args=()
for d in "$secrets"/*; do secret_args+=(--secret="$(basename "$d")=$d"); done

# The shards, each in its pod's namespace.
for ((i = 0; i < replicas; i++)); do
  add_pod "$shard_name-$i" $((10 + i))
  mapfile -t run_args < <("${pod_run[@]}" run "$shards" StatefulSet \
    --network="ns:/run/netns/$shard_name-$i-$tag" --name="$shard_name-$i-$tag" \
    --volumes_dir="$work/volumes-$shard_name-$i" "${secret_args[@]}")
  podman run -d --hostname="$shard_name-$i" "${hosts[@]}" "${run_args[@]}" >/dev/null
done
# probe NS PORT: kubelet's gRPC probe, from the pod's network.
probe() {
  ip netns exec "$1" bazel-bin/tools/reducerctl --target="127.0.0.1:$2" --timeout=1s health >/dev/null 2>&1
}
await_probe() {  # NS PORT CONTAINER WHAT
  local deadline=$((SECONDS + kStartLimit))
  until probe "$1" "$2"; do
    [[ $(podman inspect --format '{{.State.Running}}' "$3") == true ]] || fail "$4 exited"
    ((SECONDS < deadline)) || fail "$4: its probe (gRPC, port $2) never passed"
    sleep 0.5
  done
}
for ((i = 0; i < replicas; i++)); do
  await_probe "$shard_name-$i-$tag" "$readiness" "$shard_name-$i-$tag" "shard $shard_name-$i"
done
echo "==> $replicas shards ready: TLS for ${shard_name}-{0..$((replicas - 1))}.$service, job tokens (the line $job)"

# The Job's pods: the relay sidecar first, where there is one, then torchrun.
pids=()
for ((i = 0; i < completions; i++)); do
  pod="$job-$i"
  add_pod "$pod" $((100 + i))
  common=(--network="ns:/run/netns/$pod-$tag" --rank="$i" "${secret_args[@]}")
  if [[ $relay -eq 1 ]]; then
    mapfile -t relay_args < <("${pod_run[@]}" run "$job_yaml" Job --container=relay \
      --name="$pod-relay-$tag" --volumes_dir="$work/volumes-$pod-relay" "${common[@]}")
    [[ $i -eq 0 ]] && echo "    podman run ${relay_args[*]}"
    podman run -d "${hosts[@]}" "${relay_args[@]}" >/dev/null
    startup=$("${pod_run[@]}" facts "$job_yaml" Job --container=relay | awk '$1 == "ports" {print $2}' |
      tr ',' '\n' | sed -n 's/^relay-health=//p')
    await_probe "$pod-$tag" "$startup" "$pod-relay-$tag" "the relay of $pod"
  fi
  mapfile -t torch_args < <("${pod_run[@]}" run "$job_yaml" Job --container=torch \
    --name="$pod-torch-$tag" --volumes_dir="$work/volumes-$pod-torch" "${common[@]}")
  # A pod's containers share its IPC namespace too (the same-host path).
  ipc=()
  [[ $relay -eq 0 ]] || ipc=(--ipc="container:$pod-relay-$tag")
  [[ $i -eq 0 ]] && echo "    podman run ${torch_args[*]}"
  mkdir -p "$work/out-$pod"
  chown 65532:65532 "$work/out-$pod"
  timeout "$kTrainLimit" podman run --rm "${hosts[@]}" "${ipc[@]}" --volume="$work/out-$pod:/out" "${torch_args[@]}" \
    --params_out=/out/params.pt >"$work/$pod.log" 2>&1 &
  pids+=($!)
done
for ((i = 0; i < completions; i++)); do
  wait "${pids[$i]}" || { sed 's/^/  | /' "$work/$job-$i.log" >&2; fail "pod $job-$i's torchrun failed"; }
done
mode="each rank dialling the shards"
[[ $relay -eq 0 ]] || mode="through each pod's relay"
nproc=$(printf '%s\n' "${torch_args[@]}" | sed -n 's/^--nproc_per_node=//p')
world=$((completions * nproc))
result=$(grep -ho "validation mse=[0-9.]* over $((world * 64 * 4)) values; params sha256=[0-9a-f]*" \
  "$work/$job"-*.log || true)
[[ $(grep -c . <<<"$result") -eq 1 ]] ||
  { cat "$work/$job"-*.log >&2; fail "no single result of rank 0 over $world ranks' values"; }
echo "==> the Job's $completions pods trained, $world ranks, $mode: $result"

# The reference: the same script and arguments on gloo, W ranks in one
# container of the same image.
image=$(printf '%s\n' "${torch_args[@]}" | grep -v '^-' | head -1)
script_args=()
seen=0
for a in "${torch_args[@]}"; do
  [[ $seen -eq 1 ]] && script_args+=("$a")
  [[ "$a" == *.py ]] && { seen=1; script="$a"; }
done
mkdir -p "$work/out-gloo"
chown 65532:65532 "$work/out-gloo"
timeout "$kTrainLimit" podman run --rm --network=none --name="gloo-$tag" --read-only --tmpfs=/tmp \
  --user=65532:65532 --volume="$work/out-gloo:/out" --entrypoint=/usr/local/bin/torchrun "$image" \
  --nproc_per_node="$world" --master_addr=127.0.0.1 "$script" "${script_args[@]}" --backend=gloo \
  --params_out=/out/params.pt >"$work/gloo.log" 2>&1 || { cat "$work/gloo.log" >&2; fail "the gloo reference failed"; }
reference=$(grep -ho "validation mse=[0-9.]* over $((world * 64 * 4)) values" "$work/gloo.log" || true)
[[ -n "$reference" ]] || { cat "$work/gloo.log" >&2; fail "the gloo reference printed no result"; }
compared=$(podman run --rm --network=none --read-only --user=65532:65532 \
  --volume="$work/out-$job-0:/reducer:ro" --volume="$work/out-gloo:/gloo:ro" \
  --entrypoint=/usr/bin/python3 "$image" -c '
import sys, torch
tolerance = float(sys.argv[1])
ours, gloo = torch.load("/reducer/params.pt"), torch.load("/gloo/params.pt")
assert len(ours) == len(gloo) and all(a.shape == b.shape for a, b in zip(ours, gloo)), "shapes differ"
worst = max((a - b).abs().max().item() for a, b in zip(ours, gloo))
close = all(torch.allclose(a, b, rtol=tolerance, atol=tolerance) for a, b in zip(ours, gloo))
print(f"{sum(a.numel() for a in ours)} parameters, largest difference {worst:.3g}")
sys.exit(0 if close else 1)' "$kTolerance" 2>&1) || fail "the parameters differ from gloo's beyond $kTolerance: $compared"
mse() { sed -n 's/.*validation mse=\([0-9.]*\).*/\1/p' <<<"$1"; }
python3 -c 'import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(abs(a - b) > t * (1 + abs(b)))' \
  "$(mse "$result")" "$(mse "$reference")" "$kTolerance" ||
  fail "the validation error differs from gloo's: reducer $(mse "$result"), gloo $(mse "$reference")"
echo "==> gloo, $world ranks, the same script and arguments: $reference; $compared (tolerance $kTolerance)"
