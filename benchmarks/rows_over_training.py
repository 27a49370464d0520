"""``auto`` against min(H0, zstd -19) on the LSTM's gradient over training: without a layout
(``auto`` searches for the matrices, encoders/row_search.py), with the layout the adapters
pass, and with ``layout=()`` (no row model).

The bench trace's model, seed and data (bench/traces.py ``lstm_gradients``); at each step in
--steps, the first --coords coordinates of the gradient, quantized by QSGD (buckets of 512,
seed 0) at each s in --levels. Prints the machine, then one line per step: per s, the three
ratios.

    .venv/bin/python benchmarks/rows_over_training.py --steps 5 10 20 50 100 200 400
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import horovod_huffman as hh  # noqa: E402
from horovod_huffman.tools.bench import traces  # noqa: E402
from horovod_huffman.tools.bench.run import entropy_bits, machine, measure_reference  # noqa: E402


def ratios(grad, layout, s):
    """(searched, with the layout, no row model): ``auto``'s bytes over min(H0, zstd -19)."""
    levels = hh.QSGD(levels=s, seed=0).quantize(grad).levels
    floor = min(entropy_bits(levels) * levels.size / 8,
                measure_reference("zstd-19", levels, 1)["bytes"])
    return [hh.get_encoder("auto", seed=0).encode(levels, layout=given).size / floor
            for given in (None, layout, ())]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", nargs="+", type=int, default=[5, 10, 20, 50, 100, 200, 400])
    p.add_argument("--levels", nargs="+", type=int, default=[8, 16, 127])
    p.add_argument("--coords", type=int, default=1 << 20)
    args = p.parse_args(argv)
    print(f"Machine: {machine()}.")
    print("step | " + " | ".join(f"s = {s}: searched / layout / none" for s in args.levels))
    for step, trace in traces.lstm_gradients(sorted(args.steps), args.coords):
        cells = [" / ".join(f"{r:.3f}" for r in ratios(trace.grad, trace.layout, s))
                 for s in args.levels]
        print(f"{step} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
