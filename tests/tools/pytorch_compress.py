#!/usr/bin/python3
"""pytorch_compress.py — PyTorch's own DDP communication hooks train
psbench's DummyModel on psbench's data, for
tests/integration/test_compress_pytorch.py (issue 43: "faithful to
PyTorch").

Each case (CASES below) is a DummyModel configuration, a DummyData
configuration, a seed, a batch size, an SGD learning rate, epochs, two
ranks, and a hook: none (DDP's default allreduce), fp16
(torch.distributed.algorithms.ddp_comm_hooks.default_hooks.
fp16_compress_hook) or powersgd:R (powerSGD_hook, or batched_powerSGD_hook
where the case says "batched", with a PowerSGDState of
matrix_approximation_rank R, start_powerSGD_iter 2, PyTorch's other
defaults). The script
  - generates the data and the initial parameters exactly as psbench does
    (shared/rng.h's generator, trainer/data.h's DummyData and sharding,
    trainer/model.h's initialization; the generator in Python is
    tests/integration/bu_reference.py's Rng, bit-identical to rng.c);
  - builds the seed's DummyModel in torch (EmbeddingBag mean, the Linear
    layers, softmax, CrossEntropyLoss on the softmax as the seed does),
    wraps it in DDP (bucket_cap_mb and the first bucket's limit as the
    case says) on a two-rank Gloo
    group (two processes), registers the hook and trains with
    torch.optim.SGD, rank r on psbench's shard r (batches r, r+2, ...);
  - for PowerSGD, makes the hook draw its random Q as psbench's does
    (trainer/powersgd.h: the state's generator gives below(10^9), which
    seeds a generator on stream RNG_STREAM_POWERSGD whose normal fill
    gives the Qs in tensor order): PyTorch seeds torch's generator from
    numpy's (state.rng.randint(1e9)) and draws torch.randn; the script
    hands the state an rng whose randint is psbench's below, and lets
    torch.randn, while the hook draws, return psbench's normals for the
    seed torch.manual_seed was just given. Everything else is PyTorch's.
and prints rank 0's final parameters (psbench's order: embedding.weight,
then each layer's weight and bias, row-major), its loss per epoch and how
many buckets DDP rebuilt, with torch's version.

  /usr/bin/python3 tests/tools/pytorch_compress.py           the table (JSON) for every case
  /usr/bin/python3 tests/tools/pytorch_compress.py NAME...   only those cases

Needs torch (Debian's python3-torch: 1.13.1 generated
tests/integration/pytorch_compress_table.json).
"""
import faulthandler
import json
import math
import os
import re
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from bu_reference import Rng, RNG_STREAM_DATA, RNG_STREAM_MODEL  # noqa: E402
from ddp_layouts import DummyModel  # noqa: E402  (the seed's, as DDP's buckets were asked of)

RNG_STREAM_POWERSGD = 4000  # shared/rng.h

# The cases. The model is small (the table is kept in git) but has what the
# hooks care about: two matrices PowerSGD compresses (embedding 48 x 16,
# the layer's 48 x 16 weight) and a bias it never does; a cap that puts
# everything in one bucket and one that splits the model in two (bias and
# weight, then the embedding). Not PowerSGD in two buckets: torch 1.13's
# powerSGD_hook and batched_powerSGD_hook on Gloo issue a bucket's later
# allreduces from a future's callback, on whichever of Gloo's threads runs
# it, so two buckets' allreduces can go out in different orders on the two
# ranks: both hooks deadlocked here, the ranks waiting in their callbacks
# (psbench hands a step's buckets to one thread, in order).
MODEL = {"num_embeddings": 48, "embedding_dim": 16, "dense_input_size": 16, "dense_output_size": 48,
         "dense_layers_count": 1, "sparse": False}
