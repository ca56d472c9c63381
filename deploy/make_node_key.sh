#!/usr/bin/env bash
# Create one SuperNode authentication key pair (EC P-384, OpenSSH format) as Flower 1.42 expects.
#
#   deploy/make_node_key.sh OUT_PREFIX
#
# Writes OUT_PREFIX (private key: stays on the SuperNode machine, passed to
# `flower-supernode --auth-supernode-private-key`) and OUT_PREFIX.pub (public key: give it to the
# SuperLink operator, who runs `flwr supernode register OUT_PREFIX.pub <connection>`).
# Each SuperNode needs its own key pair: the SuperLink rejects a public key already in use.
set -euo pipefail
[[ $# -eq 1 && "$1" != -* ]] || { sed -n '2,9p' "$0"; exit 2; }
prefix="$1"
mkdir -p "$(dirname "$prefix")"
if [[ -e "$prefix" ]]; then
  echo "make_node_key.sh: $prefix exists; refusing to overwrite a node identity" >&2
  exit 1
fi
umask 077
if command -v ssh-keygen >/dev/null; then
  ssh-keygen -q -t ecdsa -b 384 -N "" -C "pfedma-supernode" -f "$prefix"
else
  # cryptography ships with flwr, so this fallback works wherever a SuperNode can run.
  python3 - "$prefix" <<'PY'
import sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
key = ec.generate_private_key(ec.SECP384R1())
prefix = sys.argv[1]
with open(prefix, "wb") as f:
    f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                              serialization.NoEncryption()))
with open(prefix + ".pub", "wb") as f:
    f.write(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                          serialization.PublicFormat.OpenSSH) + b"\n")
PY
fi
chmod 644 "$prefix.pub"
echo "make_node_key.sh: wrote $prefix (private) and $prefix.pub (public)"
