#!/usr/bin/env bash
# The deploy/ checks, in order, each a step that must pass for the next:
#
#   deploy/test.sh [--junit=FILE]
#
#   image-build      deploy/image/build.sh (Bazel build, rootfs, podman build)
#   image-test       deploy/image/image_test.sh (restricted run, health, W = 2, SIGTERM)
#   render-OVERLAY   kubectl kustomize of each deploy/k8s overlay, with
#                    nothing on stderr (no deprecated field)
#   set-image        deploy/k8s/set_image_test.sh (a registry set by
#                    kustomize keeps the pinned tag)
#   flag-help        reducerd's and the worker's --helpfull, from the image
#   python-deps      deploy/validate's Python packages, as requirements.txt
#                    pins them, in the venv tools/pinned_venv.sh builds (kept
#                    between runs; built again only when the file changes)
#   bootstrap-tls    deploy/k8s/bootstrap_tls_test.sh (the certificates'
#                    names and uses, the Secrets' YAML)
#   validate         schemas (the custom resources' vendored), Kubernetes
#                    client round trip, policy, flags, shards, TLS and job
#                    tokens everywhere but open and worker-job-open
#   checks-test      deploy/validate/checks_test.py (unittest)
#   exercise         deploy/exercise.sh of one-shard and worker-job (the
#                    secure default: TLS and tokens, bootstrap-tls.sh's
#                    certificates)
#   exercise-open    deploy/exercise.sh of open and worker-job-open
#                    (plaintext, no tokens)
#   exercise-mtls    deploy/exercise.sh of mtls (mutual TLS, reducerctl)
#   torch-image-build  deploy/image/torch/build.sh (the base once per
#                    inputs: several GB, up to kTorchBuildLimit the first
#                    time; then the reducer wheel and the example on it)
#   torch-image-test deploy/image/torch/image_test.sh (pins, contents,
#                    restricted imports, DDP on reducer as on gloo)
#   torch-exercise   deploy/torch_exercise.sh of two-shards and the PyTorch
#                    Job: $REDUCER_TORCH_JOB_OVERLAY, by default
#                    torch-job (each pod's ranks through its relay
#                    sidecar); torch-job-direct has the ranks dial the
#                    shards themselves
#
# Run as root (podman, ip netns) after tools/setup.sh --deploy. --junit
# writes one test case per step (a failed step and the steps it stopped, as
# failures), for .ci/run's count. Prints each step's time and its "==> "
# lines; exits 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
source deploy/image/podman.sh

readonly kStepLimit=300   # seconds, any one step
readonly kTorchBuildLimit=1800   # seconds, the PyTorch image's first build
readonly kTorchStepLimit=600     # seconds, its test and exercise (torch imports are slow on 2 cores)
overlays=(one-shard four-shards two-shards mtls open worker-job worker-job-open cert-manager monitoring
  torch-job torch-job-direct)
# The PyTorch Job that torch-exercise runs.
readonly kTorchJobOverlay=${REDUCER_TORCH_JOB_OVERLAY:-torch-job}
# The overlays that are plaintext without tokens, on purpose.
readonly kOpenOverlays=open,worker-job-open

suite=deploy/test
source packaging/lib/steps.sh "$@"
trap 'rm -rf "$work"' EXIT
rendered="$work/rendered"
mkdir -p "$rendered"
# bash -c, so that the exported functions below can be steps too.
step_prefix=(timeout "$kStepLimit" bash -c '"$@"' step)
planned_steps=(image-build image-test)
for o in "${overlays[@]}"; do planned_steps+=("render-$o"); done
planned_steps+=(set-image flag-help python-deps bootstrap-tls validate checks-test exercise exercise-open
  exercise-mtls torch-image-build torch-image-test torch-exercise)

