"""One message per quantized tensor: shape, dtype, scales and the encoded levels.

    offset  size   field
    0       4      magic b"HHQT"
    4       1      format version (3)
    5       1      float dtype code (FLOAT_CODES)
    6       1      ndim (<= MAX_NDIM)
    7       1      flags (0)
    8       8      bucket size (elements per scale)
    16      8*ndim dims
    ...     4*S    scales, float32 little-endian, S = ceil(numel / bucket size)
    ...            level stream (wire.py), flagged COVERED: without a checksum of its own
    end-8   8      checksum of every preceding byte (wire.checksum: XXH3-64)

A message is written once, straight into the buffer that goes on the wire (``Message.write``:
the exchange puts its frames and their messages into one array), and checked once on receipt.
"""
import struct
from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from horovod_huffman.kernels import cuda_parts as cp
from horovod_huffman.kernels.cuda_bits import BLOCK
from horovod_huffman.kernels.maxima import MAX_NDIM

from . import wire
from .device import (arena, is_device_array, as_device_array, stream_or_default, copy_to_host,
                     grid_for)
from .encoders import Encoder, as_encoder, check, decode, decode_dequantized, gpu
from .errors import DecodeError
from .quantizers import QuantizedTensor

MAGIC = b"HHQT"
# The message layout's version: wire.checksum over the message, the level stream inside it
# COVERED (no checksum of its own). Only this version is read.
VERSION = 3
HEAD = struct.Struct("<4sBBBBQ")
FLOAT_CODES = {"float16": 1, "float32": 2, "float64": 3, "bfloat16": 4}
_FLOAT_NAMES = {code: name for name, code in FLOAT_CODES.items()}


def _float_dtype(name):
    if name == "bfloat16":
        try:
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        except ImportError:
            return np.dtype(np.float32)
    return np.dtype(name)


@dataclass(frozen=True)
class Message:
    """A tensor message ready to be written: ``head`` (header and dims), ``scales`` (uint8
    view of little-endian float32) and the level stream (``wire.Encoded``)."""
    head: bytes
    scales: np.ndarray
    stream: wire.Encoded

    @property
    def nbytes(self):
        return len(self.head) + len(self.scales) + self.stream.nbytes(covered=True) + \
            wire.CHECKSUM.size

    def write(self, out, pos):
        """Write the message into the uint8 array ``out`` at ``pos``; returns the end."""
        start = pos
        out[pos:pos + len(self.head)] = np.frombuffer(self.head, dtype=np.uint8)
        pos += len(self.head)
        out[pos:pos + len(self.scales)] = self.scales
        pos += len(self.scales)
        pos = self.stream.write(out, pos, covered=True)
        wire.CHECKSUM.pack_into(out, pos, wire.checksum(out[start:pos]))
        return pos + wire.CHECKSUM.size


