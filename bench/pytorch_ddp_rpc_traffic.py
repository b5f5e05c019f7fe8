"""pytorch_ddp_rpc_traffic.py — what PyTorch's DDP + RPC benchmark moves over
the wire per batch and per parameter server, measured (issue 26).

The seed (torch/distributed/benchmarks/benchmark_ddp_rpc.py) keeps an
EmbeddingBag(num_embeddings, embedding_dim, mode="sum") on a parameter
server, looks it up with `emb_rref.rpc_sync().forward(indices, offsets)`,
then `dist_autograd.backward(cid, [loss])` and `opt.step(cid)` with a
DistributedOptimizer(optim.SGD, ..., lr=0.05). This script runs exactly
those three calls between two RPC workers on 127.0.0.1 — a trainer and one
parameter server holding the table — with TensorPipe forced to TCP
(`_transports=["uv"], _channels=["basic"]`, so every byte crosses the
loopback device), and counts the loopback bytes (/proc/net/dev, `lo`,
received = sent on loopback; IP and TCP headers included) around each call:

  (a) one lookup (rpc_sync forward: indices and offsets out, bags x dim back)
  (b) one dist_autograd.backward (what the gradient on the wire is)
  (c) one opt.step (DistributedOptimizer: the SGD step on the server)

To keep other processes' loopback traffic out of the count it re-runs
itself in a private network namespace (`unshare -rn`, whose `lo` only it
uses) where that is allowed; else it counts the host's `lo` and says so.

  /usr/bin/python3 bench/pytorch_ddp_rpc_traffic.py [ROWS DIM BAGS BAG_SIZE REPEATS]

Defaults: 100000 x 64 (a table of 25.6 MB), 10 bags of 5 indices, 5
repeats (the median of each call is printed, with the sizes a bags x dim
gradient and a table-sized one would have). Prints lines like

  lookup_bytes=...  backward_bytes=...  step_bytes=...  table_bytes=...  bag_grad_bytes=...
"""
import os
import socket
import statistics
import subprocess
import sys


def lo_bytes():
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[0])  # received bytes (= sent, on loopback)
    raise RuntimeError("no lo in /proc/net/dev")


def retrieve_params(emb_rref):
    from torch.distributed.rpc import RRef
    return [RRef(p) for p in emb_rref.local_value().parameters()]


def worker(rank, port, rows, dim, bags, bag_size, repeats, out):
    import torch
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc
    from torch import nn, optim
    from torch.distributed.optim import DistributedOptimizer

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=120, init_method=f"tcp://127.0.0.1:{port}",
                                           _transports=["uv"], _channels=["basic"])
    name = "trainer" if rank == 0 else "ps0"
    rpc.init_rpc(name, rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 0:
        torch.manual_seed(0)
        emb_rref = rpc.remote("ps0", nn.EmbeddingBag, args=(rows, dim), kwargs={"mode": "sum"})
        params = rpc.rpc_sync("ps0", retrieve_params, args=(emb_rref,))
        dense = nn.Linear(dim, 8)
        from torch.distributed.rpc import RRef
        params += [RRef(p) for p in dense.parameters()]
        opt = DistributedOptimizer(optim.SGD, params, lr=0.05)
        crit = nn.CrossEntropyLoss()
        res = {"lookup": [], "backward": [], "step": []}
        for it in range(repeats + 1):  # the first round warms up (not counted)
            indices = torch.randint(0, rows, (bags * bag_size,))
            offsets = torch.arange(0, bags * bag_size, bag_size)
            target = torch.randint(0, 8, (bags,))
            with dist_autograd.context() as cid:
                b0 = lo_bytes()
                emb = emb_rref.rpc_sync().forward(indices, offsets)
                b1 = lo_bytes()
                loss = crit(dense(emb), target)
                dist_autograd.backward(cid, [loss])
                b2 = lo_bytes()
                opt.step(cid)
                b3 = lo_bytes()
            if it > 0:
                res["lookup"].append(b1 - b0)
                res["backward"].append(b2 - b1)
                res["step"].append(b3 - b2)
        with open(out, "w") as f:
            f.write(" ".join(f"{k}_bytes={int(statistics.median(v))}" for k, v in res.items()))
            f.write(f" table_bytes={rows * dim * 4} bag_grad_bytes={bags * dim * 4}"
                    f" index_bytes={8 * (bags * bag_size + bags)}\n")
            f.write("per round: " + " ".join(f"{k}={v}" for k, v in res.items()) + "\n")
    rpc.shutdown()


def main():
    args = [int(a) for a in sys.argv[1:6]]
    rows, dim, bags, bag_size, repeats = args + [100000, 64, 10, 5, 5][len(args):]
    if os.environ.get("PSB_NETNS") is None:
        try:  # a private lo: only this run's bytes on it
            r = subprocess.run(["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
                                sys.executable, *sys.argv], env=dict(os.environ, PSB_NETNS="1"))
            sys.exit(r.returncode)
        except (OSError, subprocess.SubprocessError):
            pass
        print("note: no private network namespace (unshare -rn failed): counting the host's lo", file=sys.stderr)
        os.environ["PSB_NETNS"] = "0"
    import torch.multiprocessing as mp
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = f"/tmp/pytorch_ddp_rpc_traffic.{os.getpid()}"
    mp.spawn(worker, args=(port, rows, dim, bags, bag_size, repeats, out), nprocs=2, join=True)
    with open(out) as f:
        sys.stdout.write(f.read())
    os.unlink(out)
    ns = "private network namespace" if os.environ["PSB_NETNS"] == "1" else "host lo"
    print(f"table {rows} x {dim}, {bags} bags of {bag_size}, TensorPipe uv/basic, {ns}")


if __name__ == "__main__":
    main()
