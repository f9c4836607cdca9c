#!/usr/bin/env bash
# bench/network_bench.py --smoke under Bazel: the loopback table (W = 2,
# 4 B and 4 KiB and the metric sync, Reducer over gRPC against Gloo, the
# echo beside 4 KiB), the cluster table (W = 4 worker hosts, S = 1 and 2
# shard hosts, 4 KiB and 2 MiB, one round) and the targets table. Passes when
# every run succeeds and the three tables are printed (the cluster's, or a
# SKIP line with its reason where namespaces cannot be made). Runs under the
# project's Python (the first argument), whose torch the Gloo ranks use.
set -euo pipefail
python="$1"  # the project's Python (@torch_cc//:defs.bzl's PYTHON, from bench/BUILD)
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR}}/network_bench"
report="${TEST_TMPDIR}/report.txt"
"${python}" bench/network_bench.py --smoke \
  --reducerd="${PWD}/server/reducerd" \
  --reducer_worker="${PWD}/bench/reducer_allreduce_worker" \
  --virtual_network="${PWD}/bench/virtual_network" \
  --echo_bench="${PWD}/bench/grpc_echo_bench" \
  --timeout_s=120 \
  --out_dir="${out}" | tee "${report}"
fail() { echo "FAIL: $1"; exit 1; }
number='[0-9]+\.[0-9]+'
grep -q '^== loopback table: W=2' "${report}" || fail "no loopback table"
grep -Eq "^4 KiB +${number} (us|ms) +${number} (us|ms) +${number} +<= 0\.50 +${number} (us|ms) +${number}$" \
  "${report}" || fail "no 4 KiB loopback row with the echo beside it"
grep -Eq '^metric sync ' "${report}" || fail "no metric sync row"
if ! grep -q '^SKIP cluster: ' "${report}"; then
  grep -q '^== cluster table: W=4' "${report}" || fail "no cluster table"
  grep -Eq "^2 MiB +reducer S=2 +2 " "${report}" || fail "no S=2 2 MiB cluster row"
fi
grep -q '^== targets table' "${report}" || fail "no targets table"
grep -Eq '^cluster S=1 64 MiB, reducer time / model ' "${report}" \
  || fail "the targets table lacks the cluster targets"
[ -s "${out}/results.json" ] && [ -s "${out}/results.md" ] || fail "no results written"
echo PASS
