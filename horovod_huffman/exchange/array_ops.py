"""The array steps of codec_state.Codec (error feedback, decoding, summing ranks), once for host
NumPy arrays and once for GPU arrays, behind one interface, so the Codec has a single body.

``HostOps`` works on NumPy arrays; ``DeviceOps(stream)`` on Numba device arrays, with every
kernel on ``stream`` (kernels/cuda_feedback.py) and nothing copied to the host but the encoded
bytes and the scales. Work arrays are float32, or float64 for float64 gradients.
"""
import numpy as np
from numba import cuda

from horovod_huffman.kernels import cuda_feedback as cf, cuda_parts as cp, cuda_quantize as cq, \
    quantize as qk
from horovod_huffman.kernels.cuda_bits import BLOCK

from ..codec.device import grid_for, is_device_array
from ..codec.encoders.gpu import StatusChecks, StreamGroup
from ..codec.message import encode as encode_message, encode_batch
from ..codec.quantizers import QuantizedTensor, dequantize, device_scales
from ..codec.pending import Ready
from .encode_queue import EncodeQueue
from .quantize_queue import QuantizeQueue
from .rank_sums import QueuedSum, SumQueue, add_all


def work_dtype(dtype):
    return np.dtype(np.float64 if np.dtype(dtype) == np.float64 else np.float32)


def contract(x, qt):
    """``qt`` with every bucket's scale multiplied by a_b = <x_b, Q_b> / |Q_b|^2, the factor that
    makes x_b - a_b Q_b orthogonal to Q_b, hence |x_b - a_b Q_b| <= |x_b| (a contraction;
    ``quantize.contract_scales``). A scale beyond float32 becomes Inf: the bucket is then
    reduced as non-finite and error feedback keeps its residuals (feedback.ErrorFeedback.settle)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    scales = np.empty_like(qt.scales, dtype=np.float32)
    with np.errstate(over="ignore"):
        qk.contract_scales(flat, qt.levels, qt.scales, qt.bucket_size, scales)
    return type(qt)(qt.levels, scales, qt.shape, qt.dtype, qt.bucket_size)


class Ungrouped:
    """HostOps' decode group: on the host every stream decodes at once, so there is nothing
    to flush."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def flush(self):
        pass

    @staticmethod
    def checked():
        """Its verdict: a Pending of None (a host stream that fails raises as it decodes)."""
        return Ready(None)


