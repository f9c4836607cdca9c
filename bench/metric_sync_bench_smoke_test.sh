#!/usr/bin/env bash
# bench/metric_sync_bench.py --smoke under Bazel: W = 2, a 1 MiB metric state
# synced twice in each form (clone + in-place all_reduce, out of place,
# MetricSync) with the bazel-built reducerd and reducer package. Passes when
# the run succeeds (every worker checks each result and that its state is
# unchanged) and the table has a row per form with both ratios; timings are
# printed, never checked. Runs under the project's Python (the first argument).
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/smoke_lib.sh"
smoke_begin "$1"
smoke_run bench/metric_sync_bench.py \
  --pythonpath="${PWD}/python" \
  --json="${out}/metric_sync_bench.json"
expect_text '== one metric sync' "no table"
expect_line '^command: .*metric_sync_bench.py --smoke' "the table names no command"
for form in clone out_of_place metric_sync; do
  expect_line "^ 2 +1 MiB +${form} +[0-9.]+ ms +[0-9.]+ MiB +[0-9]+ MiB +[0-9.]+x +([0-9.]+x|-)\$" \
    "no row for ${form}"
done
expect_output "${out}/metric_sync_bench.json"
echo PASS
