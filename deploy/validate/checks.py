"""Checks of rendered Kubernetes objects (the output of `kubectl kustomize`
of a deploy/k8s overlay). Every function returns a list of problems, one
string each naming the object and field; an empty list means it passed.

  schema_problems(obj)       the object against Kubernetes' schema, as
                             kubernetes-validate ships it (Kubernetes
                             kKubernetesVersion, offline)
  round_trip_problems(obj)   fields the official Python client does not
                             know: the object deserialized into its model
                             (V1StatefulSet, ...) and serialized again must
                             come back unchanged (numbers where the models
                             want strings read as strings: a quantity may
                             be either); where a value of the wrong type
                             stops deserializing, that is a problem too, and
                             the first key no model has is still found
  policy_problems(objs, reducerd_flags=, worker_flags=)
                             restricted security context, resources, the
                             probes on the --health_listen port, flags
                             reducerd (or the worker) knows, selectors
                             that select the StatefulSet's pods, no
                             --listen reducerd would refuse (protected
                             mode), the worker's token in a Secret
  token_problems(objs, open=)
                             an open overlay serves with
                             --allow_unauthenticated and no job tokens;
                             every other one requires job tokens
  shard_problems(stateful_set, job)
                             the workers' target names every shard

load_objects(text) reads the YAML documents of a rendered overlay as YAML
1.2's core schema does (what kubectl writes): "yes" and "on" stay strings,
0644 is decimal, and no string becomes a date.

Values are compared strictly (True is not 1, "8081" is not 8081), an empty
mapping or list counts as given, and messages print true and false in
lower case, whole numbers without ".0" (20 s) and a missing value as
"undefined".
"""
import math
import re

import kubernetes_validate.utils as kubernetes_validate
import pydantic
import yaml
from kubernetes.client import ApiClient
from kubernetes.client import models as kubernetes_models

# The Kubernetes release whose schemas (of those kubernetes-validate ships)
# the objects are validated against: the one the pinned client's models
# are generated from (kubernetes 37.x: release-1.37).
kKubernetesVersion = "1.37"

# The kinds deploy/k8s uses, each with the client model it round-trips through.
kKinds = {
    "v1/ConfigMap": "V1ConfigMap",
    "v1/Service": "V1Service",
    "apps/v1/StatefulSet": "V1StatefulSet",
    "batch/v1/Job": "V1Job",
    "networking.k8s.io/v1/NetworkPolicy": "V1NetworkPolicy",
    "policy/v1/PodDisruptionBudget": "V1PodDisruptionBudget",
}

kReducerdBinary = "/usr/bin/reducerd"
kWorkerBinary = "/usr/bin/metric_sync_worker"
kUid = 65532
# The Secret holding the shards' tokens file (deploy/k8s/base).
kTokensSecret = "reducer-job-tokens"

NaN = math.nan


# --- values ----------------------------------------------------------------

def get(obj, *keys):
    """obj[k0][k1]..., or None where a level is missing or not a mapping
    (a list takes an int key)."""
    for key in keys:
        if isinstance(obj, dict):
            obj = obj.get(key)
        elif isinstance(obj, list) and isinstance(key, int) and 0 <= key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


def truthy(value):
    """Whether a field counts as given: {} and [] do; None, false, 0, "" and
    NaN do not."""
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)):
        return value == value and value != 0
    if isinstance(value, str):
        return value != ""
    return True


def same(a, b):
    """Strict equality: True is not 1, a string never a number, None only
    None; a mapping or list is only itself."""
    if a is None or b is None:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is b


