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
from numba import njit, int64

from .errors import OK, VALUE_OVERFLOW

PROFILE_MAX = 127
GAIN_MAX = 32767
GAIN_SHIFT = 7
# The largest |prediction| a model can make, and so the largest clip.
PREDICTION_MAX = (GAIN_MAX * PROFILE_MAX + (1 << (GAIN_SHIFT - 1))) >> GAIN_SHIFT

assert PROFILE_MAX * GAIN_MAX < 2**31


@njit(cache=True, nogil=True)
def predict(n, offsets, rows, lengths, profiles, gains, clip, out):
    """Fill ``out`` (int32, ``n`` levels) with every level's prediction (note 2): segment k
    covers ``rows[k] * lengths[k]`` levels from ``offsets[k]``, its profile is the next
    ``lengths[k]`` values of ``profiles`` and its gains the next ``rows[k]`` of ``gains``
    (segments in order, inside [0, n), not overlapping: checked by the caller)."""
    out[:] = 0
    half = int64(1) << int64(GAIN_SHIFT - 1)
    p0, g0 = 0, 0
    for k in range(offsets.shape[0]):
        at, length = offsets[k], lengths[k]
        profile = profiles[p0:p0 + length]
        for r in range(rows[k]):
            u = gains[g0 + r]
            row = out[at + r * length:at + (r + 1) * length]
            for j in range(length):
                p = (u * profile[j] + half) >> int64(GAIN_SHIFT)
                row[j] = min(max(p, -clip), clip)
        p0 += length
        g0 += rows[k]


@njit(cache=True, nogil=True)
def residuals(levels, pred, out):
    """levels - pred into ``out`` (int32)."""
    for i in range(levels.shape[0]):
        out[i] = int64(levels[i]) - int64(pred[i])


@njit(cache=True, nogil=True)
def add_predictions(resid, pred, lo, hi, out):
    """out = resid + pred (the decoded levels); VALUE_OVERFLOW where a level leaves [lo, hi]."""
    bad = False
    for i in range(resid.shape[0]):
        v = int64(resid[i]) + int64(pred[i])
        bad |= (v < lo) | (v > hi)
        out[i] = v
    return VALUE_OVERFLOW if bad else OK


@njit(cache=True, nogil=True, fastmath=True)
def row_energies(levels, at, rows, length, out):
    """The energy (sum of squares, float64) of each of ``rows`` rows of ``length`` levels
    from ``at`` into ``out``; returns their total. (fastmath here and in ``power_step``: the
    fit's floating point need not be the same on every machine; only its integers are sent.)"""
    total = 0.0
    for r in range(rows):
        row = levels[at + r * length:at + (r + 1) * length]
        e = 0.0
        for j in range(length):
            x = float(row[j])
            e += x * x
        out[r] = e
        total += e
    return total


@njit(cache=True, nogil=True, fastmath=True)
def power_step(levels, at, rows, length, v, u, v_next):
    """One power iteration on the matrix of ``rows`` x ``length`` levels from ``at``, each row
    read once: u = M v, v_next = M^T u (float64). Returns |u|^2."""
    v_next[:] = 0.0
    norm = 0.0
    for r in range(rows):
        row = levels[at + r * length:at + (r + 1) * length]
        dot = 0.0
        for j in range(length):
            dot += float(row[j]) * v[j]
        u[r] = dot
        norm += dot * dot
        for j in range(length):
            v_next[j] += dot * float(row[j])
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
def fit_profile(levels, at, rows, length, iterations, profile):
    """A rank-one fit of the matrix of ``rows`` x ``length`` levels from ``at`` by
    ``iterations`` power iterations from its row of most energy: fills ``profile`` (int64,
    ``length`` values, the fit's row direction scaled to PROFILE_MAX) and returns (|M v|^2 /
    |v|^2, the energy the fit keeps at least; the matrix's energy). The kept energy is 0 where
    the matrix or its fit is zero (``profile`` then unset)."""
    energies = np.empty(rows)
    total = row_energies(levels, at, rows, length, energies)
    if total == 0.0:
        return 0.0, total
    first = at + int64(np.argmax(energies)) * length
    v = np.empty(length)
    for j in range(length):
        v[j] = float(levels[first + j])
    u, v_next = np.empty(rows), np.empty(length)
    along = 0.0
    for _ in range(iterations):
        along = power_step(levels, at, rows, length, v, u, v_next) / np.dot(v, v)
        norm = np.abs(v_next).max()
        if norm == 0.0:
            return 0.0, total
        for j in range(length):
            v[j] = v_next[j] / norm
    for j in range(length):
        profile[j] = int64(np.rint(v[j] * PROFILE_MAX))
    return along, total
