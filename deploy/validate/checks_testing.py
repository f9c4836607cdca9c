"""What the tests of checks.py share: the rendered overlays, read once and
handed out as fresh copies, accessors of the objects the tests change, and
the problems checks.py finds in them.

DEPLOY_RENDERED names the folder that holds OVERLAY.yaml for each overlay of
kOverlays (`kubectl kustomize` of each), reducerd.help and worker.help
(`--helpfull` of reducerd and metric_sync_worker); see checks_test.py. Each
test module calls set_up_flag_sets() from its setUpModule, before any test
reads flag_sets or calls all_problems.
"""
import copy
import os

from checks import (flags_in_help, load_objects, policy_problems, round_trip_problems, schema_problems,
                    tls_problems, token_problems)

kOverlays = ["one-shard", "four-shards", "two-shards", "mtls", "open", "worker-job", "worker-job-open",
             "cert-manager", "monitoring", "torch-job", "torch-job-direct"]
# Plaintext without tokens, on purpose (deploy/test.sh's kOpenOverlays).
kOpen = {"open", "worker-job-open"}

kDir = os.environ.get("DEPLOY_RENDERED")
_parsed = {}


def _read(name):
    with open(os.path.join(kDir, name), encoding="utf-8") as f:
        return f.read()


def load(name):
    """A fresh copy of the objects of overlay `name`."""
    if name not in _parsed:
        _parsed[name] = load_objects(_read(f"{name}.yaml"))
    return copy.deepcopy(_parsed[name])


# The flags reducerd and the worker know (policy_problems' reducerd_flags and
# worker_flags), as set_up_flag_sets() reads them from their --helpfull.
flag_sets = {}


def find(objs, kind):
    return next((o for o in objs if o.get("kind") == kind), None)


def reducerd(objs):
    return find(objs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]


def worker(objs):
    return find(objs, "Job")["spec"]["template"]["spec"]["containers"][0]


def trainer(objs):
    return next(c for c in find(objs, "Job")["spec"]["template"]["spec"]["containers"] if c["name"] == "torch")


def relay(objs):
    return next(c for c in find(objs, "Job")["spec"]["template"]["spec"]["initContainers"] if c["name"] == "relay")


def env_of(container, name):
    return next(e for e in container["env"] if e["name"] == name)


def flagfile(objs):
    return find(objs, "ConfigMap")["data"]


def all_problems(objs, name):
    """Every problem of overlay `name`'s objects; those of kOpen are open."""
    out = []
    for o in objs:
        out += schema_problems(o) + round_trip_problems(o)
    return (out + policy_problems(objs, **flag_sets) + token_problems(objs, open=name in kOpen) +
            tls_problems(objs, open=name in kOpen))


def problems_after(name, mutate):
    """The problems of `name` after `mutate` changed a copy of it."""
    objs = load(name)
    mutate(objs)
    return "\n".join(all_problems(objs, name))


def set_up_flag_sets():
    """Fills flag_sets from DEPLOY_RENDERED's reducerd.help and worker.help:
    every test module's setUpModule."""
    flag_sets["reducerd_flags"] = flags_in_help(_read("reducerd.help"))
    flag_sets["worker_flags"] = flags_in_help(_read("worker.help"))
