#!/usr/bin/env bash
# PyTorch-Ignite's own distributed tests (`-m distributed` over its whole
# tests/ignite, from its pinned sdist) on gloo and on the backend "reducer",
# the same way, as Ignite's CI runs them on gloo: 4 pytest-xdist workers
# (--dist=each), WORLD_SIZE=4, each worker one rank:
#
#   tools/ignite_suite.sh [--out=DIR] [--timeout=S] [--real-name] [PYTEST ARGS...]
#
# Builds //python:reducer and //server:reducerd, fetches the sdist
# (tools/pinned_sdist.sh), copies its tests/ into DIR (so that `import
# ignite` is the installed package), then runs them under the project's
# pinned Python (python/requirements-dev.txt) with
# tests/python/ignite_on_reducer.py: once with --on=gloo, once with every
# gloo default group made on reducer (against a reducerd of its own on a
# free loopback port), and with --real-name a third time with the backend's
# own name left visible (--reducer-name=reducer). Each run writes
# DIR/RUN.xml (junit) and DIR/RUN.log; then it prints each run's counts
# and the tests gloo passes that reducer does not; exits 0 when there are
# none (the real-name run's differences are printed, not counted: they are
# the tests that check the backend's name). --timeout: pytest-timeout's
# limit for one test (default 900 s: Ignite's classification report takes
# 3.5 minutes on 2 cores). PYTEST ARGS replace the test path tests/ignite
# (e.g. tests/ignite/distributed, -k accuracy). Modules that import
# packages the venv does not pin (clearml, fairlearn, matplotlib, nltk,
# pytorch_fid, ranx, scikit-image, torchvision, pycocotools) are counted
# as collection errors on both backends. About 8 minutes per run on 2
# cores, plus the build and the first fetch. The counts of a run are in
# docs/python.md.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly kIgnite="pytorch-ignite==0.5.5"
readonly kIgniteSha256="2c14de75c939a3cc06d2e7de00b1e0a261917ef9bd874dac2e69d789dfa9cc64"
readonly kWorld=4
out=
timeout=900
real_name=0
pytest_args=()
for arg in "$@"; do
  case "$arg" in
    --out=*) out=${arg#*=} ;;
    --timeout=*) timeout=${arg#*=} ;;
    --real-name) real_name=1 ;;
    *) pytest_args+=("$arg") ;;
  esac
done
if [[ ${#pytest_args[@]} -eq 0 ]]; then pytest_args=(tests/ignite); fi

repo=$PWD
python="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
bazel build //python:reducer //server:reducerd >&2
sdist=$(tools/pinned_sdist.sh "$kIgnite" "$kIgniteSha256")
if [[ -z "$out" ]]; then out=$(mktemp -d -t ignite-suite.XXXXXX); fi
mkdir -p "$out"
rm -rf "$out/tests" && cp -r "$sdist/tests" "$out/tests"
echo "ignite_suite: results in $out" >&2

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
bazel-bin/server/reducerd --listen="127.0.0.1:$port" >"$out/reducerd.log" 2>&1 &
reducerd=$!
trap 'kill "$reducerd" 2>/dev/null || true' EXIT

runs=(gloo reducer)
if [[ $real_name -eq 1 ]]; then runs+=(reducer-real-name); fi
for run in "${runs[@]}"; do
  case "$run" in
    gloo) flags=(--on=gloo) ;;
    reducer) flags=(--on=reducer) ;;
    reducer-real-name) flags=(--on=reducer --reducer-name=reducer) ;;
  esac
  echo "ignite_suite: $run (log: $out/$run.log)" >&2
  (cd "$out" && WORLD_SIZE=$kWorld REDUCER_TARGET="127.0.0.1:$port" \
     PYTHONPATH="$repo/bazel-bin/python:$repo/tests/python" \
     "$python" -m pytest -p no:cacheprovider -p ignite_on_reducer "${flags[@]}" \
       -m distributed --dist=each --tx "$kWorld*popen//python=$python" \
       --timeout="$timeout" --timeout-method=thread --continue-on-collection-errors \
       -q -rfE --color=no --junitxml="$out/$run.xml" "${pytest_args[@]}" \
       >"$out/$run.log" 2>&1) || true  # failures are counted below
  tail -n 1 "$out/$run.log"
done
status=0
"$python" tests/python/ignite_on_reducer.py "$out/gloo.xml" "$out/reducer.xml" || status=1
if [[ $real_name -eq 1 ]]; then
  "$python" tests/python/ignite_on_reducer.py "$out/gloo.xml" "$out/reducer-real-name.xml" || true
fi
exit "$status"