def text(value):
    """A value as a message prints it: true, 20 (a whole float too), NaN,
    "undefined" for a missing one, a list comma-separated."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, list):
        return ",".join("" if v is None else text(v) for v in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


_kNumber = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def number(value):
    """A flag's text as a number: decimal with an optional exponent, 0x, 0o
    or 0b, Infinity; "" is 0; NaN if it is none of these."""
    if value is None:
        return NaN
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, (int, float)):
        return value
    s = text(value).strip()
    if s == "":
        return 0
    if _kNumber.fullmatch(s):
        f = float(s)
        return int(f) if f.is_integer() and abs(f) < 2**53 else f
    for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
        if s[:2].lower() == prefix:
            try:
                return int(s[2:], base)
            except ValueError:
                return NaN
    if re.fullmatch(r"[+-]?Infinity", s):
        return -math.inf if s.startswith("-") else math.inf
    return NaN


def is_nan(value):
    return isinstance(value, float) and value != value


# --- YAML ------------------------------------------------------------------

class _CoreLoader(yaml.SafeLoader):
    """YAML 1.2's core schema: null, true/false, decimal, 0o and 0x
    integers, floats; every other plain scalar is a string."""


_CoreLoader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in [
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", list("~nN") + [""]),
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("tag:yaml.org,2002:int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
    ("tag:yaml.org,2002:float",
     r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
     r"|[-+]?(?:\.inf|\.Inf|\.INF)|\.nan|\.NaN|\.NAN",
     list("-+.0123456789")),
]:
    _CoreLoader.add_implicit_resolver(_tag, re.compile(f"^(?:{_pattern})$"), _first)


def _core_int(loader, node):
    value = loader.construct_scalar(node)
    if value.startswith("0o"):
        return int(value[2:], 8)
    if value.startswith("0x"):
        return int(value[2:], 16)
    return int(value, 10)


def _unique_mapping(loader, node):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r}", key_node.start_mark)
        if isinstance(key, (str, int, float, bool)):
            seen.add(key)
    return loader.construct_yaml_map(node)


_CoreLoader.add_constructor("tag:yaml.org,2002:int", _core_int)
_CoreLoader.add_constructor("tag:yaml.org,2002:map", _unique_mapping)


def load_objects(yaml_text):
    """The non-empty documents of a multi-document YAML text."""
    return [d for d in yaml.load_all(yaml_text, Loader=_CoreLoader) if d is not None]


# --- schema and round trip -------------------------------------------------

def describe(obj):
    kind = get(obj, "kind")
    name = get(obj, "metadata", "name")
    return f"{'?' if kind is None else text(kind)}/{'?' if name is None else text(name)}"


def _kind_of(obj):
    return kKinds.get(f"{text(get(obj, 'apiVersion'))}/{text(get(obj, 'kind'))}")


def schema_problems(obj):
    if _kind_of(obj) is None:
        return [f"{describe(obj)}: kind {text(get(obj, 'apiVersion'))}/{text(get(obj, 'kind'))} "
                "is not one deploy/k8s uses"]
    try:
        kubernetes_validate.validate(obj, kKubernetesVersion, strict=False)
        return []
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return [f"{describe(obj)}: schema: {path}: {e.message}" if path
                else f"{describe(obj)}: schema: {e.message}"]


_kMissing = object()
# Deserialized with ApiClient's own deserializer (its private __deserialize:
# the public deserialize() takes a response's text), as the client reads an
# object the API server sends; sanitize_for_serialization writes it back.
_kClient = ApiClient()


def _child(value, key):
    if isinstance(value, dict):
        return value.get(key, _kMissing)
    if isinstance(value, list):
        return value[int(key)] if key.isdigit() and int(key) < len(value) else _kMissing
    return _kMissing


def _keys(value):
    return [str(i) for i in range(len(value))] if isinstance(value, list) else list(value)


def _json_equal(a, b):
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        if type(a) is not type(b) or len(a) != len(b):
            return False
        return all(_json_equal(_child(a, k), _child(b, k)) for k in _keys(a))
    if a is _kMissing or b is _kMissing:
        return a is b
    return same(a, b)


def _model_child(model, key):
    """The deserialized value under JSON key `key` of `model` (a client
    model, mapping or list), and whether `key` is a field of that model."""
    attributes = getattr(type(model), "attribute_map", None)
    if isinstance(attributes, dict):
        for attribute, json_key in attributes.items():
            if json_key == key:
                return getattr(model, attribute, None), True
        return None, False
    child = _child(model, key)
    return (None if child is _kMissing else child), False


def _first_difference(a, b, model, path=""):
    """The first path at which the original a and the round-tripped b
    differ, or None. A null in a is no difference where b drops it and it
    is a field of the model (the client leaves unset fields out)."""
    if _json_equal(a, b):
        return None
    if isinstance(a, (dict, list)) and isinstance(b, (dict, list)):
        keys = _keys(a) + [k for k in _keys(b) if _child(a, k) is _kMissing]
        for key in keys:
            sub_a, sub_b = _child(a, key), _child(b, key)
            sub_model, known = _model_child(model, key)
            if sub_a is None and sub_b is _kMissing and known:
                continue
            d = _first_difference(sub_a, sub_b, sub_model, f"{path}.{key}")
            if d:
                return d
        if type(a) is type(b):
            return None  # only nulls of fields the model leaves out
    return path or "."


def _field_types(openapi_type):
    """{JSON key: openapi type} of a client model's fields, or None when
    `openapi_type` names no model."""
    model = getattr(kubernetes_models, openapi_type, None)
    types = getattr(model, "openapi_types", None)
    if not isinstance(types, dict):
        return None
    return {json_key: types[attribute] for attribute, json_key in model.attribute_map.items()}


def _first_unknown_field(data, openapi_type, path=""):
    """The path of the first key in `data` that is no field of the model
    the client reads it as, or None."""
    if openapi_type.startswith("Optional["):
        openapi_type = openapi_type[len("Optional["):-1]
    if openapi_type.startswith("List[") and isinstance(data, list):
        items = ((str(i), d, openapi_type[5:-1]) for i, d in enumerate(data))
    elif openapi_type.startswith("Dict[") and isinstance(data, dict):
        value_type = openapi_type[5:-1].split(", ", 1)[1]
        items = ((k, v, value_type) for k, v in data.items())
    elif isinstance(data, dict) and (fields := _field_types(openapi_type)) is not None:
        unknown = next((k for k in data if k not in fields), None)
        if unknown is not None:
            return f"{path}.{unknown}"
        items = ((k, v, fields[k]) for k, v in data.items())
    else:
        return None
    for key, value, value_type in items:
        found = _first_unknown_field(value, value_type, f"{path}.{key}")
        if found:
            return found
    return None


def _numbers_as_strings(data, openapi_type):
    """`data` with each number where the client's models want a string made
    that string ("cpu: 2" as "cpu: '2'"): Kubernetes reads a quantity
    either way, and the schema judges every other string field."""
    if openapi_type.startswith("Optional["):
        openapi_type = openapi_type[len("Optional["):-1]
    if openapi_type.startswith("List[") and isinstance(data, list):
        return [_numbers_as_strings(d, openapi_type[5:-1]) for d in data]
    if openapi_type.startswith("Dict[") and isinstance(data, dict):
        value_type = openapi_type[5:-1].split(", ", 1)[1]
        return {k: _numbers_as_strings(v, value_type) for k, v in data.items()}
    if openapi_type == "str":
        is_number = isinstance(data, (int, float)) and not isinstance(data, bool)
        return text(data) if is_number else data
    fields = _field_types(openapi_type) if isinstance(data, dict) else None
    if fields is not None:
        return {k: _numbers_as_strings(v, fields[k]) if k in fields else v for k, v in data.items()}
    return data


def round_trip_problems(obj):
    model_name = _kind_of(obj)
    if model_name is None:
        return []
    obj = _numbers_as_strings(obj, model_name)
    problems = []
    try:
        model = _kClient._ApiClient__deserialize(obj, model_name)
        d = _first_difference(obj, _kClient.sanitize_for_serialization(model), model)
    except (pydantic.ValidationError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, pydantic.ValidationError):
            error = e.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            message = f"{e.title}.{where}: {error['msg']}"
        else:
            message = str(e)
        problems.append(f"{describe(obj)}: does not deserialize as {model_name}: {message}")
        # What the round trip would have dropped, read off the models' fields.
        d = _first_unknown_field(obj, model_name)
    if d:
        problems.append(f"{describe(obj)}: {d} does not survive a round trip through {model_name} "
                        "(unknown field?)")
    return problems


# --- flags -----------------------------------------------------------------

def flags_in_help(help_text):
    """Flag names in `PROGRAM --helpfull` output ("    --name (help ...")."""
    return {m.group(1) for m in re.finditer(r"^\s+--([A-Za-z0-9_]+) \(", help_text, re.M)}


def flagfile_lines(flagfile_text):
    """"--name=value" lines of an absl flagfile, comments and blanks skipped."""
    lines = (line.strip() for line in flagfile_text.split("\n"))
    return [line for line in lines if line and not line.startswith("#")]


def _parse_flags(args, where):
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


def _secret_mount_of(path, container, pod_spec):
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
    flags, problems = _parse_flags(get(container, "args") or [], f"{where} args")
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
            parsed, parse_problems = _parse_flags(flagfile_lines(text(cm["data"][key])),
                                                  f"{where} {describe(cm)} {key}")
            problems.extend(parse_problems)
            out.extend(parsed)
    return out, problems


# --- quantities and durations ----------------------------------------------

kSuffix = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
           "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "": 1}


def bytes_of(quantity):
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T|)", text(quantity))
    return number(m.group(1)) * kSuffix[m.group(2)] if m else NaN


def seconds_of(duration):
    """Seconds in an absl duration ("20s", "1m30s", "500ms")."""
    unit = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    total = 0
    rest = duration
    while rest:
        m = re.match(r"([0-9.]+)(h|ms|m|s|us|ns)", rest)
        if not m:
            return NaN
        total += number(m.group(1)) * unit[m.group(2)]
        rest = rest[m.end():]
    return total if duration else NaN


def _port_of(host_port):
    m = re.search(r":([0-9]+)\Z", "" if host_port is None else host_port)
    return int(m.group(1)) if m else NaN


def _is_true(value):
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


# --- policy ----------------------------------------------------------------

def _security_problems(pod_spec, where):
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


def _container_port(container, name):
    port = next((p for p in get(container, "ports") or [] if same(get(p, "name"), name)), None)
    return get(port, "containerPort")


def _reducerd_problems(sts, container, objs, reducerd_flags, where):
    """reducerd's container: flags known, ports and probes where its flags say."""
    pod_spec = sts["spec"]["template"]["spec"]
    flags, problems = effective_flags(container, pod_spec, objs, where)
    value = {}
    for name, v in flags:
        if name not in reducerd_flags:
            problems.append(f"{where}: reducerd has no flag --{name}")
        value[name] = v
    health = _port_of(value.get("health_listen"))
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
        if not same(_container_port(container, "health"), health):
            problems.append(f'{where}: containerPort "health" is not {health}')
    if not same(_container_port(container, "grpc"), _port_of(value.get("listen"))):
        problems.append(f'{where}: containerPort "grpc" is not the --listen port '
                        f"({text(value.get('listen'))})")
    if ("metrics_listen" in value and
            not same(_container_port(container, "metrics"), _port_of(value["metrics_listen"]))):
        problems.append(f'{where}: containerPort "metrics" is not the --metrics_listen port')
    limit = bytes_of(get(container, "resources", "limits", "memory"))
    budget = number(value.get("memory_budget_bytes", 2**31))
    if not budget < limit:
        problems.append(f"{where}: --memory_budget_bytes={text(budget)} is not below the memory limit")
    drain = seconds_of(value.get("drain_budget", "10s"))
    grace = get(pod_spec, "terminationGracePeriodSeconds")
    grace = 30 if grace is None else grace
    if not drain < number(grace):
        problems.append(f"{where}: --drain_budget ({text(drain)} s) is not below "
                        f"terminationGracePeriodSeconds ({text(grace)})")
    for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file", "job_tokens_file"):
        if name in value and not _secret_mount_of(value[name], container, pod_spec):
            problems.append(f"{where}: --{name}={value[name]} is not in a mounted Secret")
    if ("tls_cert_file" in value) != ("tls_key_file" in value):
        problems.append(f"{where}: --tls_cert_file and --tls_key_file go together")
    # Protected mode: reducerd would refuse to start.
    if ("listen" in value and not is_loopback_listen(value["listen"]) and
            "tls_cert_file" not in value and "job_tokens_file" not in value and
            not _is_true(value.get("allow_unauthenticated"))):
        problems.append(f"{where}: --listen={value['listen']} with neither TLS nor --job_tokens_file: "
                        "reducerd refuses it without --allow_unauthenticated")
    return problems


