#!/usr/bin/env bash
# Create a private CA and a SuperLink TLS server certificate signed by it (openssl).
#
#   deploy/make_certs.sh [--out DIR] [--host NAME_OR_IP]... [--days N] [--force]
#
# Writes DIR/ca.crt, DIR/ca.key, DIR/server.pem, DIR/server.key (default DIR: deploy/certs).
# The server certificate always names localhost and 127.0.0.1; add --host for every name or
# address SuperNodes and the flwr CLI use to reach the SuperLink (e.g. --host 10.0.0.5
# --host superlink.lab.example). Copy ONLY ca.crt to the SuperNode / CLI machines; ca.key and
# server.key stay on the SuperLink machine (or, better, ca.key offline).
# Same layout as Flower's "Enable TLS connections" guide (ca.crt / server.pem / server.key).
# ca.key and server.key are mode 0600 (also when --force replaces files that had another mode).
set -euo pipefail

out="$(dirname "$0")/certs"
days=365
force=0
hosts=(localhost 127.0.0.1)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --host) hosts+=("$2"); shift 2 ;;
    --days) days="$2"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "make_certs.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

command -v openssl >/dev/null || { echo "make_certs.sh: openssl not found" >&2; exit 1; }
mkdir -p "$out"
if [[ -e "$out/ca.crt" && $force -eq 0 ]]; then
  echo "make_certs.sh: $out/ca.crt exists; pass --force to overwrite" >&2
  exit 1
fi
umask 077  # private keys readable by the owner only
if [[ $force -eq 1 ]]; then
  # Writing over an existing file keeps its old mode (umask applies only on create).
  rm -f -- "$out/ca.crt" "$out/ca.key" "$out/server.pem" "$out/server.key" "$out/server.csr"
fi

# subjectAltName: IPv4/IPv6 literals as IP:, everything else as DNS: (deduplicated).
san=""
declare -A seen=()
for h in "${hosts[@]}"; do
  [[ -n "${seen[$h]:-}" ]] && continue
  seen[$h]=1
  if [[ "$h" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ || "$h" == *:* ]]; then
    san+="${san:+,}IP:$h"
  else
    san+="${san:+,}DNS:$h"
  fi
done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-384 -sha384 -nodes -days "$days" \
  -keyout "$out/ca.key" -out "$out/ca.crt" -subj "/CN=PFedMA federation CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  2>/dev/null

openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-384 -sha384 -nodes -keyout "$out/server.key" -out "$out/server.csr" \
  -subj "/CN=${hosts[2]:-localhost}" 2>/dev/null
ext="$(mktemp)"
trap 'rm -f "$ext"' EXIT
cat > "$ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$san
EXT
openssl x509 -req -in "$out/server.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
  -CAcreateserial -days "$days" -sha384 -extfile "$ext" -out "$out/server.pem" 2>/dev/null
rm -f "$out/server.csr" "$out/ca.srl"
chmod 600 "$out/ca.key" "$out/server.key"
chmod 644 "$out/ca.crt" "$out/server.pem"
openssl verify -CAfile "$out/ca.crt" "$out/server.pem" >/dev/null
echo "make_certs.sh: wrote $out/{ca.crt,ca.key,server.pem,server.key} for $san"
