"""CUDA element-wise and per-bucket steps of error feedback (the device side of
exchange.codec_state.Codec; summing ranks' gradients is cuda_quantize.put_level's, in the
decoders and ``dequantize_parts``).

READ ME FIRST
1. ``contract`` computes, per bucket b, the scale times a_b = <x_b, Q_b> / |Q_b|^2 with
   Q_b = scale_b * levels_b, as <x_b, levels_b> / |levels_b|^2 (quantize.contract_scales on the
   host). One thread per bucket sums in float64, in index order, so the scale is reproducible;
   the host's vectorized sums may differ in the last bits, which only matters for comparing a
   GPU rank's residuals with a CPU rank's.
2. ``clear_if_nonfinite`` and ``keep_if`` let error feedback keep its residuals through a
   non-finite step without a host round trip: the flag stays on the device.
3. Everything else is one thread per element in a grid-stride loop.
Units: buckets count elements; scales are float32.
"""
import math

from numba import cuda, float64, int64


@cuda.jit(cache=True)
def add(a, b, out):
    """out[i] = a[i] + b[i]. Any grid."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = a[i] + b[i]


@cuda.jit(cache=True)
def scale(x, factor):
    """x[i] *= factor. Any grid."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        x[i] *= factor


@cuda.jit(cache=True)
def contract(x, levels, scales, bucket, out_scales):
    """out_scales[b] = <x_b, l_b> / |l_b|^2 over bucket b's levels l_b (scales[b] * 0 when they
    are all zero: a NaN scale, a non-finite bucket, stays NaN). One thread per bucket."""
    b = cuda.grid(1)
    if b >= scales.shape[0]:
        return
    dot = 0.0
    norm2 = 0.0
    start = int64(b) * bucket
    for i in range(start, min(start + bucket, x.shape[0])):
        level = float64(levels[i])
        dot += float64(x[i]) * level
        norm2 += level * level
    out_scales[b] = dot / norm2 if norm2 > 0.0 else scales[b] * 0.0


@cuda.jit(cache=True)
def fill(flag, value):
    """flag[0] = value. One thread."""
    if cuda.grid(1) == 0:
        flag[0] = value


@cuda.jit(cache=True)
def clear_if_nonfinite(x, flag):
    """flag[0] = 0 when some x[i] is Inf or NaN (every writer writes the same 0). Any grid."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        if not math.isfinite(x[i]):
            flag[0] = 0


@cuda.jit(cache=True)
def keep_if(flag, new, old):
    """Unless flag[0] is 1: new[i] = old[i], or 0 where ``old`` is empty. Any grid."""
    if flag[0] == 1:
        return
    for i in range(cuda.grid(1), new.shape[0], cuda.gridsize(1)):
        new[i] = old[i] if old.shape[0] else 0.0


@cuda.jit(cache=True)
def residual(x, levels, scales, bucket, out):
    """out[i] = x[i] - scales[i // bucket] * levels[i]: what error feedback carries over. Any grid."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        out[i] = x[i] - scales[i // bucket] * levels[i]
