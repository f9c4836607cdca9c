// Tests of checks.mjs: the rendered overlays pass, and each kind of mistake
// made in a copy of them is caught.
//
//   DEPLOY_RENDERED=DIR node --test checks_test.mjs
//
// DIR holds one-shard.yaml, four-shards.yaml, tls.yaml, open.yaml,
// worker-job.yaml (`kubectl kustomize` of each overlay), reducerd.help and
// worker.help (`--helpfull` of reducerd and metric_sync_worker).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { parseAllDocuments } from "yaml";

import {
  bytesOf, expandTarget, flagsInHelp, isLoopbackListen, kTokensSecret, policyProblems,
  roundTripProblems, schemaProblems, secondsOf, shardProblems, tokenProblems,
} from "./checks.mjs";

const dir = process.env.DEPLOY_RENDERED;
assert.ok(dir, "DEPLOY_RENDERED names the folder of rendered overlays");

function load(name) {
  return parseAllDocuments(readFileSync(`${dir}/${name}.yaml`, "utf8")).map((d) => d.toJS()).filter((o) => o);
}
const flagSets = {
  reducerdFlags: flagsInHelp(readFileSync(`${dir}/reducerd.help`, "utf8")),
  workerFlags: flagsInHelp(readFileSync(`${dir}/worker.help`, "utf8")),
};
const find = (objs, kind) => objs.find((o) => o.kind === kind);
const reducerd = (objs) => find(objs, "StatefulSet").spec.template.spec.containers[0];
const worker = (objs) => find(objs, "Job").spec.template.spec.containers[0];
const flagfile = (objs) => find(objs, "ConfigMap").data;
// Every problem of overlay `name`'s objects; "open" is the open overlay.
function allProblems(objs, name) {
  const out = [];
  for (const o of objs) out.push(...schemaProblems(o), ...roundTripProblems(o));
  return out.concat(policyProblems(objs, flagSets), tokenProblems(objs, { open: name === "open" }));
}
// The problems of `name` after `mutate` changed a copy of it.
function problemsAfter(name, mutate) {
  const objs = load(name);
  mutate(objs);
  return allProblems(objs, name).join("\n");
}

test("every rendered overlay passes", () => {
  for (const name of ["one-shard", "four-shards", "tls", "open", "worker-job"]) {
    assert.deepEqual(allProblems(load(name), name), [], name);
  }
  for (const shards of ["four-shards", "open"]) {
    assert.deepEqual(shardProblems(find(load(shards), "StatefulSet"), find(load("worker-job"), "Job")), [], shards);
  }
});

test("job tokens: every shard overlay requires them but open, which allows anyone", () => {
  for (const name of ["one-shard", "four-shards", "tls"]) {
    assert.ok(reducerd(load(name)).args.includes("--job_tokens_file=/etc/reducer/tokens/tokens"), name);
    assert.ok(!reducerd(load(name)).args.some((a) => a.startsWith("--allow_unauthenticated")), name);
  }
  const open = load("open");
  assert.ok(reducerd(open).args.includes("--allow_unauthenticated=true"));
  assert.ok(!reducerd(open).args.some((a) => a.startsWith("--job_tokens_file")));
  assert.ok(!flagfile(open)["reducerd.flags"].includes("job_tokens_file"));
  assert.ok(!find(open, "StatefulSet").spec.template.spec.volumes.some((v) => v.secret?.secretName === kTokensSecret));
  assert.ok(worker(load("worker-job")).args.includes("--token_file=/etc/reducer/token/token"));
});

test("job tokens: a shard overlay without them, open with them", () => {
  const dropTokens = (o) => { reducerd(o).args = reducerd(o).args.filter((a) => !a.startsWith("--job_tokens_file")); };
  assert.match(problemsAfter("one-shard", dropTokens), /no --job_tokens_file: calls carry no job token/);
  assert.match(problemsAfter("one-shard", dropTokens),
               /--listen=0\.0\.0\.0:50051 with neither TLS nor --job_tokens_file: reducerd refuses it without --allow_unauthenticated/);
  assert.match(problemsAfter("four-shards", (o) => { reducerd(o).args.push("--allow_unauthenticated=true"); }),
               /--allow_unauthenticated serves anyone \(only overlays\/open may\)/);
  const notAllowed = problemsAfter("open", (o) => {
    reducerd(o).args = reducerd(o).args.filter((a) => !a.startsWith("--allow_unauthenticated"));
  });
  assert.match(notAllowed, /open, but no --allow_unauthenticated=true/);
  assert.match(notAllowed, /reducerd refuses it without --allow_unauthenticated/);
  assert.match(problemsAfter("open", (o) => { reducerd(o).args.push("--job_tokens_file=/etc/reducer/tokens/tokens"); }),
               /open, but --job_tokens_file=/);
  assert.match(problemsAfter("open", (o) => {
    find(o, "StatefulSet").spec.template.spec.volumes.push({ name: "t", secret: { secretName: kTokensSecret } });
  }), /open, but mounts the Secret reducer-job-tokens/);
  assert.match(problemsAfter("tls", (o) => {
    reducerd(o).volumeMounts = reducerd(o).volumeMounts.filter((m) => m.name !== "job-tokens");
  }), /--job_tokens_file=\/etc\/reducer\/tokens\/tokens is not in a mounted Secret/);
});

