"""Lossy quantizers that turn a float gradient into integer levels plus per-bucket scales.

>>> import numpy as np, horovod_huffman as hh
>>> g = np.linspace(-1, 1, 1000, dtype=np.float32)
>>> qt = hh.QSGD(levels=8, seed=0).quantize(g)
>>> qt.levels.dtype, int(abs(qt.levels).max()) <= 8, hh.dequantize(qt).shape
(dtype('int8'), True, (1000,))
"""
from dataclasses import dataclass

import numpy as np

from horovod_huffman.kernels import quantize as qk

FLOAT_DTYPES = ("float16", "float32", "float64", "bfloat16")


@dataclass(frozen=True)
class QuantizedTensor:
    """A quantized gradient.

    levels: 1-D signed integers (int8 when they fit), one per element, C order.
    scales: 1-D float32, one per bucket; element i dequantizes to scales[i // bucket_size] * levels[i].
    shape, dtype: the original tensor's shape and float dtype (``np.dtype``).
    bucket_size: elements per scale.
    """
    levels: np.ndarray
    scales: np.ndarray
    shape: tuple
    dtype: np.dtype
    bucket_size: int

    @property
    def numel(self):
        return int(self.levels.size)


def level_dtype(max_level):
    """Smallest signed dtype holding levels in [-max_level, max_level]."""
    for dt in (np.int8, np.int16, np.int32):
        if max_level <= np.iinfo(dt).max:
            return np.dtype(dt)
    raise ValueError(f"{max_level} levels do not fit int32")


def _flat_float(grad):
    """(1-D float32/float64 view or copy of ``grad``, original shape, original dtype)."""
    if not isinstance(grad, np.ndarray):
        raise TypeError(f"grad must be a NumPy array, got {type(grad).__name__}")
    if grad.dtype.name not in FLOAT_DTYPES:
        raise TypeError(f"grad must be a float array ({', '.join(FLOAT_DTYPES)}), got {grad.dtype}")
    work = np.float64 if grad.dtype == np.float64 else np.float32
    return np.ascontiguousarray(grad, dtype=work).reshape(-1), grad.shape, grad.dtype


def _bucket_count(n, bucket):
    return -(-n // bucket)


class _Seeded:
    """Draws one 64-bit kernel seed per call from a Generator seeded once (None: OS entropy)."""

    def __init__(self, seed):
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def _next_seed(self, seed=None):
        """The kernel seed for one call: ``seed`` when given, else the next from the sequence."""
        # Kernels take an int64 seed: keep 63 bits of whatever the caller passes.
        return int(seed) & (2**63 - 1) if seed is not None else int(self._rng.integers(0, 2**63 - 1))


class QSGD(_Seeded):
    """QSGD (Alistarh et al. 2017): per bucket, level = sign(g) * round_stochastic(|g| / ||g||_2 * s).

    Unbiased; levels in [-s, s] (``levels`` = s), int8 up to s = 127.
    """
    biased = False

    def __init__(self, levels=8, bucket_size=512, seed=None):
        if not isinstance(levels, (int, np.integer)) or not 1 <= levels <= np.iinfo(np.int32).max:
            raise ValueError(f"levels must be an integer in [1, 2**31 - 1], got {levels!r}")
        if not isinstance(bucket_size, (int, np.integer)) or bucket_size < 1:
            raise ValueError(f"bucket_size must be a positive integer, got {bucket_size!r}")
        super().__init__(seed)
        self.levels, self.bucket_size = int(levels), int(bucket_size)
        self.level_dtype = level_dtype(self.levels)

    def __repr__(self):
        return f"QSGD(levels={self.levels}, bucket_size={self.bucket_size}, seed={self.seed!r})"

    def quantize(self, grad, seed=None):
        """QuantizedTensor of a float array of any shape; ``seed`` (< 2**64) fixes this call's
        random rounding (default: the next seed of this quantizer's sequence)."""
        flat, shape, dtype = _flat_float(grad)
        levels = np.empty(flat.size, dtype=self.level_dtype)
        scales = np.empty(_bucket_count(flat.size, self.bucket_size), dtype=np.float32)
        qk.qsgd(flat, float(self.levels), self.bucket_size, self._next_seed(seed), levels, scales)
        return QuantizedTensor(levels, scales, shape, dtype, self.bucket_size)


class TernGrad(_Seeded):
    """TernGrad (Wen et al. 2017): levels in {-1, 0, 1} scaled by the max-norm.

    ``clip``: if set (paper: 2.5), gradients are first clipped to ``clip`` standard deviations
    (which biases the estimate slightly). ``bucket_size`` None scales the whole tensor by one
    max-norm, as in the paper; an integer gives one scale per bucket.
    """

    def __init__(self, clip=None, bucket_size=None, seed=None):
        if clip is not None and not (isinstance(clip, (int, float)) and clip > 0):
            raise ValueError(f"clip must be a positive number of standard deviations, got {clip!r}")
        if bucket_size is not None and (not isinstance(bucket_size, (int, np.integer)) or bucket_size < 1):
            raise ValueError(f"bucket_size must be None or a positive integer, got {bucket_size!r}")
        super().__init__(seed)
        self.clip, self.bucket_size = clip, bucket_size
        self.levels = 1
        self.level_dtype = np.dtype(np.int8)

    @property
    def biased(self):
        return self.clip is not None

    def __repr__(self):
        return f"TernGrad(clip={self.clip!r}, bucket_size={self.bucket_size!r}, seed={self.seed!r})"

    def quantize(self, grad, seed=None):
        """As QSGD.quantize."""
        flat, shape, dtype = _flat_float(grad)
        bucket = self.bucket_size or max(flat.size, 1)
        clip_at = float(self.clip * flat.std()) if self.clip is not None and flat.size else 0.0
        levels = np.empty(flat.size, dtype=np.int8)
        scales = np.empty(_bucket_count(flat.size, bucket), dtype=np.float32)
        qk.terngrad(flat, bucket, clip_at, self._next_seed(seed), levels, scales)
        return QuantizedTensor(levels, scales, shape, dtype, bucket)


def dequantize(qt, out=None):
    """The float array a QuantizedTensor stands for, in its original shape and dtype.

    bfloat16 tensors come back as float32 unless ``ml_dtypes`` provides the dtype.
    """
    work = np.float64 if qt.dtype == np.float64 else np.float32
    flat = np.empty(qt.levels.size, dtype=work) if out is None else out
    qk.dequantize(qt.levels, qt.scales.astype(work, copy=False), qt.bucket_size, flat)
    return flat.reshape(qt.shape).astype(qt.dtype, copy=False)