class HostOps:
    """NumPy implementations."""
    stream = None
    queue = None            # host tensors encode at once (encode_queue.py)
    quantizes = None        # and quantize at once (quantize_queue.py)
    checks = None           # host streams raise as they decode

    @staticmethod
    def add(a, b):
        return a + b

    contract = staticmethod(contract)

    @staticmethod
    def residual(work, qt):
        return work - dequantize(qt)

    @staticmethod
    def all_finite(x):
        """Whether every element of ``x`` is finite (a bool)."""
        return qk.all_finite(x)

    @staticmethod
    def keep_if(finite, new, old):
        """``new`` where ``finite`` (``all_finite``'s answer), else ``old`` (None: no array)."""
        return new if finite else old

    @staticmethod
    def encode(qt, encoder, layout=None):
        return encode_message(qt, encoder, layout=layout)

    @staticmethod
    def decode_group(shared=None):
        """A context giving the ``group`` that ``decode_into`` takes for the streams of one
        total; every stream joined to it is decoded when the context ends, or at its
        ``flush()``, which must come before anything else writes that total. Its
        ``checked()`` is a Pending (allreduce.py) that raises the DecodeError of a stream it
        rejected: wait for it before the total settles or leaves. ``shared``: a list that
        groups decoded together share (gpu.StreamGroup)."""
        return Ungrouped()

    @staticmethod
    def sum_later(parts, size, dtype, charge=None):
        """A Pending (allreduce.py) of a new 1-D total of ``size`` elements of ``dtype``, the
        sum of ``parts`` (rank_sums.Part); on the host computed now, within the caller's
        time. ``charge``: (statistics, key) charged the decoding time where it runs later."""
        summed = QueuedSum(None, parts, size, dtype)
        add_all(HostOps, [summed])
        return summed

    @staticmethod
    def decode_into(contents, total, add, group=None, label="", within=None):
        """The tensor of a checked message (message.Contents) dequantized into the 1-D work
        array ``total``: assigned, or with ``add`` added; ``total`` None: a new array.
        ``group``: from ``decode_group``; ``label`` names the stream in a DecodeError that
        the group raises; ``within``: (an array, an offset) of which ``total`` is the slice
        at that offset, so that a group may decode into several slices of it at once."""
        qt = contents.unpack()
        if total is None or add:
            return HostOps.add_dequantized(total, qt)
        dequantize(qt, out=total)
        return total

    @staticmethod
    def dequantize(qt):
        return dequantize(qt).astype(work_dtype(qt.dtype), copy=False)

    @staticmethod
    def add_dequantized(total, qt):
        """total + dequantize(qt) (1-D, into ``total``), in one pass without a dequantized
        array; ``total`` None: a new array."""
        if total is None:
            return HostOps.dequantize(qt).reshape(qt.numel)
        qk.dequantize_add(qt.levels, qt.scales.astype(total.dtype, copy=False), qt.bucket_size,
                          total)
        return total

    @staticmethod
    def empty(n, dtype):
        return np.empty(n, dtype=dtype)

    @staticmethod
    def assign(out, offset, part):
        """out[offset:offset + part.size] = part (1-D arrays)."""
        out[offset:offset + part.size] = part

    @staticmethod
    def dequantize_all(items):
        """For each (out, offset, qt, add) of ``items``: out[offset:offset + qt.numel] =
        dequantize(qt), or with ``add`` += it (``out`` 1-D, of qt's work dtype), in order."""
        for out, offset, qt, add in items:
            if add:
                HostOps.add_dequantized(out[offset:offset + qt.numel], qt)
            else:
                dequantize(qt, out=out[offset:offset + qt.numel])


