#!/usr/bin/env bash
# The side-by-side benchmark in one command: installs the benchmark's
# packages (Gloo through torch, Open MPI, matplotlib), builds Reducer's
# binaries, and runs bench/run_bench.py with any arguments given
# (for example --quick). Results go to bench/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --bench
bazel build //server:reducerd //bench:reducer_allreduce_worker \
  //bench:reduce_kernel_bench //bench:grpc_echo_bench
exec bench/run_bench.py "$@"
