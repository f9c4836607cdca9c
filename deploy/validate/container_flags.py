"""What a container's args and mounts say: the flags it gives its binary
(with each --flagfile read from its ConfigMap), the ports they name,
which files lie in mounted Secrets, and how reducerd reads a --listen
address and a bool flag.
"""
import re

from manifest_values import NaN, describe, get, same, text, truthy


def flags_in_help(help_text):
    """Flag names in `PROGRAM --helpfull` output ("    --name (help ...")."""
    return {m.group(1) for m in re.finditer(r"^\s+--([A-Za-z0-9_]+) \(", help_text, re.M)}


def flagfile_lines(flagfile_text):
    """"--name=value" lines of an absl flagfile, comments and blanks skipped."""
    lines = (line.strip() for line in flagfile_text.split("\n"))
    return [line for line in lines if line and not line.startswith("#")]


def parse_flags(args, where):
    """Parses ["--a=1", "--b=x"] into ([(name, value)], problems)."""
    flags = []
    problems = []
    for arg in args:
        m = re.fullmatch(r"--([A-Za-z0-9_]+)=(.*)", text(arg), re.S)
        if not m:
            problems.append(f'{where}: "{text(arg)}" is not --flag=value')
            continue
        flags.append((m.group(1), m.group(2)))
    return flags, problems


def _mount_dir(mount):
    return re.sub(r"/\Z", "", text(get(mount, "mountPath")), count=1)


def _volume(pod_spec, name):
    return next((v for v in get(pod_spec, "volumes") or [] if same(get(v, "name"), name)), None)


def _config_map_file_at(path, container, pod_spec, objs):
    """The ConfigMap data key a path inside the container reads, through the
    pod's configMap volumes: (configMap, key) or None."""
    for mount in get(container, "volumeMounts") or []:
        directory = _mount_dir(mount)
        if not path.startswith(f"{directory}/"):
            continue
        volume = _volume(pod_spec, get(mount, "name"))
        if not truthy(get(volume, "configMap")):
            continue
        cm = next((o for o in objs if get(o, "kind") == "ConfigMap" and
                   same(get(o, "metadata", "name"), get(volume, "configMap", "name"))), None)
        key = path[len(directory) + 1:]
        data = get(cm, "data")
        if isinstance(data, dict) and key in data:
            return cm, key
    return None


def secret_mount_of(path, container, pod_spec):
    """The mount of a Secret volume that holds `path`, or None."""
    for mount in get(container, "volumeMounts") or []:
        directory = _mount_dir(mount)
        volume = _volume(pod_spec, get(mount, "name"))
        if path.startswith(f"{directory}/") and truthy(get(volume, "secret")):
            return mount
    return None


def effective_flags(container, pod_spec, objs, where):
    """Every flag a container's args give reducerd, with the contents of each
    --flagfile read from its ConfigMap: ([(name, value)], problems)."""
    flags, problems = parse_flags(get(container, "args") or [], f"{where} args")
    out = []
    for name, value in flags:
        if name != "flagfile":
            out.append((name, value))
            continue
        for path in value.split(","):
            found = _config_map_file_at(path, container, pod_spec, objs)
            if not found:
                problems.append(f"{where}: --flagfile={path} is no key of a mounted ConfigMap")
                continue
            cm, key = found
            parsed, parse_problems = parse_flags(flagfile_lines(text(cm["data"][key])),
                                                  f"{where} {describe(cm)} {key}")
            problems.extend(parse_problems)
            out.extend(parsed)
    return out, problems


def expand_vars(value, variables):
    """kubelet's expansion of a command or arg: $(NAME) of a defined
    variable is replaced, $$ is $, anything else is left as written."""
    def replace(m):
        if m.group(0) == "$$":
            return "$"
        return variables.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", replace, value)


def plain_env(container):
    """{NAME: value} of the container's variables given as values (not
    valueFrom), each expanded with those before it, as kubelet does."""
    env = {}
    for e in get(container, "env") or []:
        if isinstance(e, dict) and "value" in e and isinstance(get(e, "name"), str):
            env[e["name"]] = expand_vars("null" if e["value"] is None else text(e["value"]), env)
    return env


kTorchrun = "/usr/local/bin/torchrun"


