#!/usr/bin/env bash
# Builds and runs the GPU tests (//tests/gpu:device_buffers_test) on a
# machine with a CUDA GPU, its driver and the CUDA Toolkit ($CUDA_PATH or
# /usr/local/cuda), then prints the staging figures (//tests/gpu:staging_bench:
# cudaMemcpy's peak, a 64 MiB all-reduce from device and from host memory).
# Extra flags go to Bazel (tests/gpu/run.sh --config=asan).
# Fails when the tests would skip (no toolkit at build time, no usable GPU),
# so that a green run means they ran on the device.
set -euo pipefail
cd "$(dirname "$0")/../.."

flags=(--cache_test_results=no --test_output=errors)
[[ -n "${CUDA_VISIBLE_DEVICES:-}" ]] && flags+=(--test_env=CUDA_VISIBLE_DEVICES)
[[ -n "${CUDA_PATH:-}" ]] && flags+=(--repo_env=CUDA_PATH)

bazel test "${flags[@]}" "$@" //tests/gpu:device_buffers_test
log=bazel-testlogs/tests/gpu/device_buffers_test/test.log
skipped=$(grep -c '^\[  SKIPPED \]' "$log" || true)
ran=$(grep -c '^\[       OK \]' "$log" || true)
echo "tests/gpu/run.sh: $ran passed, $skipped skipped"
if [[ "$skipped" -gt 0 ]]; then
  echo "tests/gpu/run.sh: the GPU tests skipped: $(grep -m1 -o 'no GPU.*\|built without the CUDA Toolkit' "$log")" >&2
  exit 1
fi

bazel build "${flags[@]:2}" "$@" //tests/gpu:staging_bench
RUNFILES_DIR="$PWD/bazel-bin/tests/gpu/staging_bench.runfiles" bazel-bin/tests/gpu/staging_bench
