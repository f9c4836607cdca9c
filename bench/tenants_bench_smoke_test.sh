#!/usr/bin/env bash
# bench/tenants_bench.py --smoke under Bazel: one short round of each hostile
# case (budget 256 MiB, 20 timed calls a healthy rank) with the bazel-built
# reducerd, healthy_tenant and hostile_tenant. Passes when every round ran,
# the table has a row of figures for each case, and in every row the healthy
# tenants were refused nothing, got no wrong result, and reducerd's peak RSS
# stayed within its budget plus what the budget does not count; when the
# flood of malformed calls left at most 100 warning lines (they are
# rate-limited); and when Joins naming the hostile tenant's own session (a
# wrong world size, an exact retry) left its job working. The latency ratios are printed, not checked (two cores,
# one short round). It runs in the test's temporary directory, the runfiles
# linked in as "runfiles", so that the printed command names relative paths
# only. Runs under the project's Python (the first argument).
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/smoke_lib.sh"
smoke_begin "$1"
cd "${TEST_TMPDIR}"
ln -sfn "${TEST_SRCDIR}/${TEST_WORKSPACE}" runfiles
reducerd=runfiles/server/reducerd
smoke_run runfiles/bench/tenants_bench.py \
  --healthy_tenant=runfiles/bench/healthy_tenant \
  --hostile_tenant=runfiles/bench/hostile_tenant \
  --json=tenants_bench.json
cp tenants_bench.json "${out}/tenants_bench.json"
expect_text '== Four tenants on one reducerd' "no table"
expect_line '^command: bench/tenants_bench.py --smoke' "the table does not name its command"
time='[0-9]+\.[0-9]+ (us|ms)'
for case in none unread malformed jobs memory silent join; do
  expect_line "^${case} +${time} +${time} +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ " \
    "no row of figures for '${case}' (were all its calls refused?)"
  expect_line "^${case} +${time} +${time} +[0-9.]+ +[0-9.]+ +0 +0 +[0-9]+ MiB yes " \
    "'${case}': a healthy tenant was refused or got a wrong result, or reducerd went over its budget plus 150 MiB"
done
for case in unread malformed jobs memory silent join; do
  expect_line "^${case}: hostile held " "the hostile tenant of '${case}' never engaged"
done
expect_line "^join: .*the job's all-reduce after it: OK; rank 0's exact retry: OK; all-reduce after it: OK; then 0 of " \
  "the hostile tenant's Joins naming its own session broke its job"
warnings="$(awk '$1 == "malformed" { print $(NF - 1) }' "${report}")"
[ -n "${warnings}" ] && [ "${warnings}" -le 100 ] \
  || fail "a flood of malformed calls left ${warnings:-no count of} warning lines (over 100)"
expect_output "${out}/tenants_bench.json"
echo PASS
