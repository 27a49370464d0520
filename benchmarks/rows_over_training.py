"""``auto`` against min(H0, zstd -19) on the LSTM's gradient over training: without a layout
(``auto`` searches for the matrices, encoders/row_search.py), with the layout the adapters
pass, and with ``layout=()`` (no row model).

The bench trace's model, seed and data (bench/traces.py ``lstm_trace``); at each step in
--steps, the first --coords coordinates of the gradient, quantized by QSGD (buckets of 512,
seed 0) at each s in --levels. Prints one line per step: per s, the three ratios.

    .venv/bin/python benchmarks/rows_over_training.py --steps 5 10 20 50 100 200 400
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import horovod_huffman as hh  # noqa: E402
from horovod_huffman.bench import traces  # noqa: E402
from horovod_huffman.bench.run import entropy_bits  # noqa: E402


def floor_bytes(levels):
    """min(H0, zstd -19) of ``levels`` in bytes."""
    import zstandard
    zstd = len(zstandard.ZstdCompressor(level=19).compress(levels.tobytes()))
    return min(entropy_bits(levels) * levels.size / 8, zstd)


def ratios(grad, layout, s):
    """(searched, with the layout, no row model): ``auto``'s bytes over min(H0, zstd -19)."""
    levels = hh.QSGD(levels=s, seed=0).quantize(grad).levels
    floor = floor_bytes(levels)
    return [hh.get_encoder("auto", seed=0).encode(levels, layout=given).size / floor
            for given in (None, layout, ())]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", nargs="+", type=int, default=[5, 10, 20, 50, 100, 200, 400])
    p.add_argument("--levels", nargs="+", type=int, default=[8, 16, 127])
    p.add_argument("--coords", type=int, default=1 << 20)
    args = p.parse_args(argv)
    import torch
    torch.manual_seed(0)
    text = np.frombuffer(traces.stdlib_text(), dtype=np.uint8) % traces.CharLSTM.VOCAB
    data = torch.from_numpy(text.astype(np.int64))
    model = traces.CharLSTM()(torch)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    seq_len, batch = 64, 16
    print("step | " + " | ".join(f"s = {s}: searched / layout / none" for s in args.levels))
    for step in range(1, max(args.steps) + 1):
        starts = torch.randint(0, len(data) - seq_len - 1, (batch,), generator=gen)
        xb = torch.stack([data[i:i + seq_len] for i in starts])
        yb = torch.stack([data[i + 1:i + seq_len + 1] for i in starts]).reshape(-1)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        if step in args.steps:
            grad, layout = traces._flat_grad(model)
            grad = grad[:args.coords].astype(np.float32)
            layout = traces._cut(layout, args.coords)
            cells = [" / ".join(f"{r:.3f}" for r in ratios(grad, layout, s)) for s in args.levels]
            print(f"{step} | " + " | ".join(cells), flush=True)
        opt.step()


if __name__ == "__main__":
    main()
