"""A layout for levels that come without one (encoders/rows.py): the weight matrices a flat
tensor holds, found from the levels.

The row model needs the matrices a tensor holds. The adapters, the benchmark and ``hh.pack``
know them from the parameters' shapes; a caller of ``auto`` with a flat array does not, and
there ``find_layout`` looks for them:
1. Row lengths: rows that are multiples of one profile make the squared levels, each over the
   mean square of the LOCAL_LEVELS + 1 around it, correlate at lags of the row length and its
   multiples. Their autocorrelation over SEARCH_BLOCKS blocks of SEARCH_LEVELS levels spread
   over the tensor scores every lag up to MAX_SEARCH_LENGTH (``lag_scores``). A length in
   [MIN_SEARCH_LENGTH, MAX_SEARCH_LENGTH // 2] scores the weakest of its first HARMONICS
   multiples; the shortest within FUNDAMENTAL_SHARE of the best is taken where the best
   reaches MIN_LAG_SCORE, and up to MAX_LENGTHS lengths are taken so, each one's multiples
   dropped after it (``row_lengths``).
2. Where rows begin, per length: in every block of BLOCK_ROWS rows, windows of a row's length
   predict the next by a factor (kernels/row_search.py ``row_phases``, on the first PHASE_ROWS
   rows of each block); a block's phase is the one whose share of the energy kept is largest
   over it and PHASE_BLOCKS blocks either side, and it holds rows where that phase keeps
   MIN_SHARE, and NOISE_SHARES times what levels without rows keep (1 / length), over it and
   SHARE_BLOCKS either side (``pick_phases``).
3. Matrices, per length: consecutive blocks whose rows continue one another to within
   length // PHASE_SLACK levels and whose rank-one profiles point the same way (|cosine| at
   least MERGE_COSINE) are one matrix (``join_blocks``); a block that overlaps the one before
   loses its first rows; each matrix loses the rows at its ends whose |cosine| with the row
   inward is under EDGE_COSINE (``trim_edges``); matrices of fewer than MIN_MATRIX_ROWS rows
   are dropped, and those of a later length keep only their rows outside the earlier ones'.
The layout is only a guess: ``fit`` still keeps a matrix only where its model pays, and ``ans``
the row model only where its stream is smaller.
Units: levels.
"""
from bisect import bisect_left, bisect_right

import numpy as np

from horovod_huffman.kernels.row_search import (join_blocks, pick_phases, profile_cosines,
                                                relative_squares, row_phases, trim_edges)
from horovod_huffman.kernels.stats import level_range

from .rows import MIN_ROWS

