#!/usr/bin/env bash
# psbench-torchrun.sh — a psbench job (2 trainers, 1 server, the master)
# across 2 nodes with torchrun, 2 processes a node; run it once on each
# node (docs/operations.md, "torchrun across 2 nodes"):
#
#   node0$ deploy/torchrun/psbench-torchrun.sh 0 node0 [psbench-master options...]
#   node1$ deploy/torchrun/psbench-torchrun.sh 1 node0
#
# The first argument is this node's rank, the second node 0's host name
# or address (MASTER_ADDR, where torchrun's store and psbench's master
# are). torchrun's static rendezvous gives node N the ranks 2N and 2N+1,
# so rank 0 runs on node 0: the master (--master-rank 0), then trainers 0
# and 1 (ranks 1, 2), the server (rank 3, on node 1, sharing memory with
# trainer 1 there).
#
# Install on both nodes: psbench (`apt install ./psbench_0.1.0_amd64.deb`)
# and torchrun (`pip install torch`: torchrun, or python3 -m
# torch.distributed.run, which $TORCHRUN may name). The job's token: the
# same file on both nodes, mode 600 ($PSBENCH_TOKEN_FILE, default
# ~/.psbench-token; docs/operations.md, "Launch by hand").
#
# Ports on node 0: MASTER_PORT (29400 here, $MASTER_PORT changes it) is
# torchrun's own store; psbench's master takes MASTER_PORT + 1 (29401,
# control: every rank connects) and MASTER_PORT + 2 (29402, HTTP API and
# dashboard). The server's data port is ephemeral.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 NODE_RANK MASTER_ADDR [psbench-master options...]" >&2
    exit 2
fi
node_rank=$1 master_addr=$2
shift 2
read -r -a torchrun <<<"${TORCHRUN:-torchrun}"
token_file=${PSBENCH_TOKEN_FILE:-$HOME/.psbench-token}

exec "${torchrun[@]}" --nnodes 2 --node-rank "$node_rank" --nproc-per-node 2 \
    --master-addr "$master_addr" --master-port "${MASTER_PORT:-29400}" \
    --no-python psbench-node --master-rank 0 --ntrainer 2 --nserver 1 \
    --token-file "$token_file" "$@"
