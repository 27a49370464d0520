"""The row model of ``ans`` (kernels/rows.py): a rank-one prediction of the levels of every
matrix in a tensor's ``layout``, fitted on the encoder's side and carried in the parameters.

A layout is a sequence of (rows, row length) pairs: the levels hold these matrices row-major,
one after another from level 0; levels after the last are not modelled. The exchange and the
benchmark know it from the parameters' shapes (a weight of shape (out, in, ...) is out rows of
in * ... levels).

Parameters of a model: clip, the segment count, per segment the gap from the previous one's end
(levels), its rows and its row length, then every segment's profile and every segment's gains
as zigzag varints.
"""
import reprlib
from collections import namedtuple

import numpy as np

from horovod_huffman.kernels.rows import (GAIN_MAX, PREDICTION_MAX, PROFILE_MAX,
                                          add_predictions, fit_matrices)

from ..errors import DecodeError

# A matrix is modelled where it has at least MIN_ROWS rows of at least MIN_LENGTH levels, and
# where its prediction leaves at most FIT_SHARE of the levels' energy; a tensor is where its
# matrices' fits keep at least MIN_KEPT of their energy (below it, on the benchmark traces, the
# model's stream came out larger: kept 0.05-0.23 lost, 0.39-0.92 won).
MIN_ROWS = 4
MIN_LENGTH = 8
FIT_SHARE = 0.8
MIN_KEPT = 0.3
# Power iterations of the rank-one fit (from the row of most energy; 3 came within 0.14% of
# 4 and 6 on the benchmark traces, 2 lost 7% where the gate then turned the model off).
ITERATIONS = 3
# The fit's power iterations run on at most about FIT_ROWS rows of a matrix (every k-th): the
# direction they find is the whole matrix's where one dominates, and only then is a model
# kept; the gains are every row's own. The start (the row of most energy) and all iterations
# but the last come from about COARSE_ROWS rows; the last one corrects their direction (the
# streams came within 0.2% of those of a fit on FIT_ROWS rows throughout, on the benchmark
# traces) and gives the energies the gate takes.
FIT_ROWS = 256
COARSE_ROWS = 32


