// Checks of rendered Kubernetes objects (the output of `kubectl kustomize`
// of a deploy/k8s overlay). Every function returns a list of problems, one
// string each naming the object and field; an empty list means it passed.
//
//   schemaProblems(obj)        the object against Kubernetes' schema
//                              (kubernetes-models)
//   roundTripProblems(obj)     fields @kubernetes/client-node does not know:
//                              the object deserialized and serialized again
//                              must come back unchanged
//   policyProblems(objs, flagSets)
//                              restricted security context, resources, the
//                              probes on the --health_listen port, flags
//                              reducerd (or the worker) knows, selectors
//                              that select the StatefulSet's pods, no
//                              --listen reducerd would refuse (protected
//                              mode), the worker's token in a Secret
//   tokenProblems(objs, {open})
//                              an open overlay serves with
//                              --allow_unauthenticated and no job tokens;
//                              every other one requires job tokens
//   shardProblems(statefulSet, job)
//                              the workers' target names every shard
import { isDeepStrictEqual } from "node:util";

import { ObjectSerializer } from "@kubernetes/client-node/dist/gen/models/ObjectSerializer.js";
import { ConfigMap, Service } from "kubernetes-models/v1";
import { StatefulSet } from "kubernetes-models/apps/v1";
import { Job } from "kubernetes-models/batch/v1";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";

// The kinds deploy/k8s uses: model class and client-node type name.
const kKinds = {
  "v1/ConfigMap": [ConfigMap, "V1ConfigMap"],
  "v1/Service": [Service, "V1Service"],
  "apps/v1/StatefulSet": [StatefulSet, "V1StatefulSet"],
  "batch/v1/Job": [Job, "V1Job"],
  "networking.k8s.io/v1/NetworkPolicy": [NetworkPolicy, "V1NetworkPolicy"],
  "policy/v1/PodDisruptionBudget": [PodDisruptionBudget, "V1PodDisruptionBudget"],
};

export const kReducerdBinary = "/usr/bin/reducerd";
export const kWorkerBinary = "/usr/bin/metric_sync_worker";
const kUid = 65532;
// The Secret holding the shards' tokens file (deploy/k8s/base).
export const kTokensSecret = "reducer-job-tokens";

export function describe(obj) {
  return `${obj?.kind ?? "?"}/${obj?.metadata?.name ?? "?"}`;
}

function kindOf(obj) {
  return kKinds[`${obj.apiVersion}/${obj.kind}`];
}

export function schemaProblems(obj) {
  const kind = kindOf(obj);
  if (!kind) return [`${describe(obj)}: kind ${obj.apiVersion}/${obj.kind} is not one deploy/k8s uses`];
  try {
    new kind[0](obj).validate();
    return [];
  } catch (e) {
    return [`${describe(obj)}: schema: ${e.message}`];
  }
}

// The first path at which a and b differ, or null.
function firstDifference(a, b, path = "") {
  if (isDeepStrictEqual(a, b)) return null;
  if (a && b && typeof a === "object" && typeof b === "object") {
    for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) {
      const d = firstDifference(a[key], b[key], `${path}.${key}`);
      if (d) return d;
    }
  }
  return path || ".";
}

export function roundTripProblems(obj) {
  const kind = kindOf(obj);
  if (!kind) return [];
  const type = kind[1];
  const back = JSON.parse(JSON.stringify(
      ObjectSerializer.serialize(ObjectSerializer.deserialize(obj, type), type)));
  const d = firstDifference(JSON.parse(JSON.stringify(obj)), back);
  return d ? [`${describe(obj)}: ${d} does not survive a round trip through ${type} (unknown field?)`] : [];
}

// --- flags -------------------------------------------------------------