DATA = {"max_val": 48, "sample_count": 96, "sample_length": 6, "sparsity_percentage": 25}
JOB = {"seed": 7, "batch_size": 8, "lr": 0.5, "epochs": 2, "ntrainer": 2}
CASES = {
    "none": {"compress": "none", "bucket_cap_mb": 25, "first_bucket_mb": 1},
    "fp16": {"compress": "fp16", "bucket_cap_mb": 25, "first_bucket_mb": 1},
    "none-2buckets": {"compress": "none", "bucket_cap_mb": 0.003, "first_bucket_mb": 0.003},
    "fp16-2buckets": {"compress": "fp16", "bucket_cap_mb": 0.003, "first_bucket_mb": 0.003},
    "powersgd-2": {"compress": "powersgd:2", "bucket_cap_mb": 25, "first_bucket_mb": 1},
    "batched-powersgd-2": {"compress": "powersgd:2", "batched": True, "bucket_cap_mb": 25, "first_bucket_mb": 1},
}
PSGD_START_ITER = 2
PSGD_RANDOM_SEED = 0  # PyTorch's default, and psbench's --powersgd-random-seed's


def below(r, n):
    """rng.h's below(n): unbiased by rejection."""
    t = ((1 << 64) - n) % n
    while True:
        x = r.next()
        if x >= t:
            return x % n


def dummy_data(cfg, seed):
    """trainer/data.h's DummyData: (indices, targets), sample-major lists."""
    r = Rng(seed, RNG_STREAM_DATA)
    mv = cfg["max_val"]
    e = list(range(mv))
    for i in range(mv - 1, 0, -1):
        j = below(r, i + 1)
        e[i], e[j] = e[j], e[i]
    count = mv * (100 - cfg["sparsity_percentage"]) // 100
    n, ln = cfg["sample_count"], cfg["sample_length"]
    indices = [[e[below(r, count)] for _ in range(ln)] for _ in range(n)]
    targets = [below(r, mv) for _ in range(n)]
    return indices, targets


def shard(indices, targets, batch_size, rank, ntrainers):
    """trainer/data.h's data_shard_new: batches dealt round-robin, each
    trainer keeping floor(total / ntrainers)."""
    batches = [(indices[i:i + batch_size], targets[i:i + batch_size]) for i in range(0, len(indices), batch_size)]
    keep = len(batches) // ntrainers
    return [batches[rank + k * ntrainers] for k in range(keep)]


def init_params(cfg, seed):
    """trainer/model.h's initialization, parameter by parameter, each a flat
    row-major list."""
    r = Rng(seed, RNG_STREAM_MODEL)
    ne, ed = cfg["num_embeddings"], cfg["embedding_dim"]
    din, dout = cfg["dense_input_size"], cfg["dense_output_size"]
    out = [r.fill_normal(ne * ed)]
    bound = 1.0 / math.sqrt(din)
    for _ in range(cfg["dense_layers_count"]):
        out.append(r.fill_uniform(dout * din, bound))
        out.append(r.fill_uniform(dout, bound))
    return out


class PsbStateRng(object):
    """PowerSGDState.rng (numpy's RandomState there): randint(n) is psbench's
    state generator's below(n)."""

    def __init__(self, seed):
        self.r = Rng(seed, RNG_STREAM_POWERSGD)

    def randint(self, n):
        return below(self.r, n)


class PsbRandn(object):
    """While the hook draws: torch.manual_seed(s) starts psbench's generator
    (s, RNG_STREAM_POWERSGD) and each torch.randn(*shape) is its next
    normal fill, as psbench's rng_fill_normal per tensor."""

    def __init__(self):
        self.gen = None
        self.real_seed = torch.manual_seed
        self.real_randn = torch.randn

    def manual_seed(self, s):
        self.gen = Rng(int(s), RNG_STREAM_POWERSGD)
        return self.real_seed(s)

    def randn(self, *shape, **kw):
        n = 1
        for d in shape:
            n *= d
        return torch.tensor(self.gen.fill_normal(n), dtype=kw.get("dtype") or torch.float32).view(*shape)

    def install(self):
        torch.manual_seed = self.manual_seed
        torch.randn = self.randn


def orthogonalize_2d_too():
    """torch 1.13's batched_powerSGD_hook hands _orthogonalize its 2-D P
    and Q, which _orthogonalize refuses (it asserts a batch of matrices,
    3-D): the hook cannot run at all there. Each is orthogonalized as a
    batch of one, in place, by the same code."""
    real = psgd._orthogonalize

    def orthogonalize(m, epsilon=0):
        real(m.unsqueeze(0) if m.dim() == 2 else m, epsilon)
    psgd._orthogonalize = orthogonalize


