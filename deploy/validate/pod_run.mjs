// Turns the pod template of a rendered overlay into the `podman run`
// arguments that start its first container as kubelet would: the same
// image, command, args and env (with kubelet's $(VAR) expansion), user and
// group, read-only root, capabilities dropped, no new privileges, and each
// ConfigMap or Secret volume written to a folder mounted read-only at its
// mountPath.
// Ports are not mapped: the container shares the network given, where it
// listens on exactly the ports its flags name.
//
//   node pod_run.mjs run RENDERED.yaml KIND --network=NET --name=NAME \
//       [--volumes_dir=DIR] [--secret=NAME=DIR ...] [--rank=I] [--env=NAME=VALUE ...]
//       prints the arguments after `podman run`, one per line (NUL-free
//       text; no argument holds a newline)
//   node pod_run.mjs facts RENDERED.yaml KIND
//       prints "readiness PORT", "liveness PORT", "grace SECONDS",
//       "completions N" (a Job), "ports NAME=PORT,..."
//
// KIND is StatefulSet or Job. --rank=I stands for the completion index
// kubelet's downward API gives an Indexed Job's pod; --env overrides a
// variable's value (REDUCER_TARGET pointed at a local address). --secret
// gives the files of Secret NAME (one file per key, in DIR); they are copied
// into the volume's folder with the volume's defaultMode, owned by group
// fsGroup as kubelet does. Volumes of another kind than ConfigMap or
// Secret, and valueFrom other than the completion index, are refused: such
// a template cannot be started faithfully here.
import { chmodSync, chownSync, copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const kIndexField = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

function die(message) {
  console.error(`pod_run.mjs: ${message}`);
  process.exit(1);
}

const [mode, file, kind, ...rest] = process.argv.slice(2);
const options = { env: [], secret: [] };
for (const arg of rest) {
  const m = /^--([a-z_]+)=(.*)$/s.exec(arg);
  if (!m) die(`unexpected argument ${arg}`);
  if (m[1] === "env" || m[1] === "secret") options[m[1]].push(m[2]);
  else options[m[1]] = m[2];
}
if (!file || !kind) die("usage: pod_run.mjs run|facts RENDERED.yaml KIND [options]");

const objs = parseAllDocuments(readFileSync(file, "utf8")).map((d) => d.toJS()).filter((o) => o);
const owner = objs.find((o) => o.kind === kind);
if (!owner) die(`${file} has no ${kind}`);
const pod = owner.spec.template.spec;
const container = pod.containers[0];

if (mode === "facts") {
  const lines = [
    `readiness ${container.readinessProbe?.grpc?.port ?? "none"}`,
    `liveness ${container.livenessProbe?.grpc?.port ?? "none"}`,
    `grace ${pod.terminationGracePeriodSeconds ?? 30}`,
    `ports ${(container.ports ?? []).map((p) => `${p.name}=${p.containerPort}`).join(",")}`,
  ];
  if (kind === "Job") lines.push(`completions ${owner.spec.completions}`);
  console.log(lines.join("\n"));
  process.exit(0);
}
if (mode !== "run") die(`unknown mode ${mode}`);
if (!options.network || !options.name) die("run needs --network and --name");

// The container's environment, in order, as kubelet builds it.
const env = new Map();
for (const e of container.env ?? []) {
  if (e.value !== undefined) {
    env.set(e.name, expand(String(e.value), env));
  } else if (e.valueFrom?.fieldRef?.fieldPath === kIndexField) {
    if (options.rank === undefined) die(`${e.name} is the completion index: give --rank`);
    env.set(e.name, options.rank);
  } else {
    die(`env ${e.name}: only values and the completion index can be given here`);
  }
}
for (const kv of options.env) {
  const i = kv.indexOf("=");
  if (!env.has(kv.slice(0, i))) die(`--env ${kv.slice(0, i)}: the template sets no such variable`);
  env.set(kv.slice(0, i), kv.slice(i + 1));
}

// kubelet's expansion: $(NAME) of a defined variable is replaced, $$ is $,
// anything else is left as written.
function expand(text, vars) {
  return text.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (all, name) => {
    if (all === "$$") return "$";
    return vars.has(name) ? vars.get(name) : all;
  });
}

const sc = { ...(pod.securityContext ?? {}), ...(container.securityContext ?? {}) };
const args = [`--name=${options.name}`, `--network=${options.network}`];
if (sc.runAsUser === undefined) die("the template sets no runAsUser");
args.push(`--user=${sc.runAsUser}${sc.runAsGroup !== undefined ? `:${sc.runAsGroup}` : ""}`);
if (sc.readOnlyRootFilesystem) args.push("--read-only");
for (const cap of sc.capabilities?.drop ?? []) args.push(`--cap-drop=${cap}`);
for (const cap of sc.capabilities?.add ?? []) args.push(`--cap-add=${cap}`);
if (sc.allowPrivilegeEscalation === false) args.push("--security-opt=no-new-privileges");
if (sc.seccompProfile && sc.seccompProfile.type !== "RuntimeDefault") die("seccomp other than RuntimeDefault");

const secrets = new Map(options.secret.map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
for (const mount of container.volumeMounts ?? []) {
  const volume = (pod.volumes ?? []).find((v) => v.name === mount.name);
  if (!options.volumes_dir) die("volumes need --volumes_dir");
  const dir = join(options.volumes_dir, mount.name);
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o755);
  if (volume?.configMap) {
    const cm = objs.find((o) => o.kind === "ConfigMap" && o.metadata.name === volume.configMap.name);
    if (!cm) die(`ConfigMap ${volume.configMap.name} is not rendered`);
    for (const [key, value] of Object.entries(cm.data ?? {})) {
      writeFileSync(join(dir, key), value);
      chmodSync(join(dir, key), volume.configMap.defaultMode ?? 0o644);
    }
  } else if (volume?.secret) {
    const from = secrets.get(volume.secret.secretName);
    if (!from) die(`Secret ${volume.secret.secretName}: give --secret=${volume.secret.secretName}=DIR`);
    for (const key of readdirSync(from)) {
      copyFileSync(join(from, key), join(dir, key));
      chmodSync(join(dir, key), volume.secret.defaultMode ?? 0o644);
      if (pod.securityContext?.fsGroup !== undefined) chownSync(join(dir, key), 0, pod.securityContext.fsGroup);
    }
  } else {
    die(`volume ${mount.name} is neither a ConfigMap nor a Secret`);
  }
  args.push(`--volume=${dir}:${mount.mountPath}:ro`);
}
for (const [name, value] of env) args.push(`--env=${name}=${value}`);
if (container.command) args.push(`--entrypoint=${JSON.stringify(container.command.map((c) => expand(c, env)))}`);
args.push(container.image);
for (const a of container.args ?? []) args.push(expand(a, env));
if (args.some((a) => a.includes("\n"))) die("an argument holds a newline");
console.log(args.join("\n"));
