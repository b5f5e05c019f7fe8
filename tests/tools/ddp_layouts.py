#!/usr/bin/python3
"""ddp_layouts.py — ask PyTorch's DistributedDataParallel itself how it
buckets the DummyModel, for tests/unit/trainer/test_ddp_buckets.c and
tests/integration/test_ddp_buckets.py.

For each case (a DummyModel shape, bucket_cap_mb, DDP's first-bucket limit)
it builds the seed's DummyModel (EmbeddingBag, then dense_layers_count
Linear layers; psbench's parameter order: embedding.weight, then each
layer's weight and bias), wraps it in DDP on a one-rank Gloo group, runs
three iterations (DDP rebuilds its buckets after the first, from the order
the gradients became ready) and prints, per case, the buckets of the first
iteration (DDP's initial assignment, `bucket_sizes`) and the rebuilt ones
(`rebuilt_per_bucket_param_indices`), each bucket as its parameter indices
in DDP's order.

  /usr/bin/python3 tests/tools/ddp_layouts.py --c      the C table (unit test)
  /usr/bin/python3 tests/tools/ddp_layouts.py --json   one JSON object per case

Needs torch (Debian's python3-torch: 1.13.1 generated the table in
test_ddp_buckets.c). DDP's first-bucket limit is the module variable
torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, which DDP reads when it is
constructed ("User can set dist._DEFAULT_FIRST_BUCKET_BYTES to tune DDP
first bucket", torch/nn/parallel/distributed.py).
"""
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

# (num_embeddings, embedding_dim, dense_layers_count, sparse, bucket_cap_mb, first_bucket_bytes)
CASES = [
    (1024, 1024, 8, False, 25, 1 << 20),
    (1024, 1024, 8, True, 25, 1 << 20),
    (1024, 1024, 8, False, 4, 1 << 20),
    (1024, 1024, 8, True, 4, 1 << 20),
    (1024, 1024, 8, False, 1, 1 << 20),
    (1024, 1024, 8, False, 0.5, 1 << 20),
    (1024, 1024, 8, False, 100, 1 << 20),
    (1024, 1024, 8, False, 25, 0),
    (1024, 1024, 8, False, 25, 8 << 20),
    (1024, 1024, 10, False, 25, 1 << 20),
    (1024, 1024, 10, True, 13.5, 1 << 20),
    (1024, 1024, 1, False, 25, 1 << 20),
    (1024, 1024, 1, True, 0.25, 1 << 20),
    (4096, 256, 6, False, 0.25, 1 << 20),
    (4096, 256, 6, True, 0.25, 1 << 20),
    (4096, 256, 6, True, 0.25, 1 << 16),
    (4096, 256, 6, False, 0.1, 1 << 16),
    (300, 64, 3, False, 0.01, 1 << 20),
    (300, 64, 3, True, 0.01, 1 << 20),
    (300, 64, 3, True, 0.01, 4096),
    (300, 64, 3, False, 0.01, 4096),
    (300, 64, 3, True, 0.001, 1000),
    (64, 16, 3, False, 0.001, 1 << 20),
    (64, 16, 3, True, 0.001, 1 << 20),
    (64, 16, 3, True, 0.001, 100),
    (64, 16, 3, False, 0.0001, 100),
    (64, 16, 12, False, 0.002, 1024),
    (64, 16, 12, True, 0.002, 1024),
    (100000, 32, 4, False, 1, 1 << 20),
    (100000, 32, 4, True, 1, 1 << 20),
    (100000, 32, 4, True, 25, 1 << 20),
    (512, 512, 5, False, 1, 1 << 20),
    (512, 512, 5, False, 1.0001, 1 << 20),
    (512, 512, 5, True, 2, 512 * 1024),
    (2048, 128, 7, False, 0.0625, 65536),
    (2048, 128, 7, True, 0.0625, 65536),
]


class DummyModel(nn.Module):
    """The seed's DummyModel; dense_output_size (default embedding_dim)
    for a one-layer model whose classes are not its width
    (tests/tools/pytorch_compress.py)."""

    def __init__(self, num_embeddings, embedding_dim, dense_layers_count, sparse, dense_output_size=None):
        super().__init__()
        out = dense_output_size or embedding_dim
        self.embedding = nn.EmbeddingBag(num_embeddings, embedding_dim, sparse=sparse)
        self.dense = nn.Sequential(*[nn.Linear(embedding_dim, out) for _ in range(dense_layers_count)])

    def forward(self, x):
        return F.softmax(self.dense(self.embedding(x)), dim=1)


def layout(case):
    ne, ed, nl, sparse, cap, first = case
    dist._DEFAULT_FIRST_BUCKET_BYTES = first
    torch.manual_seed(0)
    model = DummyModel(ne, ed, nl, sparse)
    ddp = DDP(model, bucket_cap_mb=cap)
    data = ddp._get_ddp_logging_data()
    initial = data.get("bucket_sizes")
    for _ in range(3):
        x = torch.randint(0, ne, (4, 3))
        ddp(x).sum().backward()
    data = ddp._get_ddp_logging_data()
    rebuilt = [[int(i) for i in b.split()] for b in data["rebuilt_per_bucket_param_indices"].split(", ")]
    sizes = [p.numel() * 4 for p in model.parameters()]
    # The first iteration's buckets: DDP's initial assignment, one bucket of
    # every dense parameter (definition order) and each sparse one alone,
    # in reversed order of their smallest index.
    dense = [i for i in range(len(sizes)) if not (sparse and i == 0)]
    first_iter = [dense] + ([[0]] if sparse else [])
    assert [sum(sizes[i] for i in b) for b in first_iter] == [int(s) for s in str(initial).split(", ")], initial
    return {
        "num_embeddings": ne, "embedding_dim": ed, "dense_layers_count": nl, "sparse": sparse,
        "bucket_cap_mb": cap, "first_bucket_bytes": first, "param_bytes": sizes,
        "first_iteration": first_iter, "rebuilt": rebuilt,
        "rebuilt_bucket_sizes": [int(s) for s in data["rebuilt_bucket_sizes"].split(", ")],
    }


def init():
    """The one-rank Gloo group layout() needs. Its rendezvous is an
    in-process store: a TCP store on a port found free a moment before
    lost that port to another test once (EADDRINUSE)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def done():
    dist.destroy_process_group()


def main():
    init()
    out = [layout(c) for c in CASES]
    done()
    if "--c" in sys.argv:
        print("/* generated by tests/tools/ddp_layouts.py --c (torch %s) */" % torch.__version__)
        for r in out:
            def blist(bs):
                return "{" + ", ".join("{" + ", ".join(str(i) for i in b) + ", END}" for b in bs) + "}"
            print("    {%d, %d, %d, %s, %r, %d, %d, %s, %s}," % (
                r["num_embeddings"], r["embedding_dim"], r["dense_layers_count"], "true" if r["sparse"] else "false",
                r["bucket_cap_mb"], r["first_bucket_bytes"], len(r["rebuilt"]), blist(r["first_iteration"]),
                blist(r["rebuilt"])))
    else:
        for r in out:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