def train_rank(rank, case, store_path, out_path):
    # A member that hangs (a lost peer) says where and leaves.
    faulthandler.dump_traceback_later(int(os.environ.get("PT_WD", "120")), exit=True)
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, JOB["ntrainer"])
    dist.init_process_group("gloo", store=store, rank=rank, world_size=JOB["ntrainer"])
    model = DummyModel(MODEL["num_embeddings"], MODEL["embedding_dim"], MODEL["dense_layers_count"],
                       MODEL["sparse"], MODEL["dense_output_size"])
    with torch.no_grad():
        for p, v in zip(model.parameters(), init_params(MODEL, JOB["seed"])):
            p.copy_(torch.tensor(v, dtype=torch.float32).view(p.shape))
    # DDP's first bucket's limit is this module variable, read when DDP is
    # made (psbench's first_bucket_mb)
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(case["first_bucket_mb"] * 1024 * 1024)
    ddp = DDP(model, bucket_cap_mb=case["bucket_cap_mb"])
    compress = case["compress"]
    if compress == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif compress.startswith("powersgd:"):
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=int(compress.split(":")[1]),
                                   start_powerSGD_iter=PSGD_START_ITER, random_seed=PSGD_RANDOM_SEED)
        state.rng = PsbStateRng(PSGD_RANDOM_SEED)
        if case.get("batched"):
            orthogonalize_2d_too()
        PsbRandn().install()
        ddp.register_comm_hook(state, psgd.batched_powerSGD_hook if case.get("batched") else psgd.powerSGD_hook)
    else:
        assert compress == "none", compress
    indices, targets = dummy_data(DATA, JOB["seed"])
    mine = shard(indices, targets, JOB["batch_size"], rank, JOB["ntrainer"])
    opt = torch.optim.SGD(ddp.parameters(), lr=JOB["lr"])
    crit = nn.CrossEntropyLoss()
    losses = []
    for _ in range(JOB["epochs"]):
        total = 0.0
        for x, y in mine:
            opt.zero_grad()
            loss = crit(ddp(torch.tensor(x, dtype=torch.int64)), torch.tensor(y, dtype=torch.int64))
            loss.backward()
            opt.step()
            total += float(loss)
        losses.append(total / len(mine))
    # Everyone done before anyone leaves: a member that tears the group down
    # while the other's last allreduce is still in flight aborts it (seen:
    # "terminate called without an active exception").
    dist.barrier()
    if rank == 0:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        sizes = ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]
        with open(out_path, "w") as f:
            # %.9g: every float32 exactly, in fewer digits than repr's
            json.dump({"params": [float("%.9g" % v) for v in flat], "loss_per_epoch": losses,
                       "rebuilt_buckets": len(str(sizes).split(", "))}, f)
    dist.barrier()
    # Leave without tearing down: torch 1.13's Gloo group and DDP's reducer,
    # destroyed as train() returns, hung one run in a few here (a thread
    # joined that never ends), after all the work was done and written.
    sys.stdout.flush()
    os._exit(0)


def run_case(name):
    case = CASES[name]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        mp.start_processes(train_rank, args=(case, os.path.join(tmp, "store"), out), nprocs=JOB["ntrainer"],
                           join=True, start_method="spawn")
        with open(out) as f:
            return json.load(f)


def main():
    names = sys.argv[1:] or list(CASES)
    for n in names:
        if n not in CASES:
            sys.exit("pytorch_compress.py: no case %r (cases: %s)" % (n, ", ".join(CASES)))
    table = {"generated_by": "tests/tools/pytorch_compress.py", "torch": torch.__version__,
             "model": MODEL, "data": DATA, "job": dict(JOB, powersgd_start_iter=PSGD_START_ITER),
             "cases": {n: dict(CASES[n], **run_case(n)) for n in names}}
    # one line per case's numbers: a diff of the table stays readable
    text = json.dumps(table, indent=1)
    text = re.sub(r"\[\n\s*([-0-9.e+,\s]*?)\n\s*\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
