"""QSGD and TernGrad quantization kernels, and dequantization.

READ ME FIRST
1. Randomness is counter-based: the uniform for element i is a hash of (seed, i) (SplitMix64),
   so results do not depend on thread count or device, and the GPU kernels can reproduce them.
2. Scales are stored ready to multiply: QSGD stores norm / s, TernGrad the max-norm, so
   dequantization is ``scale[i // bucket] * level[i]`` for every quantizer.
3. A bucket holding NaN or Inf gets scale NaN and zero levels, so the non-finite value survives
   dequantization (loss scalers look for it) instead of turning into garbage levels. So does a
   float64 bucket whose sum of squares overflows: its scale, norm / s, could not be a float32
   anyway (|x| > 1.3e154 against float32's 3.4e38), and error feedback treats both alike
   (``all_finite``).
Units: buckets count elements; levels are signed integers in [-s, s].
"""
import math

import numpy as np
from numba import njit, uint64, float64

from .squares import sum_squares

_GOLDEN = uint64(0x9E3779B97F4A7C15)       # 2**64 / golden ratio: SplitMix64's increment
_MIX1 = uint64(0xBF58476D1CE4E5B9)          # SplitMix64 finalizer constants (Vigna)
_MIX2 = uint64(0x94D049BB133111EB)
_TO_UNIT = 1.0 / 9007199254740992.0         # 2**-53: 53 random bits -> [0, 1)


def splitmix_uniform(seed, index):
    """A uniform float64 in [0, 1) for (seed, index). Plain Python compiled twice: ``uniform``
    here, and as a device function in cuda_quantize.py, so both devices draw the same numbers."""
    z = uint64(seed) + uint64(index + 1) * _GOLDEN
    z = (z ^ (z >> uint64(30))) * _MIX1
    z = (z ^ (z >> uint64(27))) * _MIX2
    z = z ^ (z >> uint64(31))
    return float64(z >> uint64(11)) * _TO_UNIT


uniform = njit(cache=True, inline="always")(splitmix_uniform)


@njit(cache=True, inline="always")
def max_norm(x, start, stop, clip_at):
    """(max |x[i]| over [start, stop) after clipping at ``clip_at`` > 0, whether all x[i] were
    finite)."""
    m = 0.0
    finite = True
    for i in range(start, stop):
        a = abs(float64(x[i]))
        if not math.isfinite(a):
            finite = False
        if clip_at > 0.0 and a > clip_at:
            a = clip_at
        if a > m:
            m = a
    return m, finite


@njit(cache=True, nogil=True)
def qsgd(x, s, bucket, seed, levels, scales):
    """QSGD: per bucket L2 norm (its squares summed in squares.py's order); level = sign(x) *
    stochastic_round(|x| / norm * s)."""
    n = x.shape[0]
    for b in range(scales.shape[0]):
        start = b * bucket
        stop = min(start + bucket, n)
        norm = math.sqrt(sum_squares(x, start, stop))
        if not math.isfinite(norm) or norm == 0.0:
            scales[b] = np.nan if not math.isfinite(norm) else 0.0
            for i in range(start, stop):
                levels[i] = 0
            continue
        scales[b] = norm / s
        inv = s / norm
        # Branch-free over slices, so that LLVM vectorizes the loop (twice as fast as the
        # same arithmetic written with branches over x[i]).
        xs, out = x[start:stop], levels[start:stop]
        for j in range(stop - start):
            v = float64(xs[j])
            p = abs(v) * inv
            q = math.floor(p)
            q = q + (1.0 if uniform(seed, start + j) < p - q else 0.0)
            q = min(q, s)
            out[j] = -q if v < 0 else q


# Lanes of ``deviation``'s sums: lane j adds elements j, j + MOMENT_LANES, ... in order, and
# the lanes are then added in order. The GPU sums the same lanes (cuda_quantize.moments), so
# both devices clip TernGrad's gradients at the same bound, bit for bit.
MOMENT_LANES = 4096


@njit(cache=True, nogil=True)
def deviation(x):
    """Population standard deviation of ``x`` (float64; 0 for no elements): the mean, then
    the mean square of x - mean, each summed in MOMENT_LANES lanes."""
    n = x.shape[0]
    if n == 0:
        return 0.0
    lanes = np.zeros(MOMENT_LANES)
    for i in range(n):
        lanes[i % MOMENT_LANES] += float64(x[i])
    mean = _lanes_total(lanes) / n
    lanes[:] = 0.0
    for i in range(n):
        d = float64(x[i]) - mean
        lanes[i % MOMENT_LANES] += d * d
    return math.sqrt(_lanes_total(lanes) / n)


