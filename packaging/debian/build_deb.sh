#!/usr/bin/env bash
# Builds the reducer Debian package from Bazel's outputs with dpkg-deb, no
# network:
#
#   build_deb.sh OUT.deb VERSION ARCH DEBIAN_DIR BINARY=PATH...
#
# Each BINARY=PATH installs a program at PATH in the package (usr/bin/...),
# stripped of debug info. DEBIAN_DIR holds control.in, postinst, prerm,
# postrm, reducerd.service (installed as lib/systemd/system/reducerd.service)
# and reducerd.flags (/etc/reducer/reducerd.flags, a conffile), beside the
# empty directory /etc/reducer/credentials (0700) for the unit's
# LoadCredential=. Depends is
# computed by dpkg-shlibdeps from the programs' shared libraries, so that
# `apt-get install ./reducer_VERSION_ARCH.deb` pulls them, plus passwd
# (groupadd, for postinst's group reducer-tokens) and procps (/bin/kill, the
# unit's ExecReload=).
set -euo pipefail

if [[ $# -lt 5 ]]; then
  echo "usage: $0 OUT.deb VERSION ARCH DEBIAN_DIR BINARY=PATH..." >&2
  exit 2
fi
out=$(realpath -m "$1") version=$2 arch=$3 debian_dir=$(realpath "$4")
shift 4

host_arch=$(dpkg --print-architecture)
if [[ "$host_arch" != "$arch" ]]; then
  echo "$0: this machine builds $host_arch binaries, the package is named $arch" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree="$work/tree"

programs=()
for pair in "$@"; do
  binary=${pair%%=*}
  path=${pair#*=}
  install -d -m 0755 "$tree/$(dirname "$path")"
  objcopy --strip-debug "$binary" "$tree/$path"
  chmod 0755 "$tree/$path"
  programs+=("$tree/$path")
done

install -D -m 0644 "$debian_dir/reducerd.service" "$tree/lib/systemd/system/reducerd.service"
install -D -m 0644 "$debian_dir/reducerd.flags" "$tree/etc/reducer/reducerd.flags"
# The unit's LoadCredential= source: TLS and token files, root's alone.
install -d -m 0700 "$tree/etc/reducer/credentials"

# dpkg-shlibdeps looks for debian/control in the current directory.
mkdir -p "$work/src/debian"
printf 'Source: reducer\n\nPackage: reducer\nArchitecture: %s\n' "$arch" \
    > "$work/src/debian/control"
depends=$(cd "$work/src" && dpkg-shlibdeps -O --warnings=0 "${programs[@]}")
depends=${depends#shlibs:Depends=}
if [[ -z "$depends" ]]; then
  echo "$0: dpkg-shlibdeps found no dependency of ${programs[*]}" >&2
  exit 1
fi

install -d -m 0755 "$tree/DEBIAN"
(cd "$tree" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -print |
   sed 's|^\./||' | LC_ALL=C sort | xargs md5sum) > "$tree/DEBIAN/md5sums"
echo "/etc/reducer/reducerd.flags" > "$tree/DEBIAN/conffiles"
for script in postinst prerm postrm; do
  install -m 0755 "$debian_dir/$script" "$tree/DEBIAN/$script"
done
installed_size=$(du -sk --exclude=DEBIAN "$tree" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" \
    -e "s/@INSTALLED_SIZE@/$installed_size/" -e "s/@DEPENDS@/$depends/" \
    "$debian_dir/control.in" > "$tree/DEBIAN/control"
chmod 0644 "$tree/DEBIAN/control" "$tree/DEBIAN/md5sums" "$tree/DEBIAN/conffiles"

SOURCE_DATE_EPOCH=0 dpkg-deb --root-owner-group -Zxz --build "$tree" "$out" >/dev/null
