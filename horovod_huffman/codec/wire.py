"""Framing of one encoded level stream (layout in docs/wire-format.md).

    offset  size  field
    0       4     magic b"HHUF"
    4       1     format version (3)
    5       1     encoder id (ENCODER_IDS)
    6       1     level dtype code (LEVEL_DTYPES)
    7       1     flags: 0, or COVERED (the stream sits inside a tensor message, whose
                  checksum covers it, and has no checksum of its own)
    8       8     element count n
    16      4     parameter bytes P
    20      8     payload bits B
    28      P     encoder parameters
    28+P    ceil(B/8)  payload, MSB-first bits, zero-padded to a byte
    end-8   8     checksum: XXH3-64 (seed 0) of every preceding byte (absent when COVERED)

All integers are little-endian. ``parse`` checks sizes, then the checksum, then every field
against the maxima (kernels/maxima.py) before anything is allocated.
"""
import struct
from dataclasses import dataclass

import numpy as np
import xxhash

from horovod_huffman.kernels.bits import write_payload
from horovod_huffman.kernels.maxima import MAX_ELEMENTS, MAX_PARAM_BYTES  # noqa: F401

from .errors import DecodeError

MAGIC = b"HHUF"
# 4: ``ans`` and ``rla`` chunks interleave 32 rANS states (docs/wire-format.md).
VERSION = 4
HEADER = struct.Struct("<4sBBBBQIQ")
CHECKSUM = struct.Struct("<Q")
OVERHEAD_BYTES = HEADER.size + CHECKSUM.size

# Default cap on the element count a decode will allocate for, unless the caller passes
# max_elements: 2**31 levels (2 GiB of int8) covers any single gradient tensor in practice.
DEFAULT_MAX_ELEMENTS = 1 << 31

# Every encoder's id in the header, by name: the stream names its encoder, so any rank decodes it
# whatever encoder it was told to use. Ids are never reused.
ENCODER_IDS = {"raw": 0, "huffman": 1, "rlh": 2, "sh": 3, "shs": 4, "elias_gamma": 5,
               "elias_delta": 6, "elias_omega": 7, "elias_rle": 8, "qsgd_elias": 9, "ans": 10,
               "rla": 11}

LEVEL_DTYPES = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 3: np.dtype(np.int32),
                4: np.dtype(np.int64)}
DTYPE_CODES = {dt: code for code, dt in LEVEL_DTYPES.items()}
# flags bit: the stream is covered by the checksum of the message around it (message.py).
COVERED = 0x01


class Frame:
    """A parsed, checksum-verified stream: fields plus views of parameters and payload."""
    __slots__ = ("encoder_id", "dtype", "n", "params", "payload", "payload_bits")

    def __init__(self, encoder_id, dtype, n, params, payload, payload_bits):
        self.encoder_id = encoder_id
        self.dtype = dtype
        self.n = n
        self.params = params
        self.payload = payload
        self.payload_bits = payload_bits


def checksum(data):
    """The 64-bit checksum of a uint8 array or bytes (XXH3-64, seed 0), shared by tensor
    messages (message.py)."""
    return xxhash.xxh3_64_intdigest(data)


@dataclass(frozen=True)
class Encoded:
    """An encoder's output before framing: ``n`` levels of ``dtype`` as ``params`` (bytes) and
    the first ``bits`` payload bits of ``words`` (native uint32 words, as the kernels write
    them). ``write`` puts the stream into a buffer once: no intermediate copy."""
    encoder_id: int
    dtype: np.dtype
    n: int
    params: bytes
    words: np.ndarray
    bits: int

    def nbytes(self, covered=False):
        """Bytes of the stream: with its checksum, or ``covered`` without it."""
        return HEADER.size + len(self.params) + (self.bits + 7) // 8 + \
            (0 if covered else CHECKSUM.size)

    def write(self, out, pos, covered=False):
        """Write the stream into the uint8 array ``out`` at ``pos``; returns the end. A
        ``covered`` stream carries the COVERED flag and no checksum (the caller's covers it)."""
        HEADER.pack_into(out, pos, MAGIC, VERSION, self.encoder_id,
                         DTYPE_CODES[np.dtype(self.dtype)], COVERED if covered else 0,
                         self.n, len(self.params), self.bits)
        start = pos + HEADER.size
        out[start:start + len(self.params)] = np.frombuffer(self.params, dtype=np.uint8)
        start += len(self.params)
        write_payload(self.words, self.bits, out, start)
        end = start + (self.bits + 7) // 8
        if not covered:
            CHECKSUM.pack_into(out, end, checksum(out[pos:end]))
            end += CHECKSUM.size
        return end


