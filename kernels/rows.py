"""Rank-one row predictions of levels (the row model of encoder ``ans``).

READ ME FIRST
1. A weight's gradient is a sum of outer products, one per example and time step; early in
   training, or wherever the inputs of a layer point one way, one product dominates and the
   gradient's rows are multiples of one profile. QSGD keeps that: the levels of row r of a
   matrix lie near u_r * v_j.
2. The model is integer arithmetic, so that every decoder predicts the same levels: a segment
   of ``rows`` x ``length`` levels (row-major, from ``offset``) has a profile v (``length``
   values in [-PROFILE_MAX, PROFILE_MAX]) and a gain u per row (in [-GAIN_MAX, GAIN_MAX]);
   level (r, j) is predicted as (u_r * v_j + 2**(GAIN_SHIFT - 1)) >> GAIN_SHIFT, clipped to
   [-clip, clip]. Levels outside every segment are predicted 0.
3. The coder codes level - prediction as it codes levels (kernels/ans.py); the decoder adds the
   predictions back.
4. |u * v| < 2**22 and |prediction| <= PREDICTION_MAX < 2**15, so a prediction is 32-bit
   arithmetic, and so is its sum with a level or residual of at most 16 bits. Every value is
   cast back to int32 after each operation: Numba widens int32 arithmetic to int64, and LLVM
   then vectorizes 4 lanes of int64 where it could take 8 or 16 of int32.
5. The encoder's plan of the residuals wants every block's largest |residual|
   (kernels/ans_plans.py). ``add_predictions`` takes them a tile of rows at a time, while
   the tile is in the L1 cache: a pass of its own after the residuals were written read 2 MB
   of them back from farther out.
Units: levels; offsets and lengths in levels.
"""
import numpy as np
from numba import njit, float32, int32, int64

from .ans_plans import block_maxima

PROFILE_MAX = 127
GAIN_MAX = 32767
GAIN_SHIFT = 7
# The largest |prediction| a model can make, and so the largest clip.
PREDICTION_MAX = (GAIN_MAX * PROFILE_MAX + (1 << (GAIN_SHIFT - 1))) >> GAIN_SHIFT

# Values of a row whose dot product with a profile a 32-bit sum holds (16-bit levels).
DOT_SPAN = 256
# Levels (whole rows, at least one) that ``add_predictions`` writes before it takes their
# block maxima (note 5): 16 KB of int16 sums, which the L1 cache still holds.
TILE_LEVELS = 1 << 13

assert PROFILE_MAX * GAIN_MAX < 2**31 and PROFILE_MAX < 2**15
assert DOT_SPAN * 2**15 * PROFILE_MAX < 2**31


