"""Host buffers that an encode or a decode borrows for a temporary of the size of its tensor
(the row model's residuals) and gives back when it is done, so that the next call on the same
thread writes to memory the process already holds.

A fresh buffer of a few MB is, as often as not, fresh pages from the system: the allocator
returns freed memory at the top of its heap, and every 4 KB page then faults on its first
write. That cost lands on the pass that first writes the buffer (docs/design.md, "Scratch
buffers").

Each thread keeps at most one buffer per dtype, of at most POOL_BYTES: ``take`` hands it out
(or a new one) and ``give`` takes it back. A buffer given back must not be used by its giver
again; one never given back is freed as any array is.

>>> import numpy as np
>>> a = take(1000, np.int16)
>>> give(a)
>>> take(500, np.int16).base is a.base
True
"""
import threading

import numpy as np

# The most bytes a thread keeps per dtype between calls (32M levels of int16 residuals).
POOL_BYTES = 64 << 20

_local = threading.local()


def take(n, dtype):
    """A 1-D array of ``n`` elements of ``dtype``, uninitialized: a view of this thread's
    buffer of that dtype where it is large enough (the buffer is then lent out until
    ``give``), else a new array."""
    dtype = np.dtype(dtype)
    pool = _pool()
    held = pool.pop(dtype, None)
    if held is not None and held.size >= n:
        return held[:n]
    return np.empty(max(n, 1), dtype=dtype)[:n]


def give(array):
    """Take back a buffer from ``take``: this thread keeps it (its whole base array, in place
    of a smaller one it holds) where it is within POOL_BYTES."""
    base = array.base if array.base is not None else array
    if base.nbytes > POOL_BYTES:
        return
    pool = _pool()
    held = pool.get(base.dtype)
    if held is None or held.size < base.size:
        pool[base.dtype] = base


def _pool():
    """This thread's buffers by dtype."""
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    return pool