def frame(encoded):
    """The complete stand-alone stream of an ``Encoded``, as a 1-D uint8 array."""
    out = np.empty(encoded.nbytes(), dtype=np.uint8)
    encoded.write(out, 0)
    return out


def as_bytes(buf):
    """A read-only uint8 view of bytes, bytearray, memoryview or a uint8 array."""
    if isinstance(buf, np.ndarray):
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise TypeError(f"stream must be a 1-D uint8 array, got {buf.dtype} with shape {buf.shape}")
        return buf
    if isinstance(buf, (bytes, bytearray, memoryview)):
        return np.frombuffer(buf, dtype=np.uint8)
    raise TypeError(f"stream must be bytes-like or a uint8 array, got {type(buf).__name__}")


def parse(buf, max_elements=None, known_ids=(), covered=False):
    """Verify and split a stream; raises DecodeError naming the first field that is wrong.
    ``covered``: the stream comes out of a message whose checksum the caller has verified; it
    must then carry the COVERED flag and no checksum, and a stand-alone stream must not."""
    data = as_bytes(buf)
    limit = DEFAULT_MAX_ELEMENTS if max_elements is None else int(max_elements)
    tail = 0 if covered else CHECKSUM.size
    if len(data) < HEADER.size + tail:
        raise DecodeError(f"stream truncated: {len(data)} bytes, a header needs "
                          f"{HEADER.size + tail}")
    magic, version, encoder_id, dtype_code, flags, n, n_params, payload_bits = \
        HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise DecodeError(f"bad magic {magic!r}: not a horovod-huffman stream")
    if version != VERSION:
        raise DecodeError(f"unsupported format version {version} (this build reads {VERSION})")
    if flags != (COVERED if covered else 0):
        raise DecodeError(f"flags {flags:#x} where {COVERED if covered else 0:#x} was expected"
                          + (" (a stream without its checksum outside a message)"
                             if flags == COVERED else ""))
    if n_params > MAX_PARAM_BYTES:
        raise DecodeError(f"parameter length {n_params} exceeds {MAX_PARAM_BYTES}")
    payload_bytes = (payload_bits + 7) // 8
    expected = HEADER.size + n_params + payload_bytes + tail
    if payload_bits > 8 * len(data) or expected != len(data):
        raise DecodeError(f"stream length {len(data)} does not match the header "
                          f"({n_params} parameter bytes, {payload_bits} payload bits)")
    if not covered:
        (stored,) = CHECKSUM.unpack_from(data, len(data) - CHECKSUM.size)
        if checksum(data[:len(data) - CHECKSUM.size]) != stored:
            raise DecodeError("checksum mismatch: stream corrupted")
    if encoder_id not in known_ids:
        raise DecodeError(f"unknown encoder id {encoder_id}")
    if dtype_code not in LEVEL_DTYPES:
        raise DecodeError(f"unknown level dtype code {dtype_code}")
    if n > MAX_ELEMENTS:
        raise DecodeError(f"element count {n} exceeds the format maximum {MAX_ELEMENTS}")
    if n > limit:
        raise DecodeError(f"element count {n} exceeds max_elements={limit}")
    params = data[HEADER.size:HEADER.size + n_params]
    payload = data[HEADER.size + n_params:HEADER.size + n_params + payload_bytes]
    return Frame(encoder_id, LEVEL_DTYPES[dtype_code], n, params, payload, payload_bits)
