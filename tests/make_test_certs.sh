#!/usr/bin/env bash
# Makes the certificates the security tests use, with the openssl command,
# into directory $1 (created if needed):
#
#   ca.pem ca.key                  the CA reducerd and workers trust
#   server.pem server.key          reducerd: SAN localhost, 127.0.0.1 (CA)
#   server2.pem server2.key        a second reducerd certificate (CA), for rotation
#   client.pem client.key          a worker (CA)
#   other_ca.pem other_ca.key      a CA nobody trusts
#   other_client.pem/.key          a worker signed by other_ca
#   other_server.pem/.key          reducerd signed by other_ca
#   expired_client.pem/.key        a worker (CA), expired
#   misnamed_server.pem/.key       reducerd (CA) named only wrong.example
#
# P-256 keys keep it fast (well under a second in all).
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }

ca() {
  key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$1" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}

# leaf NAME CA DAYS SAN
leaf() {
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1"
  printf 'basicConstraints=CA:FALSE\nsubjectAltName=%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial \
    -days "$3" -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

ca ca
ca other_ca
leaf server ca 2 "DNS:localhost,IP:127.0.0.1"
leaf server2 ca 2 "DNS:localhost,IP:127.0.0.1"
leaf client ca 2 "DNS:worker"
leaf other_client other_ca 2 "DNS:worker"
leaf other_server other_ca 2 "DNS:localhost,IP:127.0.0.1"
leaf misnamed_server ca 2 "DNS:wrong.example"
# -days -1 puts notAfter a day before notBefore (now): expired already.
leaf expired_client ca -1 "DNS:worker"
