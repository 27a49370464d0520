"""``python -m horovod_huffman.tools.bench --device cuda``: GPU throughput of the whole pipeline.

For tensors of 1M to 256M fp32 coordinates (a real gradient trace, tiled on the device) and
every encoder with device kernels, it times quantize+encode (gradient on the GPU -> message
bytes on the host) and decode+dequantize (message bytes -> gradient on the GPU), in GB/s of fp32
gradient (4 bytes per coordinate), beside a device-to-device copy of the same bytes (the
memory-bandwidth ceiling) and the CPU path on the same tensor, all measured in the same run.
"""
import time

import numpy as np

import horovod_huffman as hh
from horovod_huffman.tools.bench import traces as tr
from horovod_huffman.codec.device import cuda_usable, stream_or_default

DEVICE_ENCODERS = list(hh.codec.encoders.ON_DEVICE)
# The encoders whose device kernels code a batch of parts (the step rows).
BATCHED = [name for name in DEVICE_ENCODERS
           if isinstance(hh.get_encoder(name), hh.codec.encoders.base.Batched)]
DEFAULT_SIZES = [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28]
BEGIN, END = "<!-- bench-cuda:begin -->", "<!-- bench-cuda:end -->"


def device_name():
    from numba import cuda
    from horovod_huffman.codec.device import SIMULATED
    if SIMULATED:
        return "Numba CUDA simulator (not a GPU: figures are meaningless)"
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    return f"{name}, compute capability {dev.compute_capability[0]}.{dev.compute_capability[1]}"


