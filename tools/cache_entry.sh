# An entry of a cache folder that one process builds and the others wait
# for, never seen half built: for tools/pinned_venv.sh (venvs) and
# tools/pinned_sdist.sh (unpacked sdists), which source it. An entry is
# built in a scratch folder beside its final path and renamed into place.

# lock_cache_entry ROOT NAME: creates the cache folder ROOT and waits for
# the lock of its entry NAME (ROOT/.NAME.lock, on file descriptor 9, held
# until the script exits), so that concurrent builds of NAME run one after
# the other. A caller checks again afterwards whether NAME is there.
lock_cache_entry() {
  mkdir -p "$1"
  exec 9>"$1/.$2.lock"
  flock 9
}

# new_cache_scratch ROOT NAME: removes the scratch folders that interrupted
# builds of NAME left in ROOT and sets tmp to a new one
# (ROOT/.tmp-NAME.XXXXXX), removed when the script exits unless the caller
# clears that trap (`trap - EXIT`) once it has renamed the folder.
new_cache_scratch() {
  rm -rf "$1/.tmp-$2".*
  tmp=$(mktemp -d "$1/.tmp-$2.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
}
