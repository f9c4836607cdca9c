#!/usr/bin/env bash
# torch's own distributed tests (DistributedTest._DistTestBase, the whole
# suite) on gloo and on the backend "reducer", the same way, on the CPU:
#
#   tools/torch_suite.sh [--world-size=N] [--out=DIR] [RUNNER ARGS...]
#
# Builds //python:reducer and //server:reducerd, then runs
# tests/python/torch_suite_runner.py under the project's pinned Python
# (python/requirements-dev.txt) once per backend, with W = 3 processes per
# test unless --world-size says otherwise, reducer against a reducerd of its
# own on a free loopback port. Writes DIR/gloo.jsonl, DIR/reducer.jsonl (one
# line per test: outcome, skip reason or failure) and each run's log beside
# them (DIR: a new temporary folder unless --out names one, printed first),
# prints each backend's counts and the tests gloo passes that reducer does
# not. Further arguments go to the runner
# (e.g. -k all_gather, --tests test_barrier). About 4 minutes on 2 cores.
# Exits 0 when neither run had a test that failed; the differences are
# listed in docs/python.md.
set -euo pipefail
cd "$(dirname "$0")/.."

world_size=3
out=
runner_args=()
for arg in "$@"; do
  case "$arg" in
    --world-size=*) world_size=${arg#*=} ;;
    --out=*) out=${arg#*=} ;;
    *) runner_args+=("$arg") ;;
  esac
done

python="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
bazel build //python:reducer //server:reducerd >&2
if [[ -z "$out" ]]; then out=$(mktemp -d -t torch-suite.XXXXXX); fi
mkdir -p "$out"
echo "torch_suite: results in $out" >&2
export PYTHONPATH="$PWD/bazel-bin/python:$PWD/tests/python"

status=0
for backend in gloo reducer; do
  echo "torch_suite: $backend, W = $world_size (log: $out/$backend.log)" >&2
  "$python" tests/python/torch_suite_runner.py --backend="$backend" \
    --world-size="$world_size" --reducerd="$PWD/bazel-bin/server/reducerd" \
    --jsonl="$out/$backend.jsonl" "${runner_args[@]}" >"$out/$backend.log" 2>&1 || status=1
  tail -n 1 "$out/$backend.log"
done
"$python" tests/python/torch_suite_runner.py --compare "$out/gloo.jsonl" "$out/reducer.jsonl"
exit "$status"