# The row-length search samples SEARCH_BLOCKS blocks of SEARCH_LEVELS levels, a fixed cost
# (1.3-1.9 ms on the Intel VM of docs/benchmarks.md), so tensors of fewer than
# MIN_SEARCH_LEVELS levels are not searched; 8 blocks kept single lags without rows behind
# them under 0.03 on the benchmark traces.
SEARCH_BLOCKS = 8
SEARCH_LEVELS = 8192
MIN_SEARCH_LEVELS = 1 << 18
# Lags scored; row lengths are looked for up to half of it, so that each has two multiples.
MAX_SEARCH_LENGTH = 2048
# Rows of fewer levels are not looked for: a row's gain takes 1-2 bytes, 0.12-0.25 bits per
# level of rows of 64.
MIN_SEARCH_LENGTH = 64
# QSGD's buckets of 512 give neighbouring levels one scale; 64 levels measure it.
LOCAL_LEVELS = 64
# The LSTM's rows of 320 score 0.08 at s = 16 and 0.34 at s = 127 at step 5 of its training,
# 0.055 at s = 16 at step 20; the benchmark tensors without rows up to 0.016 (docs/design.md).
MIN_LAG_SCORE = 0.04
# A length's own multiples score within a few percent of it (the LSTM: 320 and 640).
FUNDAMENTAL_SHARE = 0.8
HARMONICS = 4
# Each length costs a pass over the tensor (``row_phases``, the profiles).
MAX_LENGTHS = 2
# Blocks of 16 rows: a phase and a profile per block; two rows measured per block, four
# blocks either side pooled, settle the phase on the LSTM's s = 16 levels (docs/design.md).
BLOCK_ROWS = 16
PHASE_ROWS = 2
PHASE_BLOCKS = 4
SHARE_BLOCKS = 1
# Blocks of rows keep 0.15-0.5 of their energy on the LSTM's s = 16 levels, levels without
# rows about 1 / length (0.003 at 320); 0.05 found the most of its matrices (docs/design.md).
MIN_SHARE = 0.05
NOISE_SHARES = 4
# Blocks of one matrix have profiles of |cosine| near 1 where its rows are near rank one, and
# down to 0.3-0.5 at s = 16 later in the LSTM's training; of two matrices about
# 1 / sqrt(length) (0.06 at 320).
MERGE_COSINE = 0.3
# A phase off by a level or two keeps nearly all of the prediction and is noise in step 2.
PHASE_SLACK = 32
EDGE_COSINE = 0.5
# A profile costs a byte or two per column: fewer rows do not pay for it.
MIN_MATRIX_ROWS = 2 * BLOCK_ROWS
# Levels spanning fewer values are not searched: given their layouts, the benchmark tensors
# took the row model at s = 16 and 127 (12-199 values), not at s = 8 (7-14) or below.
MIN_SEARCH_VALUES = 9
# Levels are searched up to this magnitude: ``row_phases``'s int64 sums of 2 * 1024 products
# of at most 2**40 stay below 2**51.
SEARCH_MAX_LEVEL = 1 << 20
assert SEARCH_MAX_LEVEL ** 2 * 2 * (MAX_SEARCH_LENGTH // 2) < 2 ** 63


def find_layout(levels, value_range=None):
    """A layout (encoders/rows.py: (rows, row length) pairs from level 0) of the matrices
    found in 1-D ``levels``, or None where there are fewer than MIN_SEARCH_LEVELS levels,
    they span fewer than MIN_SEARCH_VALUES values, a |level| exceeds SEARCH_MAX_LEVEL, no row
    length stands out, or no matrix of MIN_MATRIX_ROWS rows is found. ``value_range``: the
    levels' (min, max), where the caller has it."""
    n = levels.size
    if n < MIN_SEARCH_LEVELS:
        return None
    lo, hi = level_range(levels) if value_range is None else value_range
    if int(hi) - int(lo) + 1 < MIN_SEARCH_VALUES or \
            max(abs(int(lo)), abs(int(hi))) > SEARCH_MAX_LEVEL:
        return None
    matrices = []
    for length in row_lengths(lag_scores(levels)):
        found = _matrices(levels, length, *_row_starts(levels, length))
        matrices = sorted(matrices + _outside(found, matrices))
    return _layout(matrices)


def lag_scores(levels):
    """Scores (index: lag in levels, up to MAX_SEARCH_LENGTH) of how the levels' squares, each
    over its neighbourhood's mean square, correlate at every lag: the mean over the sampled
    blocks of their autocorrelation (1 at lag 0; a block of one value counts 0)."""
    at = np.linspace(0, levels.size - SEARCH_LEVELS, SEARCH_BLOCKS).astype(np.int64)
    z = np.empty((SEARCH_BLOCKS, SEARCH_LEVELS), dtype=np.float32)
    relative_squares(levels, at, LOCAL_LEVELS, z)
    spectrum = np.fft.rfft(z, SEARCH_LEVELS + MAX_SEARCH_LENGTH, axis=1)
    power = spectrum.real ** 2 + spectrum.imag ** 2
    correlation = np.fft.irfft(power, axis=1)[:, :MAX_SEARCH_LENGTH + 1]
    varied = correlation[:, 0] > 0
    return (correlation[varied] / correlation[varied, :1]).sum(axis=0) / SEARCH_BLOCKS


def row_lengths(scores):
    """Up to MAX_LENGTHS row lengths, the most evident first, from lag ``scores``: each the
    shortest lag in [MIN_SEARCH_LENGTH, MAX_SEARCH_LENGTH // 2] whose weakest of its first
    HARMONICS multiples (those up to MAX_SEARCH_LENGTH) scores FUNDAMENTAL_SHARE of the best
    such, where that reaches MIN_LAG_SCORE; after each, its multiples no longer count. (The
    weakest multiple, not their mean: where rows of two lengths meet, at a common multiple,
    both score, and a mean would favour the lags with that multiple among their few.)"""
    scores = scores.copy()
    lags = np.arange(MIN_SEARCH_LENGTH, MAX_SEARCH_LENGTH // 2 + 1)
    out = []
    while len(out) < MAX_LENGTHS:
        taken = np.minimum(HARMONICS, MAX_SEARCH_LENGTH // lags)
        weakest = np.min([np.where(k <= taken, scores[np.minimum(k * lags, MAX_SEARCH_LENGTH)],
                                   np.inf) for k in range(1, HARMONICS + 1)], axis=0)
        best = weakest.max()
        if not best >= MIN_LAG_SCORE:
            break
        length = int(lags[np.argmax(weakest >= FUNDAMENTAL_SHARE * best)])
        out.append(length)
        scores[::length] = 0.0
    return out


def _row_starts(levels, length):
    """(the level where rows begin in every block of BLOCK_ROWS rows of ``length``, whether
    the block holds rows): the phase whose kept sum (kernels/row_search.py ``row_phases``) over the
    block and PHASE_BLOCKS blocks either side is the largest share of its energy, and whether
    the sums at that phase
    over the block and SHARE_BLOCKS either side keep MIN_SHARE of their energy, and
    NOISE_SHARES times what a factor keeps of levels without rows (1 / ``length``)
    (``pick_phases``). A block starts at a multiple of ``length``, so a phase means the same
    in every block."""
    span = BLOCK_ROWS * length
    blocks = -(-levels.size // span)
    kept, energy = np.empty((blocks, length)), np.empty((blocks, length))
    row_phases(levels, length, BLOCK_ROWS, PHASE_ROWS, kept, energy)
    # every block weighs the same: a loud stretch does not pick its neighbours' phases
    total = energy.sum(axis=1, keepdims=True)
    np.divide(kept, total, out=kept, where=total > 0)
    np.divide(energy, total, out=energy, where=total > 0)
    phases, shares = np.empty(blocks, dtype=np.int64), np.empty(blocks)
    pick_phases(kept, energy, PHASE_BLOCKS, SHARE_BLOCKS, phases, shares)
    return np.arange(blocks) * span + phases, shares >= max(MIN_SHARE, NOISE_SHARES / length)


def _matrices(levels, length, starts, holds):
    """[(first level, rows, ``length``)] of the matrices of rows of ``length`` from blocks that
    begin rows at ``starts`` where ``holds`` (step 3 of the module's note), of at least
    MIN_MATRIX_ROWS rows. A block continues the matrix before it where it begins within a row
    of its end and its rows begin within length // PHASE_SLACK levels of the matrix's (the
    matrix keeps its own rows; kernels/row_search.py ``join_blocks``). A matrix then loses, at
    either end, up to a block's rows whose |cosine| with the row inward of them is below
    EDGE_COSINE (``trim_edges``): a block's rows may run past a matrix."""
    starts = starts[holds]
    rows = np.minimum(BLOCK_ROWS, (levels.size - starts) // length)
    starts, rows = starts[rows >= MIN_ROWS], rows[rows >= MIN_ROWS]
    cosines = np.empty(starts.size)
    profile_cosines(levels, length, starts, rows, cosines)
    first, size = np.empty_like(starts), np.empty_like(rows)
    count = join_blocks(length, starts, rows, cosines, length // PHASE_SLACK, MERGE_COSINE,
                        MIN_ROWS, first, size)
    starts, rows = first[:count], size[:count]
    trim_edges(levels, length, starts, rows, BLOCK_ROWS, EDGE_COSINE)
    return [(start, n_rows, length) for start, n_rows in zip(starts.tolist(), rows.tolist())
            if n_rows >= MIN_MATRIX_ROWS]


def _outside(found, taken):
    """The rows of ``found`` [(first level, rows, length)] outside every matrix of ``taken``
    (the same form, in order, apart): each as its runs of rows that overlap none, where they
    hold MIN_MATRIX_ROWS rows."""
    firsts = [first for first, _, _ in taken]
    out = []
    for start, rows, length in found:
        at = 0                                  # the first row not yet given out
        end = start + rows * length
        for first, n_rows, n in taken[max(0, bisect_right(firsts, start) - 1):
                                      bisect_left(firsts, end)] + [(end, 0, length)]:
            lo = min(rows, max(at, (first - start) // length))   # rows that overlap: lo..
            if lo - at >= MIN_MATRIX_ROWS:
                out.append((start + at * length, lo - at, length))
            at = max(at, -(-(first + n_rows * n - start) // length))
    return out


def _layout(matrices):
    """The layout of ``matrices`` ([(first level, rows, length)], in order, apart), with
    one-row pieces (never modelled) for the levels between them; None where there are none."""
    if not matrices:
        return None
    out, at = [], 0
    for start, rows, length in matrices:
        if start > at:
            out.append((1, start - at))
        out.append((rows, length))
        at = start + rows * length
    return out
