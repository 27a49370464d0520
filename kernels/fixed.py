"""Fixed-width bit packing (encoder ``raw``): every level as ``level - base`` in ``width`` bits.

``width`` is ceil(log2(max - min + 1)) bits, 0..32; width 0 means every level equals ``base``
and the payload is empty.
"""
from numba import njit, uint64, int64

from .bits import push_bits, word_below, join64, WORD_BITS, flush_bits, top_bits
from .errors import OK, PAYLOAD_OVERRUN, VALUE_OVERFLOW, PAYLOAD_UNDERRUN


@njit(cache=True, nogil=True)
def encode_fixed(levels, base, width, out32):
    acc = uint64(0)
    n_pending = 0
    word_pos = 0
    for i in range(levels.shape[0]):
        acc, n_pending = push_bits(acc, n_pending, uint64(int64(levels[i]) - base), width)
        if n_pending >= WORD_BITS:
            n_pending -= WORD_BITS
            out32[word_pos] = word_below(acc, n_pending)
            word_pos += 1
    return flush_bits(out32, acc, n_pending, word_pos), levels.shape[0] * width


@njit(cache=True, nogil=True)
def decode_fixed(words, total_bits, base, width, hi, out):
    n = out.shape[0]
    if n * width != total_bits:
        return PAYLOAD_OVERRUN if n * width > total_bits else PAYLOAD_UNDERRUN
    if width == 0:
        if base > hi:
            return VALUE_OVERFLOW
        for i in range(n):
            out[i] = base
        return OK
    bit_pos = 0
    for i in range(n):
        j = bit_pos >> 6
        level = base + int64(top_bits(join64(words[j], words[j + 1], bit_pos & 63), width))
        if level > hi:
            return VALUE_OVERFLOW
        out[i] = level
        bit_pos += width
    return OK
