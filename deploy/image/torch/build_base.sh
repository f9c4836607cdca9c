#!/usr/bin/env bash
# Builds the base of the PyTorch worker image (Python and torch, no Reducer)
# with podman, once per set of inputs, and prints its tag:
#
#   deploy/image/torch/build_base.sh      prints reducer-torch-base:KEY
#
# KEY is the first 12 hex digits of the SHA-256 of this script,
# Containerfile.base, requirements.txt and the host's Python version: the
# image is several GB, so a machine builds it once per KEY and keeps it in
# podman's storage (an image of that tag already there is reused; builds of
# the same KEY wait for each other, tools/cache_entry.sh's lock). Remove
# stale ones with `podman rmi`.
#
# The root filesystem (FROM scratch) holds Debian's Python 3.11 as the host
# has it (/usr/bin/python3.11, its standard library less the tests and the
# build files), the packages requirements.txt pins in
# /usr/local/lib/python3.11/dist-packages (installed --no-deps from the
# wheelhouse tools/pinned_venv.sh fills, downloading only what it lacks;
# compiled to bytecode, since the root is read-only at run time), exactly
# the host's shared libraries `ldd` lists for Python, its extension modules
# and the packages' own (torch's CUDA libraries come from their packages;
# only libcuda.so.1, the NVIDIA driver that a GPU node provides, may be
# missing), the dynamic loader, /etc/passwd and /etc/group naming the
# non-root user reducer (uid and gid 65532), and
# /usr/share/reducer/contents-base.txt: every host file and its Debian
# package, every pip package and its version. Needs podman, runc and
# Debian 12's python3 with pip (tools/setup.sh --deploy --python).
set -euo pipefail
cd "$(dirname "$0")/../../.."
source deploy/image/podman.sh
source tools/cache_entry.sh

readonly kUid=65532
readonly kPython=/usr/bin/python3.11
readonly kRequirements=deploy/image/torch/requirements.txt
readonly kSitePackages=/usr/local/lib/python3.11/dist-packages
wheelhouse="${XDG_CACHE_HOME:-$HOME/.cache}/reducer/wheels"

key=$({ cat deploy/image/torch/build_base.sh deploy/image/torch/Containerfile.base "$kRequirements"
        "$kPython" --version; } | sha256sum | cut -c1-12)
tag="reducer-torch-base:$key"
if podman image exists "$tag"; then echo "$tag"; exit 0; fi
lock_cache_entry "${XDG_CACHE_HOME:-$HOME/.cache}/reducer/images" "torch-base-$key"
if podman image exists "$tag"; then echo "$tag"; exit 0; fi

ctx=$(mktemp -d /tmp/reducer-torch-base.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
rootfs="$ctx/rootfs"
mkdir -p "$rootfs/usr/bin" "$rootfs/usr/lib" "$rootfs/usr/share/reducer" "$rootfs/etc"

echo "build_base: Python $("$kPython" -c 'import platform; print(platform.python_version())') and its standard library" >&2
install -m 0755 "$kPython" "$rootfs/usr/bin/python3.11"
ln -s python3.11 "$rootfs/usr/bin/python3"
ln -s python3 "$rootfs/usr/bin/python"
# The tests, the static library and the packaging tools are not run here;
# sitecustomize.py is a link into the host's /etc.
tar -C /usr/lib -cf - --exclude=python3.11/test --exclude='python3.11/config-3.11-*' \
  --exclude=python3.11/ensurepip --exclude=python3.11/lib2to3 --exclude=python3.11/venv \
  --exclude=python3.11/sitecustomize.py python3.11 | tar -C "$rootfs/usr/lib" -xf -

echo "build_base: the packages of $kRequirements (no dependencies beyond it)" >&2
mkdir -p "$wheelhouse"
# pip skips the files the wheelhouse already has.
"$kPython" -m pip download --no-input --disable-pip-version-check --no-deps \
  --dest "$wheelhouse" -r "$kRequirements" >&2
# --prefix /usr: Debian's pip then installs into /usr/local/lib/python3.11/
# dist-packages (on the image's sys.path) and scripts into /usr/local/bin.
"$kPython" -m pip install --no-input --disable-pip-version-check --no-index --no-deps \
  --no-compile --break-system-packages --root-user-action=ignore --find-links "$wheelhouse" \
  --root "$rootfs" --prefix /usr -r "$kRequirements" >&2
# Bytecode with the paths the image has (the root is read-only at run time).
"$kPython" -m compileall -q -j 2 -s "$rootfs" -p / "$rootfs$kSitePackages" >/dev/null || true

# The host's libraries that Python, its extension modules and the packages'
# own libraries (but NVIDIA's: they only need the C library and each other)
# link; a library in the root already is found there through its rpath.
mapfile -t elves < <(find "$rootfs/usr/lib/python3.11/lib-dynload" "$rootfs$kSitePackages" \
  -path "$rootfs$kSitePackages/nvidia" -prune -o -name '*.so*' -type f -print)
elves+=("$rootfs/usr/bin/python3.11")
libraries=()
for elf in "${elves[@]}"; do
  out=$(ldd "$elf" 2>/dev/null) || continue
  missing=$(grep 'not found' <<<"$out" | grep -v 'libcuda\.so\.1 ' || true)
  if [[ -n "$missing" ]]; then
    echo "build_base: ${elf#"$rootfs"}: ldd finds libraries missing:" >&2
    echo "$missing" >&2
    exit 1
  fi
  while read -r path; do libraries+=("$path"); done < <(awk -v r="$rootfs" \
    '$2 == "=>" && $3 ~ /^\// && index($3, r) != 1 {print $3} $1 ~ /^\// {print $1}' <<<"$out")
done
mapfile -t libraries < <(printf '%s\n' "${libraries[@]}" | sort -u)
for lib in "${libraries[@]}"; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
  chmod 0755 "$rootfs$lib"
done

printf 'root:x:0:0:root:/root:/sbin/nologin\nreducer:x:%d:%d:reducer:/nonexistent:/sbin/nologin\n' \
  "$kUid" "$kUid" >"$rootfs/etc/passwd"
printf 'root:x:0:\nreducer:x:%d:\n' "$kUid" >"$rootfs/etc/group"
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"

# Every host file and the Debian package it came from (dpkg knows a library
# by one of the paths usrmerge aliases); every pip package.
owner_of() {
  local real name pkg; real=$(readlink -f "$1")
  for name in "$1" "$real" "${real#/usr}" "/usr${1#/usr}"; do
    pkg=$(dpkg -S "$name" 2>/dev/null | awk -F': ' -v f="$name" '$2 == f {print $1; exit}')
    if [[ -n "$pkg" ]]; then echo "$pkg"; return 0; fi
  done
  echo "build_base: $1 belongs to no Debian package" >&2
  return 1
}
{
  echo "/usr/bin/python3.11 $(owner_of "$kPython")"
  echo "/usr/lib/python3.11/ $(owner_of /usr/lib/python3.11/os.py), $(owner_of /usr/lib/python3.11/lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so)"
  for lib in "${libraries[@]}"; do echo "$lib $(owner_of "$lib")"; done
  grep -E '^[A-Za-z0-9_.-]+==' "$kRequirements" | sed "s|^|$kSitePackages/ pip |"
} >"$rootfs/usr/share/reducer/contents-base.txt"
chmod 0644 "$rootfs/usr/share/reducer/contents-base.txt"

cp deploy/image/torch/Containerfile.base "$ctx/Containerfile"
echo "build_base: podman build $tag" >&2
podman build --quiet --tag "$tag" --file "$ctx/Containerfile" "$ctx" >/dev/null
echo "$tag"
