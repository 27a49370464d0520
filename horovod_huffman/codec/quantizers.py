"""Lossy quantizers that turn a float gradient into integer levels plus per-bucket scales.

>>> import numpy as np, horovod_huffman as hh
>>> g = np.linspace(-1, 1, 1000, dtype=np.float32)
>>> qt = hh.QSGD(levels=8, seed=0).quantize(g)
>>> qt.levels.dtype, int(abs(qt.levels).max()) <= 8, hh.dequantize(qt).shape
(dtype('int8'), True, (1000,))
"""
from dataclasses import dataclass

import numpy as np
from numba import cuda

from horovod_huffman.kernels import cuda_parts as cp, cuda_quantize as cq, quantize as qk
from horovod_huffman.kernels.cuda_bits import BLOCK as _BLOCK

from .device import arena, is_device_array, as_device_array, stream_or_default, grid_for

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
    quantizes_in_batches = True     # quantize_batch quantizes device tensors in one launch

    def __init__(self, seed):
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def next_seed(self, seed=None):
        """The kernel seed (< 2**63) of one quantization: ``seed`` when given, else the next of
        the sequence."""
        # Kernels take an int64 seed: keep 63 bits of whatever the caller passes.
        return int(seed) & (2**63 - 1) if seed is not None else int(self._rng.integers(0, 2**63 - 1))

    def quantize_batch(self, grads, seeds, stream=None):
        """[``quantize(g, seed=s, stream=stream)`` for each g, s of ``grads``, ``seeds``]. Device
        arrays (of one float dtype) quantize together: one launch per kernel and MAX_PARTS
        tensors, their levels and scales slices of one array each."""
        return [self.quantize(g, seed=s, stream=stream) for g, s in zip(grads, seeds)]


