#!/usr/bin/env bash
# Prints the path of a package's source distribution, unpacked, fetching it
# from the package index first if it is not in the cache yet:
#
#   tools/pinned_sdist.sh NAME==VERSION SHA256
#   tools/pinned_sdist.sh pytorch-ignite==0.5.5 2c14de75c939...   # Ignite's tests
#
# The sdist is fetched with pip (`pip download --no-deps --no-binary :all:`,
# pip of the project's venv, tools/pinned_venv.sh python/requirements-dev.txt,
# or of $PYTHON where set), must have the SHA256 given (else nothing is
# kept and this exits 1), and is unpacked into
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/reducer/sdists/NAME-VERSION
#
# (the archive itself in it, its SHA256 in .complete, checked on every
# call), built in a temporary folder and renamed into place, so an interrupted fetch leaves nothing half there; concurrent
# fetches of the same sdist wait for each other (flock). Once it is there,
# this only prints its path. The project uses it for the tests that ship in
# an sdist and not in the wheel (PyTorch-Ignite's, run on the backend
# "reducer": third_party/pinned_sdist.bzl, docs/python.md).
#
# stdout is the path alone; pip's progress goes to stderr.
set -euo pipefail

if [[ $# -ne 2 || "$1" != *==* || ! "$2" =~ ^[0-9a-f]{64}$ ]]; then
  echo "usage: $0 NAME==VERSION SHA256" >&2
  exit 2
fi
requirement=$1
want_sha=$2
name=${requirement%%==*}
version=${requirement#*==}
root="${XDG_CACHE_HOME:-$HOME/.cache}/reducer/sdists"
dest="$root/$name-$version"

if [[ ! -f "$dest/.complete" ]]; then
  source "$(dirname "${BASH_SOURCE[0]}")/cache_entry.sh"
  lock_cache_entry "$root" "$name-$version"
  if [[ ! -f "$dest/.complete" ]]; then
    python=${PYTHON:-}
    if [[ -z "$python" ]]; then
      here=$(cd "$(dirname "$0")/.." && pwd)
      python="$("$here/tools/pinned_venv.sh" "$here/python/requirements-dev.txt")/bin/python"
    fi
    new_cache_scratch "$root" "$name-$version"
    echo "pinned_sdist: fetching $requirement" >&2
    "$python" -m pip download --no-input --disable-pip-version-check --no-deps \
      --no-binary :all: --dest "$tmp/download" "$requirement" >&2
    archives=("$tmp"/download/*)
    if [[ ${#archives[@]} -ne 1 ]]; then
      echo "pinned_sdist: pip left ${#archives[@]} files, not one sdist" >&2
      exit 1
    fi
    archive=${archives[0]}
    got_sha=$(sha256sum "$archive" | cut -d' ' -f1)
    if [[ "$got_sha" != "$want_sha" ]]; then
      echo "pinned_sdist: $(basename "$archive") has SHA256 $got_sha, not $want_sha" >&2
      exit 1
    fi
    mkdir "$tmp/unpacked"
    tar -xzf "$archive" -C "$tmp/unpacked" --strip-components=1
    cp "$archive" "$tmp/unpacked/"
    echo "$got_sha" > "$tmp/unpacked/.complete"
    rm -rf "$dest"
    mv -T "$tmp/unpacked" "$dest"
  fi
fi
kept_sha=$(cat "$dest/.complete")
if [[ "$kept_sha" != "$want_sha" ]]; then
  echo "pinned_sdist: $dest holds the sdist of SHA256 $kept_sha, not $want_sha" >&2
  exit 1
fi
echo "$dest"
