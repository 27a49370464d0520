"""Huffman coding of levels one symbol per element (encoders ``huffman`` and ``sh``).

READ ME FIRST
1. Symbol ``s`` in [0, window) stands for level ``base + s``; symbol ``window`` is the escape,
   followed by the level's zigzag form in ``value_bits`` bits (8, 16 or 32). Levels outside the
   window, or without a code, take the escape, so any level round-trips.
2. The encoder reads one packed entry per element: ``code << 4 | length`` (length 0 = escape).
3. The decoder reads a multi-symbol table: one 12-bit lookup yields up to MULTI_SYMBOLS whole
   codes that fit in those 12 bits (1-bit codes are common for quantized gradients), and one
   64-bit window feeds LOOKUPS_PER_WINDOW lookups (4 x 12 = 48 bits). Escapes, symbols beyond
   MULTI_SYMBOL_MAX and the last few elements go through the single-symbol table.
"""
import numpy as np
from numba import njit, uint64, int64

from .bits import (push_bits, word_below, window64, WORD_BITS, put_bits, put_bits_long,
                   flush_bits, peek64, top_bits, zigzag, unzigzag)
from .errors import OK, PAYLOAD_OVERRUN, INVALID_CODE, VALUE_OVERFLOW, PAYLOAD_UNDERRUN
from .huffman import MAX_CODE_BITS, TABLE_SIZE, LENGTH_SHIFT, LENGTH_MASK

MULTI_SYMBOLS = 4            # symbols per multi-table entry
LOOKUPS_PER_WINDOW = 4       # 12-bit lookups per 64-bit window: 4 * 12 = 48 <= 64
MULTI_SYMBOL_BITS = 14       # 4 symbols * 14 bits + 8 header bits = 64
MULTI_SYMBOL_MAX = (1 << MULTI_SYMBOL_BITS) - 1
MULTI_SHIFT = 8              # entry: bits consumed (0-3), count (4-6), symbols from bit 8
# A packed encoder entry: code << ENTRY_CODE_SHIFT | length (length <= 12 needs 4 bits).
ENTRY_CODE_SHIFT = 4


# Histograms count into this many interleaved tables: consecutive equal levels (runs of zeros)
# would otherwise serialize on one counter's store-to-load latency.
HISTOGRAM_LANES = 4


@njit(cache=True, inline="always")
def _symbol(level, base, window):
    v = int64(level) - base
    return v if v >= 0 and v < window else window


@njit(cache=True)
def level_histogram(levels, base, window, counts):
    """Add symbol counts of ``levels`` to ``counts`` (size window + 1; last slot = escapes)."""
    n = levels.shape[0]
    lanes = np.zeros((HISTOGRAM_LANES, window + 1), dtype=np.int64)
    stop = n - n % HISTOGRAM_LANES
    for i in range(0, stop, HISTOGRAM_LANES):
        for lane in range(HISTOGRAM_LANES):
            lanes[lane, _symbol(levels[i + lane], base, window)] += 1
    for i in range(stop, n):
        lanes[0, _symbol(levels[i], base, window)] += 1
    for lane in range(HISTOGRAM_LANES):
        for v in range(window + 1):
            counts[v] += lanes[lane, v]


@njit(cache=True)
def pack_entries(codes, lengths):
    """Encoder entries ``code << 4 | length`` per symbol (uint32)."""
    entries = np.empty(codes.shape[0], dtype=np.uint32)
    for s in range(codes.shape[0]):
        entries[s] = (codes[s] << ENTRY_CODE_SHIFT) | lengths[s]
    return entries


@njit(cache=True)
def encode_levels(levels, base, window, entries, value_bits, out32):
    """Write every level's code (or escape + zigzag value); returns (words used, payload bits)."""
    esc = entries[window]
    esc_code = esc >> ENTRY_CODE_SHIFT
    esc_len = esc & LENGTH_MASK
    acc = uint64(0)
    n_pending = 0
    word_pos = 0
    n_bits = 0
    for i in range(levels.shape[0]):
        level = int64(levels[i])
        v = level - base
        e = entries[v] if v >= 0 and v < window else np.uint32(0)
        length = int64(e & LENGTH_MASK)
        if length > 0:
            acc, n_pending = push_bits(acc, n_pending, e >> ENTRY_CODE_SHIFT, length)
            if n_pending >= WORD_BITS:
                n_pending -= WORD_BITS
                out32[word_pos] = word_below(acc, n_pending)
                word_pos += 1
            n_bits += length
        else:   # rare: escape code, then the raw value
            acc, n_pending, word_pos = put_bits(out32, acc, n_pending, word_pos, esc_code, esc_len)
            acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos,
                                                     zigzag(level), value_bits)
            n_bits += esc_len + value_bits
    word_pos = flush_bits(out32, acc, n_pending, word_pos)
    return word_pos, n_bits


