"""Where a device bucket's time goes: the host's share of the GPU path, per step and bucket.

Runs the one-phase exchange (allreduce.allgather_sum) of ``--buckets`` gradient buckets held on
the GPU for 2 in-process ranks sharing it (DeviceOps over local.LocalGroup: quantize, encode,
frame, decode into the sum, all on one stream), every bucket of a step at once as a worker
holding them would (``local.run_ranks``: the encodes the exchanges queue run as one batch,
encode_queue.py), first to compile and warm up, then ``--steps`` times under cProfile. Prints,
per encoder: the first step's wall milliseconds (the kernels' compiles: the kernels over
tuples of tensors compile once per tuple length, a power of two), wall milliseconds per step
and per bucket (both ranks), and per step the calls
that cross to the device and back (kernel launches, uploads, downloads, device allocations,
stream synchronizations); then the functions with the most own time.

    python benchmarks/gpu_profile.py --coords 1048576 --buckets 4 --encoders rlh ans rla

Needs a CUDA GPU (or NUMBA_ENABLE_CUDASIM=1 with small --coords, which checks only that it
runs: the simulator's times mean nothing).
"""
import argparse
import cProfile
import io
import pstats
import time

import numpy as np
from numba import cuda

import horovod_huffman as hh
from horovod_huffman.exchange.allreduce import Job, allgather_sum
from horovod_huffman.exchange.array_ops import DeviceOps
from horovod_huffman.exchange.codec_state import Codec
from horovod_huffman.exchange.local import LocalGroup, run_ranks

# The calls counted per exchange: label -> (function name, files that define it: numba-cuda's,
# then the simulator's).
CROSSINGS = {
    "launches": ("__call__", ("cuda/dispatcher.py", "simulator/kernel.py")),
    "uploads": ("to_device", ("cuda/api.py", "simulator/cudadrv/devicearray.py")),
    "downloads": ("copy_to_host", ("cudadrv/devicearray.py",)),
    "allocations": ("device_array", ("cuda/api.py", "simulator/cudadrv/devicearray.py")),
    "synchronizations": ("synchronize", ("cudadrv/driver.py", "simulator/api.py")),
}


def step_of(codecs, grads, step, ops):
    """One step: every bucket's exchange on both ranks (a codec each), run at once."""
    group = LocalGroup(2)
    exchanges = []
    for b, works in enumerate(grads):
        job = Job(f"bucket{b}", b, step, 1, works[0].size, 4 * works[0].size)
        exchanges += [allgather_sum(c, ops, group.member(r), job, w)
                      for r, (c, w) in enumerate(zip(codecs, works))]
    return run_ranks(exchanges)


def crossings(stats, steps):
    """{label: calls per step} of CROSSINGS from a pstats.Stats."""
    return {label: sum(v[1] for (file, _, func), v in stats.stats.items()
                       if func == name and file.endswith(files)) / steps
            for label, (name, files) in CROSSINGS.items()}


def profile(encoder, coords, buckets, steps, stream):
    rng = np.random.default_rng(0)
    grads = [[cuda.to_device(rng.standard_normal(coords).astype(np.float32), stream=stream)
              for _ in range(2)] for _ in range(buckets)]
    codecs = [Codec(encoder=encoder, quantizer=hh.QSGD(levels=8), seed=r) for r in range(2)]
    ops = DeviceOps(stream)
    t0 = time.perf_counter()
    step_of(codecs, grads, 0, ops)                            # compile and warm up
    stream.synchronize()
    first = time.perf_counter() - t0
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    for step in range(1, steps + 1):
        step_of(codecs, grads, step, ops)
    stream.synchronize()
    profiler.disable()
    wall = time.perf_counter() - t0
    stats = pstats.Stats(profiler)
    return 1e3 * first, 1e3 * wall / steps, crossings(stats, steps), stats


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--coords", type=int, default=1 << 20, help="coordinates per bucket")
    p.add_argument("--buckets", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--encoders", nargs="+", default=["rlh", "ans", "rla"])
    p.add_argument("--top", type=int, default=25, help="functions listed by own time")
    args = p.parse_args(argv)
    stream = cuda.stream()
    print(f"{args.coords} coordinates per bucket (fp32), {args.buckets} buckets, 2 in-process "
          f"ranks on one GPU, {args.steps} steps; per step (every bucket, both ranks):")
    print("| encoder | first step ms | ms per step | ms per bucket | GB/s of fp32 | " +
          " | ".join(CROSSINGS) + " |")
    print("|---" * (5 + len(CROSSINGS)) + "|")
    reports = []
    for encoder in args.encoders:
        first, ms, counts, stats = profile(encoder, args.coords, args.buckets, args.steps,
                                           stream)
        gbps = 2 * 4 * args.coords * args.buckets / (ms * 1e-3) / 1e9   # both ranks' gradients
        print(f"| {encoder} | {first:.0f} | {ms:.2f} | {ms / args.buckets:.2f} | {gbps:.2f} | " +
              " | ".join(f"{counts[label]:.1f}" for label in CROSSINGS) + " |")
        text = io.StringIO()
        stats.stream = text
        stats.sort_stats("tottime").print_stats(args.top)
        reports.append((encoder, text.getvalue()))
    for encoder, text in reports:
        print(f"\n## {encoder}: functions by own time\n{text}")


if __name__ == "__main__":
    main()
