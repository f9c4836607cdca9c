"""The checks of each kind of workload: the StatefulSet of reducerd shards
(its container's flags, ports and probes, its selectors, Service,
PodDisruptionBudget and NetworkPolicies), the Job of workers, and the
workers' target naming every shard; policy_problems runs them with the
security checks.
"""
import re

from container_flags import (container_port, effective_flags, is_loopback_listen, is_true,
                             parse_flags, port_of, secret_mount_of)
from manifest_values import bytes_of, describe, get, is_nan, number, same, seconds_of, text, truthy
from security_checks import security_problems

kReducerdBinary = "/usr/bin/reducerd"

# What reducerd holds outside --memory_budget_bytes (docs/deployment.md,
# "Sizing a shard's memory"): the process at rest, each collective stream
# with a connection of its own, the sessions of 4096 ranks, and 128
# messages of --chunk_bytes + 1 MiB being received; besides
# --kept_results_bytes.
kMiB = 1 << 20
kProcessBytes = 64 * kMiB
kStreamBytes = 38 << 10
kSessionsBytes = 84 * kMiB
kMessagesInArrival = 128
kMessageHeadroomBytes = 1 * kMiB


def uncounted_bytes(value):
    """The memory reducerd needs beyond its budget with flags `value`."""
    kept = number(value.get("kept_results_bytes", 64 * kMiB))
    calls = number(value.get("max_concurrent_calls", 4096))
    chunk = number(value.get("chunk_bytes", kMiB))
    return (kProcessBytes + kept + calls * kStreamBytes + kSessionsBytes +
            kMessagesInArrival * (chunk + kMessageHeadroomBytes))
kWorkerBinary = "/usr/bin/metric_sync_worker"


def _reducerd_problems(sts, container, objs, reducerd_flags, where):
    """reducerd's container: flags known, ports and probes where its flags say."""
    pod_spec = sts["spec"]["template"]["spec"]
    flags, problems = effective_flags(container, pod_spec, objs, where)
    value = {}
    for name, v in flags:
        if name not in reducerd_flags:
            problems.append(f"{where}: reducerd has no flag --{name}")
        value[name] = v
    health = port_of(value.get("health_listen"))
    if is_nan(health):
        problems.append(f"{where}: no --health_listen port for kubelet's probes")
    else:
        for probe in ("livenessProbe", "readinessProbe"):
            p = get(container, probe)
            if not truthy(get(p, "grpc")):
                problems.append(f"{where}: {probe} is not a gRPC probe")
            elif not same(get(p, "grpc", "port"), health):
                problems.append(f"{where}: {probe} probes port {text(get(p, 'grpc', 'port'))}, "
                                f"--health_listen is port {health}")
        if not same(container_port(container, "health"), health):
            problems.append(f'{where}: containerPort "health" is not {health}')
    if not same(container_port(container, "grpc"), port_of(value.get("listen"))):
        problems.append(f'{where}: containerPort "grpc" is not the --listen port '
                        f"({text(value.get('listen'))})")
    if ("metrics_listen" in value and
            not same(container_port(container, "metrics"), port_of(value["metrics_listen"]))):
        problems.append(f'{where}: containerPort "metrics" is not the --metrics_listen port')
    limit = bytes_of(get(container, "resources", "limits", "memory"))
    budget = number(value.get("memory_budget_bytes", 2**31))
    if not budget < limit:
        problems.append(f"{where}: --memory_budget_bytes={text(budget)} is not below the memory limit")
    elif not budget + uncounted_bytes(value) <= limit:
        problems.append(f"{where}: the memory limit leaves {text((limit - budget) // kMiB)} MiB "
                        f"above --memory_budget_bytes={text(budget)}; reducerd needs "
                        f"{text(uncounted_bytes(value) // kMiB)} MiB there with these flags "
                        "(docs/deployment.md, \"Sizing a shard's memory\")")
    drain = seconds_of(value.get("drain_budget", "10s"))
    grace = get(pod_spec, "terminationGracePeriodSeconds")
    grace = 30 if grace is None else grace
    if not drain < number(grace):
        problems.append(f"{where}: --drain_budget ({text(drain)} s) is not below "
                        f"terminationGracePeriodSeconds ({text(grace)})")
    for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file", "job_tokens_file"):
        if name in value and not secret_mount_of(value[name], container, pod_spec):
            problems.append(f"{where}: --{name}={value[name]} is not in a mounted Secret")
    if ("tls_cert_file" in value) != ("tls_key_file" in value):
        problems.append(f"{where}: --tls_cert_file and --tls_key_file go together")
    # Protected mode: reducerd would refuse to start.
    if ("listen" in value and not is_loopback_listen(value["listen"]) and
            "tls_cert_file" not in value and "job_tokens_file" not in value and
            not is_true(value.get("allow_unauthenticated"))):
        problems.append(f"{where}: --listen={value['listen']} with neither TLS nor --job_tokens_file: "
                        "reducerd refuses it without --allow_unauthenticated")
    return problems


