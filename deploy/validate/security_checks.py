"""The pods' security: the Pod Security Standard "restricted" with resources
set (security_problems), images pinned (image_problems), and who may call
the shards (token_problems).
"""
import re

from container_flags import is_true, secret_mount_of, shard_flags, worker_flags
from manifest_values import bytes_of, get, same, text, truthy

kUid = 65532
# The Secret holding the shards' tokens file (deploy/k8s/base).
kTokensSecret = "reducer-job-tokens"


def security_problems(pod_spec, where):
    """The Pod Security Standard "restricted", as this project's pods meet it."""
    problems = []
    pod = get(pod_spec, "securityContext") or {}
    if (truthy(get(pod_spec, "hostNetwork")) or truthy(get(pod_spec, "hostPID")) or
            truthy(get(pod_spec, "hostIPC"))):
        problems.append(f"{where}: host namespaces")
    if get(pod, "runAsNonRoot") is not True:
        problems.append(f"{where}: pod securityContext.runAsNonRoot is not true")
    if not same(get(pod, "runAsUser"), kUid):
        problems.append(f"{where}: pod securityContext.runAsUser is not {kUid}")
    if get(pod, "seccompProfile", "type") != "RuntimeDefault":
        problems.append(f"{where}: pod seccompProfile is not RuntimeDefault")
    for v in get(pod_spec, "volumes") or []:
        if not any(truthy(get(v, k)) for k in
                   ("configMap", "secret", "emptyDir", "projected", "downwardAPI")):
            problems.append(f'{where}: volume {text(get(v, "name"))} is of a kind "restricted" '
                            "does not allow")
    for c in (get(pod_spec, "initContainers") or []) + pod_spec["containers"]:
        at = f"{where} container {text(get(c, 'name'))}"
        sc = get(c, "securityContext") or {}
        if get(sc, "allowPrivilegeEscalation") is not False:
            problems.append(f"{at}: allowPrivilegeEscalation is not false")
        if get(sc, "readOnlyRootFilesystem") is not True:
            problems.append(f"{at}: readOnlyRootFilesystem is not true")
        if truthy(get(sc, "privileged")):
            problems.append(f"{at}: privileged")
        if get(sc, "runAsNonRoot") is False or same(get(sc, "runAsUser"), 0):
            problems.append(f"{at}: may run as root")
        drop = get(sc, "capabilities", "drop")
        if "ALL" not in (drop if drop is not None else []):
            problems.append(f"{at}: capabilities do not drop ALL")
        if len(get(sc, "capabilities", "add") or []):
            problems.append(f"{at}: adds capabilities")
        if truthy(get(sc, "seccompProfile")) and get(sc, "seccompProfile", "type") != "RuntimeDefault":
            problems.append(f"{at}: seccompProfile is not RuntimeDefault")
        r = get(c, "resources") or {}
        if not truthy(get(r, "requests", "cpu")):
            problems.append(f"{at}: no cpu request")
        request, limit = get(r, "requests", "memory"), get(r, "limits", "memory")
        if not truthy(request) or not truthy(limit):
            problems.append(f"{at}: memory request and limit not both set")
        elif not same(bytes_of(request), bytes_of(limit)):
            problems.append(f"{at}: memory request {text(request)} differs from its limit {text(limit)}")
    return problems


def image_problems(pod_spec, where):
    """Every container's image pinned: a tag other than latest, or a digest
    (what `kustomize edit set image` must leave too)."""
    problems = []
    for c in (get(pod_spec, "initContainers") or []) + (get(pod_spec, "containers") or []):
        image = text(get(c, "image"))
        at = f"{where} container {text(get(c, 'name'))}"
        if "@sha256:" in image:
            continue
        # The tag follows the last ":" after the last "/" (a registry's port comes before).
        m = re.search(r":([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})\Z", image.rsplit("/", 1)[-1])
        if not m:
            problems.append(f"{at}: image {image} has no tag (it means latest): pin one")
        elif m.group(1) == "latest":
            problems.append(f"{at}: image {image} is not pinned: latest moves")
    return problems


def token_problems(objs, *, open):
    """The open overlay (`open`) serves anyone who can reach the port:
    --allow_unauthenticated, no --job_tokens_file and no volume of the
    tokens Secret; its workers send no token. Every other shard overlay
    requires job tokens and has no --allow_unauthenticated, and its workers
    send their job's token from a mounted Secret."""
    problems = []
    for where, value, pod_spec, _ in shard_flags(objs):
        tokens_volume = any(get(v, "secret", "secretName") == kTokensSecret
                            for v in get(pod_spec, "volumes") or [])
        if open:
            if not is_true(value.get("allow_unauthenticated")):
                problems.append(f"{where}: open, but no --allow_unauthenticated=true")
            if "job_tokens_file" in value:
                problems.append(f"{where}: open, but --job_tokens_file={value['job_tokens_file']}")
            if tokens_volume:
                problems.append(f"{where}: open, but mounts the Secret {kTokensSecret}")
        else:
            if "job_tokens_file" not in value:
                problems.append(f"{where}: no --job_tokens_file: calls carry no job token "
                                "(only overlays/open serves without)")
            if "allow_unauthenticated" in value and is_true(value["allow_unauthenticated"]):
                problems.append(f"{where}: --allow_unauthenticated serves anyone (only overlays/open may)")
    for where, value, pod_spec, container in worker_flags(objs):
        if open:
            if "token_file" in value:
                problems.append(f"{where}: open, but --token_file={value['token_file']}")
        elif "token_file" not in value:
            problems.append(f"{where}: no --token_file: the shards require the job's token")
        elif not secret_mount_of(value["token_file"], container, pod_spec):
            problems.append(f"{where}: --token_file={value['token_file']} is not in a mounted Secret")
    return problems