def encode(qt, encoder="rlh", stream=None, layout=None):
    """The ``Message`` of a QuantizedTensor; ``encoder`` is a name or an Encoder. Device levels
    and scales are encoded on the GPU (on ``stream``); only bytes come back. ``layout``: the
    matrices the levels hold (``Encoder.encode``), for the encoders that use it; None: a tensor
    of two or more dimensions is one matrix of shape[0] rows."""
    enc = as_encoder(encoder)
    _check_fields(qt)
    if layout is None and len(qt.shape) > 1 and qt.shape[0] and qt.numel:
        layout = [(qt.shape[0], qt.numel // qt.shape[0])]
    # stream and layout only where there are: encoders written for the host take just the
    # levels.
    options = {k: v for k, v in (("stream", stream), ("layout", layout)) if v is not None}
    if not isinstance(enc, Encoder):
        options.pop("layout", None)
    return _message(qt, enc.encoded(qt.levels, **options), qt.scales, stream)


def encode_batch(qts, encoder="rlh", stream=None):
    """The ``Message`` of each QuantizedTensor of ``qts``, the same as ``encode`` of each in
    turn (no layouts: a tensor of two or more dimensions is one matrix, as ``encode``'s
    default). Device tensors of one level dtype, with an encoder that codes batches on the GPU
    (``Encoder.codes_in_batches``: the Huffman family, ans and rla), go as one batch: their levels
    laid end to end on the device (``Encoder.encoded_parts``, a fixed number of launches and
    copies to the host whatever the number of tensors), their scales brought to the host in
    the payload's copy (gpu.Rider)."""
    enc = as_encoder(encoder)
    batched = (qts and getattr(enc, "codes_in_batches", False) and
               all(is_device_array(qt.levels) and is_device_array(qt.scales) and
                   np.dtype(qt.scales.dtype) == np.float32 for qt in qts) and
               len({np.dtype(qt.levels.dtype) for qt in qts}) == 1)
    if not batched:
        return [encode(qt, enc, stream) for qt in qts]
    for qt in qts:
        _check_fields(qt)
    stream = stream_or_default(stream)
    with arena(stream):
        levels = _end_to_end([qt.levels for qt in qts], stream)
        rider = gpu.Rider(_end_to_end([qt.scales for qt in qts], stream))
        coded = enc.encoded_parts(levels, [qt.numel for qt in qts], stream, rider)
        scales = rider.host if rider.host is not None else copy_to_host(rider.array, stream)
    ends = np.cumsum([qt.scales.size for qt in qts])
    return [_message(qt, levels_stream, scales[end - qt.scales.size:end], stream)
            for qt, levels_stream, end in zip(qts, coded, ends)]


def _end_to_end(arrays, stream):
    """One device array of ``arrays`` (device arrays of one dtype) flattened and laid end to
    end on ``stream``: one launch per MAX_PARTS of them (cuda_parts.concat); a single array
    is its own flat view."""
    arrays = [as_device_array(a) for a in arrays]
    if len(arrays) == 1:
        return arrays[0].reshape(arrays[0].size)
    sizes = [a.size for a in arrays]
    starts = np.cumsum([0] + sizes)
    out = arena(stream).take(int(starts[-1]), arrays[0].dtype)
    for a in range(0, len(arrays), cp.MAX_PARTS):
        part = range(a, min(a + cp.MAX_PARTS, len(arrays)))
        if any(sizes[k] for k in part):
            cp.concat[(grid_for(max(sizes[k] for k in part), BLOCK), len(part)),
                      BLOCK, stream](
                cp.padded(tuple(arrays[k].reshape(sizes[k]) for k in part)),
                cp.padded(tuple(int(starts[k]) for k in part)), out)
    return out


def _check_fields(qt):
    """TypeError or ValueError where a message cannot carry ``qt``'s dtype or dimensions."""
    if qt.dtype.name not in FLOAT_CODES:
        raise TypeError(f"unsupported tensor dtype {qt.dtype}")
    if len(qt.shape) > MAX_NDIM:
        raise ValueError(f"tensors of more than {MAX_NDIM} dimensions are not supported")


def _message(qt, levels, scales, stream):
    """The ``Message`` of ``qt`` with its level stream ``levels`` (``wire.Encoded``) and
    ``scales`` (host or device)."""
    if is_device_array(scales):
        scales = copy_to_host(as_device_array(scales), stream_or_default(stream))
    scales = np.ascontiguousarray(scales, dtype="<f4")
    head = HEAD.pack(MAGIC, VERSION, FLOAT_CODES[qt.dtype.name], len(qt.shape), 0,
                     qt.bucket_size) + struct.pack(f"<{len(qt.shape)}Q", *qt.shape)
    return Message(head, scales.view(np.uint8), levels)


def pack(qt, encoder="rlh", stream=None):
    """Bytes (uint8 array) of a QuantizedTensor's message (``encode``)."""
    message = encode(qt, encoder, stream)
    out = np.empty(message.nbytes, dtype=np.uint8)
    message.write(out, 0)
    return out


class Contents(namedtuple("Contents", "shape dtype bucket_size scales stream numel")):
    """A message's fields, every one checked (``contents``): the tensor's shape, float dtype,
    bucket size (elements per scale), host float32 scales and element count, and its level
    stream, not yet decoded."""
    __slots__ = ()

    def unpack(self, device=None, stream=None):
        """The QuantizedTensor (``unpack``)."""
        levels = decode(self.stream, max_elements=self.numel, device=device, stream=stream,
                        covered=True)
        if levels.size != self.numel:
            raise DecodeError(f"level stream holds {levels.size} levels, the shape needs "
                              f"{self.numel}")
        return QuantizedTensor(levels, self.scales, self.shape, self.dtype, self.bucket_size)

    def dequantize_into(self, total, add, stream, group=None, label="", within=None):
        """Decode on the GPU, dequantized into the float32/float64 device array ``total`` of
        ``numel`` elements in the decoding pass: total = (or += with ``add``) the tensor, 1-D,
        in the total's precision, as ``dequantize`` (then a sum in rank order) computes it.
        ``group``, ``label``, ``within``: as for ``encoders.decode_dequantized``."""
        decode_dequantized(self.stream, total, self.scales.astype(total.dtype), self.bucket_size,
                           add, stream, covered=True, group=group, label=label, within=within)


def contents(buf, max_elements=None):
    """The ``Contents`` of a message: every field, length and the checksum checked (the level
    stream's own fields when it is decoded); DecodeError when anything is wrong."""
    shape, dtype_code, bucket, scales, levels_stream, numel = _checked(buf, max_elements)
    return Contents(tuple(int(d) for d in shape), _float_dtype(_FLOAT_NAMES[dtype_code]),
                    int(bucket), scales, levels_stream, numel)


def _checked(buf, max_elements=None):
    """(shape, dtype code, bucket size, scales, level stream, element count) of a message, every
    field, length and its checksum checked (the level stream's own not yet); DecodeError when
    anything is wrong."""
    data = wire.as_bytes(buf)
    tail = wire.CHECKSUM.size
    if len(data) < HEAD.size + tail:
        raise DecodeError(f"message truncated: {len(data)} bytes")
    (stored,) = wire.CHECKSUM.unpack_from(data, len(data) - tail)
    if wire.checksum(data[:-tail]) != stored:
        raise DecodeError("message checksum mismatch: message corrupted")
    magic, version, dtype_code, ndim, flags, bucket = HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise DecodeError(f"bad magic {magic!r}: not a horovod-huffman tensor message")
    if version != VERSION:
        raise DecodeError(f"unsupported message version {version}")
    if dtype_code not in _FLOAT_NAMES:
        raise DecodeError(f"unknown tensor dtype code {dtype_code}")
    if ndim > MAX_NDIM or flags:
        raise DecodeError(f"bad ndim {ndim} or flags {flags:#x}")
    if bucket < 1 or bucket > wire.MAX_ELEMENTS:
        raise DecodeError(f"bucket size {bucket} out of range")
    pos = HEAD.size
    if len(data) < pos + 8 * ndim + tail:
        raise DecodeError("message truncated in the shape")
    shape = struct.unpack_from(f"<{ndim}Q", data, pos)
    pos += 8 * ndim
    numel = 1
    for d in shape:
        numel *= d
    limit = wire.DEFAULT_MAX_ELEMENTS if max_elements is None else int(max_elements)
    if numel > min(limit, wire.MAX_ELEMENTS):
        raise DecodeError(f"tensor of {numel} elements exceeds max_elements={limit}")
    n_scales = -(-numel // bucket)
    if len(data) < pos + 4 * n_scales + tail:
        raise DecodeError("message truncated in the scales")
    scales = np.frombuffer(data, dtype="<f4", count=n_scales, offset=pos).astype(np.float32)
    pos += 4 * n_scales
    return shape, dtype_code, bucket, scales, data[pos:len(data) - tail], numel


def verify(buf, max_elements=None):
    """Check a message without decoding its levels: every field, the message's checksum and
    the level stream's header (encoders.check); DecodeError when anything is wrong."""
    *_, stream, numel = _checked(buf, max_elements)
    check(stream, max_elements=numel, covered=True)


def unpack(buf, max_elements=None, device=None, stream=None):
    """The QuantizedTensor in a ``pack`` message; raises DecodeError on any malformed input.
    ``device="cuda"``: the levels are decoded on the GPU into a device array (scales stay on
    the host: they are few, and ``dequantize`` uploads them)."""
    return contents(buf, max_elements).unpack(device, stream)