// Flag names in `PROGRAM --helpfull` output ("    --name (help ...").
export function flagsInHelp(text) {
  const names = new Set();
  for (const m of text.matchAll(/^\s+--([A-Za-z0-9_]+) \(/gm)) names.add(m[1]);
  return names;
}

// "--name=value" lines of an absl flagfile, comments and blanks skipped.
export function flagfileLines(text) {
  return text.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
}

// Parses ["--a=1", "--b=x"] into [{name, value, arg}], or problems.
function parseFlags(args, where) {
  const flags = [];
  const problems = [];
  for (const arg of args) {
    const m = /^--([A-Za-z0-9_]+)=(.*)$/s.exec(arg);
    if (!m) {
      problems.push(`${where}: "${arg}" is not --flag=value`);
      continue;
    }
    flags.push({ name: m[1], value: m[2], arg });
  }
  return { flags, problems };
}

// The ConfigMap data key a path inside the container reads, through the
// pod's configMap volumes: {configMap, key} or null.
function configMapFileAt(path, container, podSpec, objs) {
  for (const mount of container.volumeMounts ?? []) {
    const dir = mount.mountPath.replace(/\/$/, "");
    if (!path.startsWith(`${dir}/`)) continue;
    const volume = (podSpec.volumes ?? []).find((v) => v.name === mount.name);
    if (!volume?.configMap) continue;
    const cm = objs.find((o) => o.kind === "ConfigMap" && o.metadata.name === volume.configMap.name);
    const key = path.slice(dir.length + 1);
    if (cm && cm.data && key in cm.data) return { configMap: cm, key };
  }
  return null;
}

// The mount of a Secret volume that holds `path`, or null.
function secretMountOf(path, container, podSpec) {
  for (const mount of container.volumeMounts ?? []) {
    const dir = mount.mountPath.replace(/\/$/, "");
    const volume = (podSpec.volumes ?? []).find((v) => v.name === mount.name);
    if (path.startsWith(`${dir}/`) && volume?.secret) return mount;
  }
  return null;
}

// Every flag a container's args give reducerd, with the contents of each
// --flagfile read from its ConfigMap: {flags, problems}.
export function effectiveFlags(container, podSpec, objs, where) {
  const { flags, problems } = parseFlags(container.args ?? [], `${where} args`);
  const out = [];
  for (const f of flags) {
    if (f.name !== "flagfile") {
      out.push(f);
      continue;
    }
    for (const path of f.value.split(",")) {
      const file = configMapFileAt(path, container, podSpec, objs);
      if (!file) {
        problems.push(`${where}: --flagfile=${path} is no key of a mounted ConfigMap`);
        continue;
      }
      const parsed = parseFlags(flagfileLines(file.configMap.data[file.key]),
                                `${where} ${describe(file.configMap)} ${file.key}`);
      problems.push(...parsed.problems);
      out.push(...parsed.flags);
    }
  }
  return { flags: out, problems };
}

// --- quantities and durations -------------------------------------------

const kSuffix = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12, "": 1 };

export function bytesOf(quantity) {
  const m = /^([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T|)$/.exec(String(quantity));
  return m ? Number(m[1]) * kSuffix[m[2]] : NaN;
}

// Seconds in an absl duration ("20s", "1m30s", "500ms").
export function secondsOf(duration) {
  const unit = { h: 3600, m: 60, s: 1, ms: 1e-3, us: 1e-6, ns: 1e-9 };
  let total = 0;
  let rest = duration;
  while (rest.length) {
    const m = /^([0-9.]+)(h|ms|m|s|us|ns)/.exec(rest);
    if (!m) return NaN;
    total += Number(m[1]) * unit[m[2]];
    rest = rest.slice(m[0].length);
  }
  return duration.length ? total : NaN;
}

function portOf(hostPort) {
  const m = /:([0-9]+)$/.exec(hostPort ?? "");
  return m ? Number(m[1]) : NaN;
}

// An absl bool flag's value read as true ("--x=true", "--x=1", ...).
function isTrue(value) {
  return /^(true|t|yes|y|1)$/i.test(value ?? "");
}

// Whether reducerd counts a --listen address as reachable from this host
// only (server/listen_exposure.h): 127.0.0.0/8, [::1], localhost, Unix
// sockets.
export function isLoopbackListen(listen) {
  if (/^unix(-abstract)?:/.test(listen)) return true;
  const host = listen.startsWith("[") ? listen.slice(1, listen.indexOf("]"))
                                      : listen.replace(/:[0-9]*$/, "");
  return /^127\.[0-9]+\.[0-9]+\.[0-9]+$/.test(host) || host === "::1" ||
         host.toLowerCase() === "localhost";
}

// --- policy --------------------------------------------------------------

// The Pod Security Standard "restricted", as this project's pods meet it.
function securityProblems(podSpec, where) {
  const problems = [];
  const pod = podSpec.securityContext ?? {};
  if (podSpec.hostNetwork || podSpec.hostPID || podSpec.hostIPC) problems.push(`${where}: host namespaces`);
  if (pod.runAsNonRoot !== true) problems.push(`${where}: pod securityContext.runAsNonRoot is not true`);
  if (pod.runAsUser !== kUid) problems.push(`${where}: pod securityContext.runAsUser is not ${kUid}`);
  if (pod.seccompProfile?.type !== "RuntimeDefault") problems.push(`${where}: pod seccompProfile is not RuntimeDefault`);
  for (const v of podSpec.volumes ?? []) {
    if (!(v.configMap || v.secret || v.emptyDir || v.projected || v.downwardAPI)) {
      problems.push(`${where}: volume ${v.name} is of a kind "restricted" does not allow`);
    }
  }
  for (const c of [...(podSpec.initContainers ?? []), ...podSpec.containers]) {
    const at = `${where} container ${c.name}`;
    const sc = c.securityContext ?? {};
    if (sc.allowPrivilegeEscalation !== false) problems.push(`${at}: allowPrivilegeEscalation is not false`);
    if (sc.readOnlyRootFilesystem !== true) problems.push(`${at}: readOnlyRootFilesystem is not true`);
    if (sc.privileged) problems.push(`${at}: privileged`);
    if (sc.runAsNonRoot === false || (sc.runAsUser !== undefined && sc.runAsUser === 0)) {
      problems.push(`${at}: may run as root`);
    }
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) problems.push(`${at}: capabilities do not drop ALL`);
    if ((sc.capabilities?.add ?? []).length) problems.push(`${at}: adds capabilities`);
    if (sc.seccompProfile && sc.seccompProfile.type !== "RuntimeDefault") {
      problems.push(`${at}: seccompProfile is not RuntimeDefault`);
    }
    const r = c.resources ?? {};
    if (!r.requests?.cpu) problems.push(`${at}: no cpu request`);
    if (!r.requests?.memory || !r.limits?.memory) problems.push(`${at}: memory request and limit not both set`);
    else if (bytesOf(r.requests.memory) !== bytesOf(r.limits.memory)) {
      problems.push(`${at}: memory request ${r.requests.memory} differs from its limit ${r.limits.memory}`);
    }
  }
  return problems;
}

