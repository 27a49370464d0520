"""Encoder parameter blocks: LEB128 varints and byte strings, read with bounds on every field."""
import functools

import numpy as np

from horovod_huffman.kernels.varints import (read_uints, write_uints, MAX_VARINT_BYTES, READ_OK,
                                             TRUNCATED, TOO_LONG)

from .errors import DecodeError


class ParamWriter:
    def __init__(self):
        self._buf = bytearray()

    def uint(self, value):
        value = int(value)
        while True:
            byte = value & 0x7F
            value >>= 7
            if value:
                self._buf.append(byte | 0x80)
            else:
                self._buf.append(byte)
                return self

    def uints(self, values):
        """Many unsigned fields (each in [0, 2**63)) in one Numba call: the bytes of ``uint``
        for each, in order."""
        values = np.ascontiguousarray(values, dtype=np.int64)
        out = np.empty(values.size * MAX_VARINT_BYTES, dtype=np.uint8)
        self._buf += out[:write_uints(values, out)].tobytes()
        return self

    def sint(self, value):
        value = int(value)
        return self.uint((value << 1) if value >= 0 else ((-value << 1) - 1))

    def raw(self, data):
        self._buf += data
        return self

    def getvalue(self):
        return bytes(self._buf)


class ParamReader:
    """Reads a parameter block; every read names its field and bounds its value. ``uint`` reads
    one field in Python (cheaper than a kernel call for a single value); ``uints`` reads many in
    one Numba call (kernels/varints.py), the same format and bounds."""

    def __init__(self, data):
        self._data = bytes(data)
        self._pos = 0

    def uint(self, name, lo, hi):
        value = 0
        for k in range(MAX_VARINT_BYTES):
            if self._pos >= len(self._data):
                raise DecodeError(f"parameters truncated while reading {name}")
            byte = self._data[self._pos]
            self._pos += 1
            value |= (byte & 0x7F) << (7 * k)
            if not byte & 0x80:
                break
        else:
            raise DecodeError(f"parameter {name}: varint too long")
        if not lo <= value <= hi:
            raise DecodeError(f"parameter {name}={value} out of range [{lo}, {hi}]")
        return value

    def uints(self, name, count, lo, hi):
        """``count`` unsigned fields in [lo, hi] (0 <= lo, hi < 2**63) as an int64 array."""
        out = np.empty(count, dtype=np.int64)
        reason, k, pos = read_uints(np.frombuffer(self._data, dtype=np.uint8), self._pos, lo, hi,
                                    out)
        self._pos = pos
        if reason == READ_OK:
            return out
        if reason == TRUNCATED:
            raise DecodeError(f"parameters truncated while reading {name} {k}")
        if reason == TOO_LONG:
            raise DecodeError(f"parameter {name} {k}: varint too long")
        raise DecodeError(f"parameter {name} {k} out of range [{lo}, {hi}]")

    def read_with(self, kernel, *args):
        """Run a compiled reader of fields, ``kernel(data, pos, *args)`` (data: the parameters
        as uint8; returns a tuple whose last item is the position after what it read), from
        the current position; moves past what it read and returns the tuple's other items."""
        *result, pos = kernel(np.frombuffer(self._data, dtype=np.uint8), self._pos, *args)
        self._pos = pos
        return result

    def sint(self, name, lo, hi):
        u = self.uint(name, 0, 2 * max(abs(lo), abs(hi)) + 1)
        value = (u >> 1) if not u & 1 else -((u + 1) >> 1)
        if not lo <= value <= hi:
            raise DecodeError(f"parameter {name}={value} out of range [{lo}, {hi}]")
        return value

    def raw(self, name, n_bytes):
        """The next ``n_bytes`` bytes as they are."""
        if n_bytes > self.remaining():
            raise DecodeError(f"parameters truncated while reading {name}")
        data = self._data[self._pos:self._pos + n_bytes]
        self._pos += n_bytes
        return data

    def remaining(self):
        """Bytes not read yet."""
        return len(self._data) - self._pos

    def rest(self):
        """The remaining bytes (the codebook); marks the block as fully read."""
        data = self._data[self._pos:]
        self._pos = len(self._data)
        return data

    def done(self):
        if self._pos != len(self._data):
            raise DecodeError(f"{len(self._data) - self._pos} unexpected bytes after the parameters")


def dtype_range(dtype):
    """(min, max) level a dtype holds; int64 streams carry int32-range levels (see wire docs)."""
    return _range(np.dtype(dtype))


@functools.lru_cache(maxsize=None)
def _range(dtype):
    """``dtype_range`` of a np.dtype, kept (np.iinfo builds an object per call)."""
    info = np.iinfo(np.int32 if dtype == np.int64 else dtype)
    return int(info.min), int(info.max)


def value_bits(dtype):
    """Bits of a raw (escaped) zigzag level for a dtype: 8, 16 or 32."""
    return 8 * min(np.dtype(dtype).itemsize, 4)
