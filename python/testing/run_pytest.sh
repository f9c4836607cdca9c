#!/usr/bin/env bash
# Runs one pytest file under `bazel test`: the reducer package and reducerd
# come from the test's runfiles. Usage (from an sh_test): run_pytest.sh FILE.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="${root}/python:${root}/python/testing"
export REDUCERD="${root}/server/reducerd"
export PYTHONDONTWRITEBYTECODE=1
cd "${TEST_TMPDIR}"
exec /usr/bin/python3 -m pytest -p no:cacheprovider -q -ra "${root}/$1"