function containerPort(container, name) {
  return (container.ports ?? []).find((p) => p.name === name)?.containerPort;
}

// reducerd's container: flags known, ports and probes where its flags say.
function reducerdProblems(sts, container, objs, reducerdFlags, where) {
  const podSpec = sts.spec.template.spec;
  const { flags, problems } = effectiveFlags(container, podSpec, objs, where);
  const value = {};
  for (const f of flags) {
    if (!reducerdFlags.has(f.name)) problems.push(`${where}: reducerd has no flag --${f.name}`);
    value[f.name] = f.value;
  }
  const health = portOf(value.health_listen);
  if (Number.isNaN(health)) {
    problems.push(`${where}: no --health_listen port for kubelet's probes`);
  } else {
    for (const probe of ["livenessProbe", "readinessProbe"]) {
      const p = container[probe];
      if (!p?.grpc) problems.push(`${where}: ${probe} is not a gRPC probe`);
      else if (p.grpc.port !== health) {
        problems.push(`${where}: ${probe} probes port ${p.grpc.port}, --health_listen is port ${health}`);
      }
    }
    if (containerPort(container, "health") !== health) problems.push(`${where}: containerPort "health" is not ${health}`);
  }
  if (containerPort(container, "grpc") !== portOf(value.listen)) {
    problems.push(`${where}: containerPort "grpc" is not the --listen port (${value.listen})`);
  }
  if (value.metrics_listen !== undefined && containerPort(container, "metrics") !== portOf(value.metrics_listen)) {
    problems.push(`${where}: containerPort "metrics" is not the --metrics_listen port`);
  }
  const limit = bytesOf(container.resources?.limits?.memory);
  const budget = Number(value.memory_budget_bytes ?? 2 ** 31);
  if (!(budget < limit)) problems.push(`${where}: --memory_budget_bytes=${budget} is not below the memory limit`);
  const drain = secondsOf(value.drain_budget ?? "10s");
  const grace = podSpec.terminationGracePeriodSeconds ?? 30;
  if (!(drain < grace)) problems.push(`${where}: --drain_budget (${drain} s) is not below terminationGracePeriodSeconds (${grace})`);
  for (const name of ["tls_cert_file", "tls_key_file", "tls_client_ca_file", "job_tokens_file"]) {
    if (value[name] !== undefined && !secretMountOf(value[name], container, podSpec)) {
      problems.push(`${where}: --${name}=${value[name]} is not in a mounted Secret`);
    }
  }
  if ((value.tls_cert_file === undefined) !== (value.tls_key_file === undefined)) {
    problems.push(`${where}: --tls_cert_file and --tls_key_file go together`);
  }
  // Protected mode: reducerd would refuse to start.
  if (value.listen !== undefined && !isLoopbackListen(value.listen) &&
      value.tls_cert_file === undefined && value.job_tokens_file === undefined &&
      !isTrue(value.allow_unauthenticated)) {
    problems.push(`${where}: --listen=${value.listen} with neither TLS nor --job_tokens_file: ` +
                  "reducerd refuses it without --allow_unauthenticated");
  }
  return problems;
}

