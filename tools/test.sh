#!/usr/bin/env bash
# Installs what the tests need (tools/setup.sh --test), then runs every
# test: `tools/test.sh`. Extra arguments go to `bazel test` (for example
# --config=asan).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --test
exec bazel test "$@" //...
