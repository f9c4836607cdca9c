#!/usr/bin/env bash
# Lays out the client library's install prefix and packs it into a tar file:
#
#   make_install_tree.sh OUT.tar VERSION SOVERSION LIBRARY PC_IN CONFIG_IN \
#       CONFIG_VERSION_IN HEADER...
#
#   include/reducer/<HEADER>                 the public headers, at their
#                                            workspace paths (client/..., core/...)
#   lib/libreducer_client.so.VERSION         the library (soname .so.SOVERSION)
#   lib/libreducer_client.so.SOVERSION       -> libreducer_client.so.VERSION
#   lib/libreducer_client.so                 -> libreducer_client.so.SOVERSION
#   lib/pkgconfig/reducer.pc
#   lib/cmake/Reducer/ReducerConfig.cmake, ReducerConfigVersion.cmake
#
# The tar is reproducible (sorted, owner root, mtime 0) and relocatable:
# extract it under any prefix.
set -euo pipefail

if [[ $# -lt 8 ]]; then
  echo "usage: $0 OUT.tar VERSION SOVERSION LIBRARY PC_IN CONFIG_IN CONFIG_VERSION_IN HEADER..." >&2
  exit 2
fi
out=$1 version=$2 soversion=$3 library=$4 pc_in=$5 config_in=$6 config_version_in=$7
shift 7

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT

for header in "$@"; do
  install -D -m 0644 "$header" "$tree/include/reducer/$header"
done

install -D -m 0755 "$library" "$tree/lib/libreducer_client.so.$version"
ln -s "libreducer_client.so.$version" "$tree/lib/libreducer_client.so.$soversion"
ln -s "libreducer_client.so.$soversion" "$tree/lib/libreducer_client.so"

substitute() {  # TEMPLATE OUTPUT: @VERSION@ and @SOVERSION@ filled in
  mkdir -p "$(dirname "$2")"
  sed -e "s/@VERSION@/$version/g" -e "s/@SOVERSION@/$soversion/g" "$1" > "$2"
  chmod 0644 "$2"
}
substitute "$pc_in" "$tree/lib/pkgconfig/reducer.pc"
substitute "$config_in" "$tree/lib/cmake/Reducer/ReducerConfig.cmake"
substitute "$config_version_in" "$tree/lib/cmake/Reducer/ReducerConfigVersion.cmake"

tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -C "$tree" -cf "$out" include lib
