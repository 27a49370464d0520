"""CUDA QSGD, TernGrad and dequantization, reproducing quantize.py's results exactly.

READ ME FIRST
1. Same counter-based randomness as the CPU (``uniform(seed, i)``: SplitMix64 of the index), so
   a tensor quantizes to the same levels on either device.
2. Exactness needs the same float64 operations in the same order: a bucket's sum of squares is
   one thread's loop in squares.py's order, and products go through ``dmul_rn``, which the
   compiler never fuses with a following add into an FMA (a fused multiply-add rounds once,
   not twice, and would change the sum). The simulator's
   libdevice lacks them, so there a plain product stands in.
3. QSGD takes two kernels: one thread per bucket for the scale (its sum of squares must keep
   squares.py's order), then one per element. TernGrad's max-norm is exact in any order, so
   blocks reduce a bucket's segments in parallel and merge them atomically
   (``terngrad_maxima``), then a thread per element draws the levels. A clip bound's
   standard deviation is summed in quantize.deviation's lanes and order (``moments``,
   ``clip_bounds``), so it is the host's, bit for bit, and never leaves the device.
   These kernels, and ``dequantize_parts``, take a tuple of tensors, the y index of the grid
   choosing one, so that a step's buckets take one launch (cuda_parts.py).
4. Decoders write level j through ``put_level``, which either stores the level or dequantizes
   it straight into a float total (assigned for the first rank, added for the next): the
   decode, dequantize and sum of ranks' streams in one pass, with no levels array. The result
   is the one ``dequantize`` then quantize.dequantize_add give on the host.
Units: buckets count elements; scales are float32, as on the CPU.
"""
import math

from numba import config, cuda, float32, float64, int64

from .cuda_bits import BLOCK
from .quantize import MOMENT_LANES, splitmix_uniform
from .squares import SUM_LANES

if config.ENABLE_CUDASIM:
    @cuda.jit(device=True)
    def mul_rn(a, b):
        return a * b
else:                                          # pragma: no cover - needs a GPU
    from numba.cuda import libdevice

    @cuda.jit(device=True, inline=True)
    def mul_rn(a, b):
        return libdevice.dmul_rn(a, b)


# ``put_level`` modes (note 4): store the level, or dequantize it into a total; bits of the mode.
PUT_LEVEL = 0
PUT_DEQUANTIZED = 1
PUT_ADD = 2          # add to the total rather than assign
PUT_WIDE = 4         # the total and its scales are float64


