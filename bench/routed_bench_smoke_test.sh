#!/usr/bin/env bash
# bench/routed_bench.py --smoke under Bazel: W = 2, 4 KiB, reduce against
# all_reduce and all_to_all_single against Gloo through torch.distributed,
# with the bazel-built reducerd and reducer package. Passes when the run
# succeeds (every worker checks its results) and both tables have a gRPC row
# (the shm rows are skipped, with the reason, where the same-host path cannot
# run). Runs under the project's Python (the first argument: torch from the
# package index, which //python:reducer's backend is built against).
set -euo pipefail
python="$1"  # the project's Python (@torch_cc//:defs.bzl's PYTHON, from bench/BUILD)
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR}}"
report="${TEST_TMPDIR}/report.txt"
"${python}" bench/routed_bench.py --smoke \
  --reducerd="${PWD}/server/reducerd" \
  --pythonpath="${PWD}/python" \
  --timeout_s=120 \
  --json="${out}/routed_bench.json" | tee "${report}"
fail() { echo "FAIL: $1"; exit 1; }
for table in '== 1. reduce to rank 0' '== 2. all_to_all_single'; do
  grep -qF "${table}" "${report}" || fail "no table '${table}'"
done
[ "$(grep -c '^command: .*routed_bench.py --smoke' "${report}")" -eq 2 ] \
  || fail "not every table names its command"
grep -Eq '^ *4 KiB +grpc +0 ' "${report}" || fail "no gRPC reduce row on the root"
grep -Eq '^ *4 KiB +grpc +1 ' "${report}" || fail "no gRPC reduce row on a non-root"
grep -Eq '^ *4 KiB +grpc +[0-9.]+ (us|ms) ' "${report}" || fail "no gRPC all_to_all row"
[ -s "${out}/routed_bench.json" ] || fail "no JSON written"
if grep -q '^path shm skipped:' "${report}"; then
  echo "SKIP shm rows: $(grep -m1 '^path shm skipped:' "${report}" | cut -d: -f2-)"
else
  grep -Eq '^ *4 KiB +shm +0 ' "${report}" || fail "no shm reduce row"
fi
echo PASS