@njit(cache=True)
def multi_symbol_table(table, window):
    """Multi-symbol entries from a single-symbol table (see module doc); 0 = use the single path.

    Entry: bits consumed | count << 4 | symbol_k << (8 + 14 k), for the codes that lie wholly
    inside the 12-bit prefix, stopping before an escape or a symbol above MULTI_SYMBOL_MAX.
    """
    multi = np.zeros(TABLE_SIZE, dtype=np.uint64)
    for prefix in range(TABLE_SIZE):
        used = 0
        count = 0
        entry = uint64(0)
        while count < MULTI_SYMBOLS:
            e = table[(prefix << used) & (TABLE_SIZE - 1)]
            length = int64(e & LENGTH_MASK)
            s = int64(e >> LENGTH_SHIFT)
            if length == 0 or length > MAX_CODE_BITS - used or s == window or s > MULTI_SYMBOL_MAX:
                break
            entry |= uint64(s) << uint64(MULTI_SHIFT + MULTI_SYMBOL_BITS * count)
            used += length
            count += 1
        if count > 0:
            multi[prefix] = entry | uint64(used) | uint64(count << 4)
    return multi


@njit(cache=True)
def decode_levels(words, total_bits, table, multi, base, window, value_bits, lo, hi, out):
    """Fill ``out`` from the payload; returns a status code (errors.py).

    ``table``/``multi`` are the single- and multi-symbol tables; ``lo``/``hi`` bound escaped
    levels to the output dtype.
    """
    n = out.shape[0]
    i = 0
    bit_pos = 0
    sym_mask = uint64(MULTI_SYMBOL_MAX)
    while i < n:
        if bit_pos > total_bits:
            return PAYLOAD_OVERRUN
        j = bit_pos >> 6
        win = window64(words[j], words[j + 1], bit_pos & 63)
        used = 0
        single = False
        for _ in range(LOOKUPS_PER_WINDOW):
            if i > n - MULTI_SYMBOLS:
                single = i < n                   # the last few symbols, one at a time
                break
            e = multi[(win << uint64(used)) >> uint64(64 - MAX_CODE_BITS)]
            if e == 0:
                single = True
                break
            out[i] = base + int64((e >> uint64(MULTI_SHIFT)) & sym_mask)
            out[i + 1] = base + int64((e >> uint64(MULTI_SHIFT + MULTI_SYMBOL_BITS)) & sym_mask)
            out[i + 2] = base + int64((e >> uint64(MULTI_SHIFT + 2 * MULTI_SYMBOL_BITS)) & sym_mask)
            out[i + 3] = base + int64((e >> uint64(MULTI_SHIFT + 3 * MULTI_SYMBOL_BITS)) & sym_mask)
            i += int64((e >> uint64(4)) & uint64(7))
            used += int64(e & uint64(0xF))
        bit_pos += used
        if not single:
            continue
        # One symbol through the single-symbol table: escapes, large symbols, the tail.
        if bit_pos > total_bits:
            return PAYLOAD_OVERRUN
        j = bit_pos >> 6
        win = window64(words[j], words[j + 1], bit_pos & 63)
        e = table[win >> uint64(64 - MAX_CODE_BITS)]
        length = int64(e & LENGTH_MASK)
        if length == 0:
            return INVALID_CODE
        s = int64(e >> LENGTH_SHIFT)
        bit_pos += length
        if s == window:                          # escape: raw zigzag value follows the code
            if bit_pos > total_bits:
                return PAYLOAD_OVERRUN
            level = unzigzag(top_bits(peek64(words, bit_pos), value_bits))
            bit_pos += value_bits
            if level < lo or level > hi:
                return VALUE_OVERFLOW
            out[i] = level
        else:
            out[i] = base + s
        i += 1
    if bit_pos > total_bits:
        return PAYLOAD_OVERRUN
    if bit_pos < total_bits:
        return PAYLOAD_UNDERRUN
    return OK