@cuda.jit(device=True, inline=True)
def put_level(out, total, scales, bucket, mode, j, level):
    """Level ``j`` of a decoded tensor, ``level``, into its destination: out[j] = level under
    PUT_LEVEL; else total[j] = (or +=, with PUT_ADD) scales[j // bucket] * level, the product
    rounded once to the total's precision before the add (never an FMA). For int8 and int16
    levels (every quantizer's) that is what ``dequantize`` computes, and
    quantize.dequantize_add on the host."""
    if mode == PUT_LEVEL:
        out[j] = level
        return
    if mode & PUT_WIDE:
        value = mul_rn(float64(scales[j // bucket]), float64(level))
        if mode & PUT_ADD:
            value = total[j] + value
        total[j] = value
    else:
        value32 = float32(mul_rn(float64(scales[j // bucket]), float64(level)))
        if mode & PUT_ADD:
            value32 = total[j] + value32
        total[j] = value32


uniform = cuda.jit(device=True, inline=True)(splitmix_uniform)     # quantize.uniform

# Elements of a TernGrad bucket one block of ``terngrad_maxima`` reduces at a time.
SEGMENT = 8 * BLOCK


@cuda.jit(device=True, inline=True)
def sum_squares(x, start, stop):
    """squares.sum_squares on the device, in the same order (squares.py's note): SUM_LANES lane
    sums, a fixed tree over them, then the tail element by element."""
    lane = cuda.local.array(SUM_LANES, float64)
    for k in range(SUM_LANES):
        lane[k] = 0.0
    rows = (stop - start) // SUM_LANES
    for r in range(rows):
        for k in range(SUM_LANES):
            v = float64(x[start + SUM_LANES * r + k])
            lane[k] += mul_rn(v, v)
    total = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + \
        ((lane[1] + lane[5]) + (lane[3] + lane[7]))
    for i in range(start + rows * SUM_LANES, stop):
        v = float64(x[i])
        total += mul_rn(v, v)
    return total


@cuda.jit(cache=True)
def qsgd_scales(xs, s, bucket, firsts, scales, inv):
    """Per bucket b of tensor p (``xs[p]``, 1-D; p = blockIdx.y): scales[firsts[p] + b] =
    norm / s (float32; NaN for a non-finite norm, 0 for a zero one) and inv[firsts[p] + b] =
    s / norm (0 where levels must be 0). One thread per bucket, any grid along x (note 3)."""
    p = cuda.blockIdx.y
    x, at = xs[p], firsts[p]
    n = x.shape[0]
    for b in range(cuda.grid(1), (n + bucket - 1) // bucket, cuda.gridsize(1)):
        start = int64(b) * bucket
        norm = math.sqrt(sum_squares(x, start, min(start + bucket, n)))
        if not math.isfinite(norm) or norm == 0.0:
            scales[at + b] = math.nan if not math.isfinite(norm) else 0.0
            inv[at + b] = 0.0
        else:
            scales[at + b] = norm / s
            inv[at + b] = s / norm


@cuda.jit(cache=True)
def qsgd_levels(xs, s, bucket, seeds, firsts, starts, inv, levels):
    """Element i of tensor p (as ``qsgd_scales``): levels[starts[p] + i] = sign(x) *
    stochastic_round(|x| * inv[firsts[p] + i // bucket]), at most s, drawn with
    uniform(seeds[p], i) as the host draws for that tensor alone. Any grid along x."""
    p = cuda.blockIdx.y
    x, seed, first, at = xs[p], seeds[p], firsts[p], starts[p]
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        r = inv[first + i // bucket]
        if r == 0.0:
            levels[at + i] = 0
            continue
        v = float64(x[i])
        scaled = mul_rn(abs(v), r)
        q = math.floor(scaled)
        if uniform(seed, i) < scaled - q:
            q += 1.0
        if q > s:
            q = s
        levels[at + i] = -q if v < 0 else q


@cuda.jit(cache=True)
def terngrad_maxima(xs, buckets, clip, clip_ats, firsts, maxima, finite):
    """Bucket b of tensor p (``xs[p]``, ``buckets[p]`` elements per bucket, clipped at
    clip_ats[p] where ``clip`` > 0 and that bound is > 0; p = blockIdx.y): maxima[firsts[p] +
    b] = max of its clipped |x|, finite[firsts[p] + b] = 0 if a value is not finite, both
    starting at 0 and 1 (``terngrad_start``). A block reduces SEGMENT elements of a bucket at
    a time and merges its maximum atomically: a maximum is exact in any order, so the result
    is the host's. Any grid along x."""
    p = cuda.blockIdx.y
    x, bucket, first = xs[p], buckets[p], firsts[p]
    clip_at = clip_ats[p] if clip > 0.0 else 0.0
    n = x.shape[0]
    per_bucket = (bucket + SEGMENT - 1) // SEGMENT
    n_buckets = (n + bucket - 1) // bucket
    best = cuda.shared.array(BLOCK, float64)
    bad = cuda.shared.array(BLOCK, int64)
    t = cuda.threadIdx.x
    for s in range(cuda.blockIdx.x, n_buckets * per_bucket, cuda.gridDim.x):
        b = s // per_bucket
        start = int64(b) * bucket + (s % per_bucket) * SEGMENT
        stop = min(start + SEGMENT, min(int64(b + 1) * bucket, n))
        m = 0.0
        ok = 1
        for i in range(start + t, stop, BLOCK):
            a = abs(float64(x[i]))
            if not math.isfinite(a):
                ok = 0
            if clip_at > 0.0 and a > clip_at:
                a = clip_at
            if a > m:
                m = a
        best[t] = m
        bad[t] = 1 - ok
        cuda.syncthreads()
        half = BLOCK // 2
        while half > 0:
            if t < half:
                if best[t + half] > best[t]:
                    best[t] = best[t + half]
                bad[t] |= bad[t + half]
            cuda.syncthreads()
            half //= 2
        if t == 0 and start < stop:
            cuda.atomic.max(maxima, first + b, best[0])
            if bad[0]:
                finite[first + b] = 0
        cuda.syncthreads()


@cuda.jit(cache=True)
def terngrad_start(maxima, finite):
    """maxima[b] = 0 and finite[b] = 1, before ``terngrad_maxima``. Any grid."""
    for b in range(cuda.grid(1), maxima.shape[0], cuda.gridsize(1)):
        maxima[b] = 0.0
        finite[b] = 1


@cuda.jit(cache=True)
def terngrad_scales(maxima, finite, scales, max_norm):
    """Per bucket, from ``terngrad_maxima``'s m: scales = m as float32 (NaN if a value is
    non-finite), max_norm = m as float64 (0 where levels must be 0). Any grid."""
    for b in range(cuda.grid(1), maxima.shape[0], cuda.gridsize(1)):
        m = maxima[b]
        scales[b] = m if finite[b] else math.nan
        max_norm[b] = m if finite[b] else 0.0


@cuda.jit(cache=True)
def terngrad_levels(xs, buckets, clip, clip_ats, seeds, firsts, starts, max_norm, levels):
    """Element i of tensor p (as ``terngrad_maxima``): levels[starts[p] + i] = sign(x) *
    Bernoulli(|x| / m), m = max_norm[firsts[p] + i // buckets[p]], drawn with
    uniform(seeds[p], i) as the host draws for that tensor alone. Any grid along x."""
    p = cuda.blockIdx.y
    x, bucket, seed = xs[p], buckets[p], seeds[p]
    clip_at = clip_ats[p] if clip > 0.0 else 0.0
    first, at = firsts[p], starts[p]
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        m = max_norm[first + i // bucket]
        levels[at + i] = 0
        if m == 0.0:
            continue
        v = float64(x[i])
        a = abs(v)
        if clip_at > 0.0 and a > clip_at:
            a = clip_at
        if uniform(seed, i) < a / m:
            levels[at + i] = -1 if v < 0 else 1


# Blocks along x of ``moments``: each sums MOMENT_LANES // MOMENT_BLOCKS of a tensor's lanes
# (quantize.deviation's), a thread a lane on a GPU (fewer blocks under the simulator, which
# runs every thread in Python).
MOMENT_BLOCKS = 2 if config.ENABLE_CUDASIM else MOMENT_LANES // BLOCK
assert MOMENT_LANES % (MOMENT_BLOCKS * BLOCK) == 0


@cuda.jit(cache=True)
def moments(xs, second, sums, squares):
    """Tensor p (``xs[p]``, p = blockIdx.y): with ``second`` 0, sums[p, j] = lane j's sum of
    the elements (quantize.deviation's lanes); with ``second`` 1, squares[p, j] = lane j's
    sum of (x - mean)**2, the mean being sums[p, :] added in order over the tensor's size.
    Block b takes the lanes [b * L, (b + 1) * L), L = MOMENT_LANES // MOMENT_BLOCKS, thread t
    those from b * L + t, BLOCK apart. Grid: (MOMENT_BLOCKS, tensors) blocks of BLOCK
    threads."""
    shared = cuda.shared.array(1, float64)
    p = cuda.blockIdx.y
    t = cuda.threadIdx.x
    x = xs[p]
    n = x.shape[0]
    shift = 0.0
    if second:
        if t == 0:
            total = 0.0
            for j in range(MOMENT_LANES):
                total += sums[p, j]
            shared[0] = total / n if n else 0.0
        cuda.syncthreads()
        shift = shared[0]
    per_block = MOMENT_LANES // MOMENT_BLOCKS
    for lane in range(cuda.blockIdx.x * per_block + t, (cuda.blockIdx.x + 1) * per_block,
                      BLOCK):
        acc = 0.0
        for i in range(lane, n, MOMENT_LANES):
            d = float64(x[i]) - shift
            acc += mul_rn(d, d) if second else d
        if second:
            squares[p, lane] = acc
        else:
            sums[p, lane] = acc


@cuda.jit(cache=True)
def clip_bounds(xs, clip, squares, clip_ats):
    """clip_ats[p] = clip * the standard deviation of tensor p (the square root of
    squares[p, :] added in order over its size, as quantize.deviation; 0 for an empty
    tensor). Grid: (1, tensors), one thread each."""
    p = cuda.blockIdx.y
    n = xs[p].shape[0]
    total = 0.0
    for j in range(MOMENT_LANES):
        total += squares[p, j]
    clip_ats[p] = mul_rn(clip, math.sqrt(total / n)) if n else 0.0


@cuda.jit(cache=True)
def convert(src, dst):
    """dst[i] = src[i] in dst's dtype (float32 scales -> float64 for float64 tensors). Any grid."""
    for i in range(cuda.grid(1), src.shape[0], cuda.gridsize(1)):
        dst[i] = src[i]


@cuda.jit(cache=True)
def dequantize(levels, scales, bucket, out):
    """out[i] = scales[i // bucket] * levels[i], in the scales' precision (float32 scales into a
    float32 out for float16/32 tensors, float64 for float64: as quantize.dequantize). Any grid."""
    for i in range(cuda.grid(1), levels.shape[0], cuda.gridsize(1)):
        out[i] = scales[i // bucket] * levels[i]


@cuda.jit(cache=True)
def dequantize_parts(levels, scales, buckets, offsets, modes, total):
    """Tensor p (``levels[p]``, ``scales[p]``, ``buckets[p]`` elements per scale; p =
    blockIdx.y) into total[offsets[p]:], assigned or added as ``modes[p]`` (a put_level mode
    with PUT_DEQUANTIZED, and PUT_WIDE for a float64 total): what ``dequantize`` of each
    gives, or quantize.dequantize_add adds on the host. Any grid along x."""
    p = cuda.blockIdx.y
    lv, sc, bucket, mode = levels[p], scales[p], buckets[p], modes[p]
    out = total[offsets[p]:offsets[p] + lv.shape[0]]
    for i in range(cuda.grid(1), lv.shape[0], cuda.gridsize(1)):
        put_level(lv, out, sc, bucket, mode, i, lv[i])
