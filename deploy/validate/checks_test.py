"""Tests of checks.py: the rendered overlays pass, and each kind of mistake
made in a copy of them is caught.

  DEPLOY_RENDERED=DIR python checks_test.py

DIR holds OVERLAY.yaml for each overlay of kOverlays (`kubectl kustomize`
of each), reducerd.help and
worker.help (`--helpfull` of reducerd and metric_sync_worker). Runs with
unittest; ends with "# pass N" and "# fail N" lines (N tests passed,
failed or errored) and exits 0 when every test passed.
"""
import copy
import math
import os
import re
import sys
import unittest

from checks import (bytes_of, expand_target, flags_in_help, is_loopback_listen, kTlsSecret,
                    kTokensSecret, load_objects, policy_problems, round_trip_problems,
                    schema_problems, seconds_of, shard_problems, tls_problems, token_problems)

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


def setUpModule():
    flag_sets["reducerd_flags"] = flags_in_help(_read("reducerd.help"))
    flag_sets["worker_flags"] = flags_in_help(_read("worker.help"))


class ChecksTest(unittest.TestCase):
    def test_every_rendered_overlay_passes(self):
        for name in kOverlays:
            with self.subTest(name):
                self.assertEqual(all_problems(load(name), name), [], name)
        for shards, workers in [("four-shards", "worker-job"), ("open", "worker-job-open"),
                                ("two-shards", "torch-job"), ("two-shards", "torch-job-direct")]:
            with self.subTest(shards):
                self.assertEqual(shard_problems(find(load(shards), "StatefulSet"),
                                                find(load(workers), "Job")), [], shards)

    def test_job_tokens_every_shard_overlay_requires_them_but_open_which_allows_anyone(self):
        for name in ["one-shard", "four-shards", "mtls", "cert-manager", "monitoring"]:
            self.assertIn("--job_tokens_file=/etc/reducer/tokens/tokens", reducerd(load(name))["args"], name)
            self.assertFalse(any(a.startswith("--allow_unauthenticated")
                                 for a in reducerd(load(name))["args"]), name)
        open_ = load("open")
        self.assertIn("--allow_unauthenticated=true", reducerd(open_)["args"])
        self.assertFalse(any(a.startswith("--job_tokens_file") for a in reducerd(open_)["args"]))
        self.assertNotIn("job_tokens_file", flagfile(open_)["reducerd.flags"])
        self.assertFalse(any((v.get("secret") or {}).get("secretName") == kTokensSecret
                             for v in find(open_, "StatefulSet")["spec"]["template"]["spec"]["volumes"]))
        self.assertIn("--token_file=$(REDUCER_TOKEN_FILE)", worker(load("worker-job"))["args"])
        self.assertIn({"name": "REDUCER_TOKEN_FILE", "value": "/etc/reducer/token/token"},
                      worker(load("worker-job"))["env"])
        self.assertFalse(any(a.startswith("--token_file") for a in worker(load("worker-job-open"))["args"]))

    def test_job_tokens_a_shard_overlay_without_them_open_with_them(self):
        def drop_tokens(o):
            reducerd(o)["args"] = [a for a in reducerd(o)["args"] if not a.startswith("--job_tokens_file")]
        self.assertRegex(problems_after("one-shard", drop_tokens), r"no --job_tokens_file: calls carry no job token")
        # Protected mode: with TLS still on reducerd starts; without it too, it refuses.
        self.assertNotRegex(problems_after("one-shard", drop_tokens), r"reducerd refuses it")

        def drop_tokens_and_tls(o):
            reducerd(o)["args"] = [a for a in reducerd(o)["args"]
                                   if not a.startswith(("--job_tokens_file", "--tls_"))]
        self.assertRegex(problems_after("one-shard", drop_tokens_and_tls),
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
        self.assertRegex(problems_after("mtls", unmount_tokens),
                         r"--job_tokens_file=/etc/reducer/tokens/tokens is not in a mounted Secret")

    def test_the_workers_token_given_and_from_a_mounted_secret(self):
        def drop_token(o):
            worker(o)["args"] = [a for a in worker(o)["args"] if not a.startswith("--token_file")]
        self.assertRegex(problems_after("worker-job", drop_token), r"no --token_file: the shards require the job's token")
        self.assertRegex(problems_after("worker-job", lambda o: worker(o).pop("volumeMounts")),
                         r"--token_file=/etc/reducer/token/token is not in a mounted Secret")
        self.assertRegex(problems_after("worker-job-open", lambda o: worker(o)["args"].append("--token_file=/t")),
                         r"open, but --token_file=/t")

    def test_tls_every_overlay_serves_it_but_open_which_is_plaintext(self):
        for name in ["one-shard", "four-shards", "mtls", "cert-manager", "monitoring"]:
            args = reducerd(load(name))["args"]
            self.assertIn("--tls_cert_file=/etc/reducer/tls/tls.crt", args, name)
            self.assertIn("--tls_key_file=/etc/reducer/tls/tls.key", args, name)
        self.assertIn("--tls_client_ca_file=/etc/reducer/tls/ca.crt", reducerd(load("mtls"))["args"])
        self.assertFalse(any(a.startswith("--tls") for a in reducerd(load("open"))["args"]))
        self.assertIn("--tls_ca_file=$(REDUCER_TLS_CA_FILE)", worker(load("worker-job"))["args"])
        self.assertFalse(any(a.startswith("--tls") for a in worker(load("worker-job-open"))["args"]))

        def drop(flag):
            def mutate(o):
                reducerd(o)["args"] = [a for a in reducerd(o)["args"] if not a.startswith(f"--{flag}=")]
            return mutate
        for flag in ["tls_cert_file", "tls_key_file"]:
            self.assertRegex(problems_after("four-shards", drop(flag)),
                             rf"no --{flag}: the gRPC port is plaintext \(only overlays/open may be\)")
        self.assertRegex(problems_after("open", lambda o: reducerd(o)["args"].append("--tls_cert_file=/x/tls.crt")),
                         r"open \(plaintext\), but --tls_cert_file=/x/tls.crt")
        self.assertRegex(problems_after("open", lambda o: find(o, "StatefulSet")["spec"]["template"]["spec"]["volumes"].append(
            {"name": "t", "secret": {"secretName": kTlsSecret}})), r"open \(plaintext\), but mounts the Secret reducer-tls")

    def test_tls_the_workers_verify_the_shards_with_the_ca_alone(self):
        def drop_ca(o):
            worker(o)["args"] = [a for a in worker(o)["args"] if not a.startswith("--tls_ca_file")]
        self.assertRegex(problems_after("worker-job", drop_ca), r"no --tls_ca_file: the worker cannot verify")

        def ca_from_shards_secret(o):
            volume = next(v for v in find(o, "Job")["spec"]["template"]["spec"]["volumes"] if v["name"] == "reducer-ca")
            volume["secret"]["secretName"] = kTlsSecret
        self.assertRegex(problems_after("worker-job", ca_from_shards_secret),
                         r"--tls_ca_file from the Secret reducer-tls, which holds the shards' key")

        def unmount_ca(o):
            worker(o)["volumeMounts"] = [m for m in worker(o)["volumeMounts"] if m["name"] != "reducer-ca"]
        self.assertRegex(problems_after("worker-job", unmount_ca),
                         r"--tls_ca_file=/etc/reducer/ca/ca.crt is not in a mounted Secret")
        self.assertRegex(problems_after("worker-job-open", lambda o: worker(o)["args"].append("--tls_ca_file=/ca.crt")),
                         r"open \(plaintext\), but --tls_ca_file=/ca.crt")

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

    def test_network_policy_admits_only_workers_and_the_scraper(self):
        def ingress(o):
            return find(o, "NetworkPolicy")["spec"]["ingress"]
        self.assertEqual(problems_after("one-shard", lambda o: None), "")

        def any_namespace(o):
            ingress(o)[1]["from"][0]["namespaceSelector"] = {}
        self.assertRegex(problems_after("one-shard", any_namespace),
                         r"the metrics port admits pods not chosen by namespace and pod labels")

        def any_pod_of_the_namespace(o):
            del ingress(o)[1]["from"][0]["podSelector"]
        self.assertRegex(problems_after("one-shard", any_pod_of_the_namespace), r"the metrics port admits pods not chosen")

        def workers_of_every_namespace(o):
            ingress(o)[0]["from"][0]["namespaceSelector"] = {}
        self.assertRegex(problems_after("one-shard", workers_of_every_namespace),
                         r"the gRPC port admits pods other than workers")

        def every_port(o):
            del ingress(o)[0]["ports"]
        self.assertRegex(problems_after("one-shard", every_port), r"an ingress rule admits every port")

        def health(o):
            ingress(o)[0]["ports"].append({"protocol": "TCP", "port": "health"})
        self.assertRegex(problems_after("one-shard", health), r"admits port health, neither grpc nor metrics")

        def both(o):
            ingress(o)[1]["ports"].append({"protocol": "TCP", "port": 50051})
        self.assertRegex(problems_after("one-shard", both), r"one rule admits to both the gRPC and the metrics port")

        def ip_block(o):
            ingress(o)[1]["from"].append({"ipBlock": {"cidr": "10.0.0.0/8"}})
        self.assertRegex(problems_after("one-shard", ip_block), r"an ingress rule admits an ipBlock")

        def egress_only(o):
            find(o, "NetworkPolicy")["spec"]["policyTypes"] = ["Egress"]
        self.assertRegex(problems_after("one-shard", egress_only), r"policyTypes lacks Ingress")

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

    def test_cert_manager_certificate_names_every_shard(self):
        def shard_certificate(o):
            return next(c for c in o if c.get("kind") == "Certificate" and c["spec"]["secretName"] == kTlsSecret)

        def three_names(o):
            shard_certificate(o)["spec"]["dnsNames"].remove("reducer-3.reducer")
        self.assertRegex(problems_after("cert-manager", three_names), r"dnsNames lack reducer-3.reducer")

        def client_only(o):
            shard_certificate(o)["spec"]["usages"] = ["client auth"]
        self.assertRegex(problems_after("cert-manager", client_only), r"usages lack server auth")

        def unknown_issuer(o):
            shard_certificate(o)["spec"]["issuerRef"]["name"] = "letsencrypt"
        self.assertRegex(problems_after("cert-manager", unknown_issuer),
                         r"issuerRef names Issuer letsencrypt, which the overlay does not make")

        def dsa(o):
            shard_certificate(o)["spec"]["privateKey"]["algorithm"] = "DSA"
        self.assertRegex(problems_after("cert-manager", dsa), r"schema: spec.privateKey.algorithm: 'DSA' is not one of")
        self.assertRegex(problems_after("cert-manager", lambda o: shard_certificate(o)["spec"].pop("secretName")),
                         r"schema: spec: 'secretName' is a required property")

        def ca_issuer_typo(o):
            issuer = next(i for i in o if i.get("kind") == "Issuer" and "ca" in i["spec"])
            issuer["spec"]["ca"]["secretname"] = issuer["spec"]["ca"].pop("secretName")
        self.assertRegex(problems_after("cert-manager", ca_issuer_typo), r"Issuer/reducer-ca: schema: spec.ca")

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
        self.assertRegex(problems_after("mtls", lambda o: reducerd(o)["args"].append("--tls_cert=/etc/reducer/tls/tls.crt")),
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
        for name in ["one-shard", "mtls"]:
            self.assertRegex(problems_after(name, unmount_tls),
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

    def test_torch_job_shape_rendezvous_and_job_name_from_the_job(self):
        def nnodes(o):
            env_of(trainer(o), "NNODES")["value"] = "3"
        self.assertRegex(problems_after("torch-job", nnodes),
                         r"--nnodes=\$\(NNODES\) with NNODES=3 is not the Job's parallelism 2")

        def parallelism(o):
            find(o, "Job")["spec"]["parallelism"] = 1
        self.assertRegex(problems_after("torch-job", parallelism), r"parallelism differs from completions")

        def node_rank(o):
            trainer(o)["args"] = [("--node_rank=0" if a.startswith("--node_rank=") else a)
                                  for a in trainer(o)["args"]]
        self.assertRegex(problems_after("torch-job-direct", node_rank), r"--node_rank is not the completion index")

        def job_name(o):
            env_of(trainer(o), "REDUCER_JOB").pop("valueFrom")
            env_of(trainer(o), "REDUCER_JOB")["value"] = "torch-ddp"
        self.assertRegex(problems_after("torch-job", job_name), r"REDUCER_JOB is not the Job's name")

        def master(o):
            env_of(trainer(o), "MASTER_ADDR")["value"] = "torch-ddp-1.torch-ddp"
        self.assertRegex(problems_after("torch-job", master), r"is not torch-ddp-0.torch-ddp, pod 0's name")

        def not_headless(o):
            find(o, "Service")["spec"].pop("clusterIP")
        self.assertRegex(problems_after("torch-job", not_headless), r"Service/torch-ddp: not headless")

        def no_service(o):
            o.remove(find(o, "Service"))
        self.assertRegex(problems_after("torch-job", no_service), r"subdomain torch-ddp names no Service")

        def not_worker(o):
            find(o, "Job")["spec"]["template"]["metadata"]["labels"].pop("reducer.dev/role")
        self.assertRegex(problems_after("torch-job", not_worker), r"pods lack reducer.dev/role: worker")

        def latest(o):
            trainer(o)["image"] = "reducer-torch:latest"
        self.assertRegex(problems_after("torch-job", latest), r"image reducer-torch:latest is not pinned")

    def test_torch_job_relay_sidecar(self):
        def not_sidecar(o):
            relay(o).pop("restartPolicy")
        self.assertRegex(problems_after("torch-job", not_sidecar), r"restartPolicy is not Always: not a sidecar")

        def elsewhere(o):
            env_of(trainer(o), "REDUCER_TARGET")["value"] = "reducer-{0..1}.reducer:50051"
        self.assertRegex(problems_after("torch-job", elsewhere),
                         r"REDUCER_TARGET=reducer-\{0..1\}.reducer:50051 is not the relay's --listen=127.0.0.1:50061")

        def exposed(o):
            relay(o)["args"][0] = "--listen=0.0.0.0:50061"
        self.assertRegex(problems_after("torch-job", exposed), r"--listen=0.0.0.0:50061 is not the pod's loopback")

        def no_probe(o):
            relay(o).pop("startupProbe")
        self.assertRegex(problems_after("torch-job", no_probe), r"no gRPC startupProbe on its --health_listen port")

        def token_unmounted(o):
            relay(o)["volumeMounts"] = [m for m in relay(o)["volumeMounts"] if m["name"] != "job-token"]
        self.assertRegex(problems_after("torch-job", token_unmounted),
                         r"relay: --token_file=/etc/reducer/token/token is not in a mounted Secret")

        def no_ca(o):
            relay(o)["args"] = [a for a in relay(o)["args"] if not a.startswith("--upstream_tls_ca_file")]
        self.assertRegex(problems_after("torch-job", no_ca), r"relay: no --tls_ca_file")

        def shards_key(o):
            spec = find(o, "Job")["spec"]["template"]["spec"]
            next(v for v in spec["volumes"] if v["name"] == "reducer-ca")["secret"]["secretName"] = kTlsSecret
        self.assertRegex(problems_after("torch-job", shards_key), r"from the Secret reducer-tls, which holds")

        # The relay's flags are checked against reducerd's --helpfull as any
        # other: a misspelt one is refused, and so is every one a reducerd
        # without the relay (no --upstream_*) would not know.
        def misspelt(o):
            relay(o)["args"].append("--upstream_tokens_file=/etc/reducer/token/token")
        self.assertRegex(problems_after("torch-job", misspelt), r"reducerd has no flag --upstream_tokens_file")
        self.assertNotRegex(problems_after("torch-job", lambda o: None), r"no flag --upstream")
        without_relay = dict(flag_sets, reducerd_flags={f for f in flag_sets["reducerd_flags"]
                                                        if not f.startswith("upstream")})
        problems = "\n".join(policy_problems(load("torch-job"), **without_relay))
        for name in ("upstream", "upstream_token_file", "upstream_tls_ca_file"):
            self.assertRegex(problems, rf"reducerd has no flag --{name}\b")

        sts = find(load("four-shards"), "StatefulSet")
        self.assertRegex(",".join(shard_problems(sts, find(load("torch-job"), "Job"))),
                         r"names reducer-0.reducer:50051,reducer-1.reducer:50051; StatefulSet/reducer serves")

    def test_torch_job_direct_dials_the_shards_with_ca_and_token(self):
        def no_ca(o):
            trainer(o)["env"] = [e for e in trainer(o)["env"] if e["name"] != "REDUCER_TLS_CA_FILE"]
        self.assertRegex(problems_after("torch-job-direct", no_ca), r"no --tls_ca_file: the worker cannot verify")

        def no_token(o):
            trainer(o)["env"] = [e for e in trainer(o)["env"] if e["name"] != "REDUCER_TOKEN_FILE"]
        self.assertRegex(problems_after("torch-job-direct", no_token), r"no --token_file: the shards require")

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