class RowModel(namedtuple("RowModel", "offsets rows lengths profiles gains clip")):
    """Segments (int64 arrays ``offsets``, ``rows``, ``lengths``), their concatenated
    ``profiles`` and ``gains`` (int64), and ``clip``, the largest |prediction| (kernels/rows.py
    note 2)."""
    __slots__ = ()

    def add_to(self, src, sign, out, maxima=None, block_bits=0):
        """out = src + sign * the model's prediction of every level (``sign`` +1 or -1:
        kernels/rows.py ``add_predictions``, which also fills ``maxima``, where given, with
        the largest |sum| of every block of 2**``block_bits``); returns (the least, the
        largest) sum, for the caller to check against ``out``'s dtype."""
        return add_predictions(src, sign, self.offsets, self.rows, self.lengths, self.profiles,
                               self.gains, self.clip, out, maxima, block_bits)

    def write(self, writer):
        """Append the model's parameters to a ParamWriter (the fields after the segment count
        in one call)."""
        count, n_profile = self.offsets.size, self.profiles.size
        fields = np.empty(3 * count + n_profile + self.gains.size, dtype=np.int64)
        segments = fields[:3 * count].reshape(count, 3)
        segments[:, 0] = self.offsets
        segments[1:, 0] -= self.offsets[:-1] + self.rows[:-1] * self.lengths[:-1]
        segments[:, 1], segments[:, 2] = self.rows, self.lengths
        fields[3 * count:3 * count + n_profile] = _zigzag(self.profiles)
        fields[3 * count + n_profile:] = _zigzag(self.gains)
        writer.uint(self.clip).uint(count).uints(fields)

    @classmethod
    def read(cls, reader, n, clip_max, name):
        """The model in a ParamReader for ``n`` levels, every field bounded: segments in order
        inside [0, n), profiles and gains in range, clip at most ``clip_max``; each value read
        takes at least one byte, so no count exceeds the parameters' size."""
        clip = reader.uint("clip", 0, clip_max)
        count = reader.uint("segments", 0, reader.remaining() // 3)
        fields = reader.uints("segments", 3 * count, 0, n).reshape(count, 3)
        gaps, rows, lengths = fields[:, 0], fields[:, 1], fields[:, 2]
        if count and (rows.min() < 1 or lengths.min() < 1):
            raise DecodeError(f"{name}: a row model segment has no rows or no levels")
        if np.any(rows > n // lengths):
            raise DecodeError(f"{name}: a row model segment holds more than {n} levels")
        sizes = rows * lengths
        # (a float sum first: exact up to 2**53, so no integer sum below can wrap)
        if float(np.sum((gaps + sizes).astype(np.float64))) > n:
            raise DecodeError(f"{name}: row model segments end past level {n}")
        ends = np.cumsum(gaps + sizes)
        n_profile, n_gains = int(lengths.sum()), int(rows.sum())
        if n_profile + n_gains > reader.remaining():
            raise DecodeError(f"{name}: row model declares {n_profile + n_gains} values, the "
                              "parameters cannot hold them")
        profiles = _unzigzag(reader.uints("profile", n_profile, 0, 2 * PROFILE_MAX))
        gains = _unzigzag(reader.uints("gains", n_gains, 0, 2 * GAIN_MAX))
        return cls(ends - sizes, rows, lengths, profiles, gains, clip)


def check_layout(layout, n):
    """The layout as an int64 array of (rows, row length) pairs, checked: pairs of whole
    numbers in [0, n] covering at most ``n`` levels in all (ValueError otherwise; the sum is
    taken in floating point, exact below 2**53 levels, so no integer product wraps)."""
    try:
        pairs = layout if isinstance(layout, np.ndarray) else np.array(list(layout))
    except ValueError:                  # ragged pairs
        pairs = np.zeros((0, 0), dtype=object)
    if pairs.shape == (0,):             # no pairs
        pairs = np.zeros((0, 2), dtype=np.int64)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu" or \
            (pairs.size and (pairs.min() < 0 or pairs.max() > n)):
        raise ValueError(f"a layout holds (rows, row length) pairs of whole numbers in "
                         f"[0, {n}], got {reprlib.repr(layout)}")
    pairs = pairs.astype(np.int64)
    if float(np.sum(pairs[:, 0].astype(np.float64) * pairs[:, 1])) > n:
        raise ValueError(f"the layout covers {int(sum(int(r) * int(c) for r, c in pairs))} "
                         f"levels, the tensor has {n}")
    return pairs


def slice_layout(layout, start, stop):
    """The layout of levels [start, stop) of a tensor of ``layout``: per matrix, the rows that
    lie wholly inside, with one-row pieces (never modelled) for the parts of rows before and
    after them; a matrix cut to less than a whole row is one such piece."""
    out, at = [], 0
    for rows, length in layout:
        size = rows * length
        lo, hi = max(start, at), min(stop, at + size)
        if lo < hi:
            first, last = -(-(lo - at) // length), (hi - at) // length
            if first < last:
                head, tail = at + first * length - lo, hi - at - last * length
                out += [(1, head)] if head else []
                out.append((last - first, length))
                out += [(1, tail)] if tail else []
            else:
                out.append((1, hi - lo))
        at += size
    return out


def fit(levels, pairs, bounds):
    """The RowModel of 1-D ``levels`` (their least and largest: ``bounds``) for the layout
    ``pairs`` (as ``check_layout`` returns them), or None where no matrix is modelled or the
    fits keep less than MIN_KEPT of the matrices' energy: each matrix's rank-one fit by power
    iteration, then its profile scaled to PROFILE_MAX and each row's gain its least-squares
    factor on the integer profile (kernels/rows.py ``fit_matrices``)."""
    rows, lengths = pairs[:, 0], pairs[:, 1]
    offsets = np.cumsum(rows * lengths) - rows * lengths
    eligible = (rows >= MIN_ROWS) & (lengths >= MIN_LENGTH)
    offsets, rows, lengths = offsets[eligible], rows[eligible], lengths[eligible]
    if not offsets.size:
        return None
    profiles = np.empty(int(lengths.sum()), dtype=np.int64)
    gains = np.empty(int(rows.sum()), dtype=np.int64)
    kept, energies = np.empty(offsets.size), np.empty(offsets.size)
    fit_matrices(levels, offsets, rows, lengths, ITERATIONS, FIT_ROWS, COARSE_ROWS, FIT_SHARE,
                 profiles, gains, kept, energies)
    fitted = kept > 0.0
    if not fitted.any() or kept.sum() < MIN_KEPT * energies.sum():
        return None
    clip = min(max(abs(int(bounds[0])), abs(int(bounds[1]))), PREDICTION_MAX)
    return RowModel(offsets[fitted], rows[fitted], lengths[fitted],
                    profiles[np.repeat(fitted, lengths)], gains[np.repeat(fitted, rows)], clip)


def _zigzag(values):
    return (values << 1) ^ (values >> 63)


def _unzigzag(values):
    return (values >> 1) ^ -(values & 1)