// The flags of each StatefulSet's reducerd container, by name, with where
// they are: [{where, value, podSpec, container}].
function shardFlags(objs) {
  const out = [];
  for (const sts of objs.filter((o) => o.kind === "StatefulSet")) {
    const podSpec = sts.spec.template.spec;
    const container = podSpec.containers[0];
    const where = `${describe(sts)} container ${container.name}`;
    const value = {};
    for (const f of effectiveFlags(container, podSpec, objs, where).flags) value[f.name] = f.value;
    out.push({ where, value, podSpec, container });
  }
  return out;
}

// The open overlay (`open`) serves anyone who can reach the port:
// --allow_unauthenticated, no --job_tokens_file and no volume of the tokens
// Secret. Every other shard overlay requires job tokens and has no
// --allow_unauthenticated.
export function tokenProblems(objs, { open }) {
  const problems = [];
  for (const { where, value, podSpec } of shardFlags(objs)) {
    const tokensVolume = (podSpec.volumes ?? []).some((v) => v.secret?.secretName === kTokensSecret);
    if (open) {
      if (!isTrue(value.allow_unauthenticated)) problems.push(`${where}: open, but no --allow_unauthenticated=true`);
      if (value.job_tokens_file !== undefined) problems.push(`${where}: open, but --job_tokens_file=${value.job_tokens_file}`);
      if (tokensVolume) problems.push(`${where}: open, but mounts the Secret ${kTokensSecret}`);
    } else {
      if (value.job_tokens_file === undefined) {
        problems.push(`${where}: no --job_tokens_file: calls carry no job token (only overlays/open serves without)`);
      }
      if (value.allow_unauthenticated !== undefined && isTrue(value.allow_unauthenticated)) {
        problems.push(`${where}: --allow_unauthenticated serves anyone (only overlays/open may)`);
      }
    }
  }
  return problems;
}

function selects(selector, labels) {
  if (!selector) return false;
  if ((selector.matchExpressions ?? []).length) return false;  // not used here
  const wanted = Object.entries(selector.matchLabels ?? {});
  return wanted.length > 0 && wanted.every(([k, v]) => labels?.[k] === v);
}

function selectorProblems(objs, sts) {
  const problems = [];
  const labels = sts.spec.template.metadata?.labels ?? {};
  const where = describe(sts);
  if (!selects(sts.spec.selector, labels)) problems.push(`${where}: its selector does not select its own pods`);
  const service = objs.find((o) => o.kind === "Service" && o.metadata.name === sts.spec.serviceName);
  if (!service) problems.push(`${where}: serviceName ${sts.spec.serviceName} names no Service`);
  else {
    if (service.spec.clusterIP !== "None") problems.push(`${describe(service)}: not headless`);
    if (!selects({ matchLabels: service.spec.selector }, labels)) {
      problems.push(`${describe(service)}: selector does not select ${where}'s pods`);
    }
  }
  if (sts.spec.podManagementPolicy !== "Parallel") problems.push(`${where}: podManagementPolicy is not Parallel`);
  const pdbs = objs.filter((o) => o.kind === "PodDisruptionBudget");
  if (!pdbs.some((p) => selects(p.spec.selector, labels))) problems.push(`${where}: no PodDisruptionBudget selects its pods`);
  const policies = objs.filter((o) => o.kind === "NetworkPolicy");
  const own = policies.filter((p) => selects(p.spec.podSelector, labels));
  if (!own.length) problems.push(`${where}: no NetworkPolicy selects its pods`);
  const container = sts.spec.template.spec.containers[0];
  for (const p of own) {
    for (const rule of p.spec.ingress ?? []) {
      if (!(rule.from ?? []).length) problems.push(`${describe(p)}: an ingress rule admits every source`);
      for (const port of rule.ports ?? []) {
        const known = typeof port.port === "string"
          ? containerPort(container, port.port) !== undefined
          : (container.ports ?? []).some((cp) => cp.containerPort === port.port);
        if (!known) problems.push(`${describe(p)}: port ${port.port} is no port of ${where}`);
      }
      const grpcRule = (rule.ports ?? []).some((x) => x.port === "grpc" || x.port === containerPort(container, "grpc"));
      if (grpcRule && !(rule.from ?? []).every((f) => f.podSelector?.matchLabels?.["reducer.dev/role"] === "worker")) {
        problems.push(`${describe(p)}: the gRPC port admits pods other than workers`);
      }
    }
  }
  return problems;
}