def torch_containers(job):
    """(trainer, relay) of a PyTorch Job (deploy/k8s/overlays/torch-job): the
    container running torchrun, and the init container running reducerd
    --upstream in front of the shards (None without one); (None, None) for
    any other Job."""
    pod_spec = job["spec"]["template"]["spec"]
    trainer = next((c for c in get(pod_spec, "containers") or []
                    if text(get(c, "command", 0)) == kTorchrun), None)
    if trainer is None:
        return None, None
    relay = next((c for c in get(pod_spec, "initContainers") or []
                  if any(text(a).startswith("--upstream=") for a in get(c, "args") or [])), None)
    return trainer, relay


def job_flags(job):
    """What the Job's pods dial the shards with, as the metric-sync worker's
    flags name it (target, token_file, tls_ca_file; each expanded as kubelet
    expands $(VAR) with the variables given as values): the worker's own
    flags; for a PyTorch Job, its relay's --upstream, --upstream_token_file
    and --upstream_tls_ca_file, or without a relay its trainer's
    REDUCER_TARGET, REDUCER_TOKEN_FILE and REDUCER_TLS_CA_FILE. Returns
    ({name: value}, where, pod_spec, container), container the one that
    dials."""
    pod_spec = job["spec"]["template"]["spec"]
    trainer, relay = torch_containers(job)
    if relay is not None:
        env = plain_env(relay)
        flags, _ = parse_flags([expand_vars(text(a), env) for a in get(relay, "args") or []], "")
        upstream = dict(flags)
        value = {name: upstream[f"upstream{suffix}"]
                 for name, suffix in (("target", ""), ("token_file", "_token_file"),
                                      ("tls_ca_file", "_tls_ca_file"))
                 if f"upstream{suffix}" in upstream}
        return value, f"{describe(job)} relay", pod_spec, relay
    if trainer is not None:
        env = plain_env(trainer)
        value = {name: env[variable]
                 for name, variable in (("target", "REDUCER_TARGET"), ("token_file", "REDUCER_TOKEN_FILE"),
                                        ("tls_ca_file", "REDUCER_TLS_CA_FILE"))
                 if variable in env}
        return value, describe(job), pod_spec, trainer
    container = pod_spec["containers"][0]
    env = plain_env(container)
    flags, _ = parse_flags([expand_vars(text(a), env) for a in get(container, "args") or []], "")
    return dict(flags), describe(job), pod_spec, container


def port_of(host_port):
    m = re.search(r":([0-9]+)\Z", "" if host_port is None else host_port)
    return int(m.group(1)) if m else NaN


def is_true(value):
    """An absl bool flag's value read as true ("--x=true", "--x=1", ...)."""
    return re.fullmatch(r"true|t|yes|y|1", "" if value is None else text(value), re.I) is not None


def is_loopback_listen(listen):
    """Whether reducerd counts a --listen address as reachable from this host
    only (server/listen_exposure.h): 127.0.0.0/8, [::1], localhost, Unix
    sockets."""
    if re.match(r"unix(-abstract)?:", listen):
        return True
    host = (listen[1:listen.find("]")] if listen.startswith("[")
            else re.sub(r":[0-9]*\Z", "", listen, count=1))
    return (re.fullmatch(r"127\.[0-9]+\.[0-9]+\.[0-9]+", host) is not None or host == "::1" or
            host.lower() == "localhost")


def container_port(container, name):
    port = next((p for p in get(container, "ports") or [] if same(get(p, "name"), name)), None)
    return get(port, "containerPort")


def shard_flags(objs):
    """The flags of each StatefulSet's reducerd container, by name, with where
    they are: [(where, value, pod_spec, container)]."""
    out = []
    for sts in (o for o in objs if get(o, "kind") == "StatefulSet"):
        pod_spec = sts["spec"]["template"]["spec"]
        container = pod_spec["containers"][0]
        where = f"{describe(sts)} container {text(get(container, 'name'))}"
        value = dict(effective_flags(container, pod_spec, objs, where)[0])
        out.append((where, value, pod_spec, container))
    return out


def worker_flags(objs):
    """What each Job's pods dial the shards with (job_flags), in the order of
    shard_flags: [(where, value, pod_spec, container)]."""
    out = []
    for job in (o for o in objs if get(o, "kind") == "Job"):
        value, where, pod_spec, container = job_flags(job)
        out.append((where, value, pod_spec, container))
    return out
