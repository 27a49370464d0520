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
4. Payloads are chunked (kernels/chunks.py); the decoder runs four chunks interleaved.
"""
import numpy as np
from numba import njit, uint64, int64

from .bits import (settle, window64, WORD_BITS, put_bits, put_bits_long, flush_bits, peek64,
                   top_bits, zigzag, unzigzag, count_leading_zeros)
from .errors import OK, PAYLOAD_OVERRUN, INVALID_CODE, VALUE_OVERFLOW, PAYLOAD_UNDERRUN
from .huffman import MAX_CODE_BITS, TABLE_SIZE, LENGTH_SHIFT, LENGTH_MASK
from .stores import (load8, store8, sampled_eighths, put_four, MULTI_SHIFT, MULTI_SYMBOL_BITS,
                     MULTI_SYMBOL_MAX, LITTLE_ENDIAN)

MULTI_SYMBOLS = 4            # symbols per multi-table entry
LOOKUPS_PER_WINDOW = 4       # 12-bit lookups per 64-bit window: 4 * 12 = 48 <= 64
# A packed encoder entry: code << ENTRY_CODE_SHIFT | length (length <= 12 needs 4 bits).
ENTRY_CODE_SHIFT = 4


# Histograms count into this many interleaved tables: consecutive equal levels (runs of zeros)
# would otherwise serialize on one counter's store-to-load latency.
HISTOGRAM_LANES = 4


@njit(cache=True, inline="always")
def _symbol(level, base, window):
    v = int64(level) - base
    return v if v >= 0 and v < window else window


# The histogram counts ranges of HISTOGRAM_RANGE levels; in one where at least
# CLEAN_EIGHTHS of 8 sampled 8-byte blocks hold a single level (kernels/stores.py), such blocks
# count at once (measured: TernGrad levels 2-3x, QSGD s = 1 1.1-1.3x faster; from 5 eighths
# QSGD s = 2 turns slower).
HISTOGRAM_RANGE = 1 << 16
CLEAN_EIGHTHS = 6


# Windows of at most this many levels are counted one level at a time by a compare pass that
# LLVM vectorizes (measured: ~0.03 ns per element and level against 0.25-0.6 ns per element for
# the table increments on QSGD s = 1..4 and TernGrad levels, windows of 3 to 7).
COMPARE_WINDOW = 8


@njit(cache=True)
def _count_equal(levels, level):
    """Elements of ``levels`` equal to ``level`` (of the levels' dtype: a narrow compare)."""
    count = 0
    for i in range(levels.shape[0]):
        count += levels[i] == level
    return count


@njit(cache=True)
def level_histogram(levels, base, window, counts):
    """Add symbol counts of ``levels`` to ``counts`` (size window + 1; last slot = escapes)."""
    last = base + window - 1
    if window <= COMPARE_WINDOW and int64(levels.dtype.type(base)) == base and \
            int64(levels.dtype.type(last)) == last:      # the window lies in the dtype's range
        inside = 0
        for v in range(window):
            c = _count_equal(levels, levels.dtype.type(base + v))
            counts[v] += c
            inside += c
        counts[window] += levels.shape[0] - inside
        return
    n = uint64(levels.shape[0])
    w = uint64(window)
    one, block = uint64(1), uint64(8 // levels.itemsize)
    lanes = np.zeros((HISTOGRAM_LANES, window + 1), dtype=np.int64)
    n_lanes = uint64(HISTOGRAM_LANES)
    for start in range(uint64(0), n, uint64(HISTOGRAM_RANGE)):
        i, stop = start, min(n, start + uint64(HISTOGRAM_RANGE))
        if sampled_eighths(levels, i, stop, uint64(0), True) >= CLEAN_EIGHTHS:
            while i + block < stop:                # levels i..i+block all equal: count block
                if load8(levels, i) == load8(levels, i + one):
                    v = uint64(int64(levels[i]) - base)
                    lanes[0, v if v < w else w] += block
                    i += block
                    continue
                for lane in range(block):
                    v = uint64(int64(levels[i]) - base)
                    lanes[lane % n_lanes, v if v < w else w] += 1
                    i += one
        while i + n_lanes <= stop:
            for lane in range(n_lanes):
                v = uint64(int64(levels[i + lane]) - base)     # out of the window: v >= w
                lanes[lane, v if v < w else w] += 1
            i += n_lanes
        while i < stop:
            v = uint64(int64(levels[i]) - base)
            lanes[0, v if v < w else w] += 1
            i += one
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
def _codes_until_escape(levels, i, stop, base, window, entries, block_pattern, block_bits, out32,
                        acc, n_pending, word_pos):
    """Hot loop of ``encode_levels``: write codes of elements i.. until one needs the escape
    (or ``stop``); returns (i, acc, n_pending, word_pos). Two codes (<= 24 bits) per flush step:
    with < 32 bits pending they fit the 64-bit accumulator. With ``block_bits`` > 0, 8 bytes of
    levels equal to ``block_pattern`` (the level whose code is all zero bits, repeated) are
    written at once as ``block_bits`` (<= 32) zero bits."""
    i, stop, w = uint64(i), uint64(stop), uint64(window)
    n_pending, word_pos = uint64(n_pending), uint64(word_pos)
    one, code_shift, length_mask = uint64(1), uint64(ENTRY_CODE_SHIFT), uint64(LENGTH_MASK)
    block, block_bits = uint64(8 // levels.itemsize), uint64(block_bits)
    while True:
        while i + one < stop:
            if block_bits != 0 and i + block <= stop and load8(levels, i) == block_pattern:
                acc <<= block_bits
                word, n_pending, full = settle(acc, n_pending + block_bits)
                out32[word_pos] = word
                word_pos += full
                i += block
                continue
            v0 = uint64(int64(levels[i]) - base)              # out of the window: v >= w
            v1 = uint64(int64(levels[i + one]) - base)
            if v0 >= w or v1 >= w:
                break
            e0, e1 = uint64(entries[v0]), uint64(entries[v1])
            len0, len1 = e0 & length_mask, e1 & length_mask
            if len0 == 0 or len1 == 0:
                break
            acc = (((acc << len0) | (e0 >> code_shift)) << len1) | (e1 >> code_shift)
            word, n_pending, full = settle(acc, n_pending + len0 + len1)
            out32[word_pos] = word
            word_pos += full
            i += uint64(2)
        if i >= stop:
            break
        v = uint64(int64(levels[i]) - base)                   # one code: the pair had an escape
        if v >= w:
            break
        e = uint64(entries[v])
        length = e & length_mask
        if length == 0:
            break
        acc = (acc << length) | (e >> code_shift)
        word, n_pending, full = settle(acc, n_pending + length)
        out32[word_pos] = word
        word_pos += full
        i += one
    return int64(i), acc, int64(n_pending), int64(word_pos)


@njit(cache=True)
def put_escape(out32, acc, n_pending, word_pos, esc, level, value_bits):
    """Write an escaped level (rare path): the escape entry's code, then the level's zigzag form
    in ``value_bits`` bits; returns the new (acc, n_pending, word_pos)."""
    acc, n_pending, word_pos = put_bits(out32, acc, n_pending, word_pos, esc >> ENTRY_CODE_SHIFT,
                                        esc & LENGTH_MASK)
    return put_bits_long(out32, acc, n_pending, word_pos, zigzag(level), value_bits)


# The Huffman writer takes 8-byte blocks of the all-zero-code level whole in a chunk where at
# least BLOCK_EIGHTHS of 8 sampled blocks are such blocks (kernels/stores.py).
BLOCK_EIGHTHS = 5


@njit(cache=True)
def _encode_chunk(levels, start, stop, base, window, entries, value_bits, block_pattern,
                  block_bits, out32, word_pos):
    """Write elements [start, stop) (one chunk) from ``word_pos``; returns (words end, bits).
    ``block_pattern``, ``block_bits``: as ``_codes_until_escape``, used when the chunk's sample
    has enough such blocks."""
    first_word = word_pos
    acc = uint64(0)
    n_pending = 0
    i = start
    if block_bits and sampled_eighths(levels, uint64(start), uint64(stop), block_pattern,
                                      False) < BLOCK_EIGHTHS:
        block_bits = 0
    while True:
        i, acc, n_pending, word_pos = _codes_until_escape(levels, i, stop, base, window, entries,
                                                          block_pattern, block_bits, out32, acc,
                                                          n_pending, word_pos)
        if i >= stop:
            break
        acc, n_pending, word_pos = put_escape(out32, acc, n_pending, word_pos, entries[window],
                                              levels[i], value_bits)
        i += 1
    n_bits = (word_pos - first_word) * WORD_BITS + n_pending
    return flush_bits(out32, acc, n_pending, word_pos), n_bits


@njit(cache=True)
def zero_code_block(levels, base, window, entries):
    """(pattern, bits) for the block fast path: 8 bytes of levels that all take the code of
    zero bits (canonical Huffman gives the all-zero code to the first symbol of the shortest
    length), and the bits they cost; bits 0 when no such code or more than 32 bits."""
    block = 8 // levels.itemsize
    for s in range(window):
        length = int64(entries[s] & LENGTH_MASK)
        if length > 0 and entries[s] >> ENTRY_CODE_SHIFT == 0:
            if length * block > 32:
                break
            copies = np.full(block, base + s, dtype=levels.dtype)
            return load8(copies, 0), length * block
    return uint64(0), 0


@njit(cache=True)
def encode_levels(levels, base, window, entries, value_bits, chunk, out32, chunk_bits):
    """Write every level's code (or escape + zigzag value), chunk by chunk (kernels/chunks.py);
    fills ``chunk_bits`` and returns the words used."""
    n = levels.shape[0]
    word_pos = 0
    block_pattern, block_bits = zero_code_block(levels, base, window, entries)
    for c in range(chunk_bits.shape[0]):
        word_pos, chunk_bits[c] = _encode_chunk(levels, c * chunk, min(n, (c + 1) * chunk), base,
                                                window, entries, value_bits, block_pattern,
                                                block_bits, out32, word_pos)
    return word_pos


@njit(cache=True, inline="always")
def with_level(entry, count, s, base, byte_levels):
    """Multi-symbol ``entry`` with symbol ``s`` (level base + s, s <= MULTI_SYMBOL_MAX) as its
    level number ``count`` (< MULTI_SYMBOLS): byte ``count`` of the 32-bit store for a 1-byte
    level dtype (kernels/stores.py), else the 14-bit symbol field ``count``."""
    if byte_levels:
        byte = count if LITTLE_ENDIAN else MULTI_SYMBOLS - 1 - count
        return entry | (uint64((base + s) & 0xFF) << uint64(MULTI_SHIFT + 8 * byte))
    return entry | (uint64(s) << uint64(MULTI_SHIFT + MULTI_SYMBOL_BITS * count))


@njit(cache=True)
def multi_symbol_table(table, window, base, byte_levels):
    """Multi-symbol entries from a single-symbol table (see module doc); 0 = use the single path.

    Entry (kernels/stores.py): bits consumed | count << 4 | levels from bit 8, for the codes that
    lie wholly inside the 12-bit prefix, stopping before an escape or a symbol above
    MULTI_SYMBOL_MAX. With ``byte_levels`` (a 1-byte level dtype) the levels are bytes,
    ``base + symbol`` at bit 8 + 8 k; otherwise symbol k sits at bit 8 + 14 k.
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
            entry = with_level(entry, count, s, base, byte_levels)
            used += length
            count += 1
        if count > 0:
            multi[prefix] = entry | uint64(used) | uint64(count << 4)
    return multi


@njit(cache=True)
def _decode_range(words, bit_pos, end_bit, table, multi, base, window, value_bits, lo, hi, out,
                  i, stop):
    """Decode elements [i, stop) of one chunk from ``bit_pos``; the chunk must end exactly at
    ``end_bit``. Returns a status code."""
    while i < stop:
        if bit_pos > end_bit:
            return PAYLOAD_OVERRUN
        j = bit_pos >> 6
        win = window64(words[j], words[j + 1], bit_pos & 63)
        used = 0
        single = False
        for _ in range(LOOKUPS_PER_WINDOW):
            if i > stop - MULTI_SYMBOLS:
                single = i < stop                # the last few symbols, one at a time
                break
            e = multi[(win << uint64(used)) >> uint64(64 - MAX_CODE_BITS)]
            if e == 0:
                single = True
                break
            put_four(out, i, e, base)
            i += int64((e >> uint64(4)) & uint64(7))
            used += int64(e & uint64(0xF))
        bit_pos += used
        if not single:
            continue
        # One symbol through the single-symbol table: escapes, large symbols, the tail.
        if bit_pos > end_bit:
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
            if bit_pos > end_bit:
                return PAYLOAD_OVERRUN
            level = unzigzag(top_bits(peek64(words, bit_pos), value_bits))
            bit_pos += value_bits
            if level < lo or level > hi:
                return VALUE_OVERFLOW
            out[i] = level
        else:
            out[i] = base + s
        i += 1
    if bit_pos > end_bit:
        return PAYLOAD_OVERRUN
    if bit_pos < end_bit:
        return PAYLOAD_UNDERRUN
    return OK


@njit(cache=True)
def decode_levels(words, starts, chunk_bits, chunk, table, multi, base, window, value_bits,
                  lo, hi, out):
    """Fill ``out`` from a chunked payload; returns a status code (errors.py).

    Chunks go four at a time: while all four have room, one multi-symbol lookup per chunk per
    iteration (four independent chains); then each chunk finishes on the single-chunk path,
    which checks it ends exactly at its declared bit length. Sparse groups of 1-byte levels
    (ZERO_RUN_BITS) whose all-zero code is one bit long write runs of its level 8 bytes at a
    time.
    """
    n = out.shape[0]
    n_chunks = starts.shape[0]
    first = table[0]                             # the symbol of the all-zero code
    zero_symbol = int64(first >> LENGTH_SHIFT)
    zero_ok = out.itemsize == 1 and (first & LENGTH_MASK) == 1 and zero_symbol < window
    zero_pattern = uint64((base + zero_symbol) & 0xFF) * uint64(0x0101010101010101)
    for c0 in range(0, n_chunks, 4):
        group = min(4, n_chunks - c0)
        bit_pos = starts[c0:c0 + group].copy()             # where each chunk resumes
        index = np.arange(c0, c0 + group) * chunk
        if group == 4:
            if zero_ok and chunk_bits[c0:c0 + 4].sum() * ZERO_RUN_BITS[1] <= \
                    4 * chunk * ZERO_RUN_BITS[0]:
                stopped = _four_zero_chunks(words, starts, chunk_bits, c0, chunk, multi, base,
                                            out, zero_pattern)
            else:
                stopped = _four_chunks(words, starts, chunk_bits, c0, chunk, multi, base, out)
            for k in range(4):
                bit_pos[k], index[k] = stopped[k], stopped[4 + k]
        for k in range(group):
            c = c0 + k
            status = _decode_range(words, bit_pos[k], starts[c] + chunk_bits[c], table, multi,
                                   base, window, value_bits, lo, hi, out, index[k],
                                   min(n, (c + 1) * chunk))
            if status != OK:
                return status
    return OK


# Groups coded in at most 33/32 bits per level (nearly all levels of the one-bit code: QSGD
# s = 1, TernGrad) take the zero-run path: measured 1.3-3.5x faster there; at 1.05 bits per
# level (QSGD s = 2) 1.2x slower.
ZERO_RUN_BITS = (33, 32)
# Levels per zero-run step (a whole 64-bit window of one-bit codes), written by 8-byte stores
# (measured against 16: TernGrad decode 1.1-1.2x, QSGD s = 1 1.05-1.6x faster).
ZERO_RUN_MAX = 64


@njit(cache=True, inline="always")
def _multi_step(win, b, i, multi, base, out):
    """One multi-symbol entry from the top of the 64-bit window ``win`` (uint64 state); returns
    (decoded, b, i), unchanged when the prefix has no entry."""
    m = multi[win >> uint64(64 - MAX_CODE_BITS)]
    if m == 0:
        return False, b, i
    put_four(out, i, m, base)
    return True, b + (m & uint64(0xF)), i + ((m >> uint64(4)) & uint64(7))


@njit(cache=True, inline="always")
def _zero_step(win, b, i, multi, base, out, zero_pattern):
    """A window of >= 8 leading zero bits is that many levels of the one-bit all-zero code (up
    to ZERO_RUN_MAX, written 8 bytes at a time); else one multi-symbol entry, as
    ``_multi_step`` (written out: see runs._four_token_chunks on nested inlining)."""
    if (win >> uint64(56)) == uint64(0):
        k = min(uint64(count_leading_zeros(win)), uint64(ZERO_RUN_MAX))
        for k8 in range(uint64(0), uint64(ZERO_RUN_MAX), uint64(8)):
            store8(out, i + k8, zero_pattern)
        return True, b + k, i + k
    m = multi[win >> uint64(64 - MAX_CODE_BITS)]
    if m == 0:
        return False, b, i
    put_four(out, i, m, base)
    return True, b + (m & uint64(0xF)), i + ((m >> uint64(4)) & uint64(7))


@njit(cache=True, inline="always")
def four_chunk_bounds(starts, chunk_bits, c0, chunk, n):
    """Chunks c0..c0+3 of a payload (all uint64): start bits, end bits, first elements and
    element stops (chunks c0..c0+2 are whole; the last may be short)."""
    one, size = uint64(1), uint64(chunk)
    c = uint64(c0)
    b0, b1 = uint64(starts[c]), uint64(starts[c + one])
    b2, b3 = uint64(starts[c + uint64(2)]), uint64(starts[c + uint64(3)])
    e0, e1 = b0 + uint64(chunk_bits[c]), b1 + uint64(chunk_bits[c + one])
    e2, e3 = b2 + uint64(chunk_bits[c + uint64(2)]), b3 + uint64(chunk_bits[c + uint64(3)])
    i0 = c * size
    i1, i2, i3 = i0 + size, i0 + uint64(2) * size, i0 + uint64(3) * size
    return (b0, b1, b2, b3, e0, e1, e2, e3, i0, i1, i2, i3,
            i1, i2, i3, min(uint64(n), i3 + size))


@njit(cache=True)
def _four_chunks(words, starts, chunk_bits, c0, chunk, multi, base, out):
    """Hot loop of ``decode_levels``: chunks c0..c0+3 advance together (four independent
    chains), each by two ``_multi_step``s from one 64-bit window per iteration (1.45x faster
    than one on dense levels; three no faster than two), while each has room for them and has
    not passed its end; returns the four (bit position, element index) pairs where they
    stopped. Indices are uint64 (kernels/bits.py, note 5)."""
    (b0, b1, b2, b3, e0, e1, e2, e3, i0, i1, i2, i3,
     stop0, stop1, stop2, stop3) = four_chunk_bounds(starts, chunk_bits, c0, chunk, out.shape[0])
    room = uint64(2 * MULTI_SYMBOLS)
    while (i0 + room <= stop0 and i1 + room <= stop1 and i2 + room <= stop2 and
           i3 + room <= stop3 and
           b0 <= e0 and b1 <= e1 and b2 <= e2 and b3 <= e3):
        w0, w1 = peek64(words, b0), peek64(words, b1)
        w2, w3 = peek64(words, b2), peek64(words, b3)
        ok, b, i0 = _multi_step(w0, b0, i0, multi, base, out)
        if ok:                                   # a second entry from the same window
            ok, b, i0 = _multi_step(w0 << (b - b0), b, i0, multi, base, out)
        b0 = b
        if not ok:
            break
        ok, b, i1 = _multi_step(w1, b1, i1, multi, base, out)
        if ok:                                   # a second entry from the same window
            ok, b, i1 = _multi_step(w1 << (b - b1), b, i1, multi, base, out)
        b1 = b
        if not ok:
            break
        ok, b, i2 = _multi_step(w2, b2, i2, multi, base, out)
        if ok:                                   # a second entry from the same window
            ok, b, i2 = _multi_step(w2 << (b - b2), b, i2, multi, base, out)
        b2 = b
        if not ok:
            break
        ok, b, i3 = _multi_step(w3, b3, i3, multi, base, out)
        if ok:                                   # a second entry from the same window
            ok, b, i3 = _multi_step(w3 << (b - b3), b, i3, multi, base, out)
        b3 = b
        if not ok:
            break
    return (int64(b0), int64(b1), int64(b2), int64(b3),
            int64(i0), int64(i1), int64(i2), int64(i3))


@njit(cache=True)
def _four_zero_chunks(words, starts, chunk_bits, c0, chunk, multi, base, out, zero_pattern):
    """``_four_chunks`` for sparse groups: one ``_zero_step`` per chunk per iteration (a
    second step per window measured slower here)."""
    (b0, b1, b2, b3, e0, e1, e2, e3, i0, i1, i2, i3,
     stop0, stop1, stop2, stop3) = four_chunk_bounds(starts, chunk_bits, c0, chunk, out.shape[0])
    room = uint64(ZERO_RUN_MAX)
    while (i0 + room <= stop0 and i1 + room <= stop1 and i2 + room <= stop2 and
           i3 + room <= stop3 and
           b0 <= e0 and b1 <= e1 and b2 <= e2 and b3 <= e3):
        w0, w1 = peek64(words, b0), peek64(words, b1)
        w2, w3 = peek64(words, b2), peek64(words, b3)
        ok, b0, i0 = _zero_step(w0, b0, i0, multi, base, out, zero_pattern)
        if not ok:
            break
        ok, b1, i1 = _zero_step(w1, b1, i1, multi, base, out, zero_pattern)
        if not ok:
            break
        ok, b2, i2 = _zero_step(w2, b2, i2, multi, base, out, zero_pattern)
        if not ok:
            break
        ok, b3, i3 = _zero_step(w3, b3, i3, multi, base, out, zero_pattern)
        if not ok:
            break
    return (int64(b0), int64(b1), int64(b2), int64(b3),
            int64(i0), int64(i1), int64(i2), int64(i3))
