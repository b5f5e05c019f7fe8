"""pytorch_step.py — PyTorch's own figure for train_step.sh's device table,
where PyTorch is installed (optional: train_step.sh runs without it).

The seed's pure-DDP step: DummyModel (EmbeddingBag 1024 x 1024, mode mean;
8 x Linear(1024, 1024); softmax; CrossEntropyLoss on the softmax, as the
seed), batch 10 of 100-index bags (DummyData's shape), SGD lr 50, wrapped
in DistributedDataParallel over Gloo with bucket_cap_mb 25, 2 processes on
DEVICE (cpu, or cuda: both ranks on GPU 0 unless the host shows more, as
the seed's cuda(rank)). Each step ends synchronised (torch.cuda.synchronize
on a GPU, as the seed's). Prints one line on stdout:

    pytorch_ddp_gloo_ms=X torch=VERSION device=NAME

  pytorch_step.py DEVICE STEPS WARMUP
Exit 0 with the line, 3 where PyTorch cannot run on DEVICE (the reason on
stderr), 1 on failure.
"""
import os
import socket
import sys
import time


def model(torch, nn):
    class DummyModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.EmbeddingBag(1024, 1024, mode="mean")
            self.dense = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(8)])

        def forward(self, x):
            return nn.functional.softmax(self.dense(self.embedding(x)), dim=1)
    return DummyModel()


def worker(rank, world, port, device, steps, warmup, out):
    import torch
    import torch.distributed as dist
    from torch import nn
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)  # psbench's trainers: one BLAS thread each
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    if device == "cuda":
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    m = model(torch, nn).to(dev)
    ddp = nn.parallel.DistributedDataParallel(m, device_ids=[dev.index] if dev.type == "cuda" else None,
                                              bucket_cap_mb=25)
    opt = torch.optim.SGD(ddp.parameters(), lr=50.0)
    crit = nn.CrossEntropyLoss()
    x = torch.randint(0, 80, (10, 100), device=dev)
    y = torch.randint(0, 100, (10,), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for i in range(warmup + steps):
        if i == warmup:
            dist.barrier()
            sync()
            t0 = time.perf_counter()
        opt.zero_grad()
        crit(ddp(x), y).backward()
        opt.step()
        sync()
    ms = (time.perf_counter() - t0) * 1000.0 / steps
    if rank == 0:
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        with open(out, "w") as f:
            f.write("pytorch_ddp_gloo_ms=%.3f torch=%s device=%s\n" % (ms, torch.__version__, name.replace(" ", "_")))
    dist.destroy_process_group()


def main():
    device, steps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print("PyTorch is not installed here (%s)" % e, file=sys.stderr)
        return 3
    if device == "cuda" and not torch.cuda.is_available():
        print("PyTorch %s sees no GPU" % torch.__version__, file=sys.stderr)
        return 3
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = "%s/pytorch_step.%d" % (os.environ.get("TMPDIR", "/tmp"), os.getpid())
    try:
        mp.spawn(worker, args=(2, port, device, steps, warmup, out), nprocs=2, join=True)
        sys.stdout.write(open(out).read())
    finally:
        if os.path.exists(out):
            os.unlink(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
