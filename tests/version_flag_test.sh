#!/usr/bin/env bash
# `BINARY --version` prints exactly "NAME VERSION" and exits 0, for each
# binary given; VERSION is packaging/version.bzl's REDUCER_VERSION, which
# tests/BUILD passes in (the binaries take it from the same file at build
# time, so this holds them to it).
#
#   version_flag_test.sh VERSION BINARY...
set -uo pipefail

want_version=$1
shift
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

[[ "$want_version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  fail "REDUCER_VERSION '$want_version' is not MAJOR.MINOR.PATCH"
[[ $# -gt 0 ]] || fail "no binary to check"

for binary in "$@"; do
  name=$(basename "$binary")
  want="$name $want_version"
  out=$(timeout 30 "$binary" --version 2>"$TEST_TMPDIR/stderr")
  rc=$?
  [[ $rc -eq 0 ]] ||
    fail "$name --version exited $rc: $(cat "$TEST_TMPDIR/stderr")"
  [[ "$out" == "$want" ]] || fail "$name --version printed '$out', want '$want'"
done

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"
