# Sourced by deploy/ scripts: `podman` as they all run it. runc, not crun
# (crun refuses hosts whose cgroups are in hybrid mode), and the repository's
# containers.conf (no default ulimits). Defines the function `podman`.
deploy_image_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CONTAINERS_CONF="$deploy_image_dir/containers.conf"
podman() { command podman --runtime runc "$@"; }