@njit(cache=True, inline="always")
def _lanes_total(lanes):
    total = 0.0
    for j in range(lanes.shape[0]):
        total += lanes[j]
    return total


@njit(cache=True, nogil=True)
def terngrad(x, bucket, clip_at, seed, levels, scales):
    """TernGrad: per bucket max-norm m; level = sign(x) * Bernoulli(|x| / m), x clipped to
    [-clip_at, clip_at] first when clip_at > 0."""
    n = x.shape[0]
    for b in range(scales.shape[0]):
        start = b * bucket
        stop = min(start + bucket, n)
        m, finite = max_norm(x, start, stop, clip_at)
        if not finite or m == 0.0:
            scales[b] = 0.0 if finite else np.nan
            for i in range(start, stop):
                levels[i] = 0
            continue
        scales[b] = m
        for i in range(start, stop):
            v = float64(x[i])
            a = abs(v)
            if clip_at > 0.0 and a > clip_at:
                a = clip_at
            levels[i] = 0
            if uniform(seed, i) < a / m:
                levels[i] = -1 if v < 0 else 1


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def contract_scales(x, levels, scales, bucket, out):
    """Error feedback's contraction: out[b] = <x_b, l_b> / |l_b|^2 for the levels l_b of bucket
    b, which equals scales[b] * a_b with a_b = <x_b, Q_b> / |Q_b|^2, Q_b = scales[b] * l_b (the
    factor that makes x_b - a_b Q_b orthogonal to Q_b), computed without Q_b: in float64 over
    small integers, so no finite x overflows it. A bucket of zero levels keeps scales[b] * 0
    (NaN stays NaN). ``reassoc`` lets LLVM vectorize the two sums (no NaN or Inf can reach a
    bucket with a nonzero level)."""
    n = x.shape[0]
    for b in range(scales.shape[0]):
        start = b * bucket
        stop = min(start + bucket, n)
        xs, ls = x[start:stop], levels[start:stop]
        dot = 0.0
        norm2 = 0.0
        for j in range(stop - start):
            level = float64(ls[j])
            dot += float64(xs[j]) * level
            norm2 += level * level
        out[b] = dot / norm2 if norm2 > 0.0 else scales[b] * 0.0


@njit(cache=True, nogil=True)
def nonfinite_count(bits, exponent):
    """How many of a float array's raw bits (uint32 for float32, uint64 for float64) have every
    bit of ``exponent``, the exponent mask, set: its Inf and NaN elements. A sum of integer
    tests vectorizes (0.16 ns an element, as fast as NumPy's isfinite + all, with no temporary
    array); a running max or an early exit does not."""
    count = 0
    for i in range(bits.shape[0]):
        count += (bits[i] & exponent) == exponent
    return count


def all_finite(x):
    """Whether every element of the float32 or float64 NumPy array ``x`` (a work array) is
    finite."""
    x = np.ascontiguousarray(x).reshape(-1)
    if x.dtype == np.float64:
        mask = np.uint64(0x7FF0000000000000)        # float64's 11 exponent bits
        return nonfinite_count(x.view(np.uint64), mask) == 0
    mask = np.uint32(0x7F800000)                    # float32's 8 exponent bits
    return nonfinite_count(x.view(np.uint32), mask) == 0


@njit(cache=True, nogil=True)
def dequantize(levels, scales, bucket, out):
    """out[i] = scales[i // bucket] * levels[i]."""
    for b in range(scales.shape[0]):
        scale = scales[b]
        start = b * bucket
        stop = min(start + bucket, levels.shape[0])
        src, dst = levels[start:stop], out[start:stop]      # slices: LLVM vectorizes
        for j in range(stop - start):
            dst[j] = scale * src[j]


@njit(cache=True, nogil=True)
def dequantize_add(levels, scales, bucket, out):
    """out[i] += scales[i // bucket] * levels[i]: the product rounded as ``dequantize`` rounds
    it, then added, so summing ranks this way equals dequantizing each and adding."""
    for b in range(scales.shape[0]):
        scale = scales[b]
        start = b * bucket
        stop = min(start + bucket, levels.shape[0])
        src, dst = levels[start:stop], out[start:stop]
        for j in range(stop - start):
            dst[j] += scale * src[j]
