"""What every encoder shares: input checks, the encode frame, and kernel status handling."""
import numpy as np

from horovod_huffman.kernels.bits import words_to_bytes
from horovod_huffman.kernels.errors import OK, MESSAGES

from .. import wire
from ..errors import DecodeError

_INT32 = np.iinfo(np.int32)


def check_levels(levels):
    """Validate encoder input: a 1-D NumPy array of int8/int16/int32/int64 levels.

    int64 arrays are accepted when every level fits int32 (the wire format's value range).
    """
    if not isinstance(levels, np.ndarray):
        raise TypeError(f"levels must be a NumPy array, got {type(levels).__name__}")
    if levels.dtype not in wire.DTYPE_CODES:
        raise TypeError(f"levels must be a signed integer array (int8/16/32/64), got {levels.dtype}")
    if levels.ndim != 1:
        raise ValueError(f"levels must be 1-D, got shape {levels.shape}; pass levels.ravel()")
    if levels.size > wire.MAX_ELEMENTS:
        raise ValueError(f"{levels.size} levels exceed the format maximum {wire.MAX_ELEMENTS}")
    if levels.dtype == np.int64 and levels.size and \
            (levels.min() < _INT32.min or levels.max() > _INT32.max):
        raise ValueError("int64 levels must lie in the int32 range "
                         f"[{_INT32.min}, {_INT32.max}]; got [{levels.min()}, {levels.max()}]")
    return np.ascontiguousarray(levels)


def out_words(max_bits):
    """A uint32 word buffer with room for ``max_bits`` payload bits plus one flush."""
    return np.empty(int(max_bits) // 32 + 2, dtype=np.uint32)


def check_status(status, encoder_name):
    """Raise DecodeError for a kernel's non-zero status."""
    if status != OK:
        raise DecodeError(f"{encoder_name}: {MESSAGES.get(int(status), f'status {status}')}")


class Encoder:
    """A lossless encoder of 1-D signed integer levels into self-describing bytes.

    Subclasses set ``name`` and ``encoder_id`` and implement ``_encode`` (levels -> parameter
    bytes, uint32 payload words, payload bits) and ``_decode`` (parameters, payload -> levels).
    """
    name = None
    encoder_id = None

    def encode(self, levels):
        """Encode ``levels`` (1-D signed integer array) into a uint8 array (docs/wire-format.md)."""
        levels = check_levels(levels)
        if levels.size == 0:
            return wire.frame(self.encoder_id, levels.dtype, 0, b"", np.empty(0, np.uint8), 0)
        return self._frame(levels, *self._encode(levels))

    def _frame(self, levels, params, out32, n_words, n_bits):
        """The stream for ``levels`` from an ``_encode`` result."""
        payload = words_to_bytes(out32, n_words, n_bits)
        return wire.frame(self.encoder_id, levels.dtype, levels.size, params, payload, n_bits)

    def _encode(self, levels):
        raise NotImplementedError

    @classmethod
    def _decode(cls, reader, words, payload_bits, out):
        """Fill ``out`` (already of the stream's dtype and length) or raise DecodeError."""
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"{type(self).__name__}({args})"

    def _config(self):
        return {}
