#!/usr/bin/env bash
# Builds the Reducer container image with podman, from the Bazel build, with
# no registry:
#
#   deploy/image/build.sh        tags reducer:<git short revision>,
#                                reducer:<release> (packaging/version.bzl's
#                                REDUCER_VERSION, the tag deploy/k8s pins)
#                                and reducer:latest
#
# The root filesystem (FROM scratch) holds reducerd, reducerctl and
# metric_sync_worker (stripped, in /usr/bin), exactly the shared libraries
# `ldd` lists for them, from Debian's packages, with the dynamic loader, the
# CA certificates (/etc/ssl/certs/ca-certificates.crt), /etc/passwd and
# /etc/group naming the non-root user reducer (uid and gid 65532), and
# /usr/share/reducer/contents.txt: every file and the Debian package it came
# from. Fails if ldd finds a library missing or a library belongs to no
# package. Prints the image's size. Needs podman and runc (tools/setup.sh
# --deploy).
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/image/podman.sh

readonly kUid=65532
binaries=(server/reducerd tools/reducerctl examples/metric_sync_worker)

bazel build //server:reducerd //tools:reducerctl //examples:metric_sync_worker

ctx=$(mktemp -d /tmp/reducer-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
rootfs="$ctx/rootfs"
mkdir -p "$rootfs/usr/bin" "$rootfs/etc/ssl/certs" "$rootfs/usr/share/reducer"

# copy_from_host PATH: PATH (symlinks followed) at the same place in rootfs.
copy_from_host() {
  mkdir -p "$rootfs$(dirname "$1")"
  cp -L "$1" "$rootfs$1"
  chmod 0644 "$rootfs$1"
}

libraries=()
for b in "${binaries[@]}"; do
  install -m 0755 "bazel-bin/$b" "$rootfs/usr/bin/$(basename "$b")"
  strip --strip-unneeded "$rootfs/usr/bin/$(basename "$b")"
  out=$(ldd "bazel-bin/$b")
  if grep -q 'not found' <<<"$out"; then
    echo "build.sh: $b: ldd finds libraries missing:" >&2
    grep 'not found' <<<"$out" >&2
    exit 1
  fi
  # "libx.so.1 => /lib/.../libx.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2
  # (0x...)"; linux-vdso is the kernel's and has no file.
  while read -r path; do
    libraries+=("$path")
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$out")
done
mapfile -t libraries < <(printf '%s\n' "${libraries[@]}" | sort -u)
for lib in "${libraries[@]}"; do
  copy_from_host "$lib"
  chmod 0755 "$rootfs$lib"
done

copy_from_host /etc/ssl/certs/ca-certificates.crt
printf 'root:x:0:0:root:/root:/sbin/nologin\nreducer:x:%d:%d:reducer:/nonexistent:/sbin/nologin\n' \
  "$kUid" "$kUid" >"$rootfs/etc/passwd"
printf 'root:x:0:\nreducer:x:%d:\n' "$kUid" >"$rootfs/etc/group"
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"

# Every library must belong to a Debian package; record which. dpkg knows a
# file by one of the paths usrmerge aliases (/lib/... or /usr/lib/...), and
# the path ldd prints may be a symlink to it: ask for every form at once.
names_of() {
  local real; real=$(readlink -f "$1")
  printf '%s\n' "$1" "$real" "${real#/usr}" "/usr${1#/usr}"
}
candidates=()
for lib in "${libraries[@]}"; do mapfile -t -O "${#candidates[@]}" candidates < <(names_of "$lib"); done
owners=$(dpkg -S "${candidates[@]}" 2>/dev/null || true)
dpkg-query -W -f='${Status}' ca-certificates 2>/dev/null | grep -q "install ok installed" || {
  echo "build.sh: the ca-certificates package is not installed" >&2; exit 1; }
{
  for b in "${binaries[@]}"; do echo "/usr/bin/$(basename "$b") this repository"; done
  for i in "${!libraries[@]}"; do
    pkg=""
    while read -r name; do
      pkg=$(awk -F': ' -v f="$name" '$2 == f {print $1; exit}' <<<"$owners")
      [[ -n "$pkg" ]] && break
    done < <(names_of "${libraries[$i]}")
    if [[ -z "$pkg" ]]; then
      echo "build.sh: ${libraries[$i]} belongs to no Debian package" >&2
      exit 1
    fi
    echo "${libraries[$i]} $pkg"
  done
  echo "/etc/ssl/certs/ca-certificates.crt ca-certificates (update-ca-certificates)"
} >"$rootfs/usr/share/reducer/contents.txt"
chmod 0644 "$rootfs/usr/share/reducer/contents.txt"

cp deploy/image/Containerfile "$ctx/Containerfile"
rev=$(git rev-parse --short HEAD)
release=$(sed -n 's/^REDUCER_VERSION = "\(.*\)"$/\1/p' packaging/version.bzl)
[[ -n "$release" ]] || { echo "build.sh: no REDUCER_VERSION in packaging/version.bzl" >&2; exit 1; }
podman build --quiet --tag "reducer:$rev" --tag "reducer:$release" --tag reducer:latest \
  --file "$ctx/Containerfile" "$ctx" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "reducer:$rev")
echo "==> image reducer:$rev (also reducer:$release, reducer:latest): $((size / 1024 / 1024)) MiB" \
  "($size bytes), ${#libraries[@]} shared libraries"
