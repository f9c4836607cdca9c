#!/usr/bin/env bash
# bench/routed_bench.py --smoke under Bazel: W = 2, 4 KiB, reduce against
# all_reduce and all_to_all_single against Gloo through torch.distributed,
# with the bazel-built reducerd and reducer package. Passes when the run
# succeeds (every worker checks its results) and both tables have a gRPC row
# (the shm rows are skipped, with the reason, where the same-host path cannot
# run). Runs under the project's Python (the first argument: torch from the
# package index, which //python:reducer's backend is built against).
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/smoke_lib.sh"
smoke_begin "$1"
smoke_run bench/routed_bench.py \
  --pythonpath="${PWD}/python" \
  --json="${out}/routed_bench.json"
expect_tables routed_bench.py '== 1. reduce to rank 0' '== 2. all_to_all_single'
expect_line '^ *4 KiB +grpc +0 ' "no gRPC reduce row on the root"
expect_line '^ *4 KiB +grpc +1 ' "no gRPC reduce row on a non-root"
expect_line '^ *4 KiB +grpc +[0-9.]+ (us|ms) ' "no gRPC all_to_all row"
expect_output "${out}/routed_bench.json"
expect_shm_line '^ *4 KiB +shm +0 ' "no shm reduce row"
echo PASS
