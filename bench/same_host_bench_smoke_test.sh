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
python="$1"  # the project's Python (@torch_cc//:defs.bzl's PYTHON, from bench/BUILD)
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR}}/same_host_bench"
report="${TEST_TMPDIR}/report.txt"
"${python}" bench/run_bench.py --suite=same_host --quick \
  --world_sizes=2 --sizes=4,4096 \
  --reducerd="${PWD}/server/reducerd" \
  --reducer_worker="${PWD}/bench/reducer_allreduce_worker" \
  --out_dir="${out}" | tee "${report}"
grep -q '^reducer  *2  *4 KiB ' "${report}" || { echo "no reducer row"; exit 1; }
grep -q '^gloo  *2  *4 KiB ' "${report}" || { echo "no gloo row"; exit 1; }
grep -q '^same-host targets (W=4):' "${report}" || { echo "no same-host section"; exit 1; }
if grep -q '^skipped reducer_shm:' "${report}"; then
  echo "SKIP reducer_shm: $(grep '^skipped reducer_shm:' "${report}" | cut -d: -f2-)"
fi
