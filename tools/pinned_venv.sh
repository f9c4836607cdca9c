#!/usr/bin/env bash
# Prints the path of a Python virtual environment holding exactly the
# packages a pinned requirements file names, building it first if missing:
#
#   tools/pinned_venv.sh REQUIREMENTS_FILE
#   "$(tools/pinned_venv.sh deploy/validate/requirements.txt)/bin/python" ...
#
# REQUIREMENTS_FILE pins every package, its dependencies included
# (NAME==VERSION lines, as `pip freeze` writes them in a clean venv), so
# the venv is the same wherever it is built. The venv lives in
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/reducer/venvs/DIR-HASH
#
# where DIR is the name of the folder holding REQUIREMENTS_FILE and HASH
# the first 12 hex digits of the file's SHA-256: editing the file makes a
# new venv next to the old one (remove stale ones by hand), and callers that
# share a file share its venv. It is made with /usr/bin/python3 -m venv
# (Debian's python3-venv); the pinned files are downloaded into the
# wheelhouse ${XDG_CACHE_HOME:-$HOME/.cache}/reducer/wheels (pip skips those
# already there) and installed from it alone, so building it again, or for
# another file pinning the same packages, downloads nothing.
#
# The venv is built in a temporary folder beside its final path and renamed
# into place when pip has succeeded (the paths in its scripts rewritten to
# the final one), so an interrupted or failed build leaves no half venv
# behind, only a ".tmp-" folder that the next build of the same file
# removes; concurrent builds of the same file wait for each other (flock).
# Once the venv exists, this only prints its path. The hash covers the
# file's own text: a file that includes another (-r) should pin everything
# itself.
#
# stdout is the path alone; pip's and venv's progress goes to stderr.
# Exits non-zero, with pip's output, when the venv cannot be built.
set -euo pipefail

if [[ $# -ne 1 || ! -f "$1" ]]; then
  echo "usage: $0 REQUIREMENTS_FILE" >&2
  exit 2
fi
requirements=$(realpath "$1")
readonly kPython=/usr/bin/python3

hash=$(sha256sum "$requirements" | cut -c1-12)
name="$(basename "$(dirname "$requirements")")-$hash"
root="${XDG_CACHE_HOME:-$HOME/.cache}/reducer/venvs"
venv="$root/$name"
wheelhouse="${XDG_CACHE_HOME:-$HOME/.cache}/reducer/wheels"

if [[ ! -x "$venv/bin/python" ]]; then
  source "$(dirname "${BASH_SOURCE[0]}")/cache_entry.sh"
  lock_cache_entry "$root" "$name"
  # Another build may have finished while this one waited for the lock.
  if [[ ! -x "$venv/bin/python" ]]; then
    new_cache_scratch "$root" "$name"
    echo "pinned_venv: building $venv from $1" >&2
    "$kPython" -m venv --prompt "$name" "$tmp" >&2
    # The pinned files go to a wheelhouse first (pip skips those already
    # there), then install from it alone: the package index's answers are
    # not cached by pip itself, and torch's alone are about 3 GB.
    mkdir -p "$wheelhouse"
    "$tmp/bin/python" -m pip download --no-input --disable-pip-version-check --no-deps \
      --dest "$wheelhouse" -r "$requirements" >&2
    "$tmp/bin/python" -m pip install --no-input --disable-pip-version-check --no-compile \
      --no-index --find-links "$wheelhouse" -r "$requirements" >&2
    # The scripts pip wrote (bin/pytest, ...) and activate name the folder
    # they were built in: name the final one.
    { grep -rlF --null "$tmp" "$tmp/bin" "$tmp/pyvenv.cfg" || true; } | xargs -0 -r sed -i "s|$tmp|$venv|g"
    rm -rf "$venv"  # not a venv (no bin/python): nothing to keep
    mv -T "$tmp" "$venv"
    trap - EXIT
    # Bytecode, compiled where the sources now are (a failure here only
    # costs the first import some time).
    "$venv/bin/python" -m compileall -q "$venv/lib" >/dev/null 2>&1 || true
  fi
fi
echo "$venv"
