#!/usr/bin/env bash
# Checks that pointing the overlays at a registry keeps the image pinned:
#
#   deploy/k8s/set_image_test.sh
#
# `kustomize edit set image reducer=REGISTRY/reducer` (no tag) writes an
# `images:` entry with newName alone; here an overlay with exactly that
# entry over a copy of deploy/k8s's four-shards and worker-job must render
# every container's image as REGISTRY/reducer:RELEASE, the tag the
# manifests pin (packaging/version.bzl's REDUCER_VERSION), and one with
# newTag too must render that tag. Prints "==> " lines; exits 0 when both
# hold. Needs kubectl.
set -euo pipefail
cd "$(dirname "$0")/../.."

readonly kRegistry=registry.example:5000/ml/reducer
release=$(sed -n 's/^REDUCER_VERSION = "\(.*\)"$/\1/p' packaging/version.bzl)
[[ -n "$release" ]] || { echo "set_image_test: no REDUCER_VERSION in packaging/version.bzl" >&2; exit 1; }
work=$(mktemp -d /tmp/reducer-set-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
# kustomize takes no absolute resource paths: a copy beside the overlay.
cp -r deploy/k8s "$work/k8s"

# images OVERLAY_DIR [TAG]: the images an overlay with the `images:` entry
# `kustomize edit set image reducer=REGISTRY/reducer[:TAG]` writes renders,
# sorted and unique.
images() {
  local dir="$work/set-image-$(basename "$1")-${2:-none}"
  mkdir -p "$dir"
  {
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n'
    printf 'resources:\n- ../k8s/overlays/%s\n' "$1"
    printf 'images:\n- name: reducer\n  newName: %s\n' "$kRegistry"
    if [[ -n "${2:-}" ]]; then printf '  newTag: "%s"\n' "$2"; fi
  } >"$dir/kustomization.yaml"
  kubectl kustomize "$dir" | sed -n 's/^ *image: //p' | sort -u
}

for overlay in four-shards worker-job; do
  got=$(images "$overlay")
  [[ "$got" == "$kRegistry:$release" ]] ||
    { echo "set_image_test: $overlay with newName alone renders image(s) '$got', not $kRegistry:$release" >&2; exit 1; }
  got=$(images "$overlay" 9.9.9)
  [[ "$got" == "$kRegistry:9.9.9" ]] ||
    { echo "set_image_test: $overlay with newTag 9.9.9 renders image(s) '$got'" >&2; exit 1; }
  echo "==> $overlay: set image keeps the pinned tag ($kRegistry:$release) or sets the one given"
done
