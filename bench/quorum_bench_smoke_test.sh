#!/usr/bin/env bash
# bench/quorum_bench.py --smoke under Bazel: W = 3, 1 MiB, one round, the kill
# with a 300 ms grace, no torchrun, with the bazel-built reducerd and worker.
# Passes when the run succeeds (every worker checks its results, the driver
# the contributors after the kill) and the table has its rows with figures.
# It runs in the test's temporary directory, the runfiles linked in as
# "runfiles", so that the printed command names relative paths only. Runs
# under the project's Python (the first argument).
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/smoke_lib.sh"
smoke_begin "$1"
cd "${TEST_TMPDIR}"
ln -sfn "${TEST_SRCDIR}/${TEST_WORKSPACE}" runfiles
reducerd=runfiles/server/reducerd
smoke_run runfiles/bench/quorum_bench.py \
  --worker=runfiles/bench/quorum_step_worker \
  --json=quorum_bench.json
cp quorum_bench.json "${out}/quorum_bench.json"
expect_text '== Quorum steps, float32 SUM, W = 3, 1 MiB' "no table"
expect_line '^command: bench/quorum_bench.py --smoke' "the table does not name its command"
time='[0-9]+\.[0-9]+ (us|ms|s)'
for figure in 'plain AllReduce' 'AllReduceQuorum' 'median step' \
    'longest step from the kill' 'kill to next result'; do
  expect_line "^(no failure|kill) +${figure} +${time}$" "no row '${figure}'"
done
expect_line '^no failure +quorum/plain per round +[0-9]+\.[0-9]+ +<= 1\.05 +(met|missed)$' \
  "no quorum/plain row"
expect_line '^no failure +quorum/plain of medians +[0-9]+\.[0-9]+$' "no ratio of the medians"
expect_line "^kill +gap +-?${time} +<= ${time} +met$" \
  "no gap row, or the gap is over grace + 0.5 s"
expect_line '^kill +contributors after +0,1$' \
  "the survivors' steps after the kill are not over 0,1"
expect_output "${out}/quorum_bench.json"
echo PASS
