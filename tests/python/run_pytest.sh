#!/usr/bin/env bash
# Runs one pytest file under `bazel test`: the reducer package and reducerd
# come from the test's runfiles. Usage (from an sh_test, as
# tests/py_testing.bzl's reducer_py_test calls it): run_pytest.sh PYTHON FILE,
# PYTHON being the interpreter (with pytest) to run it under.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="${root}/python:${root}/tests/python"
export REDUCERD="${root}/server/reducerd"
export PYTHONDONTWRITEBYTECODE=1
python=$1
file=$2
cd "${TEST_TMPDIR}"
# Each pytest case lands in Bazel's test.xml, so CI counts cases, not files.
junit=()
if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then junit=(--junitxml="${XML_OUTPUT_FILE}"); fi
exec "$python" -m pytest -p no:cacheprovider -q -ra "${junit[@]}" "${root}/${file}"
