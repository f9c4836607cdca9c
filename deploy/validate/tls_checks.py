"""TLS on the shards' gRPC port: every overlay but the open one serves it
and its workers check the shards' certificate against a CA from a Secret
(tls_problems); a cert-manager Certificate that makes the shards' Secret
names every shard as workers dial it (certificate_problems).
"""
from container_flags import effective_flags, secret_mount_of, shard_flags, worker_flags
from manifest_values import describe, get, same, text

# The kubernetes.io/tls Secret of the shards' certificate and key (deploy/k8s/base).
kTlsSecret = "reducer-tls"


def _secret_of(path, container, pod_spec):
    """The name of the Secret whose volume holds `path`, or None."""
    mount = secret_mount_of(path, container, pod_spec)
    volume = next((v for v in get(pod_spec, "volumes") or []
                   if mount is not None and same(get(v, "name"), get(mount, "name"))), None)
    return get(volume, "secret", "secretName")


def tls_problems(objs, *, open):
    """The open overlay (`open`) is plaintext, as its comments say: no TLS
    flag, no volume of the TLS Secret, and its workers no --tls_ca_file.
    Every other overlay's shards serve TLS (--tls_cert_file and
    --tls_key_file; that they lie in a mounted Secret is policy_problems'
    check), and its workers verify them with --tls_ca_file from a mounted
    Secret that is not the shards' own (which holds their key)."""
    problems = []
    for where, value, pod_spec, _ in shard_flags(objs):
        tls_flags = [n for n in ("tls_cert_file", "tls_key_file", "tls_client_ca_file") if n in value]
        if open:
            for name in tls_flags:
                problems.append(f"{where}: open (plaintext), but --{name}={value[name]}")
            if any(get(v, "secret", "secretName") == kTlsSecret for v in get(pod_spec, "volumes") or []):
                problems.append(f"{where}: open (plaintext), but mounts the Secret {kTlsSecret}")
        else:
            for name in ("tls_cert_file", "tls_key_file"):
                if name not in value:
                    problems.append(f"{where}: no --{name}: the gRPC port is plaintext "
                                    "(only overlays/open may be)")
    for where, value, pod_spec, container in worker_flags(objs):
        if open:
            if "tls_ca_file" in value:
                problems.append(f"{where}: open (plaintext), but --tls_ca_file={value['tls_ca_file']}")
        elif "tls_ca_file" not in value:
            problems.append(f"{where}: no --tls_ca_file: the worker cannot verify the shards' TLS")
        else:
            secret = _secret_of(value["tls_ca_file"], container, pod_spec)
            if secret is None:
                problems.append(f"{where}: --tls_ca_file={value['tls_ca_file']} is not in a mounted Secret")
            elif secret == kTlsSecret:
                problems.append(f"{where}: --tls_ca_file from the Secret {kTlsSecret}, which holds "
                                "the shards' key: mount the CA alone (reducer-ca)")
    return problems


def certificate_problems(objs):
    """Each cert-manager Certificate whose secretName is the Secret of a
    StatefulSet's --tls_cert_file names every shard as workers dial it
    (POD.SERVICE: reducer-0.reducer, ...), is issued by an Issuer of the
    overlay (or a ClusterIssuer), and, where usages are given, for server
    auth."""
    problems = []
    certificates = [o for o in objs if get(o, "kind") == "Certificate"]
    issuers = {text(get(o, "metadata", "name")) for o in objs if get(o, "kind") == "Issuer"}
    for sts in (o for o in objs if get(o, "kind") == "StatefulSet"):
        pod_spec = sts["spec"]["template"]["spec"]
        container = pod_spec["containers"][0]
        value = dict(effective_flags(container, pod_spec, objs, describe(sts))[0])
        if "tls_cert_file" not in value:
            continue
        secret = _secret_of(value["tls_cert_file"], container, pod_spec)
        replicas = get(sts, "spec", "replicas")
        count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1
        wanted = [f"{text(get(sts, 'metadata', 'name'))}-{i}.{text(get(sts, 'spec', 'serviceName'))}"
                  for i in range(count)]
        for cert in (c for c in certificates if same(get(c, "spec", "secretName"), secret)):
            names = get(cert, "spec", "dnsNames") or []
            missing = [n for n in wanted if n not in names]
            if missing:
                problems.append(f"{describe(cert)}: dnsNames lack {', '.join(missing)}: workers "
                                f"dial {describe(sts)}'s shards by these names")
            usages = get(cert, "spec", "usages")
            if usages is not None and "server auth" not in usages:
                problems.append(f"{describe(cert)}: usages lack server auth")
    for cert in certificates:
        ref = get(cert, "spec", "issuerRef") or {}
        kind = get(ref, "kind") or "Issuer"
        if kind == "Issuer" and text(get(ref, "name")) not in issuers:
            problems.append(f"{describe(cert)}: issuerRef names Issuer {text(get(ref, 'name'))}, "
                            "which the overlay does not make")
    return problems
