"""Tests of checks.py: the rendered overlays pass, and each kind of mistake
made in a copy of them is caught.

  DEPLOY_RENDERED=DIR python checks_test.py

DIR holds one-shard.yaml, four-shards.yaml, tls.yaml, open.yaml,
worker-job.yaml (`kubectl kustomize` of each overlay), reducerd.help and
worker.help (`--helpfull` of reducerd and metric_sync_worker). Runs with
unittest; ends with "# pass N" and "# fail N" lines (N tests passed,
failed or errored) and exits 0 when every test passed.
"""
import copy
import math
import os
import sys
import unittest

from checks import (bytes_of, expand_target, flags_in_help, is_loopback_listen, kTokensSecret,
                    load_objects, policy_problems, round_trip_problems, schema_problems, seconds_of,
                    shard_problems, token_problems)

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


flag_sets = {}


def find(objs, kind):
    return next((o for o in objs if o.get("kind") == kind), None)


def reducerd(objs):
    return find(objs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]


def worker(objs):
    return find(objs, "Job")["spec"]["template"]["spec"]["containers"][0]


def flagfile(objs):
    return find(objs, "ConfigMap")["data"]


def all_problems(objs, name):
    """Every problem of overlay `name`'s objects; "open" is the open overlay."""
    out = []
    for o in objs:
        out += schema_problems(o) + round_trip_problems(o)
    return out + policy_problems(objs, **flag_sets) + token_problems(objs, open=name == "open")


def problems_after(name, mutate):
    """The problems of `name` after `mutate` changed a copy of it."""
    objs = load(name)
    mutate(objs)
    return "\n".join(all_problems(objs, name))


def setUpModule():
    flag_sets["reducerd_flags"] = flags_in_help(_read("reducerd.help"))
    flag_sets["worker_flags"] = flags_in_help(_read("worker.help"))


