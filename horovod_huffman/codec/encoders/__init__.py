"""Every encoder by name, and ``decode`` for any of their streams."""
import inspect

import numpy as np

from horovod_huffman.kernels.bits import bytes_to_words

from .. import wire
from ..device import stream_or_default
from ..errors import DecodeError
from ..params import ParamReader
from .ans import Ans
from .auto import Auto
from . import gpu
from .base import Encoder
from .elias import EliasGamma, EliasDelta, EliasOmega, EliasRLE, QSGDElias
from .huffman import Huffman, SampleHuffman
from .raw import Raw
from .rla import RLA
from .runlength import RLH, SHS

_STREAM_ENCODERS = (Huffman, RLH, SampleHuffman, SHS, EliasGamma, EliasDelta, EliasOmega,
                    EliasRLE, QSGDElias, Raw, Ans, RLA)
_BY_NAME = {cls.name: cls for cls in _STREAM_ENCODERS + (Auto,)}
_BY_ID = {cls.encoder_id: cls for cls in _STREAM_ENCODERS}

ENCODERS = tuple(_BY_NAME)
"""Names accepted by ``get_encoder``."""

CHUNKED = tuple(name for name, cls in _BY_NAME.items()
                if "chunk_levels" in inspect.signature(cls).parameters)
"""Encoders whose payload is cut into independently decodable chunks (``chunk_levels``)."""

GROWING = tuple(name for name, cls in _BY_NAME.items()
                if "max_chunk_levels" in inspect.signature(cls).parameters)
"""Chunked encoders whose sparse streams take longer chunks, up to ``max_chunk_levels``
(encoders/base.py ``GrowingChunks``)."""

SEEDED = tuple(name for name, cls in _BY_NAME.items()
               if "seed" in inspect.signature(cls).parameters)
"""Encoders that sample the levels (``seed`` fixes the sample, and so the stream)."""

ON_DEVICE = tuple(name for name, cls in _BY_NAME.items() if getattr(cls, "on_device", False))
"""Encoders whose streams decode on the GPU itself (the others decode on the host and copy)."""


def get_encoder(name, **kwargs):
    """A new encoder by name (see ENCODERS); keyword arguments go to its constructor.

    >>> import horovod_huffman as hh
    >>> hh.get_encoder("shs", k=200, sample_size=1000, seed=0)
    SHS(sample_size=1000, k=200, seed=0)
    """
    if not isinstance(name, str):
        raise TypeError(f"encoder name must be a string, got {type(name).__name__}")
    try:
        cls = _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown encoder {name!r}; choose one of {', '.join(ENCODERS)}") from None
    return cls(**kwargs)


def as_encoder(encoder, **kwargs):
    """``encoder`` itself, or where it is a name the encoder ``get_encoder`` makes of it (with
    ``kwargs``). Every API that takes an encoder by name or as an object resolves it here."""
    if isinstance(encoder, str):
        return get_encoder(encoder, **kwargs)
    if kwargs:
        raise TypeError(f"encoder options {sorted(kwargs)} go with an encoder name, not with "
                        f"{encoder!r}")
    return encoder


def encoder_name(buf):
    """Name of the encoder that wrote a stream (header only; no checksum verification)."""
    data = wire.as_bytes(buf)
    if len(data) < wire.HEADER.size:
        raise DecodeError("not a horovod-huffman stream")
    magic, _, encoder_id = wire.HEADER.unpack_from(data, 0)[:3]
    if magic != wire.MAGIC:
        raise DecodeError("not a horovod-huffman stream")
    cls = _BY_ID.get(encoder_id)
    if cls is None:
        raise DecodeError(f"unknown encoder id {encoder_id}")
    return cls.name


