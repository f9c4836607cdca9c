#!/usr/bin/env bash
# bench/quorum_bench.py --smoke under Bazel: W = 3, 1 MiB, one round, the kill
# with a 300 ms grace, no torchrun, with the bazel-built reducerd and worker.
# Passes when the run succeeds (every worker checks its results, the driver
# the contributors after the kill) and the table has its rows with figures.
# It runs in the test's temporary directory, the runfiles linked in as
# "runfiles", so that the printed command names relative paths only. Runs
# under the project's Python (the first argument).
set -euo pipefail
python="$1"  # the project's Python (@torch_cc//:defs.bzl's PYTHON, from bench/BUILD)
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR}}"
cd "${TEST_TMPDIR}"
ln -sfn "${TEST_SRCDIR}/${TEST_WORKSPACE}" runfiles
report="report.txt"
"${python}" runfiles/bench/quorum_bench.py --smoke \
  --reducerd=runfiles/server/reducerd \
  --worker=runfiles/bench/quorum_step_worker \
  --timeout_s=120 \
  --json=quorum_bench.json | tee "${report}"
cp quorum_bench.json "${out}/quorum_bench.json"
fail() { echo "FAIL: $1"; exit 1; }
grep -qF '== Quorum steps, float32 SUM, W = 3, 1 MiB' "${report}" || fail "no table"
grep -q '^command: bench/quorum_bench.py --smoke' "${report}" \
  || fail "the table does not name its command"
time='[0-9]+\.[0-9]+ (us|ms|s)'
for figure in 'plain AllReduce' 'AllReduceQuorum' 'median step' \
    'longest step from the kill' 'kill to next result'; do
  grep -Eq "^(no failure|kill) +${figure} +${time}$" "${report}" \
    || fail "no row '${figure}'"
done
grep -Eq '^no failure +quorum/plain per round +[0-9]+\.[0-9]+ +<= 1\.05 +(met|missed)$' \
  "${report}" || fail "no quorum/plain row"
grep -Eq '^no failure +quorum/plain of medians +[0-9]+\.[0-9]+$' "${report}" \
  || fail "no ratio of the medians"
grep -Eq "^kill +gap +-?${time} +<= ${time} +met$" "${report}" \
  || fail "no gap row, or the gap is over grace + 0.5 s"
grep -Eq '^kill +contributors after +0,1$' "${report}" \
  || fail "the survivors' steps after the kill are not over 0,1"
[ -s "${out}/quorum_bench.json" ] || fail "no JSON written"
echo PASS
