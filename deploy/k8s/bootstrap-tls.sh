#!/usr/bin/env bash
# Makes the shards' TLS Secrets without cert-manager: a self-signed CA and
# the shards' certificate from it, with openssl, written as Secret YAML for
# `kubectl apply`:
#
#   deploy/k8s/bootstrap-tls.sh [--shards=N] [--name=reducer]
#       [--namespace=NS] [--days=DAYS] [--client=NAME ...] OUT_DIR
#   kubectl apply -n NS -f OUT_DIR/secrets.yaml
#
# OUT_DIR (created; refused if it holds a secrets.yaml already) gets
#   ca.crt ca.key      the CA (ECDSA P-256; keep ca.key off the cluster, or
#                      delete it: it is needed only to sign again)
#   tls.crt tls.key    the shards' certificate, for the names workers dial:
#                      NAME and NAME-0.NAME .. NAME-(N-1).NAME (the
#                      StatefulSet's pods through its headless Service of
#                      the same name), plus their .NS.svc and
#                      .NS.svc.cluster.local forms with --namespace
#   CLIENT.crt CLIENT.key   with --client=CLIENT, a worker's certificate
#                      for overlays/mtls
#   secrets.yaml       Secret reducer-tls (kubernetes.io/tls: tls.crt,
#                      tls.key, ca.crt), what the base mounts; Secret
#                      reducer-ca (ca.crt alone), what workers mount; and
#                      per --client a kubernetes.io/tls Secret CLIENT-tls
# Defaults: 4 shards (overlays/four-shards), name reducer, 365 days for the
# certificates (3650 for the CA). To renew, run it again into a new folder
# and apply: reducerd and the clients re-read the mounted files. Needs
# openssl and base64.
set -euo pipefail

usage() {
  echo "usage: $0 [--shards=N] [--name=NAME] [--namespace=NS] [--days=DAYS] [--client=NAME ...] OUT_DIR" >&2
  exit 2
}
shards=4 name=reducer namespace="" days=365 out="" clients=()
for arg in "$@"; do
  case "$arg" in
    --shards=*) shards=${arg#*=} ;;
    --name=*) name=${arg#*=} ;;
    --namespace=*) namespace=${arg#*=} ;;
    --days=*) days=${arg#*=} ;;
    --client=*) clients+=("${arg#*=}") ;;
    -*) usage ;;
    *) [[ -z "$out" ]] || usage; out=$arg ;;
  esac
done
[[ -n "$out" && "$shards" =~ ^[1-9][0-9]*$ && "$days" =~ ^[1-9][0-9]*$ ]] || usage
# DNS labels: what a Secret's name and a certificate's names allow.
label='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
for n in "$name" ${namespace:+"$namespace"} ${clients[@]+"${clients[@]}"}; do
  [[ "$n" =~ $label ]] || { echo "$0: $n is not a DNS label" >&2; exit 2; }
done
mkdir -p "$out"
[[ ! -e "$out/secrets.yaml" ]] || { echo "$0: $out/secrets.yaml exists; use a new folder" >&2; exit 1; }
umask 077
cd "$out"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }

# leaf NAME SAN EXTENDED_KEY_USAGE: NAME.crt and NAME.key, signed by the CA.
leaf() {
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1"
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=$3" "subjectAltName=$2" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

key ca
openssl req -x509 -new -key ca.key -out ca.crt -days 3650 -subj "/CN=$name-ca" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign

names=("$name")
for ((i = 0; i < shards; i++)); do names+=("$name-$i.$name"); done
if [[ -n "$namespace" ]]; then
  for n in "${names[@]}"; do names+=("$n.$namespace.svc" "$n.$namespace.svc.cluster.local"); done
fi
san=$(printf 'DNS:%s,' "${names[@]}")
leaf tls "${san%,}" serverAuth
for c in ${clients[@]+"${clients[@]}"}; do leaf "$c" "DNS:$c" clientAuth; done
rm -f ca.srl

b64() { base64 -w0 <"$1"; }
# secret NAME TYPE KEY=FILE ...: one Secret as YAML.
secret() {
  printf -- '---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  labels:\n    app.kubernetes.io/name: reducer\ntype: %s\ndata:\n' "$1" "$2"
  shift 2
  for kv in "$@"; do printf '  %s: %s\n' "${kv%%=*}" "$(b64 "${kv#*=}")"; done
}
{
  echo "# Made by deploy/k8s/bootstrap-tls.sh: the shards' certificate and its CA."
  secret reducer-tls kubernetes.io/tls tls.crt=tls.crt tls.key=tls.key ca.crt=ca.crt
  secret reducer-ca Opaque ca.crt=ca.crt
  for c in ${clients[@]+"${clients[@]}"}; do
    secret "$c-tls" kubernetes.io/tls tls.crt="$c.crt" tls.key="$c.key" ca.crt=ca.crt
  done
} >secrets.yaml
echo "==> $out/secrets.yaml: reducer-tls for ${names[*]}; reducer-ca${clients[*]:+; client certificates ${clients[*]}}"
