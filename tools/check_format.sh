#!/usr/bin/env bash
# Checks that C++ (.h .cc .cu) is formatted as the repository's .clang-format
# says, with clang-format --dry-run --Werror (Debian's clang-format package,
# tools/setup.sh --ci):
#
#   tools/check_format.sh               the lines changed since the base revision
#   tools/check_format.sh --base=REV    the lines changed since REV
#   tools/check_format.sh FILE...       the whole of each FILE
#
# Only changed lines are held to the settings: the tree was formatted by
# hand, and most files differ somewhere from what clang-format would write,
# so a change answers for the lines it adds or edits (clang-format --lines),
# not for the rest of each file it touches. A file named on the command line
# is checked whole. `git clang-format BASE` formats exactly the lines this
# checks.
#
# The changes are `git diff BASE` of the C++ files (commits since BASE and
# uncommitted edits of tracked files; deleted files skipped, renamed files
# by their changed lines only). BASE, unless --base gives one:
#   - the merge-base of HEAD and origin/main, where origin/main exists and
#     the merge-base is not HEAD itself: on a branch, everything the branch
#     changed;
#   - else HEAD~1: on main itself (as CI's clean clone of main is), or in a
#     clone without origin/main, the last commit;
#   - else none: a clone whose history is a single commit (or a shallow
#     clone of depth 1) has nothing to compare with, so nothing is checked.
#
# Prints clang-format's complaints (FILE:LINE:COL: error: code should be
# clang-formatted) and a last line that counts the files checked. Exits 0
# when every checked line is formatted, 1 when one is not, 2 on a usage
# error or when git or clang-format cannot run.
set -uo pipefail

clang_format=${CLANG_FORMAT:-clang-format}
base=""
files=()
for arg in "$@"; do
  case $arg in
    --base=*) base=${arg#--base=} ;;
    -h|--help) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    -*) echo "usage: $0 [--base=REV | FILE...]" >&2; exit 2 ;;
    *) files+=("$arg") ;;
  esac
done
if [[ -n "$base" && ${#files[@]} -gt 0 ]]; then
  echo "usage: $0 [--base=REV | FILE...]: --base and files exclude each other" >&2
  exit 2
fi
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format: no $clang_format (install Debian's clang-format: tools/setup.sh --ci)" >&2
  exit 2
fi

# FILE [--lines=A:B ...]: clang-format's verdict on FILE (or on those lines).
failed=0
checked=0
check() {
  checked=$((checked + 1))
  "$clang_format" --dry-run --Werror --style=file "$@" || failed=$((failed + 1))
}

if [[ ${#files[@]} -gt 0 ]]; then
  for f in "${files[@]}"; do
    if [[ ! -f "$f" ]]; then
      echo "check_format: no file $f" >&2
      exit 2
    fi
    check "$f"
  done
else
  top=$(git rev-parse --show-toplevel 2>/dev/null) || {
    echo "check_format: not in a git repository; name the files to check" >&2
    exit 2
  }
  cd "$top" || exit 2
  commit() { git rev-parse --verify --quiet "$1^{commit}" >/dev/null; }
  if [[ -z "$base" ]]; then
    head=$(git rev-parse HEAD) || exit 2
    if commit origin/main && mb=$(git merge-base HEAD origin/main 2>/dev/null) &&
        [[ "$mb" != "$head" ]]; then
      base=$(git rev-parse --short "$mb")
    elif commit HEAD~1; then
      base=HEAD~1
    else
      echo "check_format: no base revision (HEAD has no parent here): nothing to check"
      exit 0
    fi
  elif ! commit "$base"; then
    echo "check_format: --base=$base names no commit" >&2
    exit 2
  fi
  # "FILE<tab>START<tab>COUNT" for each hunk of added or changed lines on
  # the new side of the diff (a hunk that only deletes has COUNT 0 and is
  # skipped). A file's name is its "+++ b/NAME" header, the first line
  # starting "+++ " after its "diff --git" line.
  hunks=$(git -c core.quotepath=off diff -U0 --no-color --no-ext-diff -M \
      --diff-filter=d "$base" -- '*.h' '*.cc' '*.cu' |
    awk -v OFS='\t' '
      /^diff --git / { header = 1; next }
      header && /^\+\+\+ / { file = substr($0, 7); header = 0; next }
      !header && /^@@ / {
        split($3, r, ","); count = (2 in r) ? r[2] : 1
        if (count > 0) print file, substr(r[1], 2), count
      }') || exit 2
  current=""
  lines=()
  flush() {
    if [[ -n "$current" ]]; then check "${lines[@]}" "$current"; fi
    lines=()
  }
  while IFS=$'\t' read -r file start count; do
    [[ -n "$file" ]] || continue
    if [[ "$file" != "$current" ]]; then
      flush
      current=$file
    fi
    lines+=("--lines=$start:$((start + count - 1))")
  done <<<"$hunks"
  flush
  echo "check_format: the C++ lines changed since $base"
fi

if [[ $failed -gt 0 ]]; then
  if [[ -n "$base" ]]; then
    fix="git clang-format $base formats the changed lines"
  else
    fix="clang-format -i FILE formats a whole file"
  fi
  echo "check_format: $failed of $checked C++ files not formatted as .clang-format says ($fix)"
  exit 1
fi
echo "check_format: $checked C++ files checked, all formatted as .clang-format says"
