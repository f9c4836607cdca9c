"""Checks of rendered Kubernetes objects (the output of `kubectl kustomize`
of a deploy/k8s overlay). Every function returns a list of problems, one
string each naming the object and field; an empty list means it passed.

  schema_problems(obj)       the object against Kubernetes' schema, as
                             kubernetes-validate ships it (Kubernetes
                             kKubernetesVersion, offline); a custom
                             resource (cert-manager's Issuer and
                             Certificate, the ServiceMonitor) against its
                             schema vendored in crd_schemas/, with
                             jsonschema
  round_trip_problems(obj)   fields the official Python client does not
                             know: the object deserialized into its model
                             (V1StatefulSet, ...) and serialized again must
                             come back unchanged (numbers where the models
                             want strings read as strings: a quantity may
                             be either); where a value of the wrong type
                             stops deserializing, that is a problem too, and
                             the first key no model has is still found
  policy_problems(objs, reducerd_flags=, worker_flags=)
                             restricted security context, resources,
                             images pinned by tag, the probes on the
                             --health_listen port, flags reducerd (or the
                             worker) knows, selectors that select the
                             StatefulSet's pods, shards spread by
                             podAntiAffinity and a topology spread
                             constraint, NetworkPolicy ingress limited to
                             the workers (gRPC) and the scraper (metrics),
                             no --listen reducerd would refuse (protected
                             mode), a Certificate naming every shard, a
                             ServiceMonitor scraping a port of the Service
  token_problems(objs, open=)
                             an open overlay serves with
                             --allow_unauthenticated and no job tokens,
                             its workers send none; every other one
                             requires job tokens, its workers' from a
                             Secret
  tls_problems(objs, open=)  an open overlay is plaintext; every other one
                             serves TLS, its workers verify it with a CA
                             from a Secret other than the shards' own
  shard_problems(stateful_set, job)
                             the workers' target names every shard

load_objects(text) reads the YAML documents of a rendered overlay as YAML
1.2's core schema does (what kubectl writes): "yes" and "on" stay strings,
0644 is decimal, and no string becomes a date.

Values are compared strictly (True is not 1, "8081" is not 8081), an empty
mapping or list counts as given, and messages print true and false in
lower case, whole numbers without ".0" (20 s) and a missing value as
"undefined".

Each job lives in a module of its own, and this one gathers their entry
points for validate.py, pod_run.py and the tests (checks_test.py's
modules):

  manifest_values.py   get, text, same, ...: values as read and printed;
                       quantities and durations
  manifest_yaml.py     load_objects
  schema_checks.py     schema_problems, round_trip_problems
  custom_schemas.py    the custom resources against crd_schemas/
  container_flags.py   a container's flags, flagfiles, ports, Secrets
  security_checks.py   "restricted", resources, images, token_problems
  tls_checks.py        tls_problems, the Certificate's names
  workload_checks.py   the StatefulSet's and the Job's checks,
                       policy_problems, shard_problems
"""
from container_flags import effective_flags, flagfile_lines, flags_in_help, is_loopback_listen
from manifest_values import (NaN, bytes_of, describe, get, is_nan, kSuffix, number, same,
                             seconds_of, text, truthy)
from manifest_yaml import load_objects
from schema_checks import kKinds, kKubernetesVersion, round_trip_problems, schema_problems
from security_checks import kTokensSecret, kUid, token_problems
from tls_checks import kTlsSecret, tls_problems
from workload_checks import (expand_target, kIndexField, kReducerdBinary, kWorkerBinary,
                             policy_problems, shard_problems)

__all__ = [
    "NaN", "bytes_of", "describe", "effective_flags", "expand_target", "flagfile_lines",
    "flags_in_help", "get", "is_loopback_listen", "is_nan", "kIndexField", "kKinds",
    "kKubernetesVersion", "kReducerdBinary", "kSuffix", "kTlsSecret", "kTokensSecret", "kUid",
    "kWorkerBinary",
    "load_objects", "number", "policy_problems", "round_trip_problems", "same", "schema_problems",
    "seconds_of", "shard_problems", "text", "tls_problems", "token_problems", "truthy",
]
