#!/usr/bin/env bash
# bench/metric_sync_bench.py --smoke under Bazel: W = 2, a 1 MiB metric state
# synced twice in each form (clone + in-place all_reduce, out of place,
# MetricSync) with the bazel-built reducerd and reducer package. Passes when
# the run succeeds (every worker checks each result and that its state is
# unchanged) and the table has a row per form with both ratios; timings are
# printed, never checked. Runs under the project's Python (the first argument).
set -euo pipefail
python="$1"  # the project's Python (@torch_cc//:defs.bzl's PYTHON, from bench/BUILD)
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR}}"
report="${TEST_TMPDIR}/report.txt"
"${python}" bench/metric_sync_bench.py --smoke \
  --reducerd="${PWD}/server/reducerd" \
  --pythonpath="${PWD}/python" \
  --timeout_s=120 \
  --json="${out}/metric_sync_bench.json" | tee "${report}"
fail() { echo "FAIL: $1"; exit 1; }
grep -qF '== one metric sync' "${report}" || fail "no table"
grep -q '^command: .*metric_sync_bench.py --smoke' "${report}" || fail "the table names no command"
for form in clone out_of_place metric_sync; do
  grep -Eq "^ 2 +1 MiB +${form} +[0-9.]+ ms +[0-9.]+ MiB +[0-9]+ MiB +[0-9.]+x +([0-9.]+x|-)\$" "${report}" \
    || fail "no row for ${form}"
done
[ -s "${out}/metric_sync_bench.json" ] || fail "no JSON written"
echo PASS
