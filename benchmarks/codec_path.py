"""The exchange's codec path on one core: quantize + encode (fp32 gradient to framed message) and
decode + dequantize + sum (messages of N ranks to the fp32 sum), in GB/s of fp32 gradient, on
the char-LSTM's gradients (1.37M coordinates per step, CPython's stdlib text), N = 2 ranks held
in this process (horovod_huffman.exchange.local), the allgather exchange, QSGD s = 8 and ``rlh``.
Timings are the exchange's own spans (Statistics.trace); best of the repeats. With
``--encoder auto`` the steps after the first two reuse ``auto``'s choice (``Codec.encode``), so
its figures are those of the encoder it chose, as in training. ``--layout`` gives the exchange the gradient's
layout (every parameter's rows), as the adapters do, for ``ans``'s row model.

    .venv/bin/python benchmarks/codec_path.py
"""
import argparse
import os
import platform
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import horovod_huffman as hh  # noqa: E402
from horovod_huffman.exchange.allreduce import Job, allgather_sum  # noqa: E402
from horovod_huffman.exchange.array_ops import HostOps  # noqa: E402
from horovod_huffman.tools.bench.traces import lstm_trace  # noqa: E402
from horovod_huffman.exchange.buckets import BucketPlan  # noqa: E402
from horovod_huffman.codec.encoders.rows import slice_layout  # noqa: E402
from horovod_huffman.exchange.codec_state import Codec  # noqa: E402
from horovod_huffman.exchange.local import LocalGroup, run_ranks  # noqa: E402

LSTM_COORDS = 1_365_120


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--levels", type=int, default=8)
    p.add_argument("--encoder", default="rlh")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--layout", action="store_true", help="pass the parameters' layout")
    args = p.parse_args()
    trace = lstm_trace(LSTM_COORDS * args.ranks)
    grads = trace.grad.astype(np.float32).reshape(args.ranks, -1)
    layout = tuple(slice_layout(trace.layout, 0, LSTM_COORDS)) if args.layout else None
    (bucket,) = BucketPlan([("lstm", LSTM_COORDS, "float32")], LSTM_COORDS, 512).buckets
    works = [np.zeros(bucket.size, np.float32) for _ in range(args.ranks)]
    for w, g in zip(works, grads):
        w[:LSTM_COORDS] = g
    codecs = [Codec(encoder=args.encoder, quantizer=hh.QSGD(levels=args.levels), seed=r)
              for r in range(args.ranks)]
    best = {"encode": np.inf, "decode": np.inf}
    for step in range(args.repeats + 1):
        group = LocalGroup(args.ranks)
        run_ranks([allgather_sum(c, HostOps, group.member(r),
                                 Job(bucket.key, bucket.tag, step, 1, LSTM_COORDS,
                                     layout=layout), works[r])
                   for r, c in enumerate(codecs)])
        if step:                                # the first round compiles / warms up
            for _, phase, start, end in list(codecs[0].statistics.trace)[-3:]:
                if phase in best:
                    best[phase] = min(best[phase], end - start)
    fp32_gb = 4 * LSTM_COORDS / 1e9
    bits = 8 * codecs[0].statistics.total.sent_bytes / codecs[0].statistics.total.coords
    print(f"{platform.processor() or platform.machine()}, one core; LSTM gradient "
          f"({LSTM_COORDS} coords), QSGD s = {args.levels}, {args.encoder}"
          f"{' with the layout' if args.layout else ''}, {bits:.3f} bits/coord, N = {args.ranks}")
    print(f"quantize + encode:          {1e3 * best['encode']:.2f} ms, "
          f"{fp32_gb / best['encode']:.2f} GB/s of fp32")
    print(f"decode + dequantize + sum:  {1e3 * best['decode']:.2f} ms for {args.ranks} messages, "
          f"{fp32_gb / best['decode']:.2f} GB/s of fp32 per message summed "
          f"({args.ranks * fp32_gb / best['decode']:.2f} GB/s over all {args.ranks})")


if __name__ == "__main__":
    main()
