"""Canonical codebook on the wire: the code lengths of the coded symbols, nothing else.

Layout (MSB-first bits): for each coded symbol in increasing id order, Elias-gamma(id gap) then
its code length in LENGTH_BITS bits. The first gap is measured from -1, so every gap is >= 1.
The count of coded symbols travels in the encoder's parameters; the reader bounds every id by
the alphabet size and every length by MAX_CODE_BITS before it stores anything.
"""
import numpy as np
from numba import njit, uint64, int64

from .bits import (put_bits, put_bits_long, flush_bits, settle, peek64, top_bits, bit_length,
                   count_leading_zeros, bytes_to_words, words_to_bytes)
from .errors import OK, PAYLOAD_OVERRUN, BAD_CODEBOOK
from .maxima import CODEBOOK_LENGTH_BITS as LENGTH_BITS, MAX_CODE_BITS



@njit(cache=True, nogil=True)
def _write(symbols, lengths, out32):
    """Write the entries into ``out32``; returns (words used, bits). An entry of at most 32 bits
    (gaps below 2**14) is one push and one flush step (``settle``), longer ones go through
    ``put_bits_long``."""
    acc = uint64(0)
    n_pending = 0
    word_pos = 0
    n_bits = 0
    prev = -1
    for i in range(symbols.shape[0]):
        s = symbols[i]
        gap = s - prev
        prev = s
        g_len = bit_length(gap)
        entry_bits = 2 * g_len - 1 + LENGTH_BITS       # gamma(gap): g_len - 1 zeros, gap
        if entry_bits <= 32:
            acc = (acc << uint64(entry_bits)) | (uint64(gap) << uint64(LENGTH_BITS)) | \
                uint64(lengths[i])
            word, pending, full = settle(acc, uint64(n_pending + entry_bits))
            out32[word_pos] = word
            word_pos += int64(full)
            n_pending = int64(pending)
        else:
            acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos, 0,
                                                     g_len - 1)
            acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos, gap, g_len)
            acc, n_pending, word_pos = put_bits(out32, acc, n_pending, word_pos, lengths[i],
                                                LENGTH_BITS)
        n_bits += entry_bits
    return flush_bits(out32, acc, n_pending, word_pos), n_bits


def write_codebook(symbols, lengths):
    """Bytes of the codebook of the coded ``symbols`` (ids ascending, int64) with ``lengths``
    (bits, 1..MAX_CODE_BITS, aligned)."""
    out32 = np.zeros(2 * symbols.size + 2, dtype=np.uint32)  # an entry: <= 2*17-1 + 4 bits
    n_words, n_bits = _write(symbols, lengths, out32)
    return words_to_bytes(out32[:n_words], n_bits).tobytes()


@njit(cache=True, nogil=True)
def _read(words, total_bits, n_coded, n_symbols, lengths):
    bit_pos = 0
    prev = -1
    for _ in range(n_coded):
        if bit_pos > total_bits:
            return PAYLOAD_OVERRUN, bit_pos
        zeros = count_leading_zeros(peek64(words, bit_pos))
        if zeros > 31:            # gaps are < 2**31 (alphabets are far smaller)
            return BAD_CODEBOOK, bit_pos
        bit_pos += zeros
        if bit_pos > total_bits:
            return PAYLOAD_OVERRUN, bit_pos
        gap = top_bits(peek64(words, bit_pos), zeros + 1)
        bit_pos += zeros + 1
        s = prev + np.int64(gap)
        if s >= n_symbols:
            return BAD_CODEBOOK, bit_pos
        if bit_pos > total_bits:
            return PAYLOAD_OVERRUN, bit_pos
        length = np.int64(top_bits(peek64(words, bit_pos), LENGTH_BITS))
        bit_pos += LENGTH_BITS
        if length < 1 or length > MAX_CODE_BITS:
            return BAD_CODEBOOK, bit_pos
        lengths[s] = length
        prev = s
    if bit_pos > total_bits:
        return PAYLOAD_OVERRUN, bit_pos
    return OK, bit_pos


def read_codebook(data, n_coded, n_symbols):
    """Code lengths (int64, size ``n_symbols``) parsed from ``data``; returns (status, lengths).

    The caller has bounded ``n_coded`` and ``n_symbols``; ``data`` is a bytes-like object.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    lengths = np.zeros(n_symbols, dtype=np.int64)
    status, _ = _read(bytes_to_words(buf), 8 * len(buf), n_coded, n_symbols, lengths)
    return status, lengths
