// Validates rendered deploy/k8s overlays offline:
//
//   node validate.mjs --reducerd_help=FILE --worker_help=FILE \
//       --shards=OVERLAY --workers=OVERLAY --open=OVERLAY NAME=RENDERED.yaml ...
//
// FILEs hold `reducerd --helpfull` and `metric_sync_worker --helpfull`;
// each RENDERED.yaml is `kubectl kustomize` of overlay NAME. Every object is
// checked against Kubernetes' schema, round-tripped through client-node, and
// held to the policy of checks.mjs; the Job of the --workers overlay must
// name every shard of the StatefulSet of the --shards overlay. The --open
// overlay's shards must serve without job tokens (--allow_unauthenticated),
// every other overlay's must require them. Prints one "==> " line per
// overlay that passed and every problem found; exits 1 on any problem.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

import {
  describe, flagsInHelp, policyProblems, roundTripProblems, schemaProblems, shardProblems,
  tokenProblems,
} from "./checks.mjs";

const options = {};
const overlays = [];
for (const arg of process.argv.slice(2)) {
  const flag = /^--([a-z_]+)=(.*)$/.exec(arg);
  const overlay = /^([A-Za-z0-9_-]+)=(.+)$/.exec(arg);
  if (flag) options[flag[1]] = flag[2];
  else if (overlay) overlays.push({ name: overlay[1], file: overlay[2] });
  else {
    console.error(`validate.mjs: unexpected argument ${arg}`);
    process.exit(2);
  }
}
if (!options.reducerd_help || !options.worker_help || !overlays.length) {
  console.error("usage: node validate.mjs --reducerd_help=FILE --worker_help=FILE " +
                "[--shards=NAME --workers=NAME] [--open=NAME] NAME=RENDERED.yaml ...");
  process.exit(2);
}

export function loadObjects(file) {
  return parseAllDocuments(readFileSync(file, "utf8"))
    .map((d) => d.toJS())
    .filter((o) => o);
}

const flagSets = {
  reducerdFlags: flagsInHelp(readFileSync(options.reducerd_help, "utf8")),
  workerFlags: flagsInHelp(readFileSync(options.worker_help, "utf8")),
};
for (const [name, set] of Object.entries(flagSets)) {
  if (set.size < 5) {
    console.error(`validate.mjs: only ${set.size} flags in the help of ${name}`);
    process.exit(1);
  }
}

let failed = false;
const rendered = {};
for (const { name, file } of overlays) {
  const objs = loadObjects(file);
  rendered[name] = objs;
  const problems = [];
  if (!objs.length) problems.push("renders no object");
  for (const obj of objs) problems.push(...schemaProblems(obj), ...roundTripProblems(obj));
  problems.push(...policyProblems(objs, flagSets));
  const open = name === options.open;
  problems.push(...tokenProblems(objs, { open }));
  const shards = objs.some((o) => o.kind === "StatefulSet");
  const tokens = !shards ? "" : open ? ", open (no tokens)" : ", job tokens";
  if (problems.length) {
    failed = true;
    for (const p of problems) console.log(`FAIL ${name}: ${p}`);
  } else {
    console.log(`==> ${name}: ${objs.map(describe).join(", ")}: schema, round trip, policy${tokens} ok`);
  }
}
if (options.open && !(options.open in rendered)) {
  failed = true;
  console.log(`FAIL --open=${options.open} names no rendered overlay`);
}

if (options.shards && options.workers) {
  const sts = (rendered[options.shards] ?? []).find((o) => o.kind === "StatefulSet");
  const job = (rendered[options.workers] ?? []).find((o) => o.kind === "Job");
  const problems = sts && job ? shardProblems(sts, job) : ["--shards or --workers names no rendered overlay"];
  if (problems.length) {
    failed = true;
    for (const p of problems) console.log(`FAIL shards: ${p}`);
  } else {
    console.log(`==> ${options.workers}'s target names every shard of ${options.shards}`);
  }
}
process.exit(failed ? 1 : 0);
