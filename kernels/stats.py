"""Statistics of levels: their range (every encoder's window), and the run statistics from
which ``auto`` sizes every encoder without encoding.

From ``rlh``'s tokens (whose joint counts size ``rlh`` and ``rla``) one pass gathers the
per-level element counts of the per-symbol codes, the zero-run chunking of ``shs``, and the
exact payload bits of ``elias_rle`` and ``qsgd_elias`` (whose codes depend on each run, not on
a histogram).
"""
from numba import njit, int64, uint64

from .bits import zigzag
from .elias import OMEGA_BITS, omega_bits
from .runs import MAX_RUN


@njit(cache=True, nogil=True)
def level_range(levels):
    """(min, max) of non-empty ``levels`` as int64, in one pass; (0, -1) when empty."""
    if levels.shape[0] == 0:
        return int64(0), int64(-1)
    lo = levels[0]
    hi = levels[0]
    for i in range(levels.shape[0]):
        lo = min(lo, levels[i])
        hi = max(hi, levels[i])
    return int64(lo), int64(hi)


@njit(cache=True, inline="always")
def _rle_run_bits(level, run):
    """elias_rle's bits for a maximal run of ``run`` levels ``level``: pieces of MAX_RUN."""
    pieces, rest = run // MAX_RUN, run % MAX_RUN
    level_bits = omega_bits(zigzag(level) + uint64(1))
    bits = pieces * (level_bits + omega_bits(MAX_RUN))
    return bits + (level_bits + omega_bits(rest) if rest else 0)


@njit(cache=True, nogil=True)
def token_statistics(levels, ends, n_runs, chunk_runs, base, window, shs_k, level_counts,
                     zero_run_counts):
    """Statistics of ``levels`` from its tokens: run ends ``ends[:n_runs]``, runs cut at chunk
    boundaries, ``chunk_runs[c]`` = runs in chunks 0..c (kernels/runs.py). Fills
    ``level_counts`` (size window + 1, the last: levels outside the window) and
    ``zero_run_counts`` (size shs_k + 1: index r for the zero runs of r mod shs_k levels,
    shs_k for the other runs); returns (elias_rle bits, qsgd_elias bits, shs full chunks).

    shs cuts its zero runs at chunk boundaries as the tokens are cut; elias_rle codes
    maximal runs, so a run that boundaries cut is then counted whole. qsgd_elias codes each
    non-zero level as omega(gap to the previous one), a sign bit and omega(|level|): a
    maximal zero run before a non-zero level makes its gap the run's length + 1, every other
    gap is 1."""
    rle_bits = int64(0)
    chunks = int64(0)
    gap_bits = int64(0)         # sum over zero tokens of omega(run + 1) - omega(1)
    outside_bits = int64(0)     # sum over levels outside the window of 1 + omega(|level|)
    omega_one = OMEGA_BITS[1]
    start = int64(0)
    for k in range(n_runs):
        end = int64(ends[k])
        level = int64(levels[end])
        run = end + 1 - start
        v = level - base
        inside = v >= 0 and v < window
        level_counts[v if inside else window] += run
        outside_bits += 0 if inside else run * (1 + omega_bits(abs(level)))
        rle_bits += omega_bits(zigzag(level) + uint64(1)) + omega_bits(run)
        zero = int64(level == 0)                    # products, not branches: it is random
        full = run // shs_k if run >= shs_k else 0    # no division for most runs
        chunks += full * zero
        zero_run_counts[shs_k + zero * (run - full * shs_k - shs_k)] += 1
        gap_bits += (omega_bits(run + 1) - omega_one) * zero
        start = end + 1
    qsgd_bits = outside_bits + gap_bits
    for v in range(window):                         # every non-zero level's own bits
        level = base + v
        if level != 0:
            qsgd_bits += level_counts[v] * (omega_one + 1 + omega_bits(abs(level)))
    qsgd_bits += omega_one * level_counts[window]   # (outside levels are never 0)
    rle_fix, gap_fix = _whole_runs(levels, ends, n_runs, chunk_runs)
    return rle_bits + rle_fix, qsgd_bits + gap_fix, chunks


@njit(cache=True, nogil=True)
def _whole_runs(levels, ends, n_runs, chunk_runs):
    """Corrections to ``token_statistics``' per-token sums, (elias_rle bits, qsgd_elias gap
    bits): for maximal runs that chunk boundaries cut, the whole run's bits less its pieces';
    a zero run that ends the levels is followed by no gap."""
    rle = int64(0)
    gap = int64(0)
    omega_one = OMEGA_BITS[1]
    merged_until, merged = int64(-1), int64(0)     # the run counted whole up to a token
    for c in range(chunk_runs.shape[0] - 1):
        k = int64(chunk_runs[c])
        if k == 0 or k >= n_runs or levels[ends[k - 1]] != levels[ends[k]]:
            continue
        level = int64(levels[ends[k]])
        left = merged if merged_until == k - 1 else _token_run(ends, k - 1)
        right = _token_run(ends, k)
        rle += _rle_run_bits(level, left + right) - _rle_run_bits(level, left) - \
            _rle_run_bits(level, right)
        if level == 0:
            gap += omega_bits(left + right + 1) - omega_bits(left + 1) - \
                omega_bits(right + 1) + omega_one
        merged_until, merged = k, left + right
    last = n_runs - 1
    if n_runs and levels[ends[last]] == 0:
        run = merged if merged_until == last else _token_run(ends, last)
        gap -= omega_bits(run + 1) - omega_one
    return rle, gap


@njit(cache=True, inline="always")
def _token_run(ends, k):
    """Levels in token k."""
    return int64(ends[k]) - (int64(ends[k - 1]) if k > 0 else int64(-1))
