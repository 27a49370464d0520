"""The search for the matrices of levels that come without a layout (encoders/row_search.py
drives it; the row model itself is kernels/rows.py).

READ ME FIRST
1. Rows that are multiples of one profile predict each other up to a factor: for windows x
   and y of a row's length, one row apart, the least-squares factor keeps dot(x, y)^2 / |x|^2
   of |y|^2. Where the windows begin on row starts that share is near 1; a window across a row
   start mixes two factors and keeps less; levels without rows keep about 1 / length.
2. ``row_phases`` sums those shares' parts per block and phase; ``pick_phases`` picks each
   block's phase from its neighbourhood; ``profile_cosines`` compares neighbouring blocks'
   profiles; ``join_blocks`` joins blocks into matrices; ``trim_edges`` trims rows at a
   matrix's ends that do not follow the row inward.
3. ``relative_squares`` is the row-length search's input: squares over their neighbourhood's
   mean square, so that QSGD's per-bucket scales do not swamp the rows' pattern.
Sums of integer products are int64 and exact for |level| <= 2**20 and rows of up to 1024
levels (encoders/row_search.py ``SEARCH_MAX_LEVEL``). Units: levels.
"""
import numpy as np
from numba import njit, int64

from .rows import fit_profile


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
        along, _ = fit_profile(levels, starts[k], rows[k], length, 1, 1, 1, profile)
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
    """out[b, i] = x^2 / (the mean of x^2 over the levels from i - local // 2 to i + local // 2
    that lie in the block), for x the level at starts[b] + i (0 where those are all 0), less
    the mean of out[b]: squares made independent of the levels' scale, which varies along a
    tensor (QSGD's buckets). Blocks of out.shape[1] levels, each inside ``levels``
    (starts[b] + out.shape[1] <= levels.size: not checked). Sums of squares are exact (int64,
    sliding)."""
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
