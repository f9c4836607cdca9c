#!/usr/bin/env bash
# Runs bench/latency_probe_test.py with the pytest of the project's Python
# (the first argument: @torch_cc//:defs.bzl's PYTHON, from bench/BUILD).
set -euo pipefail
python="$1"
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONDONTWRITEBYTECODE=1
cd "${TEST_TMPDIR}"
junit=()
if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then junit=(--junitxml="${XML_OUTPUT_FILE}"); fi
exec "${python}" -m pytest -p no:cacheprovider -q -ra "${junit[@]}" \
  "${root}/bench/latency_probe_test.py"