class QSGD(_Seeded):
    """QSGD (Alistarh et al. 2017): per bucket,
    ``level = sign(g) * round_stochastic(|g| / ||g||_2 * s)``.

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

    def quantize(self, grad, seed=None, stream=None):
        """QuantizedTensor of a float array of any shape; ``seed`` (< 2**64) fixes this call's
        random rounding (default: the next seed of this quantizer's sequence).

        A GPU array (``__cuda_array_interface__``; float16/32/64) is quantized on the device, on
        ``stream``, into device levels and scales equal to the host result.
        """
        if is_device_array(grad):
            return self.quantize_batch([grad], [seed], stream)[0]
        flat, shape, dtype = _flat_float(grad)
        levels = np.empty(flat.size, dtype=self.level_dtype)
        scales = np.empty(_bucket_count(flat.size, self.bucket_size), dtype=np.float32)
        qk.qsgd(flat, float(self.levels), self.bucket_size, self.next_seed(seed), levels, scales)
        return QuantizedTensor(levels, scales, shape, dtype, self.bucket_size)

    @property
    def batch_key(self):
        """Quantizers whose batch keys are equal quantize every tensor alike (seeds aside)."""
        return "QSGD", self.levels, self.bucket_size

    def quantize_batch(self, grads, seeds, stream=None):
        if not grads or not all(is_device_array(g) for g in grads):
            return super().quantize_batch(grads, seeds, stream)
        with _DeviceBatch(grads, stream, lambda n: self.bucket_size, self.level_dtype) as batch:
            s, stream = float(self.levels), batch.stream
            drawn = [self.next_seed(x) for x in seeds]
            for part in batch.launches():
                xs, firsts = batch.tensors(part), batch.each(batch.firsts, part)
                seed = batch.each(drawn, part)
                cq.qsgd_scales[batch.grid(part, batch.counts), _BLOCK, stream](
                    xs, s, self.bucket_size, firsts, batch.scales, batch.factors)
                cq.qsgd_levels[batch.grid(part, batch.sizes), _BLOCK, stream](
                    xs, s, self.bucket_size, seed, firsts, batch.each(batch.starts, part),
                    batch.factors, batch.levels)
        return batch.results()


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

    @property
    def batch_key(self):
        """As QSGD.batch_key."""
        return "TernGrad", self.clip, self.bucket_size

    def quantize(self, grad, seed=None, stream=None):
        """As QSGD.quantize. The clip bound's standard deviation is summed in the same fixed
        order on either device (kernels/quantize.py ``deviation``)."""
        if is_device_array(grad):
            return self.quantize_batch([grad], [seed], stream)[0]
        flat, shape, dtype = _flat_float(grad)
        bucket = self.bucket_size or max(flat.size, 1)
        clip_at = float(self.clip * qk.deviation(flat)) if self.clip is not None else 0.0
        levels = np.empty(flat.size, dtype=np.int8)
        scales = np.empty(_bucket_count(flat.size, bucket), dtype=np.float32)
        qk.terngrad(flat, bucket, clip_at, self.next_seed(seed), levels, scales)
        return QuantizedTensor(levels, scales, shape, dtype, bucket)

    def quantize_batch(self, grads, seeds, stream=None):
        """As QSGD.quantize_batch; a bucket's max-norm is reduced by blocks in parallel
        (cuda_quantize.terngrad_maxima). With ``clip``, every tensor's standard deviation is
        reduced on the device too, in a fixed order (``_clip_bounds``): nothing comes back
        to the host."""
        if not grads or not all(is_device_array(g) for g in grads):
            return super().quantize_batch(grads, seeds, stream)
        with _DeviceBatch(grads, stream, lambda n: self.bucket_size or max(n, 1),
                          np.int8) as batch:
            self._quantize_device(batch, seeds)
        return batch.results()

    def _quantize_device(self, batch, seeds):
        """``quantize_batch``'s launches for the _DeviceBatch ``batch``."""
        stream = batch.stream
        drawn = [self.next_seed(x) for x in seeds]
        clip = float(self.clip or 0.0)
        # Read only where clip > 0: otherwise any float64 device array stands in.
        clip_ats = _clip_bounds(batch, clip) if clip else batch.factors
        n_buckets = batch.scales.size
        finite = arena(stream).take(n_buckets, np.int64)
        grid = grid_for(n_buckets, _BLOCK)
        if n_buckets:
            cq.terngrad_start[grid, _BLOCK, stream](batch.factors, finite)
        segments = [c * -(-b // cq.SEGMENT) for c, b in zip(batch.counts, batch.buckets)]
        for part in batch.launches():
            xs, firsts = batch.tensors(part), batch.each(batch.firsts, part)
            cq.terngrad_maxima[batch.grid(part, segments, 1), _BLOCK, stream](
                xs, batch.each(batch.buckets, part), clip, clip_ats[part.start:], firsts,
                batch.factors, finite)
        if n_buckets:
            cq.terngrad_scales[grid, _BLOCK, stream](batch.factors, finite, batch.scales,
                                                     batch.factors)
        for part in batch.launches():
            cq.terngrad_levels[batch.grid(part, batch.sizes), _BLOCK, stream](
                batch.tensors(part), batch.each(batch.buckets, part), clip,
                clip_ats[part.start:], batch.each(drawn, part), batch.each(batch.firsts, part),
                batch.each(batch.starts, part), batch.factors, batch.levels)


class _DeviceBatch:
    """Device gradients of one float dtype quantized together: their levels, scales and
    float64 per-bucket factors (QSGD's s / norm, TernGrad's max-norm) are slices of one array
    each, and each kernel takes them MAX_PARTS at a time (kernels/cuda_parts.py).
    ``bucket_of(n)``: the bucket size of a tensor of n elements. Used in a ``with`` block,
    inside which the factors and the kernels' other temporaries are regions of the stream's
    arena (device.Arena); the levels and scales outlive it."""

    def __init__(self, grads, stream, bucket_of, level_dtype):
        self.flats = [_flat_device(g, stream) for g in grads]
        self.stream = self.flats[0][3]
        if len({f[2] for f in self.flats}) > 1:
            raise TypeError("a batch of device gradients must share one float dtype")
        self.sizes = [int(f[0].size) for f in self.flats]
        self.buckets = [int(bucket_of(n)) for n in self.sizes]
        self.counts = [_bucket_count(n, b) for n, b in zip(self.sizes, self.buckets)]
        self.starts = [int(v) for v in np.cumsum([0] + self.sizes)]
        self.firsts = [int(v) for v in np.cumsum([0] + self.counts)]
        stream = self.stream
        self.levels = cuda.device_array(self.starts[-1], dtype=level_dtype, stream=stream)
        self.scales = cuda.device_array(self.firsts[-1], dtype=np.float32, stream=stream)
        self.factors = None

    def __enter__(self):
        self._arena = arena(self.stream).__enter__()
        self.factors = self._arena.take(self.firsts[-1], np.float64)
        return self

    def __exit__(self, kind, value, traceback):
        self._arena.__exit__(kind, value, traceback)

    def launches(self):
        """The tensors of each launch (ranges of at most MAX_PARTS indices), skipping those
        that are all empty."""
        n = len(self.flats)
        for a in range(0, n, cp.MAX_PARTS):
            part = range(a, min(a + cp.MAX_PARTS, n))
            if any(self.sizes[k] for k in part):
                yield part

    def tensors(self, part):
        return cp.padded(tuple(self.flats[k][0] for k in part))

    @staticmethod
    def each(values, part):
        """The kernel tuple of ``values`` (one number per tensor) for the tensors of ``part``."""
        return cp.padded(tuple(values[k] for k in part))

    @staticmethod
    def grid(part, work, per_block=_BLOCK):
        """(blocks along x for the largest ``work`` of ``part`` at ``per_block`` items each,
        one row of blocks per tensor)."""
        return grid_for(max(work[k] for k in part), per_block), len(part)

    def results(self):
        return [QuantizedTensor(self.levels[self.starts[k]:self.starts[k + 1]],
                                self.scales[self.firsts[k]:self.firsts[k + 1]],
                                f[1], f[2], bucket)
                for k, (f, bucket) in enumerate(zip(self.flats, self.buckets))]


def _flat_device(grad, stream):
    """(1-D device view of ``grad``, shape, dtype, stream) for a float16/32/64 device array."""
    grad = as_device_array(grad)
    if grad.dtype.name not in ("float16", "float32", "float64"):
        raise TypeError(f"device grad must be float16/32/64, got {grad.dtype}; "
                        "convert bfloat16 on the device first")
    if not grad.is_c_contiguous():
        raise ValueError("device grad must be contiguous")
    return grad.reshape(grad.size), tuple(grad.shape), np.dtype(grad.dtype), \
        stream_or_default(stream)


def _clip_bounds(batch, clip):
    """A float64 device array: ``clip`` times each tensor's population standard deviation, in
    the host's order (kernels/quantize.py ``deviation``; cuda_quantize.moments, then
    clip_bounds), three launches per MAX_PARTS tensors and no copy to the host."""
    stream = batch.stream
    n = len(batch.flats)
    scratch = arena(stream)
    sums = scratch.take((n, qk.MOMENT_LANES), np.float64)
    squares = scratch.take((n, qk.MOMENT_LANES), np.float64)
    clip_ats = scratch.take(n, np.float64)
    for part in batch.launches():
        xs, rows = batch.tensors(part), slice(part.start, part.stop)
        grid = (cq.MOMENT_BLOCKS, len(part))
        cq.moments[grid, _BLOCK, stream](xs, 0, sums[rows], squares[rows])
        cq.moments[grid, _BLOCK, stream](xs, 1, sums[rows], squares[rows])
        cq.clip_bounds[(1, len(part)), 1, stream](xs, clip, squares[rows], clip_ats[rows])
    return clip_ats


def device_scales(qt, dtype, stream):
    """``qt``'s scales on the device, in the precision a ``dtype`` tensor dequantizes in:
    float64 for float64, else float32 (as the host does)."""
    scales = as_device_array(qt.scales) if is_device_array(qt.scales) else \
        cuda.to_device(np.ascontiguousarray(qt.scales, dtype=np.float32), stream=stream)
    if np.dtype(dtype) != np.float64:
        return scales
    wide = cuda.device_array(scales.size, dtype=np.float64, stream=stream)
    cq.convert[grid_for(scales.size, _BLOCK), _BLOCK, stream](scales, wide)
    return wide


def dequantize(qt, out=None, stream=None):
    """The float array a QuantizedTensor stands for, in its original shape and dtype.

    bfloat16 tensors come back as float32 unless ``ml_dtypes`` provides the dtype. Device
    levels (``quantize`` of a GPU array, ``hh.decode(..., device="cuda")``) dequantize on the
    device, on ``stream``, into a device array (``out``: a flat device array to fill).
    """
    if is_device_array(qt.levels):
        dtype = qt.dtype if qt.dtype.name in ("float16", "float32", "float64") else np.float32
        stream = stream_or_default(stream)
        levels = as_device_array(qt.levels)
        if out is None:
            out = cuda.device_array(levels.size, dtype=dtype, stream=stream)
        scales = device_scales(qt, dtype, stream)
        # float16 goes through float32, as on the host (one rounding to float32, then to float16).
        work = out if out.dtype != np.float16 else \
            cuda.device_array(levels.size, dtype=np.float32, stream=stream)
        if levels.size:
            cq.dequantize[grid_for(levels.size, _BLOCK), _BLOCK, stream](
                levels, scales, qt.bucket_size, work)
            if work is not out:
                cq.convert[grid_for(levels.size, _BLOCK), _BLOCK, stream](work, out)
        return out.reshape(qt.shape)
    work = np.float64 if qt.dtype == np.float64 else np.float32
    flat = np.empty(qt.levels.size, dtype=work) if out is None else out
    qk.dequantize(qt.levels, qt.scales.astype(work, copy=False), qt.bucket_size, flat)
    return flat.reshape(qt.shape).astype(qt.dtype, copy=False)