// The worker Job: Indexed, all ranks at once, the rank its index, flags the
// worker knows, world size its completions.
function jobProblems(job, workerFlags) {
  const where = describe(job);
  const problems = [];
  const spec = job.spec;
  if (spec.completionMode !== "Indexed") problems.push(`${where}: not an Indexed Job`);
  if (spec.parallelism !== spec.completions) problems.push(`${where}: parallelism differs from completions`);
  const labels = spec.template.metadata?.labels ?? {};
  if (labels["reducer.dev/role"] !== "worker") problems.push(`${where}: pods lack reducer.dev/role: worker`);
  const c = spec.template.spec.containers[0];
  const { flags, problems: parse } = parseFlags(c.args ?? [], `${where} args`);
  problems.push(...parse);
  const value = {};
  for (const f of flags) {
    if (!workerFlags.has(f.name)) problems.push(`${where}: the worker has no flag --${f.name}`);
    value[f.name] = f.value;
  }
  if (Number(value.world_size) !== spec.completions) {
    problems.push(`${where}: --world_size=${value.world_size}, completions ${spec.completions}`);
  }
  const index = (c.env ?? []).find((e) => e.name === "JOB_COMPLETION_INDEX");
  if (value.rank !== "$(JOB_COMPLETION_INDEX)" ||
      index?.valueFrom?.fieldRef?.fieldPath !== "metadata.annotations['batch.kubernetes.io/job-completion-index']") {
    problems.push(`${where}: --rank is not the completion index`);
  }
  if (value.target !== "$(REDUCER_TARGET)") problems.push(`${where}: --target is not $(REDUCER_TARGET)`);
  // The shards require the job's token (the base's --job_tokens_file).
  if (value.token_file === undefined) {
    problems.push(`${where}: no --token_file: the shards require the job's token`);
  } else if (!secretMountOf(value.token_file, c, spec.template.spec)) {
    problems.push(`${where}: --token_file=${value.token_file} is not in a mounted Secret`);
  }
  return problems;
}

export function policyProblems(objs, { reducerdFlags, workerFlags }) {
  const problems = [];
  for (const obj of objs) {
    if (obj.kind === "StatefulSet" || obj.kind === "Job") {
      problems.push(...securityProblems(obj.spec.template.spec, describe(obj)));
    }
    if (obj.kind === "StatefulSet") {
      for (const c of obj.spec.template.spec.containers) {
        const where = `${describe(obj)} container ${c.name}`;
        if (c.command?.[0] !== kReducerdBinary) problems.push(`${where}: command is not ${kReducerdBinary}`);
        problems.push(...reducerdProblems(obj, c, objs, reducerdFlags, where));
      }
      problems.push(...selectorProblems(objs, obj));
    }
    if (obj.kind === "Job") problems.push(...jobProblems(obj, workerFlags));
  }
  return problems;
}

// Expands a client target's "{A..B}" ranges as the client does (docs/api.md,
// "Several shards"): "r-{0..2}.x:1" -> ["r-0.x:1", "r-1.x:1", "r-2.x:1"].
export function expandTarget(target) {
  const out = [];
  for (const part of target.split(",")) {
    const m = /^(.*)\{([0-9]+)\.\.([0-9]+)\}(.*)$/.exec(part);
    if (!m) {
      out.push(part);
      continue;
    }
    const width = m[2].length;
    for (let i = Number(m[2]); i <= Number(m[3]); i++) {
      out.push(`${m[1]}${String(i).padStart(width, "0")}${m[4]}`);
    }
  }
  return out;
}

// The Job's REDUCER_TARGET names reducer-0 .. reducer-(N-1) of the
// StatefulSet, in order, on its gRPC port.
export function shardProblems(sts, job) {
  const c = job.spec.template.spec.containers[0];
  const target = (c.env ?? []).find((e) => e.name === "REDUCER_TARGET")?.value ?? "";
  const port = containerPort(sts.spec.template.spec.containers[0], "grpc");
  const want = Array.from({ length: sts.spec.replicas },
                          (_, i) => `${sts.metadata.name}-${i}.${sts.spec.serviceName}:${port}`);
  const got = expandTarget(target);
  return isDeepStrictEqual(got, want) ? []
    : [`${describe(job)}: REDUCER_TARGET=${target} names ${got.join(",")}; ${describe(sts)} serves ${want.join(",")}`];
}
