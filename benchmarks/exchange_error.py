"""Error of the reduced gradient under each exchange, against N: the allgather sums the N ranks'
quantized gradients, the two-phase exchange requantizes that sum once more (allreduce.py).

Gradients are the digits CNN's (bench/traces.py), N ranks each on its own batch of 32 after a
short training; QSGD s = 8, buckets of 512. Printed per N: |estimate - mean|^2 / |mean|^2 of
the averaged gradient, the mean over ``--trials`` steps, for the allgather, the two-phase
exchange, and the two-phase exchange whose sum is requantized with s*N levels; and the ``rlh``
bits per coordinate of one rank's gradient and of each requantized sum.

    .venv/bin/python benchmarks/exchange_error.py
"""
import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import horovod_huffman as hh  # noqa: E402
from horovod_huffman.tools.bench.traces import cnn, digits_data  # noqa: E402
from horovod_huffman.codec.quantizers import dequantize  # noqa: E402


class Gradients:
    """Per-batch gradients of the digits CNN after ``warmup`` steps of SGD."""

    def __init__(self, torch, warmup=60, seed=0):
        torch.manual_seed(seed)
        xtr, ytr, _, _ = digits_data()
        self.torch, self.x, self.y = torch, torch.from_numpy(xtr), torch.from_numpy(ytr)
        self.model = cnn(torch)
        opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        for _ in range(warmup):
            opt.zero_grad()
            self._loss(torch.randperm(len(self.y))[:64]).backward()
            opt.step()

    def _loss(self, idx):
        return self.torch.nn.functional.cross_entropy(self.model(self.x[idx]), self.y[idx])

    def ranks(self, n, batch=32):
        """n gradients (float32), each of its own batch."""
        perm = self.torch.randperm(len(self.y))
        out = []
        for k in range(n):
            self.model.zero_grad()
            self._loss(perm[k * batch:(k + 1) * batch]).backward()
            out.append(np.concatenate([p.grad.reshape(-1).numpy()
                                       for p in self.model.parameters()]).astype(np.float32))
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4, 8])
    p.add_argument("--levels", type=int, default=8)
    p.add_argument("--trials", type=int, default=5)
    args = p.parse_args()
    import torch
    grads = Gradients(torch)
    rng = np.random.default_rng(0)
    rlh = hh.get_encoder("rlh")

    def noisy(v, quantizer):
        qt = quantizer.quantize(v, seed=int(rng.integers(1 << 31)))
        return dequantize(qt).reshape(-1), 8 * len(rlh.encode(qt.levels)) / v.size

    print("N  | error: allgather | two-phase | two-phase, sum at s*N | bits/coord: rank | "
          "sum at s | sum at s*N")
    for n in args.ranks:
        q, fine = hh.QSGD(levels=args.levels), hh.QSGD(levels=args.levels * n)
        err, bits = np.zeros(3), np.zeros(3)
        for _ in range(args.trials):
            gs = grads.ranks(n)
            mean = sum(gs) / n
            pieces = [noisy(g, q) for g in gs]
            total = sum(v for v, _ in pieces)
            coarse, fine_sum = noisy(total, q), noisy(total, fine)
            estimates = (total / n, coarse[0] / n, fine_sum[0] / n)
            err += [np.sum((e - mean) ** 2) / np.sum(mean ** 2) for e in estimates]
            bits += [np.mean([b for _, b in pieces]), coarse[1], fine_sum[1]]
        err, bits = err / args.trials, bits / args.trials
        print(f"{n:<3}| {err[0]:.3f} | {err[1]:.3f} ({err[1] / err[0]:.1f}x) | "
              f"{err[2]:.3f} ({err[2] / err[0]:.1f}x) | {bits[0]:.2f} | {bits[1]:.2f} | "
              f"{bits[2]:.2f}")


if __name__ == "__main__":
    main()
