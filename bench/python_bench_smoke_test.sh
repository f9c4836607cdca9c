#!/usr/bin/env bash
# bench/python_bench.py --smoke under Bazel: W = 2, 4 B and 4 KiB all-reduces
# of the torch backend against Gloo, 4 B per call through the C++ client, the
# Python client and the torch backend, 3 DDP steps per system and bucket cap,
# with the bazel-built reducerd, reducer package and C++ worker. Passes when
# the run succeeds (every worker checks its results, the DDP models on Reducer
# and Gloo agree) and the output has all three tables with a gRPC row each
# (the shm rows are skipped, with the reason, where the same-host path cannot
# run). Runs under the project's Python (the first argument: torch and numpy
# from the package index, which //python:reducer's backend is built against).
set -euo pipefail
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/bench/smoke_lib.sh"
smoke_begin "$1"
smoke_run bench/python_bench.py \
  --reducer_worker="${PWD}/bench/reducer_allreduce_worker" \
  --pythonpath="${PWD}/python" \
  --json="${out}/python_bench.json"
expect_tables python_bench.py '== 1. torch.distributed.all_reduce' '== 2. Python' '== 3. DDP step'
expect_line '^4 KiB +grpc +10 ' "no 4 KiB gRPC all_reduce row"
expect_line '^grpc +20 ' "no gRPC per-call row"
for system in reducer gloo none; do
  expect_line "^1 +${system} " "no DDP row for ${system} at cap 1"
done
expect_output "${out}/python_bench.json"
expect_shm_line '^shm +20 ' "no shm per-call row"
echo PASS
