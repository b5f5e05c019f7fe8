"""fake_torchrun.py — a stand-in for torchrun's static rendezvous, for
tests/deploy/test_deploy.py where torch is not installed.

    fake_torchrun.py --nnodes N --node-rank R --nproc-per-node P
                     --master-addr A --master-port M --no-python CMD [ARGS...]

Starts P copies of CMD with the environment torchrun gives each (RANK =
R * P + local rank, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
GROUP_WORLD_SIZE, ROLE_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID
...), and on node 0 listens on A:M meanwhile, as torchrun's own store does,
so that a command that took MASTER_PORT would fail. Exits with the first
non-zero exit status of its children (0 when all are 0); SIGTERM and
SIGINT are passed on to them, and they die with it (PR_SET_PDEATHSIG).
"""
import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys


def die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main():
    ap = argparse.ArgumentParser(prog="fake_torchrun.py")
    ap.add_argument("--nnodes", type=int, required=True)
    ap.add_argument("--node-rank", type=int, required=True)
    ap.add_argument("--nproc-per-node", type=int, required=True)
    ap.add_argument("--master-addr", required=True)
    ap.add_argument("--master-port", type=int, required=True)
    ap.add_argument("--no-python", action="store_true", required=True)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    store = None
    if a.node_rank == 0:
        store = socket.socket()
        store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        store.bind((a.master_addr, a.master_port))
        store.listen(16)
    world = a.nnodes * a.nproc_per_node
    children = []
    for local in range(a.nproc_per_node):
        rank = a.node_rank * a.nproc_per_node + local
        env = dict(os.environ)
        env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                    "LOCAL_WORLD_SIZE": str(a.nproc_per_node), "GROUP_RANK": str(a.node_rank),
                    "GROUP_WORLD_SIZE": str(a.nnodes), "ROLE_RANK": str(rank), "ROLE_NAME": "default",
                    "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": a.master_addr,
                    "MASTER_PORT": str(a.master_port), "TORCHELASTIC_RUN_ID": "none",
                    "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0"})
        children.append(subprocess.Popen(a.cmd, env=env, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent))

    def forward(sig, frame):
        for c in children:
            if c.poll() is None:
                c.send_signal(sig)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    rc = 0
    for c in children:
        r = c.wait()
        if r != 0 and rc == 0:
            rc = r if r > 0 else 128 - r
    if store:
        store.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