class DeviceOps:
    """GPU implementations; results stay on the device."""

    def __init__(self, stream):
        self.stream = stream
        # Quantizations the exchanges on this stream ask for, and their encodes, each run as
        # one batch (quantize_queue.py, encode_queue.py); the sums they ask for, computed
        # together (rank_sums.py); the statuses of their decode groups, read back in one copy.
        self.quantizes = QuantizeQueue(self)
        self.queue = EncodeQueue(self)
        self.sums = SumQueue(self)
        self.checks = StatusChecks(stream)

    def _launch(self, kernel, n):
        return kernel[grid_for(n, BLOCK), BLOCK, self.stream]

    def _like(self, x, dtype=None):
        return cuda.device_array(x.shape, dtype=dtype or x.dtype, stream=self.stream)

    def add(self, a, b):
        out = self._like(a)
        self._launch(cf.add, a.size)(a, b, out)
        return out

    def contract(self, x, qt):
        scales = self._like(qt.scales)
        blocks = -(-qt.scales.size // BLOCK)
        if blocks:
            cf.contract[blocks, BLOCK, self.stream](x.reshape(x.size), qt.levels, qt.scales,
                                                    qt.bucket_size, scales)
        return QuantizedTensor(qt.levels, scales, qt.shape, qt.dtype, qt.bucket_size)

    def residual(self, work, qt):
        out = self._like(work)
        self._launch(cf.residual, work.size)(work, qt.levels, qt.scales, qt.bucket_size, out)
        return out

    def all_finite(self, x):
        """A one-element int32 device array: 1 when every element of ``x`` is finite, else 0;
        computed on the stream, never read back to the host (``keep_if`` takes it)."""
        flag = cuda.device_array(1, dtype=np.int32, stream=self.stream)
        cf.fill[1, 1, self.stream](flag, 1)
        if x.size:
            self._launch(cf.clear_if_nonfinite, x.size)(x.reshape(x.size), flag)
        return flag

    def keep_if(self, finite, new, old):
        """``new``, overwritten on the stream by ``old`` (None or another shape: zeros) unless
        the device flag ``finite`` is 1."""
        if old is None or not is_device_array(old) or old.shape != new.shape:
            old = new[:0]
        self._launch(cf.keep_if, new.size)(finite, new, old)
        return new

    def encode(self, qt, encoder, layout=None):
        return encode_message(qt, encoder, stream=self.stream, layout=layout)

    def encode_batch(self, qts, encoder):
        """The messages of several quantized tensors, as ``encode`` of each (no layouts);
        with an encoder that codes batches (the Huffman family, ``ans``), every tensor in one
        batch on the device (message.encode_batch): the encode queue's call."""
        return encode_batch(qts, encoder, stream=self.stream)

    def decode_group(self, shared=None):
        """As HostOps.decode_group: a gpu.StreamGroup, which decodes the Huffman family's and
        ``ans``'s streams of one total (the ranks' streams of a bucket) in one launch. Its streams'
        statuses stay on the device with every other group's of these ops until a driver
        flushes them (``checked()``, the group's verdict, raises the DecodeError)."""
        return StreamGroup(self.stream, self.checks, shared)

    def sum_later(self, parts, size, dtype, charge=None):
        """As HostOps.sum_later, queued: computed with every other sum queued on these ops
        when a driver flushes it or it is waited for (rank_sums.py)."""
        return self.sums.put(parts, size, dtype, charge)

    def decode_into(self, contents, total, add, group=None, label="", within=None):
        """As HostOps.decode_into, decoding, dequantizing and adding in one pass on the device
        (message.Contents.dequantize_into): no levels array."""
        if total is None:
            total, add, within = self.empty(contents.numel, work_dtype(contents.dtype)), False, None
        contents.dequantize_into(total, add, self.stream, group, label, within)
        return total

    def dequantize_all(self, items):
        """As HostOps.dequantize_all, in one launch per output array, level dtype and
        MAX_PARTS // 2 tensors (cuda_quantize.dequantize_parts, which takes two arrays per
        tensor): every element is what HostOps.dequantize_all assigns or adds."""
        groups = {}
        for out, offset, qt, add in items:
            if qt.numel:
                scales = device_scales(qt, np.float32, self.stream)
                groups.setdefault((id(out), np.dtype(qt.levels.dtype), np.dtype(scales.dtype)),
                                  []).append((out, int(offset), qt, scales, add))
        per_launch = cp.MAX_PARTS // 2
        for group in groups.values():
            out = group[0][0]
            wide = cq.PUT_WIDE if out.dtype == np.float64 else 0
            for a in range(0, len(group), per_launch):
                chunk = group[a:a + per_launch]
                levels = tuple(qt.levels.reshape(qt.numel) for _, _, qt, _, _ in chunk)
                scales = tuple(sc.reshape(sc.size) for *_, sc, _ in chunk)
                buckets = tuple(int(qt.bucket_size) for _, _, qt, _, _ in chunk)
                offsets = tuple(offset for _, offset, *_ in chunk)
                modes = tuple(cq.PUT_DEQUANTIZED | wide | (cq.PUT_ADD if add else 0)
                              for *_, add in chunk)
                grid = (grid_for(max(qt.numel for _, _, qt, _, _ in chunk), BLOCK), len(chunk))
                cq.dequantize_parts[grid, BLOCK, self.stream](
                    *(cp.padded(t) for t in (levels, scales, buckets, offsets, modes)), out)

    def empty(self, n, dtype):
        return cuda.device_array(n, dtype=dtype, stream=self.stream)

    def assign(self, out, offset, part):
        """out[offset:offset + part.size] = part (1-D device arrays), on the stream."""
        if part.size:
            out[offset:offset + part.size].copy_to_device(part, stream=self.stream)

    def scale(self, x, factor):
        self._launch(cf.scale, x.size)(x, factor)
        return x
