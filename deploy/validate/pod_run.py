"""Turns the pod template of a rendered overlay into the `podman run`
arguments that start one of its containers (the first, or --container's)
as kubelet would: the same image, command, args and env (with kubelet's
$(VAR) expansion), user and group, read-only root, capabilities dropped,
no new privileges, each ConfigMap or Secret volume written to a folder
mounted read-only at its mountPath, and each emptyDir a tmpfs there.
Ports are not mapped: the container shares the network given, where it
listens on exactly the ports its flags name.

  python pod_run.py run RENDERED.yaml KIND --network=NET --name=NAME \\
      [--volumes_dir=DIR] [--secret=NAME=DIR ...] [--rank=I] [--env=NAME=VALUE ...]
      [--container=NAME]
      prints the arguments after `podman run`, one per line (NUL-free
      text; no argument holds a newline)
  python pod_run.py facts RENDERED.yaml KIND [--container=NAME]
      prints "readiness PORT", "liveness PORT", "grace SECONDS",
      "completions N" (a Job), "first NAME-0.SERVICE" (a StatefulSet: the
      name workers dial its first shard by), "ports NAME=PORT,...";
      a Job also "parallelism N", "name NAME" and "subdomain NAME" (or
      "subdomain none"); with --container=NAME, the probes and ports are
      that container's
  python pod_run.py secrets SECRETS.yaml DIR
      writes each Secret of SECRETS.yaml (as `kubectl apply -f` takes it:
      data base64, stringData as is) as DIR/NAME/KEY files, the folders
      that --secret=NAME=DIR/NAME gives

KIND is StatefulSet or Job. --container names a container or an init
container (a native sidecar) of the template. --rank=I stands for the
completion index kubelet's downward API gives an Indexed Job's pod, and
sets the host name Kubernetes gives that pod (NAME-I); the label
batch.kubernetes.io/job-name is the Job's name. --env overrides a
variable's value (REDUCER_TARGET pointed at a local address). --secret
gives the files of Secret NAME (one file per key, in DIR); they are copied
into the volume's folder with the volume's defaultMode, owned by group
fsGroup as kubelet does. Volumes of another kind than ConfigMap, Secret or
emptyDir, and valueFrom other than the completion index and the Job's
name, are refused: such a template cannot be started faithfully here.
"""
import base64
import json
import os
import re
import shutil
import sys

from checks import get, load_objects, text, truthy
from container_flags import expand_vars as expand

kIndexField = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# The label Kubernetes puts on a Job's pods: the Job's name.
kJobNameField = "metadata.labels['batch.kubernetes.io/job-name']"


def die(message):
    print(f"pod_run.py: {message}", file=sys.stderr)
    sys.exit(1)


def split_at_equals(kv):
    """"NAME=VALUE" as (NAME, VALUE)."""
    i = kv.find("=")
    return kv[:i], kv[i + 1:]


def write_secrets(file, out_dir):
    with open(file, encoding="utf-8") as f:
        objs = load_objects(f.read())
    secrets = [o for o in objs if get(o, "kind") == "Secret"]
    if not secrets:
        die(f"{file} holds no Secret")
    for secret in secrets:
        directory = os.path.join(out_dir, text(get(secret, "metadata", "name")))
        os.makedirs(directory, exist_ok=True)
        files = {k: base64.b64decode(text(v), validate=True) for k, v in (get(secret, "data") or {}).items()}
        files.update({k: text(v).encode() for k, v in (get(secret, "stringData") or {}).items()})
        for key, content in files.items():
            with open(os.path.join(directory, key), "wb") as f:
                f.write(content)
    return 0


