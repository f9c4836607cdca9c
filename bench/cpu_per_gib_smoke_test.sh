#!/usr/bin/env bash
# bench/cpu_per_gib.py --smoke under Bazel: W = 2, 1 MiB, one round, with the
# bazel-built reducerd and worker. Passes when the run succeeds (every
# worker checks its result) and the table has a row per system with numeric
# CPU figures. Runs under the project's Python (the first argument), whose
# torch the Gloo ranks use.
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/smoke_lib.sh"
smoke_begin "$1"
smoke_run bench/cpu_per_gib.py \
  --reducer_worker="${PWD}/bench/reducer_allreduce_worker" \
  --json="${out}/cpu_per_gib.json"
expect_text '== CPU seconds per GiB all-reduced' "no table"
expect_line '^command: bench/cpu_per_gib.py --smoke' "the table does not name its command"
number='[0-9]+\.[0-9]+'
expect_line "^ *1 MiB +reducer +${number} (us|ms) +${number} +${number} +${number} +${number}$" \
  "no reducer row with rank, reducerd and total figures"
expect_line "^ *1 MiB +gloo +${number} (us|ms) +${number} +- +${number} +1\.00$" "no gloo row"
expect_output "${out}/cpu_per_gib.json"
echo PASS