def check(buf, max_elements=None, covered=False):
    """Check a stream's header, lengths and checksum without decoding it; DecodeError naming
    the first field that is wrong (the decoder's own checks of the payload come on decode).
    ``covered``: a stream inside a message whose checksum was verified (``wire.parse``)."""
    frame = wire.parse(buf, max_elements, known_ids=_BY_ID, covered=covered)
    if frame.n == 0 and (len(frame.params) or frame.payload_bits):
        raise DecodeError(f"{_BY_ID[frame.encoder_id].name}: empty stream with parameters or "
                          "payload")
    return frame


def decode(buf, max_elements=None, device=None, stream=None, covered=False):
    """Levels from any encoder's stream, in the dtype they were encoded from.

    Treats ``buf`` as hostile: anything malformed raises DecodeError naming the problem, and no
    more than ``max_elements`` (default wire.DEFAULT_MAX_ELEMENTS) levels are allocated.
    ``device="cuda"`` returns a Numba device array, decoded on the GPU on ``stream`` (default:
    the default stream) for the streams of ON_DEVICE's encoders (others decode on the host
    and are copied over). ``covered``: as for ``check``.
    """
    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"device must be None, 'cpu' or 'cuda', got {device!r}")
    frame = check(buf, max_elements, covered)
    cls = _BY_ID[frame.encoder_id]
    if device == "cuda":
        stream = stream_or_default(stream)
        out = gpu.Output(frame.n, frame.dtype, stream)
        _decode_on_device(cls, frame, out, stream)
        return out.levels
    out = np.empty(frame.n, dtype=frame.dtype)
    if frame.n:
        cls._decode(ParamReader(frame.params), bytes_to_words(frame.payload),
                    frame.payload_bits, out)
    return out


def decode_dequantized(buf, total, scales, bucket, add, stream=None, covered=False, group=None,
                       label="", within=None):
    """Decode a stream of ``total.size`` levels on the GPU, dequantized into the float32 or
    float64 device array ``total`` in the same pass: total[j] = scales[j // bucket] * level j,
    or += with ``add`` (``scales``: a host or device array of the total's dtype). The levels
    never exist as an array for the encoders that decode on the device (gpu.Output). Treats
    ``buf`` as ``decode`` does; a stream of another length raises DecodeError before anything
    is written.

    ``group``: a gpu.StreamGroup that the Huffman family's and ans's streams join, to be decoded
    with the group's others in one launch when it is flushed (None: at once); ``label`` names
    the stream in the group's DecodeError; ``within``: (an array, an offset) of which ``total``
    is the slice at that offset, so that a group decodes into several slices of one array in one
    launch (gpu.Output)."""
    frame = check(buf, total.size, covered)
    if frame.n != total.size:
        raise DecodeError(f"stream holds {frame.n} levels, {total.size} expected")
    stream = stream_or_default(stream)
    _decode_on_device(_BY_ID[frame.encoder_id], frame,
                      gpu.Output(frame.n, frame.dtype, stream, total, scales, bucket, add, group,
                                 label, within), stream)


def _decode_on_device(cls, frame, out, stream):
    """Decode ``frame`` into the gpu.Output ``out``: on the device for ON_DEVICE's encoders,
    else on the host, then copied."""
    if frame.n == 0:
        return
    if cls.on_device:
        if cls.decodes_in_groups:
            words = bytes_to_words(frame.payload)
        else:
            out.group.flush()
            words = gpu.to_device_words(frame.payload, stream)
        cls._decode(ParamReader(frame.params), words, frame.payload_bits, out, stream)
        return
    host = np.empty(frame.n, dtype=frame.dtype)
    cls._decode(ParamReader(frame.params), bytes_to_words(frame.payload), frame.payload_bits,
                host)
    out.put(host)


__all__ = ["ENCODERS", "Encoder", "as_encoder", "get_encoder", "decode", "encoder_name", "Auto",
           "Huffman", "RLH", "SampleHuffman", "SHS", "EliasGamma", "EliasDelta", "EliasOmega",
           "EliasRLE", "QSGDElias", "Raw", "Ans", "RLA"]
