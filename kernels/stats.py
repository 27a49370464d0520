"""One-pass statistics of levels: their range (every encoder's window), and the run statistics
from which ``auto`` sizes every encoder without encoding.

Per maximal run (capped at MAX_RUN elements, as the run-based encoders cap them) it gathers the
joint (level, run bucket) counts of ``rlh``, the per-level element counts of the per-symbol
codes, the zero-run chunking of ``shs``, and the exact payload bits of ``elias_rle`` and
``qsgd_elias`` (whose codes depend on each run, not on a histogram).
"""
from numba import njit, int64, uint64

from .bits import zigzag
from .elias import omega_bits
from .runs import run_bucket, RUN_BUCKETS, MAX_RUN


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


@njit(cache=True, nogil=True)
def run_statistics(levels, base, window, shs_k, level_counts, rlh_counts, zero_run_counts):
    """Fill the count arrays; returns (elias_rle bits, qsgd_elias bits, shs full chunks).

    level_counts: size window + 1 (last = outside the window); rlh_counts: size
    window * RUN_BUCKETS + 1; zero_run_counts: size shs_k, index r = runs of r mod shs_k zeros.
    """
    n = levels.shape[0]
    rle_bits = 0
    qsgd_bits = 0
    chunks = 0
    omega_one = omega_bits(1)
    prev_nonzero = -1
    i = 0
    while i < n:
        level = levels[i]
        j = i + 1
        stop = min(n, i + MAX_RUN)
        while j < stop and levels[j] == level:
            j += 1
        run = j - i
        v = int64(level) - base
        if v >= 0 and v < window:
            level_counts[v] += run
            rlh_counts[run_bucket(run) * window + v] += 1
        else:
            level_counts[window] += run
            rlh_counts[RUN_BUCKETS * window] += 1
        rle_bits += omega_bits(zigzag(level) + uint64(1)) + omega_bits(run)
        if level == 0:
            chunks += run // shs_k
            zero_run_counts[run % shs_k] += 1
        else:
            mag_bits = omega_bits(abs(int64(level)))
            qsgd_bits += omega_bits(i - prev_nonzero) + (run - 1) * omega_one + run * (1 + mag_bits)
            prev_nonzero = j - 1
        i = j
    return rle_bits, qsgd_bits, chunks
