#!/usr/bin/env bash
# bench/python_bench.py --smoke under Bazel: W = 2, 4 B and 4 KiB all-reduces
# of the torch backend against Gloo, 4 B per call through the C++ client, the
# Python client and the torch backend, 3 DDP steps per system and bucket cap,
# with the bazel-built reducerd, reducer package and C++ worker. Passes when
# the run succeeds (every worker checks its results, the DDP models on Reducer
# and Gloo agree) and the output has all three tables with a gRPC row each
# (the shm rows are skipped, with the reason, where the same-host path cannot
# run). Runs under the project's Python (the first argument: torch and numpy
# from the package index, which //python:reducer's backend is built against).
set -euo pipefail
python="$1"  # the project's Python (@torch_cc//:defs.bzl's PYTHON, from bench/BUILD)
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR}}"
report="${TEST_TMPDIR}/report.txt"
"${python}" bench/python_bench.py --smoke \
  --reducerd="${PWD}/server/reducerd" \
  --reducer_worker="${PWD}/bench/reducer_allreduce_worker" \
  --pythonpath="${PWD}/python" \
  --timeout_s=120 \
  --json="${out}/python_bench.json" | tee "${report}"
fail() { echo "FAIL: $1"; exit 1; }
for table in '== 1. torch.distributed.all_reduce' '== 2. Python' '== 3. DDP step'; do
  grep -qF "${table}" "${report}" || fail "no table '${table}'"
done
[ "$(grep -c '^command: .*python_bench.py --smoke' "${report}")" -eq 3 ] \
  || fail "not every table names its command"
grep -Eq '^4 KiB +grpc +10 ' "${report}" || fail "no 4 KiB gRPC all_reduce row"
grep -Eq '^grpc +20 ' "${report}" || fail "no gRPC per-call row"
for system in reducer gloo none; do
  grep -Eq "^1 +${system} " "${report}" || fail "no DDP row for ${system} at cap 1"
done
[ -s "${out}/python_bench.json" ] || fail "no JSON written"
if grep -q '^path shm skipped:' "${report}"; then
  echo "SKIP shm rows: $(grep -m1 '^path shm skipped:' "${report}" | cut -d: -f2-)"
else
  grep -Eq '^shm +20 ' "${report}" || fail "no shm per-call row"
fi
echo PASS
