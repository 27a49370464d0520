"""LEB128 varints, the encoding of the encoders' parameter blocks (horovod_huffman/codec/params.py):
7 value bits per byte, low groups first, the high bit set on every byte but the last.

Read here in bulk, compiled: a stream declares one bit count per chunk of 2**16 levels, too
many to read one by one in Python.
"""
from numba import njit, uint64

from .maxima import MAX_VARINT_BYTES

# Reasons ``read_uints`` stops early.
READ_OK, TRUNCATED, TOO_LONG, OUT_OF_RANGE = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def read_uints(data, pos, lo, hi, out):
    """Read len(out) varints from data[pos:] (uint8) into ``out`` (int64), each in [lo, hi]
    (0 <= lo <= hi < 2**63); returns (reason, values read, position after them)."""
    n = data.shape[0]
    for k in range(out.shape[0]):
        value = uint64(0)
        for b in range(MAX_VARINT_BYTES + 1):
            if b == MAX_VARINT_BYTES:
                return TOO_LONG, k, pos
            if pos >= n:
                return TRUNCATED, k, pos
            byte = uint64(data[pos])
            pos += 1
            group = byte & uint64(0x7F)
            if b == MAX_VARINT_BYTES - 1 and group:     # bit 63 or above: past hi
                return OUT_OF_RANGE, k, pos
            value |= group << uint64(7 * b)
            if not byte & uint64(0x80):
                break
        if value < uint64(lo) or value > uint64(hi):
            return OUT_OF_RANGE, k, pos
        out[k] = value
    return READ_OK, out.shape[0], pos


@njit(cache=True, nogil=True)
def write_uints(values, out):
    """Write ``values`` (int64, each in [0, 2**63)) as varints into ``out`` (uint8, at least
    MAX_VARINT_BYTES per value); returns the bytes written."""
    pos = 0
    for k in range(values.shape[0]):
        value = uint64(values[k])
        while value >= uint64(0x80):
            out[pos] = (value & uint64(0x7F)) | uint64(0x80)
            value >>= uint64(7)
            pos += 1
        out[pos] = value
        pos += 1
    return pos