class ChecksTest(unittest.TestCase):
    def test_every_rendered_overlay_passes(self):
        for name in ["one-shard", "four-shards", "tls", "open", "worker-job"]:
            with self.subTest(name):
                self.assertEqual(all_problems(load(name), name), [], name)
        for shards in ["four-shards", "open"]:
            with self.subTest(shards):
                self.assertEqual(shard_problems(find(load(shards), "StatefulSet"),
                                                find(load("worker-job"), "Job")), [], shards)

    def test_job_tokens_every_shard_overlay_requires_them_but_open_which_allows_anyone(self):
        for name in ["one-shard", "four-shards", "tls"]:
            self.assertIn("--job_tokens_file=/etc/reducer/tokens/tokens", reducerd(load(name))["args"], name)
            self.assertFalse(any(a.startswith("--allow_unauthenticated")
                                 for a in reducerd(load(name))["args"]), name)
        open_ = load("open")
        self.assertIn("--allow_unauthenticated=true", reducerd(open_)["args"])
        self.assertFalse(any(a.startswith("--job_tokens_file") for a in reducerd(open_)["args"]))
        self.assertNotIn("job_tokens_file", flagfile(open_)["reducerd.flags"])
        self.assertFalse(any((v.get("secret") or {}).get("secretName") == kTokensSecret
                             for v in find(open_, "StatefulSet")["spec"]["template"]["spec"]["volumes"]))
        self.assertIn("--token_file=/etc/reducer/token/token", worker(load("worker-job"))["args"])

    def test_job_tokens_a_shard_overlay_without_them_open_with_them(self):
        def drop_tokens(o):
            reducerd(o)["args"] = [a for a in reducerd(o)["args"] if not a.startswith("--job_tokens_file")]
        self.assertRegex(problems_after("one-shard", drop_tokens), r"no --job_tokens_file: calls carry no job token")
        self.assertRegex(problems_after("one-shard", drop_tokens),
                         r"--listen=0\.0\.0\.0:50051 with neither TLS nor --job_tokens_file: "
                         r"reducerd refuses it without --allow_unauthenticated")
        self.assertRegex(problems_after("four-shards", lambda o: reducerd(o)["args"].append("--allow_unauthenticated=true")),
                         r"--allow_unauthenticated serves anyone \(only overlays/open may\)")

        def drop_allow(o):
            reducerd(o)["args"] = [a for a in reducerd(o)["args"] if not a.startswith("--allow_unauthenticated")]
        not_allowed = problems_after("open", drop_allow)
        self.assertRegex(not_allowed, r"open, but no --allow_unauthenticated=true")
        self.assertRegex(not_allowed, r"reducerd refuses it without --allow_unauthenticated")
        self.assertRegex(problems_after("open", lambda o: reducerd(o)["args"].append("--job_tokens_file=/etc/reducer/tokens/tokens")),
                         r"open, but --job_tokens_file=")
        self.assertRegex(problems_after("open", lambda o: find(o, "StatefulSet")["spec"]["template"]["spec"]["volumes"].append(
            {"name": "t", "secret": {"secretName": kTokensSecret}})), r"open, but mounts the Secret reducer-job-tokens")

        def unmount_tokens(o):
            reducerd(o)["volumeMounts"] = [m for m in reducerd(o)["volumeMounts"] if m["name"] != "job-tokens"]
        self.assertRegex(problems_after("tls", unmount_tokens),
                         r"--job_tokens_file=/etc/reducer/tokens/tokens is not in a mounted Secret")

    def test_the_workers_token_given_and_from_a_mounted_secret(self):
        def drop_token(o):
            worker(o)["args"] = [a for a in worker(o)["args"] if not a.startswith("--token_file")]
        self.assertRegex(problems_after("worker-job", drop_token), r"no --token_file: the shards require the job's token")
        self.assertRegex(problems_after("worker-job", lambda o: worker(o).pop("volumeMounts")),
                         r"--token_file=/etc/reducer/token/token is not in a mounted Secret")

    def test_loopback_listen_addresses_as_reducerd_tells_them(self):
        for a in ["127.0.0.1:50051", "127.1.2.3:1", "[::1]:50051", "localhost:50051", "unix:/run/r.sock",
                  "unix-abstract:r"]:
            self.assertTrue(is_loopback_listen(a), a)
        for a in ["0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.5:50051", "reducer-0.reducer:50051"]:
            self.assertFalse(is_loopback_listen(a), a)

    def test_help_parsing_finds_reducerds_own_and_absls_flags(self):
        for f in ["listen", "health_listen", "memory_budget_bytes", "drain_budget", "flagfile", "tls_cert_file",
                  "job_tokens_file", "allow_unauthenticated"]:
            self.assertIn(f, flag_sets["reducerd_flags"], f)
        self.assertIn("world_size", flag_sets["worker_flags"])
        self.assertIn("token_file", flag_sets["worker_flags"])
        self.assertNotIn("world_size", flag_sets["reducerd_flags"])

    def test_schema_a_wrongly_typed_field(self):
        def three(o):
            find(o, "StatefulSet")["spec"]["replicas"] = "three"
        self.assertRegex(problems_after("one-shard", three), r"schema: .*replicas")

    def test_round_trip_a_field_kubernetes_does_not_know(self):
        def probes(o):
            reducerd(o)["readinessProbes"] = {}
        self.assertRegex(problems_after("one-shard", probes), r"containers\.0\.readinessProbes does not survive")

        def completions_mode(o):
            find(o, "Job")["spec"]["completionsMode"] = "Indexed"
        self.assertRegex(problems_after("worker-job", completions_mode), r"spec\.completionsMode")

    def test_flags_one_reducerd_does_not_know_in_the_flagfile_or_in_args(self):
        def unknown_in_flagfile(o):
            flagfile(o)["reducerd.flags"] += "--memory_budget=1\n"
        self.assertRegex(problems_after("one-shard", unknown_in_flagfile), r"reducerd has no flag --memory_budget")
        self.assertRegex(problems_after("tls", lambda o: reducerd(o)["args"].append("--tls_cert=/etc/reducer/tls/tls.crt")),
                         r"reducerd has no flag --tls_cert\b")
        self.assertRegex(problems_after("one-shard", lambda o: reducerd(o)["args"].append("--listen")),
                         r'"--listen" is not --flag=value')
        self.assertRegex(problems_after("worker-job", lambda o: worker(o)["args"].append("--shards=4")),
                         r"the worker has no flag --shards")

    def test_probes_on_another_port_than_health_listens(self):
        def liveness_port(o):
            reducerd(o)["livenessProbe"]["grpc"]["port"] = 50051
        self.assertRegex(problems_after("one-shard", liveness_port),
                         r"livenessProbe probes port 50051, --health_listen is port 8081")

        def health_listen(o):
            d = flagfile(o)
            d["reducerd.flags"] = d["reducerd.flags"].replace("--health_listen=0.0.0.0:8081",
                                                              "--health_listen=0.0.0.0:8082")
        self.assertRegex(problems_after("one-shard", health_listen),
                         r"readinessProbe probes port 8081, --health_listen is port 8082")

        def tcp_probe(o):
            del reducerd(o)["readinessProbe"]["grpc"]
            reducerd(o)["readinessProbe"]["tcpSocket"] = {"port": 8081}
        self.assertRegex(problems_after("one-shard", tcp_probe), r"readinessProbe is not a gRPC probe")

    def test_restricted_security_context(self):
        def writable_root(o):
            reducerd(o)["securityContext"]["readOnlyRootFilesystem"] = False
        self.assertRegex(problems_after("one-shard", writable_root), r"readOnlyRootFilesystem is not true")

        def drop_net_raw(o):
            worker(o)["securityContext"]["capabilities"]["drop"] = ["NET_RAW"]
        self.assertRegex(problems_after("worker-job", drop_net_raw), r"capabilities do not drop ALL")

        def may_be_root(o):
            del find(o, "StatefulSet")["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
        self.assertRegex(problems_after("one-shard", may_be_root), r"runAsNonRoot is not true")

        def escalation(o):
            reducerd(o)["securityContext"]["allowPrivilegeEscalation"] = True
        self.assertRegex(problems_after("one-shard", escalation), r"allowPrivilegeEscalation is not false")

        def unconfined(o):
            find(o, "StatefulSet")["spec"]["template"]["spec"]["securityContext"]["seccompProfile"]["type"] = "Unconfined"
        self.assertRegex(problems_after("one-shard", unconfined), r"seccompProfile is not RuntimeDefault")

    def test_resources_memory_budget_and_drain_budget(self):
        def request(o):
            reducerd(o)["resources"]["requests"]["memory"] = "1Gi"
        self.assertRegex(problems_after("one-shard", request), r"memory request 1Gi differs from its limit 2Gi")
        self.assertRegex(problems_after("worker-job", lambda o: worker(o)["resources"]["requests"].pop("cpu")),
                         r"no cpu request")

        def budget(o):
            d = flagfile(o)
            d["reducerd.flags"] = d["reducerd.flags"].replace("--memory_budget_bytes=1476395008",
                                                              "--memory_budget_bytes=2147483648")
        self.assertRegex(problems_after("one-shard", budget), r"--memory_budget_bytes=2147483648 is not below the memory limit")

        def more_calls(o):
            flagfile(o)["reducerd.flags"] += "--max_concurrent_calls=8192\n"
        # 4096 more streams at 38 KiB each: 152 MiB more than the base leaves.
        self.assertRegex(problems_after("one-shard", more_calls),
                         r"the memory limit leaves 640 MiB above --memory_budget_bytes=1476395008; "
                         r"reducerd needs 772 MiB there with these flags")

        def grace(o):
            find(o, "StatefulSet")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 20
        self.assertRegex(problems_after("one-shard", grace),
                         r"--drain_budget \(20 s\) is not below terminationGracePeriodSeconds \(20\)")

    def test_selectors_that_miss_the_statefulsets_pods(self):
        def pdb(o):
            find(o, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "worker"
        self.assertRegex(problems_after("one-shard", pdb), r"no PodDisruptionBudget selects its pods")

        def policy(o):
            find(o, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"] = {"app": "reducer"}
        self.assertRegex(problems_after("one-shard", policy), r"no NetworkPolicy selects its pods")

        def service(o):
            find(o, "Service")["spec"]["selector"] = {"app": "reducer"}
        self.assertRegex(problems_after("one-shard", service), r"Service/reducer: selector does not select")

        def anyone(o):
            find(o, "NetworkPolicy")["spec"]["ingress"][0]["from"] = [{"podSelector": {}}]
        self.assertRegex(problems_after("one-shard", anyone), r"the gRPC port admits pods other than workers")

        def no_such_port(o):
            find(o, "NetworkPolicy")["spec"]["ingress"][1]["ports"][0]["port"] = "prometheus"
        self.assertRegex(problems_after("one-shard", no_such_port), r"port prometheus is no port of StatefulSet/reducer")

    def test_tls_files_outside_a_mounted_secret(self):
        def unmount_tls(o):
            spec = find(o, "StatefulSet")["spec"]["template"]["spec"]
            spec["containers"][0]["volumeMounts"] = [m for m in spec["containers"][0]["volumeMounts"]
                                                     if m["name"] != "tls"]
        self.assertRegex(problems_after("tls", unmount_tls),
                         r"--tls_cert_file=/etc/reducer/tls/tls.crt is not in a mounted Secret")

    def test_the_worker_job_index_as_rank_world_size_every_shard_in_the_target(self):
        def completions(o):
            find(o, "Job")["spec"]["completions"] = 3
        self.assertRegex(problems_after("worker-job", completions), r"--world_size=4, completions 3")

        def rank(o):
            worker(o)["args"][2] = "--rank=0"
        self.assertRegex(problems_after("worker-job", rank), r"--rank is not the completion index")
        sts = find(load("four-shards"), "StatefulSet")
        job = find(load("worker-job"), "Job")
        job["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "reducer-{0..2}.reducer:50051"
        self.assertRegex(",".join(shard_problems(sts, job)),
                         r"names reducer-0.reducer:50051,reducer-1.reducer:50051,reducer-2.reducer:50051;")
        self.assertRegex(",".join(shard_problems(find(load("one-shard"), "StatefulSet"), find(load("worker-job"), "Job"))),
                         r"serves reducer-0.reducer:50051$")

    def test_targets_quantities_and_durations(self):
        self.assertEqual(expand_target("r-{0..2}.s:1"), ["r-0.s:1", "r-1.s:1", "r-2.s:1"])
        self.assertEqual(expand_target("a:1,h{08..10}:2"), ["a:1", "h08:2", "h09:2", "h10:2"])
        self.assertEqual(bytes_of("2Gi"), 2147483648)
        self.assertEqual(bytes_of("128Mi"), 134217728)
        self.assertEqual(bytes_of("1G"), 1e9)
        self.assertEqual(seconds_of("1m30s"), 90)
        self.assertEqual(seconds_of("500ms"), 0.5)
        self.assertTrue(math.isnan(seconds_of("20")))


def main():
    if not kDir:
        print("checks_test.py: DEPLOY_RENDERED names the folder of rendered overlays", file=sys.stderr)
        return 2
    result = unittest.main(argv=[sys.argv[0]] + sys.argv[1:], exit=False, verbosity=2).result
    # A test whose subTests failed has one failure per subTest: count tests.
    failed = {getattr(t, "test_case", t).id() for t, _ in result.failures + result.errors}
    print(f"# pass {max(0, result.testsRun - len(failed) - len(result.skipped))}")
    print(f"# fail {len(failed)}")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