def main(argv):
    if argv[:1] == ["secrets"]:
        if len(argv) != 3:
            die("usage: pod_run.py secrets SECRETS.yaml DIR")
        return write_secrets(argv[1], argv[2])
    mode, file, kind = (argv + [None] * 3)[:3]
    rest = argv[3:]
    options = {"env": [], "secret": []}
    for arg in rest:
        m = re.fullmatch(r"--([a-z_]+)=(.*)", arg, re.S)
        if not m:
            die(f"unexpected argument {arg}")
        if m.group(1) in ("env", "secret"):
            options[m.group(1)].append(m.group(2))
        else:
            options[m.group(1)] = m.group(2)
    if not file or not kind:
        die("usage: pod_run.py run|facts RENDERED.yaml KIND [options]")

    with open(file, encoding="utf-8") as f:
        objs = load_objects(f.read())
    owner = next((o for o in objs if get(o, "kind") == kind), None)
    if owner is None:
        die(f"{file} has no {kind}")
    pod = owner["spec"]["template"]["spec"]
    container = pod["containers"][0]
    if options.get("container"):
        container = next((c for c in (get(pod, "containers") or []) + (get(pod, "initContainers") or [])
                          if get(c, "name") == options["container"]), None)
        if container is None:
            die(f"the template has no container {options['container']}")

    if mode == "facts":
        def or_else(value, default):
            return default if value is None else text(value)
        ports = ",".join(f"{text(get(p, 'name'))}={text(get(p, 'containerPort'))}"
                         for p in get(container, "ports") or [])
        lines = [
            f"readiness {or_else(get(container, 'readinessProbe', 'grpc', 'port'), 'none')}",
            f"liveness {or_else(get(container, 'livenessProbe', 'grpc', 'port'), 'none')}",
            f"grace {or_else(get(pod, 'terminationGracePeriodSeconds'), '30')}",
            f"ports {ports}",
        ]
        if kind == "Job":
            lines.append(f"completions {text(get(owner, 'spec', 'completions'))}")
            lines.append(f"parallelism {text(get(owner, 'spec', 'parallelism'))}")
            lines.append(f"name {text(get(owner, 'metadata', 'name'))}")
            lines.append(f"subdomain {or_else(get(pod, 'subdomain'), 'none')}")
        if kind == "StatefulSet":
            lines.append(f"first {text(get(owner, 'metadata', 'name'))}-0."
                         f"{text(get(owner, 'spec', 'serviceName'))}")
        print("\n".join(lines))
        return 0
    if mode != "run":
        die(f"unknown mode {text(mode)}")
    if not options.get("network") or not options.get("name"):
        die("run needs --network and --name")

    # The container's environment, in order, as kubelet builds it.
    env = {}
    for e in get(container, "env") or []:
        name = get(e, "name")
        if isinstance(e, dict) and "value" in e:
            env[name] = expand("null" if e["value"] is None else text(e["value"]), env)
        elif get(e, "valueFrom", "fieldRef", "fieldPath") == kIndexField:
            if "rank" not in options:
                die(f"{name} is the completion index: give --rank")
            env[name] = options["rank"]
        elif get(e, "valueFrom", "fieldRef", "fieldPath") == kJobNameField and kind == "Job":
            env[name] = text(get(owner, "metadata", "name"))
        else:
            die(f"env {name}: only values, the completion index and the Job's name can be given here")
    for kv in options["env"]:
        name, value = split_at_equals(kv)
        if name not in env:
            die(f"--env {name}: the template sets no such variable")
        env[name] = value

    sc = {**(get(pod, "securityContext") or {}), **(get(container, "securityContext") or {})}
    args = [f"--name={options['name']}", f"--network={options['network']}"]
    if kind == "Job" and "rank" in options:
        args.append(f"--hostname={text(get(owner, 'metadata', 'name'))}-{options['rank']}")
    if sc.get("runAsUser") is None:
        die("the template sets no runAsUser")
    group = f":{text(sc['runAsGroup'])}" if sc.get("runAsGroup") is not None else ""
    args.append(f"--user={text(sc['runAsUser'])}{group}")
    if truthy(sc.get("readOnlyRootFilesystem")):
        args.append("--read-only")
    for cap in get(sc, "capabilities", "drop") or []:
        args.append(f"--cap-drop={cap}")
    for cap in get(sc, "capabilities", "add") or []:
        args.append(f"--cap-add={cap}")
    if sc.get("allowPrivilegeEscalation") is False:
        args.append("--security-opt=no-new-privileges")
    if truthy(sc.get("seccompProfile")) and get(sc, "seccompProfile", "type") != "RuntimeDefault":
        die("seccomp other than RuntimeDefault")

    secrets = dict(split_at_equals(kv) for kv in options["secret"])
    fs_group = get(pod, "securityContext", "fsGroup")
    for mount in get(container, "volumeMounts") or []:
        volume = next((v for v in get(pod, "volumes") or [] if get(v, "name") == get(mount, "name")), None)
        if volume is not None and "emptyDir" in volume:
            args.append(f"--tmpfs={mount['mountPath']}")
            continue
        if not options.get("volumes_dir"):
            die("volumes need --volumes_dir")
        directory = os.path.join(options["volumes_dir"], mount["name"])
        os.makedirs(directory, exist_ok=True)
        os.chmod(directory, 0o755)
        if truthy(get(volume, "configMap")):
            cm_name = get(volume, "configMap", "name")
            cm = next((o for o in objs if get(o, "kind") == "ConfigMap" and
                       get(o, "metadata", "name") == cm_name), None)
            if cm is None:
                die(f"ConfigMap {cm_name} is not rendered")
            mode_bits = get(volume, "configMap", "defaultMode")
            for key, value in (get(cm, "data") or {}).items():
                path = os.path.join(directory, key)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text(value))
                os.chmod(path, 0o644 if mode_bits is None else mode_bits)
        elif truthy(get(volume, "secret")):
            secret_name = get(volume, "secret", "secretName")
            source = secrets.get(secret_name)
            if not source:
                die(f"Secret {secret_name}: give --secret={secret_name}=DIR")
            mode_bits = get(volume, "secret", "defaultMode")
            for key in sorted(os.listdir(source)):
                path = os.path.join(directory, key)
                shutil.copyfile(os.path.join(source, key), path)
                os.chmod(path, 0o644 if mode_bits is None else mode_bits)
                if fs_group is not None:
                    os.chown(path, 0, fs_group)
        else:
            die(f"volume {mount['name']} is neither a ConfigMap, a Secret nor an emptyDir")
        args.append(f"--volume={directory}:{mount['mountPath']}:ro")
    for name, value in env.items():
        args.append(f"--env={name}={value}")
    if get(container, "command") is not None:
        command = [expand(text(c), env) for c in container["command"]]
        args.append(f"--entrypoint={json.dumps(command, ensure_ascii=False, separators=(',', ':'))}")
    args.append(text(get(container, "image")))
    for a in get(container, "args") or []:
        args.append(expand(text(a), env))
    if any("\n" in a for a in args):
        die("an argument holds a newline")
    print("\n".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
