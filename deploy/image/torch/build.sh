#!/usr/bin/env bash
# Builds the PyTorch worker image with podman, offline once the wheelhouse
# holds the pinned packages, from this repository:
#
#   deploy/image/torch/build.sh [--wheel=FILE]
#       tags reducer-torch:<git short revision>, reducer-torch:<release>
#       (packaging/version.bzl's REDUCER_VERSION, the tag
#       deploy/k8s/overlays/torch-job pins) and reducer-torch:latest
#
# On the base build_base.sh makes (Debian's Python 3.11, pip's torch and its
# libraries; built once per set of inputs, several GB), one small layer:
# the `reducer` wheel (FILE, or the one python/build_wheel.sh builds with
# the project's venv, tools/pinned_venv.sh python/requirements-dev.txt),
# installed --no-deps into /usr/local/lib/python3.11/dist-packages;
# examples/torch_ddp.py in /usr/share/reducer/examples; and
# /usr/share/reducer/contents.txt: the base's list (contents-base.txt) and
# the wheel. The image runs as the non-root user reducer (65532), its
# entrypoint torchrun. Prints the image's size. Needs podman and runc
# (tools/setup.sh --deploy).
set -euo pipefail
cd "$(dirname "$0")/../../.."
source deploy/image/podman.sh

readonly kSitePackages=/usr/local/lib/python3.11/dist-packages
wheel=""
for arg in "$@"; do
  case $arg in
    --wheel=*) wheel=$(realpath "${arg#--wheel=}") ;;
    *) echo "usage: $0 [--wheel=FILE]" >&2; exit 2 ;;
  esac
done

base=$(deploy/image/torch/build_base.sh)
echo "build: base $base" >&2

ctx=$(mktemp -d /tmp/reducer-torch-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
if [[ -z "$wheel" ]]; then
  wheel=$(python/build_wheel.sh "$ctx/wheel" | tail -1)
fi
[[ -f "$wheel" ]] || { echo "build: no wheel $wheel" >&2; exit 1; }

layer="$ctx/layer"
mkdir -p "$layer/usr/share/reducer/examples"
/usr/bin/python3.11 -m pip install --no-input --disable-pip-version-check --no-index --no-deps \
  --no-compile --break-system-packages --root-user-action=ignore --root "$layer" --prefix /usr \
  "$wheel" >&2
/usr/bin/python3.11 -m compileall -q -s "$layer" -p / "$layer$kSitePackages" >/dev/null
install -m 0644 examples/torch_ddp.py "$layer/usr/share/reducer/examples/torch_ddp.py"
# The base's list, then what this layer adds.
podman run --rm --network=none --entrypoint=/usr/bin/python3 "$base" \
  -c 'print(open("/usr/share/reducer/contents-base.txt").read(), end="")' \
  >"$layer/usr/share/reducer/contents.txt"
{
  echo "$kSitePackages/ pip $(basename "$wheel") (this repository)"
  echo "/usr/share/reducer/examples/torch_ddp.py this repository"
} >>"$layer/usr/share/reducer/contents.txt"
chmod 0644 "$layer/usr/share/reducer/contents.txt"

cp deploy/image/torch/Containerfile "$ctx/Containerfile"
rev=$(git rev-parse --short HEAD)
release=$(sed -n 's/^REDUCER_VERSION = "\(.*\)"$/\1/p' packaging/version.bzl)
[[ -n "$release" ]] || { echo "build: no REDUCER_VERSION in packaging/version.bzl" >&2; exit 1; }
podman build --quiet --build-arg "BASE=$base" --tag "reducer-torch:$rev" \
  --tag "reducer-torch:$release" --tag reducer-torch:latest \
  --file "$ctx/Containerfile" "$ctx" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "reducer-torch:$rev")
base_size=$(podman image inspect --format '{{.Size}}' "$base")
echo "==> image reducer-torch:$rev (also reducer-torch:$release, reducer-torch:latest):" \
  "$((size / 1024 / 1024)) MiB ($size bytes), of which the base $base $((base_size / 1024 / 1024)) MiB"