def _shard_flags(objs):
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


def token_problems(objs, *, open):
    """The open overlay (`open`) serves anyone who can reach the port:
    --allow_unauthenticated, no --job_tokens_file and no volume of the
    tokens Secret. Every other shard overlay requires job tokens and has no
    --allow_unauthenticated."""
    problems = []
    for where, value, pod_spec, _ in _shard_flags(objs):
        tokens_volume = any(get(v, "secret", "secretName") == kTokensSecret
                            for v in get(pod_spec, "volumes") or [])
        if open:
            if not _is_true(value.get("allow_unauthenticated")):
                problems.append(f"{where}: open, but no --allow_unauthenticated=true")
            if "job_tokens_file" in value:
                problems.append(f"{where}: open, but --job_tokens_file={value['job_tokens_file']}")
            if tokens_volume:
                problems.append(f"{where}: open, but mounts the Secret {kTokensSecret}")
        else:
            if "job_tokens_file" not in value:
                problems.append(f"{where}: no --job_tokens_file: calls carry no job token "
                                "(only overlays/open serves without)")
            if "allow_unauthenticated" in value and _is_true(value["allow_unauthenticated"]):
                problems.append(f"{where}: --allow_unauthenticated serves anyone (only overlays/open may)")
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
                    known = _container_port(container, number_or_name) is not None
                else:
                    known = any(same(get(cp, "containerPort"), number_or_name)
                                for cp in get(container, "ports") or [])
                if not known:
                    problems.append(f"{describe(p)}: port {text(number_or_name)} is no port of {where}")
            grpc_rule = any(same(get(x, "port"), "grpc") or
                            same(get(x, "port"), _container_port(container, "grpc"))
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
    flags, parse = _parse_flags(get(c, "args") or [], f"{where} args")
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
    elif not _secret_mount_of(value["token_file"], c, pod_spec):
        problems.append(f"{where}: --token_file={value['token_file']} is not in a mounted Secret")
    return problems


def policy_problems(objs, *, reducerd_flags, worker_flags):
    problems = []
    for obj in objs:
        kind = get(obj, "kind")
        if kind in ("StatefulSet", "Job"):
            problems.extend(_security_problems(obj["spec"]["template"]["spec"], describe(obj)))
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
    port = _container_port(sts["spec"]["template"]["spec"]["containers"][0], "grpc")
    replicas = get(sts, "spec", "replicas")
    count = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 0
    want = [f"{text(get(sts, 'metadata', 'name'))}-{i}.{text(get(sts, 'spec', 'serviceName'))}:{text(port)}"
            for i in range(count)]
    got = expand_target(target)
    if got == want:
        return []
    return [f"{describe(job)}: REDUCER_TARGET={target} names {','.join(got)}; "
            f"{describe(sts)} serves {','.join(want)}"]