# kubectl prints a warning for each deprecated kustomize field: none allowed.
render() {
  kubectl kustomize "deploy/k8s/overlays/$1" >"$rendered/$1.yaml" 2>"$rendered/$1.stderr" || {
    cat "$rendered/$1.stderr"; return 1; }
  if [[ -s "$rendered/$1.stderr" ]]; then cat "$rendered/$1.stderr"; return 1; fi
  echo "==> $(grep -c '^kind:' "$rendered/$1.yaml") objects"
}

# --helpfull exits 1 after printing; what counts is that it printed flags.
flag_help() {
  podman run --rm --network=none reducer:latest --helpfull >"$rendered/reducerd.help" 2>&1
  podman run --rm --network=none --entrypoint=/usr/bin/metric_sync_worker reducer:latest \
    --helpfull >"$rendered/worker.help" 2>&1
  grep -q -- '--health_listen' "$rendered/reducerd.help" && grep -q -- '--allow_unauthenticated' "$rendered/reducerd.help" &&
    grep -q -- '--world_size' "$rendered/worker.help" && grep -q -- '--token_file' "$rendered/worker.help"
}

readonly kValidateRequirements=deploy/validate/requirements.txt

# Builds deploy/validate's venv if it is missing; the steps after it find it
# the same way, at once.
python_deps() {
  local venv
  venv=$(tools/pinned_venv.sh "$kValidateRequirements") || return 1
  "$venv/bin/python" -c 'import kubernetes, kubernetes_validate, yaml' || return 1
  echo "==> $(basename "$venv"): $(grep -c '^[A-Za-z0-9_.-]*==' "$kValidateRequirements") pinned packages"
}

# deploy/validate's Python, with its pinned packages.
validate_python() {
  local venv
  venv=$(tools/pinned_venv.sh "$kValidateRequirements") || return 1
  "$venv/bin/python" "$@"
}

validate() {
  local args=() o
  # $overlays_list: the array, exported as a string for the step's own bash.
  for o in $overlays_list; do args+=("$o=$rendered/$o.yaml"); done
  validate_python deploy/validate/validate.py --reducerd_help="$rendered/reducerd.help" \
    --worker_help="$rendered/worker.help" --shards=four-shards --workers=worker-job \
    --pairs=two-shards:torch-job,two-shards:torch-job-direct \
    --open="$kOpenOverlays" "${args[@]}"
}

checks_test() {
  local out rc
  out=$(DEPLOY_RENDERED="$rendered" validate_python deploy/validate/checks_test.py 2>&1)
  rc=$?
  printf '%s\n' "$out"
  [[ $rc -eq 0 ]] || return 1
  echo "==> checks_test.py: $(sed -n 's/^# pass //p' <<<"$out") tests passed"
}

export -f podman render flag_help python_deps validate_python validate checks_test
export kValidateRequirements kOpenOverlays
export overlays_list="${overlays[*]}"
export rendered
step image-build deploy/image/build.sh
step image-test deploy/image/image_test.sh
for o in "${overlays[@]}"; do step "render-$o" render "$o"; done
step set-image deploy/k8s/set_image_test.sh
step flag-help flag_help
step python-deps python_deps
step bootstrap-tls deploy/k8s/bootstrap_tls_test.sh
step validate validate
step checks-test checks_test
step exercise deploy/exercise.sh "$rendered/one-shard.yaml" "$rendered/worker-job.yaml"
step exercise-open deploy/exercise.sh "$rendered/open.yaml" "$rendered/worker-job-open.yaml"
step exercise-mtls deploy/exercise.sh "$rendered/mtls.yaml"
step_prefix=(timeout "$kTorchBuildLimit" bash -c '"$@"' step)
step torch-image-build deploy/image/torch/build.sh
step_prefix=(timeout "$kTorchStepLimit" bash -c '"$@"' step)
step torch-image-test deploy/image/torch/image_test.sh
step torch-exercise deploy/torch_exercise.sh "$rendered/two-shards.yaml" "$rendered/$kTorchJobOverlay.yaml"
finish
