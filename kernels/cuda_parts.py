"""CUDA kernels over a tuple of tensors, so that a step's buckets take one launch.

A kernel that takes a tuple of 1-D arrays works on tensor p = blockIdx.y of it, with a
grid-stride loop along x (``cuda.grid(1)``, ``cuda.gridsize(1)``), so any x extent is
correct. Tuples are padded to a power of two (``padded``) so that a kernel compiles for a few
lengths only, and hold at most MAX_PARTS tensors: a launch's parameters must fit 4 KiB, and an
array takes 56 bytes of them, an integer or a float 8, so a kernel that takes two arrays per
tensor (``dequantize_parts``) takes MAX_PARTS // 2. Users: QSGD's and TernGrad's kernels and
``dequantize_parts`` (cuda_quantize.py), and ``concat`` below.
"""
from numba import cuda

MAX_PARTS = 32


def padded(items):
    """The tuple ``items`` (1 to MAX_PARTS of them) padded to a power of two with its first;
    the padding is never read (the grid's y extent is ``len(items)``)."""
    k = 1 << (len(items) - 1).bit_length()
    return tuple(items) + (items[0],) * (k - len(items))


@cuda.jit(cache=True)
def concat(xs, starts, out):
    """out[starts[p] + i] = xs[p][i] for tensor p = blockIdx.y. Any grid along x."""
    p = cuda.blockIdx.y
    x, at = xs[p], starts[p]
    for i in range(cuda.grid(1), x.shape[0], cuda.gridsize(1)):
        out[at + i] = x[i]