def _selects(selector, labels):
    if not truthy(selector):
        return False
    if len(get(selector, "matchExpressions") or []):
        return False  # not used here
    wanted = list((get(selector, "matchLabels") or {}).items())
    return len(wanted) > 0 and all(same(get(labels, k), v) for k, v in wanted)


def _selector_problems(objs, sts):
    problems = []
    spec = sts["spec"]
    labels = get(spec, "template", "metadata", "labels") or {}
    where = describe(sts)
    if not _selects(get(spec, "selector"), labels):
        problems.append(f"{where}: its selector does not select its own pods")
    service = next((o for o in objs if get(o, "kind") == "Service" and
                    same(get(o, "metadata", "name"), get(spec, "serviceName"))), None)
    if service is None:
        problems.append(f"{where}: serviceName {text(get(spec, 'serviceName'))} names no Service")
    else:
        if get(service, "spec", "clusterIP") != "None":
            problems.append(f"{describe(service)}: not headless")
        if not _selects({"matchLabels": get(service, "spec", "selector")}, labels):
            problems.append(f"{describe(service)}: selector does not select {where}'s pods")
    if get(spec, "podManagementPolicy") != "Parallel":
        problems.append(f"{where}: podManagementPolicy is not Parallel")
    pdbs = [o for o in objs if get(o, "kind") == "PodDisruptionBudget"]
    if not any(_selects(get(p, "spec", "selector"), labels) for p in pdbs):
        problems.append(f"{where}: no PodDisruptionBudget selects its pods")
    policies = [o for o in objs if get(o, "kind") == "NetworkPolicy"]
    own = [p for p in policies if _selects(get(p, "spec", "podSelector"), labels)]
    if not own:
        problems.append(f"{where}: no NetworkPolicy selects its pods")
    container = spec["template"]["spec"]["containers"][0]
    for p in own:
        for rule in get(p, "spec", "ingress") or []:
            sources = get(rule, "from") or []
            if not len(sources):
                problems.append(f"{describe(p)}: an ingress rule admits every source")
            for port in get(rule, "ports") or []:
                number_or_name = get(port, "port")
                if isinstance(number_or_name, str):
                    known = container_port(container, number_or_name) is not None
                else:
                    known = any(same(get(cp, "containerPort"), number_or_name)
                                for cp in get(container, "ports") or [])
                if not known:
                    problems.append(f"{describe(p)}: port {text(number_or_name)} is no port of {where}")
            grpc_rule = any(same(get(x, "port"), "grpc") or
                            same(get(x, "port"), container_port(container, "grpc"))
                            for x in get(rule, "ports") or [])
            if grpc_rule and not all(
                    get(f, "podSelector", "matchLabels", "reducer.dev/role") == "worker"
                    for f in sources):
                problems.append(f"{describe(p)}: the gRPC port admits pods other than workers")
    return problems


