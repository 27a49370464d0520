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
Units: levels; offsets and lengths in levels.
"""
import numpy as np
from numba import njit, float32, int64

from .errors import OK, VALUE_OVERFLOW

PROFILE_MAX = 127
GAIN_MAX = 32767
GAIN_SHIFT = 7
# The largest |prediction| a model can make, and so the largest clip.
PREDICTION_MAX = (GAIN_MAX * PROFILE_MAX + (1 << (GAIN_SHIFT - 1))) >> GAIN_SHIFT

assert PROFILE_MAX * GAIN_MAX < 2**31


@njit(cache=True, nogil=True)
def add_predictions(src, sign, offsets, rows, lengths, profiles, gains, clip, lo, hi, out):
    """out = src + sign * every level's prediction (note 2; ``sign`` +1 or -1), in one pass:
    segment k covers ``rows[k] * lengths[k]`` levels from ``offsets[k]``, its profile is the
    next ``lengths[k]`` values of ``profiles`` and its gains the next ``rows[k]`` of ``gains``
    (segments in order, inside the levels, not overlapping: checked by the caller); levels
    outside every segment are predicted 0. Returns VALUE_OVERFLOW where a value leaves
    [lo, hi], else OK. Encoding: the residuals (levels - predictions, int32); decoding: the
    levels (residuals + predictions)."""
    half = int64(1) << int64(GAIN_SHIFT - 1)
    bad = False
    done, p0, g0 = 0, 0, 0
    for k in range(offsets.shape[0] + 1):
        at = offsets[k] if k < offsets.shape[0] else src.shape[0]
        for i in range(done, at):                    # no segment: predicted 0
            v = int64(src[i])
            bad |= (v < lo) | (v > hi)
            out[i] = v
        if k == offsets.shape[0]:
            break
        length = lengths[k]
        profile = profiles[p0:p0 + length]
        for r in range(rows[k]):
            u = gains[g0 + r]
            row_src = src[at + r * length:at + (r + 1) * length]
            row_out = out[at + r * length:at + (r + 1) * length]
            for j in range(length):
                p = (u * profile[j] + half) >> int64(GAIN_SHIFT)
                v = int64(row_src[j]) + sign * min(max(p, -clip), clip)
                bad |= (v < lo) | (v > hi)
                row_out[j] = v
        done = at + rows[k] * length
        p0 += length
        g0 += rows[k]
    return VALUE_OVERFLOW if bad else OK


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
def power_step(levels, at, rows, length, step, v, v_next):
    """One power iteration on every ``step``-th row of the matrix of ``rows`` x ``length``
    levels from ``at``, each row read once: u = M v, v_next = M^T u (float64). Returns
    |u|^2."""
    v_next[:] = 0.0
    norm = 0.0
    for r in range(0, rows, step):
        row = levels[at + r * length:at + (r + 1) * length]
        dot = float32(0.0)
        for j in range(length):
            dot += float32(row[j]) * v[j]
        norm += float(dot) * float(dot)
        for j in range(length):
            v_next[j] += dot * float32(row[j])
    return norm


@njit(cache=True, nogil=True)
def row_gains(levels, at, rows, length, profile, out):
    """Each row's least-squares gain on the integer ``profile`` in units of 2**-GAIN_SHIFT,
    rounded and clipped to [-GAIN_MAX, GAIN_MAX], into ``out`` (int64)."""
    scale = 0.0
    for j in range(length):
        scale += float(profile[j]) * float(profile[j])
    for r in range(rows):
        row = levels[at + r * length:at + (r + 1) * length]
        dot = int64(0)
        for j in range(length):
            dot += int64(row[j]) * profile[j]
        g = np.rint(dot * float(1 << GAIN_SHIFT) / scale)
        out[r] = int64(min(max(g, -GAIN_MAX), GAIN_MAX))


@njit(cache=True, nogil=True)
def fit_profile(levels, at, rows, length, iterations, step, profile):
    """A rank-one fit of the matrix of ``rows`` x ``length`` levels from ``at`` by
    ``iterations`` power iterations on every ``step``-th row, from the row of most energy
    among them: fills ``profile`` (int64, ``length`` values, the fit's row direction scaled to
    PROFILE_MAX) and returns (|M v|^2 / |v|^2, the energy the fit keeps at least; the
    energy), both of the rows taken. The kept energy is 0 where they or their fit are zero
    (``profile`` then unset)."""
    energies = np.empty(-(-rows // step))
    total = row_energies(levels, at, rows, length, step, energies)
    if total == 0.0:
        return 0.0, total
    first = at + int64(np.argmax(energies)) * step * length
    v = np.empty(length, dtype=np.float32)
    for j in range(length):
        v[j] = float32(levels[first + j])
    v_next = np.empty(length, dtype=np.float32)
    along = 0.0
    for _ in range(iterations):
        along = power_step(levels, at, rows, length, step, v, v_next) / float(np.dot(v, v))
        norm = np.abs(v_next).max()
        if norm == 0.0:
            return 0.0, total
        for j in range(length):
            v[j] = v_next[j] / norm
    for j in range(length):
        profile[j] = int64(np.rint(v[j] * PROFILE_MAX))
    return along, total


@njit(cache=True, nogil=True)
def fit_matrices(levels, offsets, rows, lengths, iterations, fit_rows, fit_share, profiles,
                 gains, kept, energies):
    """``fit_profile`` on every matrix k (``rows[k]`` x ``lengths[k]`` levels from
    ``offsets[k]``), on every (rows[k] // fit_rows)-th row: energies[k] the matrix's energy
    and kept[k] the energy its fit keeps, both estimated from the rows taken; where the fit
    keeps at least (1 - fit_share) of it, the matrix's profile and every row's gain
    (``row_gains``) go to its stretch of ``profiles`` and ``gains`` (the matrices' lengths and
    rows one after another), else kept[k] is 0 and its stretches are unset."""
    p0, g0 = 0, 0
    for k in range(offsets.shape[0]):
        n_rows, length = rows[k], lengths[k]
        step = max(1, n_rows // fit_rows)
        profile = profiles[p0:p0 + length]
        along, total = fit_profile(levels, offsets[k], n_rows, length, iterations, step,
                                   profile)
        scale = n_rows / -(-n_rows // step)              # the rows taken -> the matrix
        energies[k] = total * scale
        kept[k] = along * scale
        if kept[k] == 0.0 or kept[k] < (1.0 - fit_share) * energies[k]:
            kept[k] = 0.0
        else:
            row_gains(levels, offsets[k], n_rows, length, profile, gains[g0:g0 + n_rows])
        p0 += length
        g0 += n_rows


@njit(cache=True, nogil=True)
def row_phases(levels, length, block_rows, sample_rows, kept, energy):
    """How well rows of ``length`` levels predict the next up to a factor, by where they begin,
    in every block of ``block_rows * length`` levels. For a window of ``length`` levels from i
    and the next one from i + length, a least-squares factor keeps dot^2 / |first|^2 of the
    second's energy. kept[b, q] sums that, and energy[b, q] the second windows' energy, over
    the windows from b * block_rows * length + q + r * length, r < ``sample_rows`` (both
    inside the levels; arrays of float64, one row per block, ``length`` columns, filled).
    Sums of integer products are exact (int64, sliding)."""
    n = levels.shape[0]
    span = block_rows * length
    kept[:] = 0.0
    energy[:] = 0.0
    for b in range(kept.shape[0]):
        first = b * span
        last = min(first + sample_rows * length, n - 2 * length + 1)   # window starts
        dot, e1, e2 = int64(0), int64(0), int64(0)
        if first < last:
            for k in range(first, first + length):
                x, y = int64(levels[k]), int64(levels[k + length])
                dot += x * y
                e1 += x * x
                e2 += y * y
        for i in range(first, last):
            q = (i - first) % length
            if e1 > 0:
                kept[b, q] += float(dot) * float(dot) / float(e1)
            energy[b, q] += float(e2)
            x, y = int64(levels[i]), int64(levels[i + length])
            z = int64(levels[i + 2 * length]) if i + 2 * length < n else int64(0)
            dot += y * z - x * y
            e1 += y * y - x * x
            e2 += z * z - y * y


@njit(cache=True, nogil=True)
def profile_cosines(levels, length, starts, rows, cosines):
    """|cosine| between the rank-one profiles (``fit_profile``, one iteration) of the matrices
    of rows[k] x ``length`` levels from starts[k] and from starts[k - 1], column by column
    where the two begin rows at different levels (level i is column (i - start) mod
    ``length``), into cosines[k] (float64); -1 where matrix k has no profile (no energy), 0 at
    k = 0 or where matrix k - 1 has none."""
    profile = np.empty(length, dtype=np.int64)
    direction = np.empty(length)
    before = np.zeros(length)
    have = False
    for k in range(starts.shape[0]):
        along, _ = fit_profile(levels, starts[k], rows[k], length, 1, 1, profile)
        norm = 0.0
        if along > 0.0:
            for j in range(length):
                norm += float(profile[j]) * float(profile[j])
        if norm == 0.0:
            cosines[k] = -1.0
            have = False
            continue
        norm = np.sqrt(norm)
        shift = (starts[k] - starts[k - 1]) % length if k > 0 else 0
        dot = 0.0
        for j in range(length):
            direction[j] = profile[j] / norm
            dot += direction[j] * before[(j + shift) % length]
        cosines[k] = abs(dot) if have else 0.0
        before[:] = direction
        have = True


@njit(cache=True, nogil=True)
def relative_squares(levels, starts, local, out):
    """out[b, i] = x^2 / (the mean of x^2 over the ``local`` levels around x), for x the level
    at starts[b] + i (0 where those are all 0), less the mean of out[b]: squares made
    independent of the levels' scale, which varies along a tensor (QSGD's buckets). Sums of
    squares are exact (int64, sliding)."""
    size = out.shape[1]
    half = local // 2
    for b in range(starts.shape[0]):
        block = levels[starts[b]:starts[b] + size]
        total = int64(0)
        for j in range(min(half, size)):
            total += int64(block[j]) * int64(block[j])
        mean = 0.0
        for i in range(size):
            if i + half < size:
                total += int64(block[i + half]) * int64(block[i + half])
            if i - half - 1 >= 0:
                total -= int64(block[i - half - 1]) * int64(block[i - half - 1])
            width = min(i + half, size - 1) - max(i - half, 0) + 1
            x = int64(block[i]) * int64(block[i])
            value = float(x) * width / float(total) if total > 0 else 0.0
            out[b, i] = value
            mean += value
        mean /= size
        for i in range(size):
            out[b, i] -= mean


@njit(cache=True, nogil=True)
def pick_phases(kept, energy, phase_blocks, share_blocks, phases, shares):
    """Per block b (rows of ``row_phases``'s ``kept`` and ``energy``): phases[b], the phase
    whose kept sum over blocks b - phase_blocks .. b + phase_blocks (those that exist) is the
    largest share of its energy sum there, and shares[b], that share over blocks
    b - share_blocks .. b + share_blocks (0 where the energy is 0)."""
    blocks, length = kept.shape
    window_kept, window_energy = np.zeros(length), np.zeros(length)
    for b in range(min(phase_blocks, blocks)):
        window_kept += kept[b]
        window_energy += energy[b]
    for b in range(blocks):
        if b + phase_blocks < blocks:
            window_kept += kept[b + phase_blocks]
            window_energy += energy[b + phase_blocks]
        if b - phase_blocks - 1 >= 0:
            window_kept -= kept[b - phase_blocks - 1]
            window_energy -= energy[b - phase_blocks - 1]
        q, best = 0, -1.0
        for p in range(length):
            share = window_kept[p] / window_energy[p] if window_energy[p] > 0.0 else 0.0
            if share > best:
                q, best = p, share
        phases[b] = q
        k, e = 0.0, 0.0
        for c in range(max(0, b - share_blocks), min(blocks, b + share_blocks + 1)):
            k += kept[c, q]
            e += energy[c, q]
        shares[b] = k / e if e > 0.0 else 0.0


@njit(cache=True, nogil=True)
def _row_cosine(levels, a, b, length):
    """|cosine| between the rows of ``length`` levels from ``a`` and from ``b`` (0 where one
    is all zero)."""
    dot, ea, eb = 0.0, 0.0, 0.0
    for j in range(length):
        x, y = float(levels[a + j]), float(levels[b + j])
        dot += x * y
        ea += x * x
        eb += y * y
    return abs(dot) / np.sqrt(ea * eb) if ea > 0.0 and eb > 0.0 else 0.0


@njit(cache=True, nogil=True)
def trim_edges(levels, length, starts, rows, most, min_cosine):
    """Drop from each matrix k (rows[k] x ``length`` levels from starts[k], both updated in
    place) its first row while that and the next row's |cosine| is below ``min_cosine``, then
    its last row likewise with the row before, at most ``most`` rows at each end and while
    two rows are left."""
    for k in range(starts.shape[0]):
        for _ in range(most):
            if rows[k] <= 2 or \
                    _row_cosine(levels, starts[k], starts[k] + length, length) >= min_cosine:
                break
            starts[k] += length
            rows[k] -= 1
        for _ in range(most):
            last = starts[k] + (rows[k] - 1) * length
            if rows[k] <= 2 or _row_cosine(levels, last, last - length, length) >= min_cosine:
                break
            rows[k] -= 1


@njit(cache=True, nogil=True)
def join_blocks(length, starts, rows, cosines, slack, merge_cosine, min_rows, out_starts,
                out_rows):
    """Matrices of rows of ``length`` from blocks of rows[k] rows from starts[k] (ascending)
    and ``profile_cosines``'s cosines: a block without a profile (cosine < 0) is skipped; one
    that begins within a row of the last matrix's end, its rows within ``slack`` levels of the
    matrix's, and whose cosine is at least ``merge_cosine`` extends that matrix by its whole
    rows past the matrix's end; any other loses its rows that overlap the last matrix and
    starts a matrix where ``min_rows`` rows are left. Writes (first level, rows) to
    ``out_starts`` and ``out_rows`` and returns how many."""
    count = 0
    for k in range(starts.shape[0]):
        if cosines[k] < 0.0:
            continue
        start = starts[k]
        end = start + rows[k] * length
        if count:
            last = out_starts[count - 1] + out_rows[count - 1] * length
            shift = (start - last) % length
            if min(shift, length - shift) <= slack and cosines[k] >= merge_cosine and \
                    start < last + length:
                out_rows[count - 1] += max(0, end - last) // length
                continue
            if start < last:
                start += -(-(last - start) // length) * length
        if end - start >= min_rows * length:
            out_starts[count] = start
            out_rows[count] = (end - start) // length
            count += 1
    return count
