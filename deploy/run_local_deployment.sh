#!/usr/bin/env bash
# Run PFedMA on a real local Flower deployment: 1 SuperLink + N SuperNodes as separate processes
# on 127.0.0.1, with TLS (private CA) and SuperNode authentication (registered EC keys).
#
#   deploy/run_local_deployment.sh [--nodes 3] [--config tiny] [--set key=value]...
#       [--workdir /tmp/pfedma-deployment] [--output-dir DIR] [--port 39611]
#       [--profile NAME]... [--timeout S] [--keep-running] [--insecure]
#
# Steps (each is what you would do by hand on separate machines, see docs/deploy.md):
#   1. deploy/make_certs.sh            CA + SuperLink server certificate   (WORKDIR/certs)
#   2. deploy/make_node_key.sh         one EC key pair per SuperNode       (WORKDIR/keys)
#   3. flower-superlink --ssl-* --enable-supernode-auth --host 127.0.0.1 --port PORT
#      (Fleet, Control and Runtime APIs share this port in Flower 1.42: it stays on loopback)
#   3b. deploy/fleet_gateway.py on PORT+1: forwards only the Fleet API to PORT
#   4. flwr supernode register keys/nodeI.pub pfedma-local   (FLWR_HOME=WORKDIR/cli, via PORT)
#   5. flower-supernode --superlink 127.0.0.1:PORT+1 --root-certificates
#          --auth-supernode-private-key --node-config 'partition-id=I num-partitions=N
#          state-dir=".." data-dir=".." min-rule-mode="full" allow-run-endpoint=false
#          allow-plugins=false'   (the node's own security policy, docs/deploy.md)
#   6. flwr run . pfedma-local --run-config '...'; poll `flwr list`; save `flwr log` to run.log
# Everything started is stopped on exit (also on Ctrl-C / SIGTERM). Logs: WORKDIR/logs.
#
# --insecure disables TLS and node authentication. It exists for LOCAL DEBUGGING ONLY: anyone
# who can reach the port could join the federation or read the traffic.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec python3 "$here/local_deployment.py" "$@"
