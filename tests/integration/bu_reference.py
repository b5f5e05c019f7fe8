"""bu_reference.py — the batch-update benchmark recomputed in Python, from
the definitions in shared/rng.h and docs/protocol.md ("Kind `batch-update`"),
for the tests to compare psbench's trainers and servers against.

- Rng: xoshiro256** seeded by splitmix64 (seed ^ stream * golden), unit(),
  the uniform and normal (Marsaglia polar, with rng.h's own ln) fills. The
  draws are bit-identical to rng.c: every step is an IEEE double operation.
- linear_init: the Linear(in, out) parameters [weight, bias] as the server
  initializes them: stream RNG_STREAM_MODEL, U(-k, k), k = 1/sqrt(in).
- inputs: trainer r's batches, stream RNG_STREAM_INPUTS + r.
- gradient: forward y = x W^T + b, L1 loss against zeros, dW = dy^T x,
  db = column sums (double precision; the tests compare within tolerance).
- train: synchronous rounds (batch_update_size = trainers): the mean of the
  trainers' gradients (float32 sum times float32 1/N), then PyTorch's SGD
  with momentum, in float32 as the server computes it.

Run with /usr/bin/python3; no numpy needed (the models are small).
"""
import math
import struct

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
RNG_STREAM_DATA = 1
RNG_STREAM_MODEL = 2
RNG_STREAM_INPUTS = 1000
LN2 = float.fromhex("0x1.62e42fefa39efp-1")

_F32 = struct.Struct("<f")


def f32(x):
    return _F32.unpack(_F32.pack(x))[0]


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Rng(object):
    def __init__(self, seed, stream):
        x = (seed ^ (stream * GOLDEN)) & M64
        self.s = []
        for _ in range(4):
            x = (x + GOLDEN) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    def next(self):
        s = self.s
        result = (_rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        return result

    def unit(self):
        return (self.next() >> 11) * 2.0 ** -53

    def fill_uniform(self, n, bound):
        return [f32(bound * (2 * self.unit() - 1)) for _ in range(n)]

    def fill_normal(self, n):
        out = []
        while len(out) < n:
            while True:
                u = 2 * self.unit() - 1
                v = 2 * self.unit() - 1
                s = u * u + v * v
                if 0 < s < 1:
                    break
            f = math.sqrt(-2 * rng_ln(s) / s)
            out.append(f32(u * f))
            if len(out) < n:
                out.append(f32(v * f))
        return out


def rng_ln(x):
    """rng.h's ln: frexp, then 2 atanh((m-1)/(m+1)) by a Horner polynomial
    in t^2 with coefficients 1/(2j+1), j = 12 down to 0."""
    m, e = math.frexp(x)
    lo = 1.0 if m < 0.70710678118654752440 else 0.0
    m = m + m * lo
    e = e - lo
    t = (m - 1) / (m + 1)
    t2 = t * t
    p = 1.0 / 25
    for j in range(11, -1, -1):
        p = p * t2 + 1.0 / (2 * j + 1)
    return 2 * t * p + e * LN2


def linear_init(in_f, out_f, seed):
    """[weight (out x in, row-major), bias (out)] as one flat list."""
    r = Rng(seed, RNG_STREAM_MODEL)
    return r.fill_uniform(out_f * in_f + out_f, 1.0 / math.sqrt(in_f))


def part_begin(total, p, n):
    return p * total // n


def inputs(seed, rank, batches, batch_size, in_f):
    """Trainer `rank`'s inputs for one pass: a list of batch_size*in lists."""
    r = Rng(seed, RNG_STREAM_INPUTS + rank)
    return [r.fill_normal(batch_size * in_f) for _ in range(batches)]


def gradient(params, x, batch_size, in_f, out_f):
    """(loss, [dW, db]) of one batch, in double precision."""
    W = params[:out_f * in_f]
    b = params[out_f * in_f:]
    n = batch_size * out_f
    g = f32(1.0 / f32(float(n)))
    dW = [0.0] * (out_f * in_f)
    db = [0.0] * out_f
    loss = 0.0
    for i in range(batch_size):
        xi = x[i * in_f:(i + 1) * in_f]
        for j in range(out_f):
            wj = W[j * in_f:(j + 1) * in_f]
            y = b[j] + math.fsum(a * c for a, c in zip(xi, wj))
            loss += abs(y)
            d = g if y > 0 else (-g if y < 0 else 0.0)
            if d:
                db[j] += d
                base = j * in_f
                for k in range(in_f):
                    dW[base + k] += d * xi[k]
    return loss / n, dW + db


class Sgd(object):
    """PyTorch's SGD with momentum (dampening 0, no Nesterov), float32."""

    def __init__(self, params, lr, momentum):
        self.p = [f32(v) for v in params]
        self.lr = f32(lr)
        self.momentum = f32(momentum)
        self.buf = None

    def step(self, g):
        if self.buf is None:
            self.buf = [f32(v) for v in g]
        else:
            self.buf = [f32(f32(self.momentum * b) + v) for b, v in zip(self.buf, g)]
        self.p = [f32(p - f32(self.lr * b)) for p, b in zip(self.p, self.buf)]
        return self.p


def mean_f32(vectors):
    """The server's mean: float32 sum (in the given order) times f32(1/N)."""
    n = len(vectors)
    scale = f32(1.0 / f32(float(n)))
    out = []
    for i in range(len(vectors[0])):
        acc = f32(vectors[0][i])
        for v in vectors[1:]:
            acc = f32(acc + f32(v[i]))
        out.append(f32(acc * scale))
    return out


def train(in_f, out_f, batch_size, batches, trainers, seed, lr=0.001, momentum=0.9,
          passes=(None,)):
    """The parameters after synchronous rounds (every trainer's batch r
    averaged in round r) from linear_init. `passes`: the batches of each
    pass on the same server state (None: `batches`), as a standalone server
    sees a warm-up pass then the timed pass; every pass draws its inputs
    from the start again. Returns (params, mean loss per round of the last
    pass)."""
    counts = [batches if n is None else n for n in passes]
    params = linear_init(in_f, out_f, seed)
    xs = [inputs(seed, r, max(counts), batch_size, in_f) for r in range(trainers)]
    opt = Sgd(params, lr, momentum)
    losses = []
    for n in counts:
        losses = []
        for b in range(n):
            grads = []
            total_loss = 0.0
            for r in range(trainers):
                loss, g = gradient(opt.p, xs[r][b], batch_size, in_f, out_f)
                grads.append([f32(v) for v in g])
                total_loss += loss
            losses.append(total_loss / trainers)
            opt.step(mean_f32(grads))
    return opt.p, losses


def read_params(path):
    with open(path, "rb") as f:
        data = f.read()
    n = len(data) // 4
    return list(struct.unpack("<%df" % n, data[:4 * n]))
