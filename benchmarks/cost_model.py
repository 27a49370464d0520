"""Cost model: bytes per rank and communication time per step of one gradient exchange, projected
to N = 1024 ranks at 10 and 100 Gbit/s, for fp32 ring allreduce, fp16 ring allreduce, the
one-phase allgather of Huffman-coded levels and the two-phase exchange (allreduce.py).

The codec's rates and the bits per coordinate are measured here, on this machine, on one core:
QSGD s = 8 (buckets of 512) of a Gaussian gradient, ``rlh``. Then, for n coordinates, N ranks,
link bandwidth B (bits/s) and per-message latency a:

    fp32 ring allreduce   bits sent 2 (N-1)/N 32 n          time 2 (N-1) a + bits / B
    fp16 ring allreduce   bits sent 2 (N-1)/N 16 n          time 2 (N-1) a + bits / B
    allgather (Huffman)   bits sent (N-1) n b (ring)        time (N-1) a + bits / B
                                                            + encode(n) + decode(N n)
    two-phase (Huffman)   bits sent 2 (N-1)/N n b           time 2 (N-1) a + bits / B
                                                            + encode(n + n/N) + decode(2 n)

(decode includes dequantizing and summing; the ring allreduces' additions are not counted).

    .venv/bin/python benchmarks/cost_model.py --plot docs/cost-model.png
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import horovod_huffman as hh  # noqa: E402

LATENCY_S = 10e-6           # per message: a typical datacenter round of a ring step
SCHEMES = ("fp32", "fp16", "allgather", "two_phase")


def measure(n=1 << 22, repeats=5):
    """(bits per coordinate, seconds per coordinate to quantize + encode, seconds per
    coordinate to decode + dequantize + add) of QSGD s = 8 + rlh on one core."""
    grad = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    quantizer, encoder = hh.QSGD(levels=8), hh.get_encoder("rlh")
    total = np.zeros(n, np.float32)
    hh.unpack(hh.pack(quantizer.quantize(grad, seed=0), encoder))     # compile / warm up
    enc, dec = [], []
    for k in range(repeats):
        t0 = time.perf_counter()
        msg = hh.pack(quantizer.quantize(grad, seed=k), encoder)
        t1 = time.perf_counter()
        total += hh.dequantize(hh.unpack(msg))
        t2 = time.perf_counter()
        enc.append(t1 - t0)
        dec.append(t2 - t1)
    return 8 * msg.size / n, min(enc) / n, min(dec) / n


def project(scheme, n, ranks, gbit, bits, enc_s, dec_s, latency=LATENCY_S):
    """(bits one rank sends, seconds) for one exchange of n coordinates."""
    bandwidth = gbit * 1e9
    share = (ranks - 1) / ranks
    if scheme in ("fp32", "fp16"):
        sent = 2 * share * (32 if scheme == "fp32" else 16) * n
        return sent, 2 * (ranks - 1) * latency + sent / bandwidth
    if scheme == "allgather":
        sent = (ranks - 1) * n * bits
        return sent, (ranks - 1) * latency + sent / bandwidth + enc_s * n + dec_s * ranks * n
    sent = 2 * share * n * bits
    return sent, 2 * (ranks - 1) * latency + sent / bandwidth + enc_s * (n + n / ranks) + \
        dec_s * 2 * n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--coords", type=float, default=25.6e6, help="gradient size (ResNet-50)")
    p.add_argument("--rates", type=float, nargs="+", default=[10, 100], help="Gbit/s")
    p.add_argument("--plot", metavar="PNG")
    args = p.parse_args()
    bits, enc_s, dec_s = measure()
    n = args.coords
    ranks = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    print(f"measured on one core: rlh at QSGD s = 8: {bits:.3f} bits/coord, quantize+encode "
          f"{4e-9 / enc_s:.2f} GB/s of fp32, decode+dequantize+add {4e-9 / dec_s:.2f} GB/s")
    for gbit in args.rates:
        print(f"\n{n / 1e6:.1f}M coordinates at {gbit:g} Gbit/s: MB sent per rank / ms per step")
        print("| N | " + " | ".join(SCHEMES) + " | fastest |")
        print("|---:|" + "---:|" * (len(SCHEMES) + 1))
        for r in ranks:
            cells = {s: project(s, n, r, gbit, bits, enc_s, dec_s) for s in SCHEMES}
            best = min(cells, key=lambda s: cells[s][1])
            print(f"| {r} | " + " | ".join(f"{c[0] / 8e6:.1f} / {1e3 * c[1]:.0f}"
                                           for c in cells.values()) + f" | {best} |")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(args.rates), figsize=(6 * len(args.rates), 4.5))
        for ax, gbit in zip(np.atleast_1d(axes), args.rates):
            for s in SCHEMES:
                ax.plot(ranks, [1e3 * project(s, n, r, gbit, bits, enc_s, dec_s)[1]
                                for r in ranks], marker="o", label=s)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("ranks N")
            ax.set_ylabel("exchange time per step (ms)")
            ax.set_title(f"{n / 1e6:.1f}M coordinates, {gbit:g} Gbit/s links")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