test("the worker's token: given, and from a mounted Secret", () => {
  assert.match(problemsAfter("worker-job", (o) => { worker(o).args = worker(o).args.filter((a) => !a.startsWith("--token_file")); }),
               /no --token_file: the shards require the job's token/);
  assert.match(problemsAfter("worker-job", (o) => { delete worker(o).volumeMounts; }),
               /--token_file=\/etc\/reducer\/token\/token is not in a mounted Secret/);
});

test("loopback --listen addresses, as reducerd tells them", () => {
  for (const a of ["127.0.0.1:50051", "127.1.2.3:1", "[::1]:50051", "localhost:50051", "unix:/run/r.sock", "unix-abstract:r"]) {
    assert.ok(isLoopbackListen(a), a);
  }
  for (const a of ["0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.5:50051", "reducer-0.reducer:50051"]) {
    assert.ok(!isLoopbackListen(a), a);
  }
});

test("help parsing finds reducerd's own and absl's flags", () => {
  for (const f of ["listen", "health_listen", "memory_budget_bytes", "drain_budget", "flagfile", "tls_cert_file",
                   "job_tokens_file", "allow_unauthenticated"]) {
    assert.ok(flagSets.reducerdFlags.has(f), f);
  }
  assert.ok(flagSets.workerFlags.has("world_size"));
  assert.ok(flagSets.workerFlags.has("token_file"));
  assert.ok(!flagSets.reducerdFlags.has("world_size"));
});

test("schema: a wrongly typed field", () => {
  assert.match(problemsAfter("one-shard", (o) => { find(o, "StatefulSet").spec.replicas = "three"; }),
               /schema: .*replicas/);
});

test("round trip: a field Kubernetes does not know", () => {
  assert.match(problemsAfter("one-shard", (o) => { reducerd(o).readinessProbes = {}; }),
               /containers\.0\.readinessProbes does not survive/);
  assert.match(problemsAfter("worker-job", (o) => { find(o, "Job").spec.completionsMode = "Indexed"; }),
               /spec\.completionsMode/);
});

test("flags: one reducerd does not know, in the flagfile or in args", () => {
  assert.match(problemsAfter("one-shard", (o) => {
    flagfile(o)["reducerd.flags"] += "--memory_budget=1\n";
  }), /reducerd has no flag --memory_budget/);
  assert.match(problemsAfter("tls", (o) => { reducerd(o).args.push("--tls_cert=/etc/reducer/tls/tls.crt"); }),
               /reducerd has no flag --tls_cert\b/);
  assert.match(problemsAfter("one-shard", (o) => { reducerd(o).args.push("--listen"); }),
               /"--listen" is not --flag=value/);
  assert.match(problemsAfter("worker-job", (o) => { worker(o).args.push("--shards=4"); }),
               /the worker has no flag --shards/);
});

test("probes: on another port than --health_listen's", () => {
  assert.match(problemsAfter("one-shard", (o) => { reducerd(o).livenessProbe.grpc.port = 50051; }),
               /livenessProbe probes port 50051, --health_listen is port 8081/);
  assert.match(problemsAfter("one-shard", (o) => {
    const d = flagfile(o);
    d["reducerd.flags"] = d["reducerd.flags"].replace("--health_listen=0.0.0.0:8081", "--health_listen=0.0.0.0:8082");
  }), /readinessProbe probes port 8081, --health_listen is port 8082/);
  assert.match(problemsAfter("one-shard", (o) => { delete reducerd(o).readinessProbe.grpc; reducerd(o).readinessProbe.tcpSocket = { port: 8081 }; }),
               /readinessProbe is not a gRPC probe/);
});

test("restricted security context", () => {
  assert.match(problemsAfter("one-shard", (o) => { reducerd(o).securityContext.readOnlyRootFilesystem = false; }),
               /readOnlyRootFilesystem is not true/);
  assert.match(problemsAfter("worker-job", (o) => { worker(o).securityContext.capabilities.drop = ["NET_RAW"]; }),
               /capabilities do not drop ALL/);
  assert.match(problemsAfter("one-shard", (o) => { delete find(o, "StatefulSet").spec.template.spec.securityContext.runAsNonRoot; }),
               /runAsNonRoot is not true/);
  assert.match(problemsAfter("one-shard", (o) => { reducerd(o).securityContext.allowPrivilegeEscalation = true; }),
               /allowPrivilegeEscalation is not false/);
  assert.match(problemsAfter("one-shard", (o) => { find(o, "StatefulSet").spec.template.spec.securityContext.seccompProfile.type = "Unconfined"; }),
               /seccompProfile is not RuntimeDefault/);
});

test("resources, memory budget and drain budget", () => {
  assert.match(problemsAfter("one-shard", (o) => { reducerd(o).resources.requests.memory = "1Gi"; }),
               /memory request 1Gi differs from its limit 2Gi/);
  assert.match(problemsAfter("worker-job", (o) => { delete worker(o).resources.requests.cpu; }), /no cpu request/);
  assert.match(problemsAfter("one-shard", (o) => {
    const d = flagfile(o);
    d["reducerd.flags"] = d["reducerd.flags"].replace("--memory_budget_bytes=1610612736", "--memory_budget_bytes=2147483648");
  }), /--memory_budget_bytes=2147483648 is not below the memory limit/);
  assert.match(problemsAfter("one-shard", (o) => { find(o, "StatefulSet").spec.template.spec.terminationGracePeriodSeconds = 20; }),
               /--drain_budget \(20 s\) is not below terminationGracePeriodSeconds \(20\)/);
});

test("selectors that miss the StatefulSet's pods", () => {
  assert.match(problemsAfter("one-shard", (o) => { find(o, "PodDisruptionBudget").spec.selector.matchLabels["app.kubernetes.io/component"] = "worker"; }),
               /no PodDisruptionBudget selects its pods/);
  assert.match(problemsAfter("one-shard", (o) => { find(o, "NetworkPolicy").spec.podSelector.matchLabels = { app: "reducer" }; }),
               /no NetworkPolicy selects its pods/);
  assert.match(problemsAfter("one-shard", (o) => { find(o, "Service").spec.selector = { app: "reducer" }; }),
               /Service\/reducer: selector does not select/);
  assert.match(problemsAfter("one-shard", (o) => { find(o, "NetworkPolicy").spec.ingress[0].from = [{ podSelector: {} }]; }),
               /the gRPC port admits pods other than workers/);
  assert.match(problemsAfter("one-shard", (o) => { find(o, "NetworkPolicy").spec.ingress[1].ports[0].port = "prometheus"; }),
               /port prometheus is no port of StatefulSet\/reducer/);
});

test("TLS files outside a mounted Secret", () => {
  assert.match(problemsAfter("tls", (o) => {
    const spec = find(o, "StatefulSet").spec.template.spec;
    spec.containers[0].volumeMounts = spec.containers[0].volumeMounts.filter((m) => m.name !== "tls");
  }), /--tls_cert_file=\/etc\/reducer\/tls\/tls.crt is not in a mounted Secret/);
});

test("the worker Job: index as rank, world size, every shard in the target", () => {
  assert.match(problemsAfter("worker-job", (o) => { find(o, "Job").spec.completions = 3; }),
               /--world_size=4, completions 3/);
  assert.match(problemsAfter("worker-job", (o) => { worker(o).args[2] = "--rank=0"; }),
               /--rank is not the completion index/);
  const sts = find(load("four-shards"), "StatefulSet");
  const job = find(load("worker-job"), "Job");
  job.spec.template.spec.containers[0].env[0].value = "reducer-{0..2}.reducer:50051";
  assert.match(shardProblems(sts, job).join(), /names reducer-0.reducer:50051,reducer-1.reducer:50051,reducer-2.reducer:50051;/);
  assert.match(shardProblems(find(load("one-shard"), "StatefulSet"), find(load("worker-job"), "Job")).join(),
               /serves reducer-0.reducer:50051$/);
});

test("targets, quantities and durations", () => {
  assert.deepEqual(expandTarget("r-{0..2}.s:1"), ["r-0.s:1", "r-1.s:1", "r-2.s:1"]);
  assert.deepEqual(expandTarget("a:1,h{08..10}:2"), ["a:1", "h08:2", "h09:2", "h10:2"]);
  assert.equal(bytesOf("2Gi"), 2147483648);
  assert.equal(bytesOf("128Mi"), 134217728);
  assert.equal(bytesOf("1G"), 1e9);
  assert.equal(secondsOf("1m30s"), 90);
  assert.equal(secondsOf("500ms"), 0.5);
  assert.ok(Number.isNaN(secondsOf("20")));
});
