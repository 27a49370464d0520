"""Compile the device decoders (and the batch kernels of the token encoders and the quantizer)
for a real GPU without one: PTX from numba-cuda, then ptxas.

Checks what the CUDA simulator cannot: that the kernels type and compile for the real target,
that their products stay unfused (no ``fma.rn``: the decoders' sums must equal the host's),
that their parameters fit 4 KiB (the kernels over tuples of tensors, kernels/cuda_parts.py),
and what they cost a multiprocessor (registers, spills, shared memory; ptxas -v). It exits 1
where a kernel fails either check. Needs numba-cuda
with its CUDA bindings and NVRTC, libNVVM (CUDA_HOME) and, for the second step, ptxas; no
driver and no GPU:

    pip install --target /tmp/ncuda numba-cuda==0.30.4 "cuda-bindings==13.*" cuda-core \\
        "nvidia-cuda-nvrtc==13.0.*"      # then remove the numpy it brings, keep the venv's
    LD_LIBRARY_PATH=/tmp/ncuda/nvidia/cu13/lib CUDA_HOME=/usr/local/cuda-13.0 \\
        .venv/bin/python benchmarks/cuda_ptx.py --numba-cuda /tmp/ncuda --cc 9.0

Device functions are compiled for the current device's compute capability; with no driver,
``--cc`` stands in for it.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import types as pytypes


def kernels(types):
    """(name, kernel, signature) of every group decoder, for float32 and float64 totals, of the
    token encoders', ``ans``'s and ``rla``'s kernels, for int8 levels, and of the kernels that
    take a tuple of tensors (QSGD's, TernGrad's and dequantize_parts), at their longest
    tuple."""
    from horovod_huffman.kernels import (cuda_ans, cuda_decode, cuda_parts, cuda_quantize,
                                         cuda_rla, cuda_tokens)
    i64, u32, u64 = types.int64, types.uint32, types.uint64

    def arr(t, dims=1):
        return types.Array(t, dims, "C")

    levels, table = arr(types.int8), arr(i64, 2)
    buckets = arr(i64)                                     # runs.BUCKET_BASE, BUCKET_EXTRA
    head = (levels, i64, table, i64, arr(i64))             # levels, chunk, chunks, mode, prev
    code = (table, arr(u32), i64, arr(i64), i64, arr(i64))  # parts ... k, seg_offset
    out = [
        ("chunk_ranges", cuda_tokens.chunk_ranges, (levels, table, table)),
        ("segment_prev", cuda_tokens.segment_prev, head),
        ("count_tokens", cuda_tokens.count_tokens, head + (table, i64, arr(i64))),
        ("segment_bits", cuda_tokens.segment_bits, head + code + (arr(i64),)),
        ("chunk_layout", cuda_tokens.chunk_layout, (arr(i64), arr(i64), table, table, arr(i64))),
        ("write_tokens", cuda_tokens.write_tokens, head + code + (arr(i64), arr(u32))),
    ]
    f64, k = types.float64, 32                    # tuples as long as cuda_parts.MAX_PARTS
    ints = types.UniTuple(i64, k)
    for grad in (types.float16, types.float32):
        xs = types.UniTuple(arr(grad), k)
        out += [
            (f"qsgd_scales/{grad}", cuda_quantize.qsgd_scales,
             (xs, f64, i64, ints, arr(types.float32), arr(f64))),
            (f"qsgd_levels/{grad}", cuda_quantize.qsgd_levels,
             (xs, f64, i64, ints, ints, ints, arr(f64), arr(types.int8))),
            (f"terngrad_maxima/{grad}", cuda_quantize.terngrad_maxima,
             (xs, ints, f64, arr(f64), ints, arr(f64), arr(i64))),
            (f"terngrad_levels/{grad}", cuda_quantize.terngrad_levels,
             (xs, ints, f64, arr(f64), ints, ints, ints, arr(f64), arr(types.int8))),
            (f"moments/{grad}", cuda_quantize.moments,
             (xs, i64, arr(f64, 2), arr(f64, 2))),
            (f"clip_bounds/{grad}", cuda_quantize.clip_bounds,
             (xs, f64, arr(f64, 2), arr(f64))),
        ]
    half = types.UniTuple(i64, k // 2)           # dequantize_parts: two arrays a tensor
    for total in (types.float32, types.float64):
        out.append((f"dequantize_parts/{total}", cuda_quantize.dequantize_parts,
                    (types.UniTuple(arr(types.int8), k // 2),
                     types.UniTuple(arr(types.float32), k // 2), half, half, half, arr(total))))
    out += [("terngrad_start", cuda_quantize.terngrad_start, (arr(f64), arr(i64))),
            ("terngrad_scales", cuda_quantize.terngrad_scales,
             (arr(f64), arr(i64), arr(types.float32), arr(f64))),
            ("concat", cuda_parts.concat,
             (types.UniTuple(arr(types.int8), k), ints, arr(types.int8)))]
    for total in (types.float32, types.float64):
        put = (arr(types.int8), arr(total), arr(total), i64, i64)      # put_level's arguments
        out += [
            (f"decode_streams/{total}", cuda_decode.decode_streams,
             (arr(u64), table, table, arr(i64), arr(i64), arr(u64, 2), i64, i64, i64) +
             put[:4] + (arr(i64),)),
            (f"decode_fixed/{total}", cuda_decode.decode_fixed,
             (arr(u64), i64, i64, i64, i64) + put + (arr(i64),)),
            (f"put_levels/{total}", cuda_decode.put_levels, (arr(types.int8),) + put),
            (f"put_constant/{total}", cuda_decode.put_constant, (i64, i64) + put),
            (f"ans decode_streams/{total}", cuda_ans.decode_streams,
             (arr(u64), table, table, arr(i64), arr(i64), arr(u64, 2), arr(types.uint8),
              arr(i64), table) + put[:4] + (arr(i64),)),
            (f"rla decode_streams/{total}", cuda_rla.decode_streams,
             (arr(u64), table, table, arr(i64), arr(i64), table, arr(u64, 2), buckets,
              buckets) + put[:4] + (arr(i64),)),
        ]
    maxima = arr(types.int32)
    out += [
        ("ans encode_chunks", cuda_ans.encode_chunks,
         (levels, table, table, arr(u64, 2), arr(u64, 2), arr(types.uint8), arr(u32), arr(i64))),
        ("ans pack_chunks", cuda_ans.pack_chunks,
         (arr(u32), arr(i64), arr(i64), arr(i64), arr(u32))),
        ("ans unit_layout", cuda_ans.unit_layout,
         (arr(i64), arr(i64), table, arr(i64), arr(i64), arr(i64))),
        ("ans block_maxima", cuda_ans.block_maxima, (levels, table, table, maxima)),
        ("ans context_counts", cuda_ans.context_counts, (levels, table, table, maxima, arr(i64))),
        ("rla token_statistics", cuda_rla.token_statistics,
         (levels, table, table, buckets, arr(u32), arr(i64), table)),
        ("rla encode_chunks", cuda_rla.encode_chunks,
         (levels, table, table, arr(u64, 2), arr(u64, 2), arr(u32), arr(u32), arr(i64))),
        ("rla write_extras", cuda_rla.write_extras,
         (table, buckets, arr(u32), arr(i64), arr(u32))),
    ]
    return out


# A launch's parameters, on every CUDA version and GPU (12.1 and sm_70 on allow 32,764).
MAX_PARAM_BYTES = 4096


def param_bytes(ptx):
    """Bytes of the parameters of the kernel entry in ``ptx``."""
    entry = ptx[ptx.index(".entry"):]
    entry = entry[:entry.index(")")]
    return sum(int(bits) // 8 * int(count or 1) for bits, count in re.findall(
        r"\.param\s+(?:\.align\s+\d+\s+)?\.[busf](\d+)\s+\w+(?:\[(\d+)\])?", entry))


def ptxas(ptx, cc, tool):
    """ptxas -v's resource line for ``ptx``, or why there is none."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([tool, f"-arch=sm_{cc[0]}{cc[1]}", "-v", src, "-o",
                               os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    lines = [line.split("info    : ", 1)[-1] for line in proc.stderr.splitlines()
             if "Used" in line or "spill" in line]
    return "; ".join(line.strip() for line in lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numba-cuda", help="a directory holding numba-cuda (pip --target)")
    p.add_argument("--cc", default="9.0", help="compute capability, e.g. 9.0 (H100/H200)")
    p.add_argument("--ptxas", default=os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                   "bin", "ptxas"))
    args = p.parse_args(argv)
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    if args.numba_cuda:
        sys.path.insert(0, args.numba_cuda)
        import _numba_cuda_redirector  # noqa: F401  (numba.cuda is numba-cuda's from here)
    from numba import cuda, types
    import numba.cuda.dispatcher as dispatcher
    cc = tuple(int(x) for x in args.cc.split("."))
    dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=cc)
    print(f"numba.cuda: {os.path.dirname(cuda.__file__)}; sm_{cc[0]}{cc[1]}")
    failed = 0
    for name, kernel, sig in kernels(types):
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
        params = param_bytes(ptx)
        line = (f"{name}: {len(ptx)} bytes of PTX, {ptx.count('fma.rn')} fma.rn, {params} "
                f"bytes of parameters")
        failed += ptx.count("fma.rn") > 0 or params > MAX_PARAM_BYTES
        if os.path.exists(args.ptxas):
            line += "; " + ptxas(ptx, cc, args.ptxas)
        print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
