"""The checks of each kind of workload: the StatefulSet of reducerd shards
(its container's flags, ports and probes, its selectors, its spread over
nodes, Service, PodDisruptionBudget and NetworkPolicies' ingress), the Job
of workers, a ServiceMonitor of the shards' Service, and the workers'
target naming every shard; policy_problems runs them with the security,
image and Certificate checks.
"""
import re

from container_flags import (container_port, effective_flags, is_loopback_listen, is_true,
                             job_flags, parse_flags, port_of, secret_mount_of, torch_containers)
from manifest_values import bytes_of, describe, get, is_nan, number, same, seconds_of, text, truthy
from security_checks import image_problems, security_problems
from tls_checks import certificate_problems
from torch_job_checks import torch_job_problems

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
    problems.extend(_spread_problems(spec["template"]["spec"], labels, where))
    policies = [o for o in objs if get(o, "kind") == "NetworkPolicy"]
    own = [p for p in policies if _selects(get(p, "spec", "podSelector"), labels)]
    if not own:
        problems.append(f"{where}: no NetworkPolicy selects its pods")
    container = spec["template"]["spec"]["containers"][0]
    for p in own:
        problems.extend(_ingress_problems(p, container, where))
    return problems


kHostname = "kubernetes.io/hostname"


def _spread_problems(pod_spec, labels, where):
    """Shards spread over nodes: a podAntiAffinity term (required or
    preferred) on the node's hostname and a topologySpreadConstraint, both
    selecting the StatefulSet's own pods."""
    problems = []
    anti = get(pod_spec, "affinity", "podAntiAffinity") or {}
    terms = list(get(anti, "requiredDuringSchedulingIgnoredDuringExecution") or [])
    terms += [get(t, "podAffinityTerm") for t in
              get(anti, "preferredDuringSchedulingIgnoredDuringExecution") or []]
    if not any(get(t, "topologyKey") == kHostname and _selects(get(t, "labelSelector"), labels)
               for t in terms):
        problems.append(f"{where}: no podAntiAffinity on {kHostname} selecting its pods: "
                        "shards may share a node")
    if not any(_selects(get(c, "labelSelector"), labels)
               for c in get(pod_spec, "topologySpreadConstraints") or []):
        problems.append(f"{where}: no topologySpreadConstraint selecting its pods")
    return problems


def _ingress_problems(policy, container, where):
    """A NetworkPolicy of the shards admits, each on its own port only, the
    workers of its namespace (podSelector reducer.dev/role: worker, nothing
    else) to the gRPC port and pods chosen by label in namespaces chosen
    by label (the metrics scraper) to the metrics port; nothing else."""
    problems = []
    at = describe(policy)
    if "Ingress" not in (get(policy, "spec", "policyTypes") or []):
        problems.append(f"{at}: policyTypes lacks Ingress: ingress is not limited")
    for rule in get(policy, "spec", "ingress") or []:
        sources = get(rule, "from") or []
        if not len(sources):
            problems.append(f"{at}: an ingress rule admits every source")
        ports = get(rule, "ports") or []
        if not len(ports):
            problems.append(f"{at}: an ingress rule admits every port")
        names = set()
        for port in ports:
            number_or_name = get(port, "port")
            if isinstance(number_or_name, str):
                known = container_port(container, number_or_name) is not None
                name = number_or_name
            else:
                cp = next((cp for cp in get(container, "ports") or []
                           if same(get(cp, "containerPort"), number_or_name)), None)
                known = cp is not None
                name = get(cp, "name")
            if not known:
                problems.append(f"{at}: port {text(number_or_name)} is no port of {where}")
            elif name not in ("grpc", "metrics"):
                problems.append(f"{at}: admits port {text(number_or_name)}, neither grpc nor metrics")
            names.add(name)
        if "grpc" in names and "metrics" in names:
            problems.append(f"{at}: one rule admits to both the gRPC and the metrics port")
        for source in sources:
            if truthy(get(source, "ipBlock")):
                problems.append(f"{at}: an ingress rule admits an ipBlock")
            if "grpc" in names and (
                    get(source, "podSelector", "matchLabels") != {"reducer.dev/role": "worker"} or
                    len(get(source, "podSelector", "matchExpressions") or []) or
                    get(source, "namespaceSelector") is not None):
                problems.append(f"{at}: the gRPC port admits pods other than workers "
                                "(reducer.dev/role: worker, this namespace)")
            if "metrics" in names and not (
                    len(get(source, "namespaceSelector", "matchLabels") or {}) and
                    len(get(source, "podSelector", "matchLabels") or {})):
                problems.append(f"{at}: the metrics port admits pods not chosen by namespace "
                                "and pod labels")
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
    # The token and the CA: token_problems and tls_problems, which know
    # whether the overlay is open.
    return problems


def _service_monitor_problems(monitor, objs):
    """A ServiceMonitor selects a Service of the overlay and scrapes a port
    that Service names."""
    services = [o for o in objs if get(o, "kind") == "Service" and
                _selects(get(monitor, "spec", "selector"), get(o, "metadata", "labels") or {})]
    if not services:
        return [f"{describe(monitor)}: its selector selects no Service of the overlay"]
    problems = []
    for endpoint in get(monitor, "spec", "endpoints") or []:
        port = get(endpoint, "port")
        if not any(same(get(p, "name"), port) for s in services for p in get(s, "spec", "ports") or []):
            problems.append(f"{describe(monitor)}: endpoint port {text(port)} is no port of "
                            f"{', '.join(describe(s) for s in services)}")
    return problems


def policy_problems(objs, *, reducerd_flags, worker_flags):
    problems = certificate_problems(objs)
    for obj in objs:
        kind = get(obj, "kind")
        if kind == "ServiceMonitor":
            problems.extend(_service_monitor_problems(obj, objs))
        if kind in ("StatefulSet", "Job"):
            problems.extend(security_problems(obj["spec"]["template"]["spec"], describe(obj)))
            problems.extend(image_problems(obj["spec"]["template"]["spec"], describe(obj)))
        if kind == "StatefulSet":
            for c in obj["spec"]["template"]["spec"]["containers"]:
                where = f"{describe(obj)} container {text(get(c, 'name'))}"
                if get(c, "command", 0) != kReducerdBinary:
                    problems.append(f"{where}: command is not {kReducerdBinary}")
                problems.extend(_reducerd_problems(obj, c, objs, reducerd_flags, where))
            problems.extend(_selector_problems(objs, obj))
        if kind == "Job" and torch_containers(obj)[0] is not None:
            problems.extend(torch_job_problems(obj, objs, reducerd_flags))
        elif kind == "Job":
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
    """The Job's target (REDUCER_TARGET, or its relay's --upstream) names
    reducer-0 .. reducer-(N-1) of the StatefulSet, in order, on its gRPC
    port."""
    target = job_flags(job)[0].get("target")
    target = "" if target is None else text(target)
    port = container_port(sts["spec"]["template"]["spec"]["containers"][0], "grpc")
    replicas = get(sts, "spec", "replicas")
    count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 0
    want = [f"{text(get(sts, 'metadata', 'name'))}-{i}.{text(get(sts, 'spec', 'serviceName'))}:{text(port)}"
            for i in range(count)]
    got = expand_target(target)
    if got == want:
        return []
    return [f"{describe(job)}: the target {target} names {','.join(got)}; "
            f"{describe(sts)} serves {','.join(want)}"]
