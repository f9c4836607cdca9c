#!/usr/bin/env bash
# bench/network_bench.py --smoke under Bazel: the loopback table (W = 2,
# 4 B and 4 KiB and the metric sync, Reducer over gRPC against Gloo, the
# echo beside 4 KiB), the cluster table (W = 4 worker hosts, S = 1 and 2
# shard hosts, 4 KiB and 2 MiB, one round), the relay table (2 hosts x 2
# ranks, flat and through a relay per host, against Gloo; one host's 2 ranks
# through a relay against its same-host path; 64 KiB and 1 MiB) and the
# targets table. Passes when every run succeeds and the four tables are
# printed (the cluster's and the relay's, or SKIP lines with the reason
# where namespaces cannot be made). Runs under the
# project's Python (the first argument), whose torch the Gloo ranks use.
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/smoke_lib.sh"
smoke_begin "$1" network_bench
smoke_run bench/network_bench.py \
  --reducer_worker="${PWD}/bench/reducer_allreduce_worker" \
  --virtual_network="${PWD}/bench/virtual_network" \
  --echo_bench="${PWD}/bench/grpc_echo_bench" \
  --out_dir="${out}"
number='[0-9]+\.[0-9]+'
expect_line '^== loopback table: W=2' "no loopback table"
expect_line "^4 KiB +${number} (us|ms) +${number} (us|ms) +${number} +<= 0\.50 +${number} (us|ms) +${number}$" \
  "no 4 KiB loopback row with the echo beside it"
expect_line '^metric sync ' "no metric sync row"
if ! grep -q '^SKIP cluster: ' "${report}"; then
  expect_line '^== cluster table: W=4' "no cluster table"
  expect_line "^2 MiB +reducer S=2 +2 " "no S=2 2 MiB cluster row"
fi
if ! grep -q '^SKIP relay: ' "${report}"; then
  expect_line '^== relay table' "no relay table"
  expect_line "^1 MiB +2x2 +relay S=1 +2 " "no 2x2 relay row at 1 MiB"
  expect_line "^1 MiB +2x2 +flat S=1 +2 " "no 2x2 flat row at 1 MiB"
  expect_line "^1 MiB +1x2 +relay S=1 +2 " "no one-host relay row at 1 MiB"
fi
expect_line '^== targets table' "no targets table"
expect_line '^cluster S=1 64 MiB, reducer time / model ' "the targets table lacks the cluster targets"
expect_output "${out}/results.json" "${out}/results.md"
echo PASS
