"""Pufferfish's compute side: parameters and forward + backward time per training step (one
thread, no Horovod) of the benchmark models, full-rank against factorized
(horovod_huffman.torch.factorize, rank ratio 1/4, first and last layers full-rank): the digits
CNN (batch 32) and the char-LSTM (batch 16 of 64 characters).

    .venv/bin/python benchmarks/pufferfish.py
"""
import argparse
import os
import platform
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from horovod_huffman.tools.bench.traces import CharLSTM, cnn  # noqa: E402
from horovod_huffman.torch import factorize  # noqa: E402


def step_ms(model, x, y, repeats):
    """Best forward + backward time of ``repeats`` (milliseconds)."""
    best = float("inf")
    for _ in range(repeats + 2):                   # two untimed first calls
        model.zero_grad()
        t0 = time.perf_counter()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--rank-ratio", type=float, default=0.25)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cases = {"cnn": (cnn(torch), torch.randn(32, 64), torch.randint(0, 10, (32,))),
             "lstm": (CharLSTM()(torch), torch.randint(0, CharLSTM.VOCAB, (16, 64)),
                      torch.randint(0, CharLSTM.VOCAB, (16 * 64,)))}
    print(f"{platform.processor() or platform.machine()}, one thread; rank ratio "
          f"{args.rank_ratio}, best of {args.repeats}")
    print("| model | params full | params factorized | fewer | fwd+bwd ms full | "
          "fwd+bwd ms factorized | speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (model, x, y) in cases.items():
        full = step_ms(model, x, y, args.repeats)
        report = factorize(model, rank_ratio=args.rank_ratio)
        low = step_ms(model, x, y, args.repeats)
        print(f"| {name} | {report.params_before} | {report.params_after} | "
              f"{report.reduction:.2f}x | {full:.2f} | {low:.2f} | {full / low:.2f}x |")


if __name__ == "__main__":
    main()
