"""Per-level code lengths used by ``auto`` to size the per-symbol Elias encoders."""
import numpy as np
from numba import njit, uint64

from .bits import zigzag
from .elias import code_bits


@njit(cache=True, nogil=True)
def elias_level_bits(kind, base, window):
    """Bits of the Elias code of zigzag(level) + 1 for each level in [base, base + window)."""
    out = np.empty(window, dtype=np.int64)
    for v in range(window):
        out[v] = code_bits(kind, zigzag(base + v) + uint64(1))
    return out