kIndexField = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def _job_problems(job, worker_flags):
    """The worker Job: Indexed, all ranks at once, the rank its index, flags
    the worker knows, world size its completions."""
    where = describe(job)
    problems = []
    spec = job["spec"]
    if get(spec, "completionMode") != "Indexed":
        problems.append(f"{where}: not an Indexed Job")
    if not same(get(spec, "parallelism"), get(spec, "completions")):
        problems.append(f"{where}: parallelism differs from completions")
    labels = get(spec, "template", "metadata", "labels") or {}
    if get(labels, "reducer.dev/role") != "worker":
        problems.append(f"{where}: pods lack reducer.dev/role: worker")
    pod_spec = spec["template"]["spec"]
    c = pod_spec["containers"][0]
    flags, parse = parse_flags(get(c, "args") or [], f"{where} args")
    problems.extend(parse)
    value = {}
    for name, v in flags:
        if name not in worker_flags:
            problems.append(f"{where}: the worker has no flag --{name}")
        value[name] = v
    if not same(number(value.get("world_size")), get(spec, "completions")):
        problems.append(f"{where}: --world_size={text(value.get('world_size'))}, "
                        f"completions {text(get(spec, 'completions'))}")
    index = next((e for e in get(c, "env") or [] if get(e, "name") == "JOB_COMPLETION_INDEX"), None)
    if (value.get("rank") != "$(JOB_COMPLETION_INDEX)" or
            get(index, "valueFrom", "fieldRef", "fieldPath") != kIndexField):
        problems.append(f"{where}: --rank is not the completion index")
    if value.get("target") != "$(REDUCER_TARGET)":
        problems.append(f"{where}: --target is not $(REDUCER_TARGET)")
    # The shards require the job's token (the base's --job_tokens_file).
    if "token_file" not in value:
        problems.append(f"{where}: no --token_file: the shards require the job's token")
    elif not secret_mount_of(value["token_file"], c, pod_spec):
        problems.append(f"{where}: --token_file={value['token_file']} is not in a mounted Secret")
    return problems


def policy_problems(objs, *, reducerd_flags, worker_flags):
    problems = []
    for obj in objs:
        kind = get(obj, "kind")
        if kind in ("StatefulSet", "Job"):
            problems.extend(security_problems(obj["spec"]["template"]["spec"], describe(obj)))
        if kind == "StatefulSet":
            for c in obj["spec"]["template"]["spec"]["containers"]:
                where = f"{describe(obj)} container {text(get(c, 'name'))}"
                if get(c, "command", 0) != kReducerdBinary:
                    problems.append(f"{where}: command is not {kReducerdBinary}")
                problems.extend(_reducerd_problems(obj, c, objs, reducerd_flags, where))
            problems.extend(_selector_problems(objs, obj))
        if kind == "Job":
            problems.extend(_job_problems(obj, worker_flags))
    return problems


def expand_target(target):
    """Expands a client target's "{A..B}" ranges as the client does
    (docs/api.md, "Several shards"): "r-{0..2}.x:1" -> ["r-0.x:1", "r-1.x:1",
    "r-2.x:1"]."""
    out = []
    for part in target.split(","):
        m = re.fullmatch(r"(.*)\{([0-9]+)\.\.([0-9]+)\}(.*)", part)
        if not m:
            out.append(part)
            continue
        width = len(m.group(2))
        for i in range(int(m.group(2)), int(m.group(3)) + 1):
            out.append(f"{m.group(1)}{str(i).zfill(width)}{m.group(4)}")
    return out


def shard_problems(sts, job):
    """The Job's REDUCER_TARGET names reducer-0 .. reducer-(N-1) of the
    StatefulSet, in order, on its gRPC port."""
    c = job["spec"]["template"]["spec"]["containers"][0]
    env = next((e for e in get(c, "env") or [] if get(e, "name") == "REDUCER_TARGET"), None)
    target = get(env, "value")
    target = "" if target is None else text(target)
    port = container_port(sts["spec"]["template"]["spec"]["containers"][0], "grpc")
    replicas = get(sts, "spec", "replicas")
    count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 0
    want = [f"{text(get(sts, 'metadata', 'name'))}-{i}.{text(get(sts, 'spec', 'serviceName'))}:{text(port)}"
            for i in range(count)]
    got = expand_target(target)
    if got == want:
        return []
    return [f"{describe(job)}: REDUCER_TARGET={target} names {','.join(got)}; "
            f"{describe(sts)} serves {','.join(want)}"]
