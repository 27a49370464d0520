"""CUDA element-wise and per-bucket steps of error feedback (the device side of
exchange.Codec; summing ranks' gradients is cuda_quantize.dequantize_add32 / dequantize_add64).

READ ME FIRST
1. ``contract`` computes, per bucket b, a_b = <x_b, Q_b> / |Q_b|^2 with Q_b = scale_b * levels_b
   and multiplies the bucket's scale by it (exchange.contract on the host). One thread per
   bucket sums in float64, so the factor is reproducible; it is not bitwise the host's float32
   reduction, which only matters for comparing a GPU rank's residuals with a CPU rank's.
2. Everything else is one thread per element in a grid-stride loop.
Units: buckets count elements; scales are float32.
"""
from numba import cuda, float64, int64


@cuda.jit
def add(a, b, out):
    """out[i] = a[i] + b[i]. Any grid."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = a[i] + b[i]


@cuda.jit
def scale(x, factor):
    """x[i] *= factor. Any grid."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        x[i] *= factor


@cuda.jit
def contract(x, levels, scales, bucket, out_scales):
    """out_scales[b] = scales[b] * <x_b, Q_b> / |Q_b|^2 (0 when Q_b = 0). One thread per bucket."""
    b = cuda.grid(1)
    if b >= scales.shape[0]:
        return
    s = float64(scales[b])
    dot = 0.0
    norm2 = 0.0
    start = int64(b) * bucket
    for i in range(start, min(start + bucket, x.shape[0])):
        q = s * float64(levels[i])
        dot += float64(x[i]) * q
        norm2 += q * q
    # s * 0 keeps a NaN scale (a non-finite bucket) NaN, as the host does.
    out_scales[b] = s * (dot / norm2) if norm2 > 0.0 else s * 0.0


@cuda.jit
def residual(x, levels, scales, bucket, out):
    """out[i] = x[i] - scales[i // bucket] * levels[i]: what error feedback carries over. Any grid."""
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        out[i] = x[i] - scales[i // bucket] * levels[i]
