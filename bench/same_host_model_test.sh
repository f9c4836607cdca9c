#!/usr/bin/env bash
# Runs bench/same_host_model_test.py with the system python's pytest.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONDONTWRITEBYTECODE=1
cd "${TEST_TMPDIR}"
junit=()
if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then junit=(--junitxml="${XML_OUTPUT_FILE}"); fi
exec /usr/bin/python3 -m pytest -p no:cacheprovider -q -ra "${junit[@]}" \
  "${root}/bench/same_host_model_test.py"
