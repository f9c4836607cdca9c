"""Validates rendered deploy/k8s overlays offline:

  python validate.py --reducerd_help=FILE --worker_help=FILE \\
      --shards=OVERLAY --workers=OVERLAY [--pairs=SHARDS:WORKERS,...]
      --open=OVERLAY[,OVERLAY...] NAME=RENDERED.yaml ...

FILEs hold `reducerd --helpfull` and `metric_sync_worker --helpfull`; each
RENDERED.yaml is `kubectl kustomize` of overlay NAME. Every object is
checked against Kubernetes' schema, round-tripped through the Kubernetes
client's models, and held to the policy of checks.py; the Job of the
--workers overlay must name every shard of the StatefulSet of the --shards
overlay, and so must each pair's of --pairs (the PyTorch Job and its shards). The --open overlays' shards must serve plaintext without job
tokens (--allow_unauthenticated) and their workers send neither token nor
CA; every other overlay's shards must serve TLS and require tokens, and its
workers send a token and verify the shards with a CA. Prints
one "==> " line per overlay that passed and every problem found; exits 1 on
any problem. Run it with the interpreter of the venv that
tools/pinned_venv.sh builds from requirements.txt.
"""
import re
import sys

import yaml

from checks import (describe, flags_in_help, get, load_objects, policy_problems,
                    round_trip_problems, schema_problems, shard_problems, tls_problems,
                    token_problems)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main(argv):
    options = {}
    overlays = []
    for arg in argv:
        flag = re.fullmatch(r"--([a-z_]+)=(.*)", arg, re.S)
        overlay = re.fullmatch(r"([A-Za-z0-9_-]+)=(.+)", arg, re.S)
        if flag:
            options[flag.group(1)] = flag.group(2)
        elif overlay:
            overlays.append((overlay.group(1), overlay.group(2)))
        else:
            print(f"validate.py: unexpected argument {arg}", file=sys.stderr)
            return 2
    if not options.get("reducerd_help") or not options.get("worker_help") or not overlays:
        print("usage: python validate.py --reducerd_help=FILE --worker_help=FILE "
              "[--shards=NAME --workers=NAME] [--open=NAME,...] NAME=RENDERED.yaml ...", file=sys.stderr)
        return 2

    flag_sets = {
        "reducerd_flags": flags_in_help(read(options["reducerd_help"])),
        "worker_flags": flags_in_help(read(options["worker_help"])),
    }
    for name, flags in flag_sets.items():
        if len(flags) < 5:
            print(f"validate.py: only {len(flags)} flags in the help of {name}", file=sys.stderr)
            return 1

    open_names = [n for n in options.get("open", "").split(",") if n]
    failed = False
    rendered = {}
    for name, path in overlays:
        problems = []
        try:
            objs = load_objects(read(path))
        except yaml.YAMLError as e:
            objs = []
            problems.append(f"{path} is no YAML: {e}")
        rendered[name] = objs
        if not objs and not problems:
            problems.append("renders no object")
        for obj in objs:
            problems += schema_problems(obj) + round_trip_problems(obj)
        if objs:
            problems += policy_problems(objs, **flag_sets)
        is_open = name in open_names
        problems += token_problems(objs, open=is_open) + tls_problems(objs, open=is_open)
        serving = any(get(o, "kind") in ("StatefulSet", "Job") for o in objs)
        tokens = ("" if not serving else ", open (plaintext, no tokens)" if is_open
                  else ", TLS and job tokens")
        if problems:
            failed = True
            for p in problems:
                print(f"FAIL {name}: {p}")
        else:
            print(f"==> {name}: {', '.join(describe(o) for o in objs)}: "
                  f"schema, round trip, policy{tokens} ok")
    for name in open_names:
        if name not in rendered:
            failed = True
            print(f"FAIL --open names {name}, no rendered overlay")

    pairs = [p.split(":", 1) for p in options.get("pairs", "").split(",") if p]
    if options.get("shards") and options.get("workers"):
        pairs.insert(0, [options["shards"], options["workers"]])
    for pair in pairs:
        shards, workers = pair if len(pair) == 2 else (pair[0], "")
        sts = next((o for o in rendered.get(shards, []) if get(o, "kind") == "StatefulSet"), None)
        job = next((o for o in rendered.get(workers, []) if get(o, "kind") == "Job"), None)
        problems = (shard_problems(sts, job) if sts and job
                    else [f"{shards}:{workers} names no rendered overlay of shards and workers"])
        if problems:
            failed = True
            for p in problems:
                print(f"FAIL shards: {p}")
        else:
            print(f"==> {workers}'s target names every shard of {shards}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