def best_time(fn, stream, repeats):
    """Best wall time of ``fn`` followed by a sync of ``stream`` (seconds)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        stream.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_encoder(name, chunk_levels=None):
    """Encoder ``name`` as the benchmark runs it: seeded where it samples, with
    ``chunk_levels`` levels per chunk (and no more) where it is chunked and that is given."""
    kwargs = {"seed": 0} if name in hh.codec.encoders.SEEDED else {}
    if chunk_levels and name in hh.codec.encoders.CHUNKED:
        kwargs["chunk_levels"] = chunk_levels
    if chunk_levels and name in hh.codec.encoders.GROWING:
        kwargs["max_chunk_levels"] = chunk_levels
    return hh.get_encoder(name, **kwargs)


def measure(encoder_name, quantizer, grad, stream, repeats, chunk_levels=None):
    """(encode s, decode s, message bytes) of the device path for one device gradient."""
    enc = bench_encoder(encoder_name, chunk_levels)
    state = {}

    def encode():
        state["msg"] = hh.pack(quantizer.quantize(grad, seed=0, stream=stream), enc, stream=stream)

    def decode():
        state["out"] = hh.dequantize(hh.unpack(state["msg"], device="cuda", stream=stream),
                                     stream=stream)

    encode()
    decode()                                     # compile and warm up
    t_enc = best_time(encode, stream, repeats)
    t_dec = best_time(decode, stream, repeats)
    return t_enc, t_dec, state["msg"].size


def bucket_sizes(n, bucket):
    """Coordinates of each bucket of ``bucket`` coordinates (the last may be shorter)."""
    return [bucket] * (n // bucket) + ([n % bucket] if n % bucket else [])


def measure_step(encoder_name, quantizer, grad, bucket, stream, repeats, chunk_levels=None):
    """(encode s, decode s, bytes) of a training step's gradient in buckets of ``bucket``
    coordinates, coded as one batch: quantized in one call, every bucket's stream encoded by
    ``Encoder.encode_parts`` and brought to the host with the scales; then, as an exchange of
    two ranks sums a bucket, each bucket's two streams (this one twice) decoded, dequantized
    and summed into its slice of the step's total, every bucket through one gpu.StreamGroup
    (one launch for the Huffman family and ``ans``)."""
    from numba import cuda
    from horovod_huffman.codec.device import copy_to_host
    from horovod_huffman.codec.encoders import decode_dequantized, gpu
    enc = bench_encoder(encoder_name, chunk_levels)
    sizes = bucket_sizes(grad.size, bucket)
    total = cuda.device_array(grad.size, dtype=np.float32, stream=stream)
    state = {}

    def encode():
        qt = quantizer.quantize(grad, seed=0, stream=stream)
        state["bufs"] = enc.encode_parts(qt.levels, sizes, stream)
        state["scales"] = copy_to_host(qt.scales, stream)
        state["per_scale"] = qt.bucket_size

    def decode():
        at = 0
        per = state["per_scale"]
        with gpu.StreamGroup(stream) as group:
            for n, buf in zip(sizes, state["bufs"]):
                scales = state["scales"][at // per:-(-(at + n) // per)]
                for rank in range(2):
                    decode_dequantized(buf, total[at:at + n], scales, per, rank > 0, stream,
                                       group=group, within=(total, at))
                at += n

    encode()
    decode()                                     # compile and warm up
    t_enc = best_time(encode, stream, repeats)
    t_dec = best_time(decode, stream, repeats)
    return t_enc, t_dec, sum(b.size for b in state["bufs"]) + 4 * state["scales"].size


def measure_host(encoder_name, quantizer, grad, repeats, chunk_levels=None):
    """(encode s, decode s) of the CPU path on a host copy of the gradient."""
    enc = bench_encoder(encoder_name, chunk_levels)
    msg = hh.pack(quantizer.quantize(grad, seed=0), enc)
    t_enc = min(_wall(lambda: hh.pack(quantizer.quantize(grad, seed=0), enc))
                for _ in range(repeats))
    t_dec = min(_wall(lambda: hh.dequantize(hh.unpack(msg))) for _ in range(repeats))
    return t_enc, t_dec


def _wall(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(args):
    from numba import cuda
    from tqdm import tqdm
    stream = stream_or_default(None)
    quantizer = hh.QSGD(levels=args.levels, seed=0)
    base = tr.TRACES[args.trace](min(max(args.sizes), 1 << 20)).grad
    rows = []
    with tqdm(total=len(args.sizes) * (len(args.encoders) + 1), desc="cuda benchmark",
              unit="step") as bar:
        for n in args.sizes:
            host = np.resize(base, n).astype(np.float32)        # the trace, tiled
            grad = cuda.to_device(host, stream=stream)
            copy = cuda.device_array_like(grad, stream=stream)
            t_copy = best_time(lambda: copy.copy_to_device(grad, stream=stream), stream,
                               args.repeats)
            bar.update()
            for name in args.encoders:
                bar.set_postfix_str(f"{n} coords, {name}")
                t_enc, t_dec, size = measure(name, quantizer, grad, stream, args.repeats,
                                             args.chunk_levels)
                row = {"n": n, "encoder": name, "enc": t_enc, "dec": t_dec, "bytes": size,
                       "copy": t_copy}
                if n <= args.cpu_max:
                    row["cpu_enc"], row["cpu_dec"] = measure_host(name, quantizer, host,
                                                                  args.repeats,
                                                                  args.chunk_levels)
                rows.append(row)
                bar.update()
            del grad, copy
        if args.step_coords:
            n = args.step_coords
            grad = cuda.to_device(np.resize(base, n).astype(np.float32), stream=stream)
            copy = cuda.device_array_like(grad, stream=stream)
            t_copy = best_time(lambda: copy.copy_to_device(grad, stream=stream), stream,
                               args.repeats)
            for name in args.encoders:
                if name not in BATCHED:
                    continue
                bar.set_postfix_str(f"step of {n} coords, {name}")
                t_enc, t_dec, size = measure_step(name, quantizer, grad, args.bucket_coords,
                                                  stream, args.repeats, args.chunk_levels)
                rows.append({"n": n, "encoder": f"{name}, step", "enc": t_enc, "dec": t_dec,
                             "bytes": size, "copy": t_copy})
            del grad, copy
    return rows


def gbps(n, seconds):
    return f"{4 * n / seconds / 1e9:.1f}"


def table(rows, args):
    lines = [f"Device: {device_name()}.",
             f"Run: `python -m horovod_huffman.tools.bench --device cuda --sizes "
             f"{' '.join(str(s) for s in args.sizes)} --repeats {args.repeats}"
             f"{f' --chunk-levels {args.chunk_levels}' if args.chunk_levels else ''}` on "
             f"{time.strftime('%Y-%m-%d')}; trace {args.trace}, QSGD s = {args.levels}, buckets "
             "of 512; GB/s of fp32 gradient (4 bytes per coordinate), best of the repeats; "
             "encode = quantize + encode + bytes to the host, decode = bytes from the host + "
             "decode + dequantize; CPU columns: one host process, same tensor."
             + (f" Rows \"step\": a gradient of {args.step_coords:,} coordinates in buckets of "
                f"{args.bucket_coords:,}, quantized in one call and every bucket encoded as "
                "one batch (``encode_parts``); decode = every bucket's two ranks' streams "
                "decoded, dequantized and summed into its slice of the step's total in one "
                "launch (one gpu.StreamGroup)."
                if args.step_coords else ""), "",
             "| coords | encoder | bits/coord | encode GB/s | decode GB/s | D2D copy GB/s "
             "| CPU encode GB/s | CPU decode GB/s |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        cpu = (gbps(r["n"], r["cpu_enc"]), gbps(r["n"], r["cpu_dec"])) if "cpu_enc" in r \
            else ("-", "-")
        lines.append(f"| {r['n']:,} | {r['encoder']} | {8 * r['bytes'] / r['n']:.3f} | "
                     f"{gbps(r['n'], r['enc'])} | {gbps(r['n'], r['dec'])} | "
                     f"{gbps(r['n'], r['copy'])} | {cpu[0]} | {cpu[1]} |")
    return lines


def add_arguments(p):
    g = p.add_argument_group("--device cuda")
    g.add_argument("--sizes", type=int, nargs="+", default=DEFAULT_SIZES,
                   help="coordinates per tensor (default 1M 4M 16M 64M 256M)")
    g.add_argument("--encoders", nargs="+", default=DEVICE_ENCODERS, choices=DEVICE_ENCODERS)
    g.add_argument("--trace", default="cnn-digits", choices=list(tr.TRACES))
    g.add_argument("--levels", type=int, default=8, help="QSGD levels s (default 8)")
    g.add_argument("--cpu-max", type=int, default=1 << 24,
                   help="largest tensor also timed on the CPU path (default 16M)")
    g.add_argument("--step-coords", type=int, default=25_557_032,
                   help="coordinates of the training step coded as one batch (default: "
                        "ResNet-50's 25,557,032; 0: none)")
    g.add_argument("--bucket-coords", type=int, default=1 << 20,
                   help="coordinates per bucket of that step (default 1M: 4 MiB of fp32)")
    g.add_argument("--chunk-levels", type=int, default=None,
                   help="levels per chunk of the chunked encoders (default theirs, 65536): "
                        "the device decoders run a thread per chunk, ans a warp")


def main(args, write_markdown):
    if not cuda_usable():
        print("no usable CUDA GPU (numba.cuda.is_available() is False); the device benchmark "
              "needs one (or NUMBA_ENABLE_CUDASIM=1 with tiny --sizes, for a dry run)")
        return 2
    lines = table(run(args), args)
    print("\n".join(lines))
    if args.markdown:
        write_markdown(args.markdown, lines, BEGIN, END)
        print(f"table written to {args.markdown}")
    return 0
