#!/usr/bin/env bash
# bench/cpu_per_gib.py --smoke under Bazel: W = 2, 1 MiB, one round, with the
# bazel-built reducerd and worker. Passes when the run succeeds (every
# worker checks its result) and the table has a row per system with numeric
# CPU figures. Runs under the project's Python (the first argument), whose
# torch the Gloo ranks use.
set -euo pipefail
python="$1"  # the project's Python (@torch_cc//:defs.bzl's PYTHON, from bench/BUILD)
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR}}"
report="${TEST_TMPDIR}/report.txt"
"${python}" bench/cpu_per_gib.py --smoke \
  --reducerd="${PWD}/server/reducerd" \
  --reducer_worker="${PWD}/bench/reducer_allreduce_worker" \
  --timeout_s=120 \
  --json="${out}/cpu_per_gib.json" | tee "${report}"
fail() { echo "FAIL: $1"; exit 1; }
grep -qF '== CPU seconds per GiB all-reduced' "${report}" || fail "no table"
grep -q '^command: bench/cpu_per_gib.py --smoke' "${report}" \
  || fail "the table does not name its command"
number='[0-9]+\.[0-9]+'
grep -Eq "^ *1 MiB +reducer +${number} (us|ms) +${number} +${number} +${number} +${number}$" \
  "${report}" || fail "no reducer row with rank, reducerd and total figures"
grep -Eq "^ *1 MiB +gloo +${number} (us|ms) +${number} +- +${number} +1\.00$" \
  "${report}" || fail "no gloo row"
[ -s "${out}/cpu_per_gib.json" ] || fail "no JSON written"
echo PASS
