#!/usr/bin/env bash
# Checks deploy/k8s/bootstrap-tls.sh's output against openssl and the
# Kubernetes schemas:
#
#   deploy/k8s/bootstrap_tls_test.sh
#
# With --shards=3 --namespace=training --client=w1: the shards' certificate
# verifies against the CA for server use under every name a worker may dial
# (reducer, reducer-0.reducer .. reducer-2.reducer and their .training.svc
# and .training.svc.cluster.local forms) and not for reducer-3.reducer or
# another namespace's name; the client certificate verifies for client use
# and not for server use; secrets.yaml holds exactly the Secrets
# reducer-tls (kubernetes.io/tls: tls.crt, tls.key, ca.crt, the files
# written), reducer-ca (ca.crt alone: no key reaches workers) and w1-tls,
# each valid against Kubernetes' schema (deploy/validate); and the script
# refuses to write over a secrets.yaml, a bad --shards and a name that is
# not a DNS label. Prints "==> " lines; exits 0 when all hold. Needs
# openssl and deploy/validate's venv (tools/pinned_venv.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() { echo "bootstrap_tls_test: $*" >&2; exit 1; }
venv=$(tools/pinned_venv.sh deploy/validate/requirements.txt)
work=$(mktemp -d /tmp/reducer-bootstrap-tls.XXXXXX)
trap 'rm -rf "$work"' EXIT
out=$work/out

deploy/k8s/bootstrap-tls.sh --shards=3 --namespace=training --client=w1 "$out" >/dev/null

# verify PURPOSE NAME CERT: openssl's chain, purpose and host name check.
verify() {
  openssl verify -CAfile "$out/ca.crt" -purpose "$1" ${2:+-verify_hostname "$2"} "$3" >/dev/null 2>&1
}
names=(reducer)
for i in 0 1 2; do names+=("reducer-$i.reducer"); done
for n in "${names[@]}"; do
  for name in "$n" "$n.training.svc" "$n.training.svc.cluster.local"; do
    verify sslserver "$name" "$out/tls.crt" || fail "tls.crt does not verify for $name"
  done
done
for name in reducer-3.reducer reducer-0.reducer.other.svc reducer-0; do
  ! verify sslserver "$name" "$out/tls.crt" || fail "tls.crt verifies for $name"
done
echo "==> tls.crt: server certificate for ${#names[*]} names x 3 forms, none beyond them"
verify sslclient "" "$out/w1.crt" || fail "w1.crt does not verify as a client certificate"
! verify sslserver "" "$out/w1.crt" || fail "w1.crt verifies as a server certificate"
echo "==> w1.crt: client certificate only"

"$venv/bin/python" deploy/validate/pod_run.py secrets "$out/secrets.yaml" "$work/secrets"
[[ "$(ls "$work/secrets" | tr '\n' ' ')" == "reducer-ca reducer-tls w1-tls " ]] ||
  fail "secrets.yaml holds $(ls "$work/secrets" | tr '\n' ' ')"
[[ "$(ls "$work/secrets/reducer-ca")" == ca.crt ]] || fail "reducer-ca holds more than ca.crt"
for f in tls.crt tls.key ca.crt; do
  cmp -s "$work/secrets/reducer-tls/$f" "$out/$f" || fail "reducer-tls's $f is not $out/$f"
done
cmp -s "$work/secrets/w1-tls/tls.crt" "$out/w1.crt" || fail "w1-tls's tls.crt is not w1.crt"
grep -q "type: kubernetes.io/tls" "$out/secrets.yaml" || fail "no kubernetes.io/tls Secret"
"$venv/bin/python" - "$out/secrets.yaml" <<'PY'
import sys
sys.path.insert(0, "deploy/validate")
from checks import load_objects, round_trip_problems, schema_problems
with open(sys.argv[1], encoding="utf-8") as f:
    objs = load_objects(f.read())
problems = [p for o in objs for p in schema_problems(o) + round_trip_problems(o)]
print("\n".join(problems), file=sys.stderr)
sys.exit(1 if problems or len(objs) != 3 else 0)
PY
echo "==> secrets.yaml: reducer-tls, reducer-ca (ca.crt alone), w1-tls; Kubernetes' schema and client models take them"

! deploy/k8s/bootstrap-tls.sh "$out" >/dev/null 2>&1 || fail "wrote over an existing secrets.yaml"
! deploy/k8s/bootstrap-tls.sh --shards=0 "$work/o2" >/dev/null 2>&1 || fail "took --shards=0"
! deploy/k8s/bootstrap-tls.sh --client=Bad_Name "$work/o3" >/dev/null 2>&1 || fail "took --client=Bad_Name"
echo "==> refuses an existing secrets.yaml, --shards=0, a client name that is no DNS label"
