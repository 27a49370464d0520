"""Framing of one encoded level stream (layout in docs/wire-format.md).

    offset  size  field
    0       4     magic b"HHUF"
    4       1     format version (1)
    5       1     encoder id (ENCODER_IDS)
    6       1     level dtype code (LEVEL_DTYPES)
    7       1     flags (0; reserved)
    8       8     element count n
    16      4     parameter bytes P
    20      8     payload bits B
    28      P     encoder parameters
    28+P    ceil(B/8)  payload, MSB-first bits, zero-padded to a byte
    end-4   4     CRC-32 (zlib polynomial) of every preceding byte

All integers are little-endian. ``parse`` checks sizes, then the checksum, then every field
against the maxima below before anything is allocated.
"""
import struct
import zlib

import numpy as np

from .errors import DecodeError

MAGIC = b"HHUF"
VERSION = 1
HEADER = struct.Struct("<4sBBBBQIQ")
CRC = struct.Struct("<I")
OVERHEAD_BYTES = HEADER.size + CRC.size

# Largest element count the format admits (runs and gaps stay below 2**41, see kernels/elias.py).
MAX_ELEMENTS = 1 << 40
# Default cap on the element count a decode will allocate for, unless the caller passes
# max_elements: 2**31 levels (2 GiB of int8) covers any single gradient tensor in practice.
DEFAULT_MAX_ELEMENTS = 1 << 31
MAX_PARAM_BYTES = 1 << 20     # codebooks are a few KiB; a larger parameter block is forged

LEVEL_DTYPES = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 3: np.dtype(np.int32),
                4: np.dtype(np.int64)}
DTYPE_CODES = {dt: code for code, dt in LEVEL_DTYPES.items()}


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


def frame(encoder_id, dtype, n, params, payload, payload_bits):
    """The complete stream as a 1-D uint8 array."""
    total = HEADER.size + len(params) + len(payload) + CRC.size
    out = np.empty(total, dtype=np.uint8)
    HEADER.pack_into(out, 0, MAGIC, VERSION, encoder_id, DTYPE_CODES[np.dtype(dtype)], 0,
                     n, len(params), payload_bits)
    start = HEADER.size
    out[start:start + len(params)] = np.frombuffer(params, dtype=np.uint8)
    start += len(params)
    out[start:start + len(payload)] = payload
    CRC.pack_into(out, total - CRC.size, zlib.crc32(out[:total - CRC.size]))
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


def parse(buf, max_elements=None, known_ids=()):
    """Verify and split a stream; raises DecodeError naming the first field that is wrong."""
    data = as_bytes(buf)
    limit = DEFAULT_MAX_ELEMENTS if max_elements is None else int(max_elements)
    if len(data) < OVERHEAD_BYTES:
        raise DecodeError(f"stream truncated: {len(data)} bytes, a header needs {OVERHEAD_BYTES}")
    magic, version, encoder_id, dtype_code, flags, n, n_params, payload_bits = \
        HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise DecodeError(f"bad magic {magic!r}: not a horovod-huffman stream")
    if version != VERSION:
        raise DecodeError(f"unsupported format version {version} (this build reads {VERSION})")
    if n_params > MAX_PARAM_BYTES:
        raise DecodeError(f"parameter length {n_params} exceeds {MAX_PARAM_BYTES}")
    payload_bytes = (payload_bits + 7) // 8
    expected = HEADER.size + n_params + payload_bytes + CRC.size
    if payload_bits > 8 * len(data) or expected != len(data):
        raise DecodeError(f"stream length {len(data)} does not match the header "
                          f"({n_params} parameter bytes, {payload_bits} payload bits)")
    (crc,) = CRC.unpack_from(data, len(data) - CRC.size)
    if zlib.crc32(data[:len(data) - CRC.size]) != crc:
        raise DecodeError("checksum mismatch: stream corrupted")
    if flags != 0:
        raise DecodeError(f"unknown flags {flags:#x}")
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