@njit(cache=True, nogil=True)
def add_predictions(src, sign, offsets, rows, lengths, profiles, gains, clip, out, maxima=None,
                    block_bits=0):
    """out = src + sign * every level's prediction (note 2; ``sign`` +1 or -1), in one pass:
    segment k covers ``rows[k] * lengths[k]`` levels from ``offsets[k]``, its profile is the
    next ``lengths[k]`` values of ``profiles`` and its gains the next ``rows[k]`` of ``gains``
    (segments in order, inside the levels, not overlapping, lengths >= 1: checked by the
    caller); levels outside every segment are predicted 0. Returns (the least, the largest) of
    the sums, as computed before ``out``'s dtype holds them (the caller checks them against
    it; (0, 0) for no levels). Encoding: the residuals (levels - predictions); decoding: the
    levels (residuals + predictions). ``src`` of at most 16 bits is summed in 32 bits (note
    4). ``maxima`` (int64, one per block of 2**``block_bits`` levels of ``out``, or None):
    every block's largest |sum| (ans_plans.block_maxima's), taken a tile of TILE_LEVELS at a
    time, while the tile's sums are in the cache (note 5)."""
    narrow = src.itemsize <= 2
    if src.shape[0] == 0:
        return int64(0), int64(0)
    vmin, vmax = int64(0x7FFFFFFFFFFFFFFF), int64(-0x8000000000000000)
    done, p0, g0, blocks = 0, 0, 0, 0
    for k in range(offsets.shape[0] + 1):
        at = offsets[k] if k < offsets.shape[0] else src.shape[0]
        for i in range(done, at):                    # no segment: predicted 0
            v = int64(src[i])
            vmin, vmax = min(vmin, v), max(vmax, v)
            out[i] = v
        if k == offsets.shape[0]:
            break
        n_rows, length = rows[k], lengths[k]
        v32 = np.empty(length, dtype=np.int32)
        for j in range(length):
            v32[j] = profiles[p0 + j]
        c, flip = int32(clip), int32(0) if sign > 0 else int32(-1)
        tile = max(1, TILE_LEVELS // length)         # rows per tile
        for r0 in range(0, n_rows, tile):
            r1 = min(n_rows, r0 + tile)
            seg_src, seg_out = src[at + r0 * length:at + r1 * length], \
                out[at + r0 * length:at + r1 * length]
            seg_gains = gains[g0 + r0:g0 + r1]
            if narrow:                               # (literal arguments: two compiled loops)
                low, high = _narrow_rows(seg_src, seg_out, v32, seg_gains, c, flip)
            else:
                low, high = _wide_rows(seg_src, seg_out, v32, seg_gains, c, flip)
            vmin, vmax = min(vmin, low), max(vmax, high)
            if maxima is not None:
                blocks = _whole_block_maxima(out, at + r1 * length, block_bits, blocks, maxima)
        done = at + n_rows * length
        p0 += length
        g0 += n_rows
    if maxima is not None and blocks < maxima.shape[0]:
        block_maxima(out[blocks << block_bits:], block_bits, maxima[blocks:])
    return vmin, vmax


@njit(cache=True, inline="always")
def _whole_block_maxima(out, end, block_bits, blocks, maxima):
    """``block_maxima`` of the blocks from ``blocks`` that out[:end] holds whole; returns the
    first block not taken."""
    whole = end >> block_bits
    if whole > blocks:
        block_maxima(out[blocks << block_bits:whole << block_bits], block_bits,
                     maxima[blocks:whole])
        return whole
    return blocks


@njit(cache=True, inline="always")
def _prediction(u, v, c, flip):
    """sign * clamp((u * v + half) >> GAIN_SHIFT, -c, c) in 32 bits (``flip`` 0 for sign +1,
    -1 for sign -1: p ^ flip - flip is p or -p)."""
    p = int32(int32(u * v + int32(1 << (GAIN_SHIFT - 1))) >> int32(GAIN_SHIFT))
    p = p if p < c else c
    p = p if p > int32(-c) else int32(-c)
    return int32(int32(p ^ flip) - flip)


@njit(cache=True, inline="always")
def _narrow_rows(src, out, profile, gains, c, flip):
    """out = src + prediction (``_prediction``) over rows of len(``profile``) (int32) levels,
    a gain each, for |src| below 2**16, so that every value fits 32 bits and so does the whole
    loop (note 4); returns (the least, the largest) sum (for no levels, the largest and the
    least int32). (A loop of its own: a least and largest that may be int64 on another path
    make Numba type them int64 on both.)"""
    length = profile.shape[0]
    vmin, vmax = int32(0x7FFFFFFF), int32(-0x80000000)
    for r in range(gains.shape[0]):
        row_src, row_out = src[r * length:(r + 1) * length], out[r * length:(r + 1) * length]
        u = int32(gains[r])
        for j in range(length):
            v = int32(int32(row_src[j]) + _prediction(u, profile[j], c, flip))
            vmin = v if v < vmin else vmin
            vmax = v if v > vmax else vmax
            row_out[j] = v
    return int64(vmin), int64(vmax)


@njit(cache=True, inline="always")
def _wide_rows(src, out, profile, gains, c, flip):
    """``_narrow_rows``'s loop with 64-bit sums."""
    length = profile.shape[0]
    vmin, vmax = int64(0x7FFFFFFFFFFFFFFF), int64(-0x8000000000000000)
    for r in range(gains.shape[0]):
        row_src, row_out = src[r * length:(r + 1) * length], out[r * length:(r + 1) * length]
        u = int32(gains[r])
        for j in range(length):
            v = int64(row_src[j]) + int64(_prediction(u, profile[j], c, flip))
            vmin, vmax = min(vmin, v), max(vmax, v)
            row_out[j] = v
    return vmin, vmax


@njit(cache=True, nogil=True, fastmath=True)
def row_energies(levels, at, rows, length, step, out):
    """The energy (sum of squares, float64) of every ``step``-th of ``rows`` rows of ``length``
    levels from ``at`` into ``out`` (one entry per row taken); returns their total. (fastmath
    here and in ``power_step``: the fit's floating point need not be the same on every
    machine; only its integers are sent.)"""
    total = 0.0
    for r in range(0, rows, step):
        row = levels[at + r * length:at + (r + 1) * length]
        e = float32(0.0)
        for j in range(length):
            x = float32(row[j])
            e += x * x
        out[r // step] = e
        total += e
    return total


@njit(cache=True, nogil=True, fastmath=True)
def power_step(levels, at, rows, length, step, v, v_next, energy):
    """One power iteration on every ``step``-th row of the matrix of ``rows`` x ``length``
    levels from ``at``, each row read once: u = M v, v_next = M^T u (float32). Returns (|u|^2,
    with ``energy`` (a literal) the rows' energy, else 0)."""
    v_next[:] = 0.0
    norm, total = 0.0, 0.0
    for r in range(0, rows, step):
        row = levels[at + r * length:at + (r + 1) * length]
        dot, e = float32(0.0), float32(0.0)
        for j in range(length):
            x = float32(row[j])
            dot += x * v[j]
            if energy:
                e += x * x
        norm += float(dot) * float(dot)
        total += e
        for j in range(length):
            v_next[j] += dot * float32(row[j])
    return norm, total


@njit(cache=True, nogil=True)
def row_gains(levels, at, rows, length, profile, out):
    """Each row's least-squares gain on the integer ``profile`` in units of 2**-GAIN_SHIFT,
    rounded and clipped to [-GAIN_MAX, GAIN_MAX], into ``out`` (int64). The profile is taken
    as int16 (|v| <= PROFILE_MAX); levels of at most 16 bits take their dot products in 32
    bits, DOT_SPAN values at a time (note 4)."""
    scale = 0.0
    p16 = np.empty(length, dtype=np.int16)
    for j in range(length):
        scale += float(profile[j]) * float(profile[j])
        p16[j] = profile[j]
    narrow = levels.itemsize <= 2
    for r in range(rows):
        row = levels[at + r * length:at + (r + 1) * length]
        dot = int64(0)
        if narrow:
            for j0 in range(0, length, DOT_SPAN):
                dot += _narrow_dot(row[j0:j0 + DOT_SPAN], p16[j0:j0 + DOT_SPAN])
        else:
            for j in range(length):
                dot += int64(row[j]) * int64(p16[j])
        g = np.rint(dot * float(1 << GAIN_SHIFT) / scale)
        out[r] = int64(min(max(g, -GAIN_MAX), GAIN_MAX))


@njit(cache=True, inline="always")
def _narrow_dot(a, b):
    """The dot product of at most DOT_SPAN values of at most 16 bits with int16 profile
    values, in 32 bits (products of two 16-bit values, which LLVM sums in pairs: vpmaddwd)."""
    dot = int32(0)
    for j in range(a.shape[0]):
        dot = int32(dot + int32(int32(a[j]) * int32(b[j])))
    return dot


@njit(cache=True, nogil=True)
def _energy(levels, at, rows, length, step):
    """The energy of every ``step``-th row (``row_energies``'s total)."""
    return row_energies(levels, at, rows, length, step, np.empty(-(-rows // step)))


@njit(cache=True, nogil=True)
def fit_profile(levels, at, rows, length, iterations, step, coarse_step, profile):
    """A rank-one fit of the matrix of ``rows`` x ``length`` levels from ``at`` by
    ``iterations`` (at least 1) power iterations from the row of most energy among every
    ``coarse_step``-th row (a multiple of ``step``): all but the last on those rows (the
    direction comes near the sample's at a fraction of the cost), the last on every
    ``step``-th. Fills ``profile`` (int64, ``length`` values, the fit's row direction scaled
    to PROFILE_MAX) and returns (|M v|^2 / |v|^2 of the last iteration, the energy the fit
    keeps at least; the energy), both of every ``step``-th row. The kept energy is 0 where
    they or their fit are zero (``profile`` then unset)."""
    energies = np.empty(-(-rows // coarse_step))
    if row_energies(levels, at, rows, length, coarse_step, energies) == 0.0:
        return 0.0, _energy(levels, at, rows, length, step)
    first = at + int64(np.argmax(energies)) * coarse_step * length
    v = np.empty(length, dtype=np.float32)
    for j in range(length):
        v[j] = float32(levels[first + j])
    v_next = np.empty(length, dtype=np.float32)
    along, total = 0.0, 0.0
    for k in range(iterations):
        last = k == iterations - 1
        if last:
            along, total = power_step(levels, at, rows, length, step, v, v_next, True)
        else:
            along, _ = power_step(levels, at, rows, length, coarse_step, v, v_next, False)
        along /= float(np.dot(v, v))
        norm = np.abs(v_next).max()
        if norm == 0.0:
            return 0.0, total if last else _energy(levels, at, rows, length, step)
        for j in range(length):
            v[j] = v_next[j] / norm
    for j in range(length):
        profile[j] = int64(np.rint(v[j] * PROFILE_MAX))
    return along, total


@njit(cache=True, nogil=True)
def fit_matrices(levels, offsets, rows, lengths, iterations, fit_rows, coarse_rows, fit_share,
                 profiles, gains, kept, energies):
    """``fit_profile`` on every matrix k (``rows[k]`` x ``lengths[k]`` levels from
    ``offsets[k]``), on every (rows[k] // fit_rows)-th row, all iterations but the last on
    every (rows[k] // coarse_rows)-th (at least as many): energies[k] the matrix's energy
    and kept[k] the energy its fit keeps, both estimated from the rows taken; where the fit
    keeps at least (1 - fit_share) of it, the matrix's profile and every row's gain
    (``row_gains``) go to its stretch of ``profiles`` and ``gains`` (the matrices' lengths and
    rows one after another), else kept[k] is 0 and its stretches are unset."""
    p0, g0 = 0, 0
    for k in range(offsets.shape[0]):
        n_rows, length = rows[k], lengths[k]
        step = max(1, n_rows // fit_rows)
        coarse_step = max(step, n_rows // coarse_rows // step * step)
        profile = profiles[p0:p0 + length]
        along, total = fit_profile(levels, offsets[k], n_rows, length, iterations, step,
                                   coarse_step, profile)
        scale = n_rows / -(-n_rows // step)              # the rows taken -> the matrix
        energies[k] = total * scale
        kept[k] = along * scale
        if kept[k] == 0.0 or kept[k] < (1.0 - fit_share) * energies[k]:
            kept[k] = 0.0
        else:
            row_gains(levels, offsets[k], n_rows, length, profile, gains[g0:g0 + n_rows])
        p0 += length
        g0 += n_rows
