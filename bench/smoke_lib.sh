# What the smoke tests of the Python benchmarks (bench/*_smoke_test.sh, each
# a bench_smoke_test of bench/smoke_test.bzl) share: where they run and write,
# how they run their benchmark, and the checks of its printed report.
# Sourced after `set -euo pipefail`; every check exits 1 with "FAIL: ..."
# when it does not hold.

# smoke_begin PYTHON [OUT_SUBDIR]: changes to the runfiles root and sets
# python (the project's Python: @torch_cc//:defs.bzl's PYTHON, which
# bench_smoke_test passes as the first argument), out (the test's undeclared
# outputs, or OUT_SUBDIR below them), report (the file smoke_run copies the
# benchmark's output to) and reducerd (the bazel-built daemon smoke_run
# names; a test that runs elsewhere sets it anew).
smoke_begin() {
  python="$1"
  cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
  out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR}}${2:+/$2}"
  report="${TEST_TMPDIR}/report.txt"
  reducerd="${PWD}/server/reducerd"
}

# smoke_run SCRIPT ARGS...: runs the benchmark SCRIPT under python in its
# smoke form, with reducerd, a 120 s limit and ARGS; its output goes to
# stdout and to report.
smoke_run() {
  local script="$1"
  shift
  "${python}" "${script}" --smoke --reducerd="${reducerd}" --timeout_s=120 "$@" \
    | tee "${report}"
}

# fail MESSAGE: the test fails, saying MESSAGE.
fail() {
  echo "FAIL: $1"
  exit 1
}

# expect_text TEXT MESSAGE: fails with MESSAGE unless report holds TEXT.
expect_text() {
  grep -qF "$1" "${report}" || fail "$2"
}

# expect_line REGEX MESSAGE: fails with MESSAGE unless a line of report
# matches the extended regular expression REGEX.
expect_line() {
  grep -Eq "$1" "${report}" || fail "$2"
}

# expect_tables SCRIPT TITLE...: fails unless report holds every TITLE and
# as many lines "command: ...SCRIPT --smoke" as there are titles (each
# table names the command that made it).
expect_tables() {
  local script="$1" title
  shift
  for title in "$@"; do
    expect_text "${title}" "no table '${title}'"
  done
  [ "$(grep -c "^command: .*${script} --smoke" "${report}")" -eq "$#" ] \
    || fail "not every table names its command"
}

# expect_output FILE...: fails unless the benchmark wrote every FILE, not
# empty.
expect_output() {
  local file
  for file in "$@"; do
    [ -s "${file}" ] || fail "no ${file##*/} written"
  done
}

# expect_shm_line REGEX MESSAGE: where report says the same-host path was
# skipped, prints the reason as a SKIP line; elsewhere expect_line.
expect_shm_line() {
  if grep -q '^path shm skipped:' "${report}"; then
    echo "SKIP shm rows: $(grep -m1 '^path shm skipped:' "${report}" | cut -d: -f2-)"
  else
    expect_line "$1" "$2"
  fi
}
