#!/usr/bin/env bash
# bench/shard_bench.py --smoke under Bazel: W = 4 worker hosts and S = 2
# reducerd shard hosts in network namespaces, 4 KiB and 2 MiB all-reduces of
# Reducer, Gloo and (when Open MPI is installed) MPI, one round. Passes when
# every run gave the right number of timings; skips (exit 0, a SKIP line)
# where namespaces cannot be made. Runs under the project's Python (the
# first argument), whose torch the Gloo ranks use (fails without it).
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/smoke_lib.sh"
smoke_begin "$1" shard_bench
exec "${python}" bench/shard_bench.py --smoke \
  --reducerd="${reducerd}" \
  --reducer_worker="${PWD}/bench/reducer_allreduce_worker" \
  --virtual_network="${PWD}/bench/virtual_network" \
  --out_dir="${out}"
