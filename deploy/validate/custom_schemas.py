"""The custom resources deploy/k8s uses (cert-manager's Issuer and
Certificate, the Prometheus Operator's ServiceMonitor) against the schemas
vendored in crd_schemas/ (see its README.md for where they come from),
with the jsonschema package: custom_schema_problems(obj).
"""
import json
import os

import jsonschema

from manifest_values import describe, get, text

kSchemaDir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crd_schemas")

# apiVersion/kind: the file in crd_schemas/ holding its schema.
kCustomKinds = {
    "cert-manager.io/v1/Issuer": "issuer.json",
    "cert-manager.io/v1/Certificate": "certificate.json",
    "monitoring.coreos.com/v1/ServiceMonitor": "servicemonitor.json",
}

_validators = {}


def _validator(key):
    if key not in _validators:
        with open(os.path.join(kSchemaDir, kCustomKinds[key]), encoding="utf-8") as f:
            schema = json.load(f)
        jsonschema.Draft7Validator.check_schema(schema)
        _validators[key] = jsonschema.Draft7Validator(schema)
    return _validators[key]


def custom_kind(obj):
    """The kCustomKinds key of obj's kind, or None for another kind."""
    key = f"{text(get(obj, 'apiVersion'))}/{text(get(obj, 'kind'))}"
    return key if key in kCustomKinds else None


def custom_schema_problems(obj):
    """Every place where obj breaks its kind's vendored schema, the first
    of each path; [] for a kind without one."""
    key = custom_kind(obj)
    if key is None:
        return []
    problems = []
    for error in sorted(_validator(key).iter_errors(obj), key=lambda e: list(map(str, e.path))):
        path = ".".join(str(p) for p in error.path)
        problems.append(f"{describe(obj)}: schema: {path}: {error.message}" if path
                        else f"{describe(obj)}: schema: {error.message}")
    return problems
