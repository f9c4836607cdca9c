"""The checks of a PyTorch training Job (deploy/k8s/overlays/torch-job and
torch-job-direct): torchrun's shape from the Job's, the rendezvous through
the Job's headless Service, the job's name from the Job's, and the relay
sidecar in front of the shards. Whether the token and the CA come from
Secrets is token_problems' and tls_problems' check, and which shards the
target names shard_problems' (through container_flags.job_flags, which
knows who dials the shards: the relay, or without one the trainer).
"""
from container_flags import (container_port, expand_vars, is_loopback_listen, parse_flags,
                             plain_env, port_of, torch_containers)
from manifest_values import describe, get, is_nan, number, same, text, truthy

kIndexField = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# The label Kubernetes puts on a Job's pods (1.27 on): the Job's name.
kJobNameField = "metadata.labels['batch.kubernetes.io/job-name']"


def _env_entry(container, name):
    return next((e for e in get(container, "env") or [] if get(e, "name") == name), None)


def _torchrun_flags(trainer):
    """torchrun's --name=value options before the script, and the script."""
    options = {}
    for a in get(trainer, "args") or []:
        a = text(a)
        if not a.startswith("--"):
            return options, a
        name, _, value = a[2:].partition("=")
        options[name] = value
    return options, None


def _relay_problems(relay, trainer, reducerd_flags, where):
    """The relay: a native sidecar (restartPolicy Always) running reducerd
    with flags it knows, serving the pod's loopback at the trainer's
    REDUCER_TARGET, its startup probe on its --health_listen port."""
    problems = []
    at = f"{where} relay {text(get(relay, 'name'))}"
    if get(relay, "restartPolicy") != "Always":
        problems.append(f"{at}: restartPolicy is not Always: not a sidecar, the trainer would "
                        "wait for it to end")
    if text(get(relay, "command", 0)) != "/usr/bin/reducerd":
        problems.append(f"{at}: command is not /usr/bin/reducerd")
    env = plain_env(relay)
    flags, parse = parse_flags([expand_vars(text(a), env) for a in get(relay, "args") or []], at)
    problems.extend(parse)
    value = dict(flags)
    for name in value:
        if name not in reducerd_flags:
            problems.append(f"{at}: reducerd has no flag --{name}")
    listen = value.get("listen", "")
    if not is_loopback_listen(listen):
        problems.append(f"{at}: --listen={listen} is not the pod's loopback: the relay serves "
                        "plaintext to the pod's own ranks only")
    target = text(get(_env_entry(trainer, "REDUCER_TARGET"), "value"))
    if target != listen:
        problems.append(f"{where}: REDUCER_TARGET={target} is not the relay's --listen={listen}")
    health = port_of(value.get("health_listen"))
    probe = get(relay, "startupProbe")
    if is_nan(health) or not truthy(get(probe, "grpc")) or not same(get(probe, "grpc", "port"), health):
        problems.append(f"{at}: no gRPC startupProbe on its --health_listen port: the trainer "
                        "would start before the relay serves")
    elif not same(container_port(relay, "relay-health"), health):
        problems.append(f'{at}: containerPort "relay-health" is not {health}')
    return problems


def torch_job_problems(job, objs, reducerd_flags):
    """An Indexed Job of NNODES pods, all at once, labelled as workers; in
    each, torchrun with --nnodes=$(NNODES) (NNODES the Job's parallelism),
    --node_rank the completion index, --master_addr=$(MASTER_ADDR) the name
    the Job's pod 0 has through its subdomain, a headless Service of the
    overlay selecting the Job's pods, on --master_port; REDUCER_JOB the
    Job's name (the label Kubernetes sets); a relay, where there is one,
    as _relay_problems says."""
    where = describe(job)
    problems = []
    spec = job["spec"]
    name = text(get(job, "metadata", "name"))
    pod_spec = spec["template"]["spec"]
    trainer, relay = torch_containers(job)
    if get(spec, "completionMode") != "Indexed":
        problems.append(f"{where}: not an Indexed Job")
    if not same(get(spec, "parallelism"), get(spec, "completions")):
        problems.append(f"{where}: parallelism differs from completions")
    if get(spec, "template", "metadata", "labels", "reducer.dev/role") != "worker":
        problems.append(f"{where}: pods lack reducer.dev/role: worker (the shards' NetworkPolicy "
                        "admits only workers)")
    env = plain_env(trainer)
    options, script = _torchrun_flags(trainer)
    if script is None:
        problems.append(f"{where}: torchrun is given no script")
    if options.get("nnodes") != "$(NNODES)" or not same(number(env.get("NNODES")), get(spec, "parallelism")):
        problems.append(f"{where}: --nnodes={options.get('nnodes')} with NNODES={env.get('NNODES')} "
                        f"is not the Job's parallelism {text(get(spec, 'parallelism'))}")
    index = _env_entry(trainer, "JOB_COMPLETION_INDEX")
    if (options.get("node_rank") != "$(JOB_COMPLETION_INDEX)" or
            get(index, "valueFrom", "fieldRef", "fieldPath") != kIndexField):
        problems.append(f"{where}: --node_rank is not the completion index")
    if get(_env_entry(trainer, "REDUCER_JOB"), "valueFrom", "fieldRef", "fieldPath") != kJobNameField:
        problems.append(f"{where}: REDUCER_JOB is not the Job's name ({kJobNameField})")
    subdomain = get(pod_spec, "subdomain")
    master = f"{name}-0.{text(subdomain)}"
    if options.get("master_addr") != "$(MASTER_ADDR)" or env.get("MASTER_ADDR") != master:
        problems.append(f"{where}: --master_addr={options.get('master_addr')} with "
                        f"MASTER_ADDR={env.get('MASTER_ADDR')} is not {master}, pod 0's name")
    service = next((o for o in objs if get(o, "kind") == "Service" and
                    same(get(o, "metadata", "name"), subdomain)), None)
    if service is None:
        problems.append(f"{where}: subdomain {text(subdomain)} names no Service of the overlay")
    else:
        if get(service, "spec", "clusterIP") != "None":
            problems.append(f"{describe(service)}: not headless: pods get no names of their own")
        if get(service, "spec", "selector") != {"batch.kubernetes.io/job-name": name}:
            problems.append(f"{describe(service)}: does not select the pods of {where} alone "
                            f"(batch.kubernetes.io/job-name: {name})")
        if not any(same(get(p, "port"), number(options.get("master_port")))
                   for p in get(service, "spec", "ports") or []):
            problems.append(f"{describe(service)}: no port {options.get('master_port')} "
                            "(torchrun's --master_port)")
    if relay is not None:
        problems.extend(_relay_problems(relay, trainer, reducerd_flags, where))
    return problems
