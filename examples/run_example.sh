#!/usr/bin/env bash
# Runs N ranks of an example worker against a running reducerd:
#
#   bazel-bin/server/reducerd &                      # listens on 127.0.0.1:50051
#   examples/run_example.sh metric_sync_worker 4
#   examples/run_example.sh allreduce_worker 2 --steps=10
#
# Builds //examples:<name> with bazel if bazel-bin/examples/<name> is missing
# or older than its source. Extra arguments go to every worker. The target is
# $REDUCER_TARGET (default 127.0.0.1:50051), the job $REDUCER_JOB (default a
# fresh name). Exits nonzero if any rank failed.
set -uo pipefail

usage() {
  echo "usage: $0 <metric_sync_worker|allreduce_worker|quorum_worker> <num_ranks> [worker flags...]" >&2
  exit 2
}

[[ $# -ge 2 ]] || usage
name="$1"
ranks="$2"
shift 2
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || usage
[[ -f "$(dirname "$0")/${name}.cc" ]] || { echo "$0: no example named ${name}" >&2; usage; }

cd "$(dirname "$0")/.."
binary="bazel-bin/examples/${name}"
if [[ ! -x "$binary" || "examples/${name}.cc" -nt "$binary" ]]; then
  echo "building //examples:${name} ..." >&2
  bazel build "//examples:${name}" || exit 1
fi

target="${REDUCER_TARGET:-127.0.0.1:50051}"
job="${REDUCER_JOB:-${name}-$$-$(date +%s)}"

pids=()
for ((rank = 0; rank < ranks; ++rank)); do
  "$binary" --target="$target" --job="$job" --rank="$rank" \
      --world_size="$ranks" "$@" &
  pids+=("$!")
done

failed=0
for rank in "${!pids[@]}"; do
  if ! wait "${pids[$rank]}"; then
    echo "$0: rank ${rank} failed" >&2
    failed=1
  fi
done
exit "$failed"
