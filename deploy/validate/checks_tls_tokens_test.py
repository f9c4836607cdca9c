"""Tests of checks.py's TLS and job tokens, and of who may reach the shards:
every overlay serves TLS and requires the job's token but the open ones,
which are plaintext and allow anyone; the workers present a token and
verify the shards with a CA alone, from mounted Secrets; cert-manager's
Certificate names every shard; the NetworkPolicy admits only the workers
and the scraper; which listen addresses are loopback, as reducerd tells
them (off loopback it refuses to serve without TLS or tokens).

Run through checks_test.py, which says what DEPLOY_RENDERED holds.
"""
import unittest

from checks import is_loopback_listen, kTlsSecret, kTokensSecret
from checks_testing import find, flagfile, load, problems_after, reducerd, set_up_flag_sets, worker


def setUpModule():
    set_up_flag_sets()


class TlsAndTokensTest(unittest.TestCase):
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

    def test_tls_files_outside_a_mounted_secret(self):
        def unmount_tls(o):
            spec = find(o, "StatefulSet")["spec"]["template"]["spec"]
            spec["containers"][0]["volumeMounts"] = [m for m in spec["containers"][0]["volumeMounts"]
                                                     if m["name"] != "tls"]
        for name in ["one-shard", "mtls"]:
            self.assertRegex(problems_after(name, unmount_tls),
                             r"--tls_cert_file=/etc/reducer/tls/tls.crt is not in a mounted Secret")

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

    def test_loopback_listen_addresses_as_reducerd_tells_them(self):
        for a in ["127.0.0.1:50051", "127.1.2.3:1", "[::1]:50051", "localhost:50051", "unix:/run/r.sock",
                  "unix-abstract:r"]:
            self.assertTrue(is_loopback_listen(a), a)
        for a in ["0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.5:50051", "reducer-0.reducer:50051"]:
            self.assertFalse(is_loopback_listen(a), a)
