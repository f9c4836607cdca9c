#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, ASan and UBSan, and fuzzes each one
# for SECONDS seconds (default 60) starting from its checked-in seed corpus.
# New inputs go to a scratch folder, not into the repository. Exits nonzero
# if a fuzzer finds a crash (the reproducer is left in the scratch folder).
#
#   tests/fuzz/run_fuzzers.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
# A separate output base keeps the clang build from evicting the gcc one.
bazel_clang=(bazel --output_base="${HOME}/.cache/reducer-clang")
"${bazel_clang[@]}" build --config=clang --config=fuzz --symlink_prefix=/ \
  //tests/fuzz:core_validation_fuzzer //tests/fuzz:request_decoding_fuzzer \
  //tests/fuzz:shared_memory_reads_fuzzer
bin="$("${bazel_clang[@]}" info --config=clang --config=fuzz bazel-bin)"
scratch="$(mktemp -d)"
for name in core_validation request_decoding shared_memory_reads; do
  mkdir -p "$scratch/$name"
  echo "=== fuzzing $name for ${seconds}s"
  (cd "$scratch" && "$bin/tests/fuzz/${name}_fuzzer" -max_total_time="$seconds" \
      -print_final_stats=1 -rss_limit_mb=2048 \
      "$scratch/$name" "$OLDPWD/tests/fuzz/corpus/$name")
done
rm -rf "$scratch"
