"""An object against Kubernetes' schema (schema_problems) and through the
official Python client's models (round_trip_problems); see checks.py. The
custom resources (custom_schemas.py) are checked against their vendored
schemas instead, and have no model to round-trip through.
"""
import kubernetes_validate.utils as kubernetes_validate
import pydantic
from kubernetes.client import ApiClient
from kubernetes.client import models as kubernetes_models

from custom_schemas import custom_kind, custom_schema_problems
from manifest_values import describe, get, same, text


# The Kubernetes release whose schemas (of those kubernetes-validate ships)
# the objects are validated against: the one the pinned client's models
# are generated from (kubernetes 37.x: release-1.37).
kKubernetesVersion = "1.37"

# The kinds deploy/k8s uses, each with the client model it round-trips through.
kKinds = {
    "v1/ConfigMap": "V1ConfigMap",
    "v1/Service": "V1Service",
    "v1/Secret": "V1Secret",
    "apps/v1/StatefulSet": "V1StatefulSet",
    "batch/v1/Job": "V1Job",
    "networking.k8s.io/v1/NetworkPolicy": "V1NetworkPolicy",
    "policy/v1/PodDisruptionBudget": "V1PodDisruptionBudget",
}


def _kind_of(obj):
    return kKinds.get(f"{text(get(obj, 'apiVersion'))}/{text(get(obj, 'kind'))}")


def schema_problems(obj):
    if custom_kind(obj) is not None:
        return custom_schema_problems(obj)
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
