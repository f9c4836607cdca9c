# Steps with a JUnit record, for the scripts that run one check after
# another outside Bazel (packaging/deb_test.sh and packaging/wheel_test.sh,
# through root_steps.sh, and deploy/test.sh): each step a command whose
# output goes to a log of its own, timed; the first step that fails ends
# the script. Sourced as
#
#   suite=deploy/test   # the JUnit suite; its class name with dots for "/"
#   source packaging/lib/steps.sh "$@"
#
# which reads the script's arguments ([--junit=FILE]: the JUnit file to
# write at the end; `usage`, when the script sets it, is what a wrong one
# prints after its name) and sets `work` (a scratch folder, which the script's
# EXIT trap removes). Before its first step a script may set `step_prefix`
# (a command, as an array, that runs each step's command: a time limit, a
# shell) and `planned_steps` (the names of all its steps, in order, so that
# the steps a failure stopped are recorded as failures too).

junit=""
for arg in "$@"; do
  case $arg in
    --junit=*) junit=${arg#--junit=} ;;
    *) echo "usage: $0 ${usage:-[--junit=FILE]}" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d "/tmp/reducer-${suite//\//-}.XXXXXX")
step_prefix=()
planned_steps=()
cases=()  # junit <testcase> elements
failed=0
started=$(date +%s)

xml_escape() { sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g'; }

# step NAME COMMAND...: runs one step, timing it; on success prints the
# lines of its log that start with "==> ", on failure the end of its log,
# and stops the test (later steps need this one).
step() {
  local name=$1; shift
  local log="$work/$name.log" t0 t1 rc classname=${suite//\//.}
  t0=$(date +%s)
  echo "--- $name"
  "${step_prefix[@]}" "$@" >"$log" 2>&1
  rc=$?
  t1=$(date +%s)
  if [[ $rc -eq 0 ]]; then
    echo "    ok in $((t1 - t0)) s"
    sed -n 's/^==> /    /p' "$log"
    cases+=("<testcase classname=\"$classname\" name=\"$name\" time=\"$((t1 - t0))\"/>")
  else
    echo "    FAILED (exit $rc) after $((t1 - t0)) s; its log ends:"
    tail -40 "$log" | sed 's/^/    | /'
    local message
    message=$(tail -40 "$log" | xml_escape)
    cases+=("<testcase classname=\"$classname\" name=\"$name\" time=\"$((t1 - t0))\"><failure message=\"$name failed (exit $rc)\">$message</failure></testcase>")
    failed=1
    finish
  fi
}

# Writes the JUnit file, prints the outcome and exits (0: every step passed).
finish() {
  local total=$(($(date +%s) - started)) name
  # The planned steps a failure stopped count as failures too.
  for name in "${planned_steps[@]:${#cases[@]}}"; do
    cases+=("<testcase classname=\"${suite//\//.}\" name=\"$name\" time=\"0\"><failure message=\"not run: an earlier step failed\"/></testcase>")
  done
  if [[ -n "$junit" ]]; then
    mkdir -p "$(dirname "$junit")"
    {
      echo "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
      echo "<testsuites><testsuite name=\"$suite\" tests=\"${#cases[@]}\" time=\"$total\">"
      printf '%s\n' "${cases[@]}"
      echo "</testsuite></testsuites>"
    } >"$junit"
  fi
  if [[ $failed -eq 0 ]]; then
    echo "$suite: passed in $total s"
  else
    echo "$suite: FAILED after $total s"
  fi
  exit $failed
}
