#!/usr/bin/env bash
# The side-by-side benchmark in one command: installs the benchmark's
# packages (Open MPI), builds Reducer's binaries, and runs bench/run_bench.py
# with any arguments given (for example --quick) under the project's Python
# (the venv of python/requirements-dev.txt, whose torch brings Gloo; built
# by tools/pinned_venv.sh the first time). Results go to bench/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --bench
bazel build //server:reducerd //bench:reducer_allreduce_worker \
  //bench:reduce_kernel_bench //bench:grpc_echo_bench
python="$(tools/pinned_venv.sh python/requirements-dev.txt)/bin/python"
exec "${python}" bench/run_bench.py "$@"
