"""Tests of checks.py's checks of the workloads: every rendered overlay
passes; images pinned by tag; the shards spread by anti-affinity and a
topology spread constraint; gRPC probes on the health port; the
"restricted" security context; resources, the memory budget and the drain
budget; the selectors of the PodDisruptionBudget, NetworkPolicy and
Service; flags in args and the flagfile that reducerd or the worker knows;
the schemas, the Kubernetes client's round trip and the ServiceMonitor's
vendored schema; --helpfull parsing; targets, quantities and durations.

Run through checks_test.py, which says what DEPLOY_RENDERED holds.
"""
import math
import os
import re
import unittest

from checks import bytes_of, expand_target, seconds_of, shard_problems
from checks_testing import (all_problems, find, flag_sets, flagfile, kOverlays, load, problems_after, reducerd,
                            set_up_flag_sets, worker)


def setUpModule():
    set_up_flag_sets()


class WorkloadsTest(unittest.TestCase):
    def test_every_rendered_overlay_passes(self):
        for name in kOverlays:
            with self.subTest(name):
                self.assertEqual(all_problems(load(name), name), [], name)
        for shards, workers in [("four-shards", "worker-job"), ("open", "worker-job-open"),
                                ("two-shards", "torch-job"), ("two-shards", "torch-job-direct")]:
            with self.subTest(shards):
                self.assertEqual(shard_problems(find(load(shards), "StatefulSet"),
                                                find(load(workers), "Job")), [], shards)

    def test_images_pinned_by_tag(self):
        def image(value, where=reducerd):
            def mutate(o):
                where(o)["image"] = value
            return mutate
        # The release deploy/image/build.sh tags the image with, as packaging/version.bzl names it.
        version_bzl = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../packaging/version.bzl")
        with open(version_bzl, encoding="utf-8") as f:
            release = re.search(r'^REDUCER_VERSION = "(.*)"$', f.read(), re.M).group(1)
        for name in kOverlays:
            for o in load(name):
                if o.get("kind") in ("StatefulSet", "Job"):
                    spec = o["spec"]["template"]["spec"]
                    for c in spec["containers"] + spec.get("initContainers", []):
                        # The trainer's image (deploy/image/torch/build.sh), the same release.
                        want = "reducer-torch" if c["name"] == "torch" else "reducer"
                        self.assertEqual(c["image"], f"{want}:{release}", name)
        self.assertRegex(problems_after("one-shard", image("reducer:latest")), r"image reducer:latest is not pinned")
        self.assertRegex(problems_after("worker-job", image("registry.example:5000/ml/reducer:latest", worker)),
                         r"image registry.example:5000/ml/reducer:latest is not pinned")
        # What `kustomize edit set image reducer=REGISTRY/reducer` without a tag leaves.
        self.assertRegex(problems_after("worker-job", image("registry.example:5000/reducer", worker)),
                         r"image registry.example:5000/reducer has no tag")
        self.assertRegex(problems_after("one-shard", image("reducer")), r"image reducer has no tag")
        for pinned in ["registry.example:5000/reducer:0.1.0", "reducer@sha256:" + "a" * 64]:
            self.assertNotRegex(problems_after("one-shard", image(pinned)), r"image ", pinned)

    def test_shards_spread_by_anti_affinity_and_a_topology_spread_constraint(self):
        def pod(o):
            return find(o, "StatefulSet")["spec"]["template"]["spec"]
        self.assertRegex(problems_after("four-shards", lambda o: pod(o).pop("affinity")),
                         r"no podAntiAffinity on kubernetes.io/hostname selecting its pods")

        def zone_only(o):
            term = pod(o)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
            term["podAffinityTerm"]["topologyKey"] = "topology.kubernetes.io/zone"
        self.assertRegex(problems_after("four-shards", zone_only), r"no podAntiAffinity on kubernetes.io/hostname")

        def other_pods(o):
            term = pod(o)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
            term["podAffinityTerm"]["labelSelector"]["matchLabels"] = {"app": "other"}
        self.assertRegex(problems_after("four-shards", other_pods), r"no podAntiAffinity")
        self.assertRegex(problems_after("four-shards", lambda o: pod(o).pop("topologySpreadConstraints")),
                         r"no topologySpreadConstraint selecting its pods")

        def spread_other_pods(o):
            for c in pod(o)["topologySpreadConstraints"]:
                c["labelSelector"]["matchLabels"] = {"app": "other"}
        self.assertRegex(problems_after("four-shards", spread_other_pods), r"no topologySpreadConstraint")

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

    def test_flags_one_reducerd_does_not_know_in_the_flagfile_or_in_args(self):
        def unknown_in_flagfile(o):
            flagfile(o)["reducerd.flags"] += "--memory_budget=1\n"
        self.assertRegex(problems_after("one-shard", unknown_in_flagfile), r"reducerd has no flag --memory_budget")
        self.assertRegex(problems_after("mtls", lambda o: reducerd(o)["args"].append("--tls_cert=/etc/reducer/tls/tls.crt")),
                         r"reducerd has no flag --tls_cert\b")
        self.assertRegex(problems_after("one-shard", lambda o: reducerd(o)["args"].append("--listen")),
                         r'"--listen" is not --flag=value')
        self.assertRegex(problems_after("worker-job", lambda o: worker(o)["args"].append("--shards=4")),
                         r"the worker has no flag --shards")

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

    def test_service_monitor_against_its_vendored_schema_and_the_service(self):
        def monitor(o):
            return find(o, "ServiceMonitor")
        self.assertEqual(monitor(load("monitoring"))["apiVersion"], "monitoring.coreos.com/v1")

        def endpoint(field, value):
            def mutate(o):
                monitor(o)["spec"]["endpoints"][0][field] = value
            return mutate
        self.assertRegex(problems_after("monitoring", endpoint("intervall", "30s")),
                         r"ServiceMonitor/reducer: schema: spec.endpoints.0: Additional properties are not allowed "
                         r"\('intervall' was unexpected\)")
        self.assertRegex(problems_after("monitoring", endpoint("scheme", "tcp")),
                         r"schema: spec.endpoints.0.scheme: 'tcp' is not one of")
        self.assertRegex(problems_after("monitoring", endpoint("interval", "30 seconds")),
                         r"schema: spec.endpoints.0.interval: '30 seconds' does not match")
        self.assertRegex(problems_after("monitoring", endpoint("port", 9464)),
                         r"schema: spec.endpoints.0.port: 9464 is not of type 'string'")
        self.assertRegex(problems_after("monitoring", lambda o: monitor(o)["spec"].pop("selector")),
                         r"schema: spec: 'selector' is a required property")
        self.assertRegex(problems_after("monitoring", endpoint("port", "prometheus")),
                         r"endpoint port prometheus is no port of Service/reducer")

        def other_service(o):
            monitor(o)["spec"]["selector"]["matchLabels"] = {"app": "other"}
        self.assertRegex(problems_after("monitoring", other_service), r"its selector selects no Service of the overlay")

    def test_help_parsing_finds_reducerds_own_and_absls_flags(self):
        for f in ["listen", "health_listen", "memory_budget_bytes", "drain_budget", "flagfile", "tls_cert_file",
                  "job_tokens_file", "allow_unauthenticated"]:
            self.assertIn(f, flag_sets["reducerd_flags"], f)
        self.assertIn("world_size", flag_sets["worker_flags"])
        self.assertIn("token_file", flag_sets["worker_flags"])
        self.assertNotIn("world_size", flag_sets["reducerd_flags"])

    def test_targets_quantities_and_durations(self):
        self.assertEqual(expand_target("r-{0..2}.s:1"), ["r-0.s:1", "r-1.s:1", "r-2.s:1"])
        self.assertEqual(expand_target("a:1,h{08..10}:2"), ["a:1", "h08:2", "h09:2", "h10:2"])
        self.assertEqual(bytes_of("2Gi"), 2147483648)
        self.assertEqual(bytes_of("128Mi"), 134217728)
        self.assertEqual(bytes_of("1G"), 1e9)
        self.assertEqual(seconds_of("1m30s"), 90)
        self.assertEqual(seconds_of("500ms"), 0.5)
        self.assertTrue(math.isnan(seconds_of("20")))
