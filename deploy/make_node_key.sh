#!/usr/bin/env bash
# Create one SuperNode authentication key pair (EC P-384, OpenSSH format) as Flower 1.42 expects.
#
#   deploy/make_node_key.sh [--force] OUT_PREFIX
#
# Writes OUT_PREFIX (private key, mode 0600: stays on the SuperNode machine, passed to
# `flower-supernode --auth-supernode-private-key`) and OUT_PREFIX.pub (public key, 0644: give it
# to the SuperLink operator, who runs `flwr supernode register OUT_PREFIX.pub <connection>`).
# Each SuperNode needs its own key pair: the SuperLink rejects a public key already in use.
# An existing key is kept unless --force; --force replaces it (a new node identity that must be
# registered again) and still leaves the private key 0600, whatever the old file's mode was.
set -euo pipefail
usage() { sed -n '2,12p' "$0"; exit 2; }
force=0
prefix=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) force=1; shift ;;
    -h|--help) usage ;;
    -*) echo "make_node_key.sh: unknown option $1" >&2; usage ;;
    *) [[ -z "$prefix" ]] || usage; prefix="$1"; shift ;;
  esac
done
[[ -n "$prefix" ]] || usage
umask 077
mkdir -p "$(dirname "$prefix")"
if [[ -e "$prefix" || -e "$prefix.pub" ]]; then
  if [[ $force -eq 0 ]]; then
    echo "make_node_key.sh: $prefix exists; refusing to overwrite a node identity (--force)" >&2
    exit 1
  fi
  # Remove first: writing over an existing file keeps its old mode (umask applies on create).
  rm -f -- "$prefix" "$prefix.pub"
fi
if command -v ssh-keygen >/dev/null; then
  ssh-keygen -q -t ecdsa -b 384 -N "" -C "pfedma-supernode" -f "$prefix"
else
  # cryptography ships with flwr, so this fallback works wherever a SuperNode can run.
  python3 - "$prefix" <<'PY'
import os
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
key = ec.generate_private_key(ec.SECP384R1())
prefix = sys.argv[1]
fd = os.open(prefix, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
with os.fdopen(fd, "wb") as f:
    f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                              serialization.NoEncryption()))
with open(prefix + ".pub", "wb") as f:
    f.write(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                          serialization.PublicFormat.OpenSSH) + b"\n")
PY
fi
chmod 600 "$prefix"
chmod 644 "$prefix.pub"
echo "make_node_key.sh: wrote $prefix (private, 0600) and $prefix.pub (public)"
