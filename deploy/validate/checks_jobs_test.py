"""Tests of checks.py's checks of the Jobs: the worker Job (the completion
index as --rank, --world_size its completions, every shard in its target)
and the PyTorch Jobs (their shape and rendezvous, the job's name from the
Job; torch-job's relay sidecar on the pod's loopback, its flags as
reducerd's --helpfull lists them; torch-job-direct's ranks dialling the
shards with a CA and a token).

Run through checks_test.py, which says what DEPLOY_RENDERED holds.
"""
import unittest

from checks import kTlsSecret, policy_problems, shard_problems
from checks_testing import env_of, find, flag_sets, load, problems_after, relay, set_up_flag_sets, trainer, worker


def setUpModule():
    set_up_flag_sets()


class JobsTest(unittest.TestCase):
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
