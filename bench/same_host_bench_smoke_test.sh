#!/usr/bin/env bash
# bench/run_bench.py --suite=same_host in its smallest form under Bazel:
# W = 2, 4 B and 4 KiB, 30 timed calls, every system that can run here.
# reducer (gRPC) must run; reducer_shm is skipped, with its reason, where the
# same-host path cannot run, and gloo and mpi_tcp/mpi_shm where torch or
# Open MPI is missing. Passes when every system that ran gave the right
# number of timings (Reducer's workers also check their results) and the
# same-host section was printed. Runs under the project's Python (the first
# argument), whose torch the Gloo ranks use: gloo must run.
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/smoke_lib.sh"
smoke_begin "$1" same_host_bench
"${python}" bench/run_bench.py --suite=same_host --quick \
  --world_sizes=2 --sizes=4,4096 \
  --reducerd="${reducerd}" \
  --reducer_worker="${PWD}/bench/reducer_allreduce_worker" \
  --out_dir="${out}" | tee "${report}"
expect_line '^reducer  *2  *4 KiB ' "no reducer row"
expect_line '^gloo  *2  *4 KiB ' "no gloo row"
expect_line '^same-host targets \(W=4\):' "no same-host section"
if grep -q '^skipped reducer_shm:' "${report}"; then
  echo "SKIP reducer_shm: $(grep '^skipped reducer_shm:' "${report}" | cut -d: -f2-)"
fi
