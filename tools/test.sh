#!/usr/bin/env bash
# Installs what the build needs, then runs every test: `tools/test.sh`.
# Extra arguments go to `bazel test` (for example --config=asan).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
exec bazel test "$@" //...
