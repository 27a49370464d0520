"""Huffman coding of levels one symbol per element (encoders ``huffman`` and ``sh``).

READ ME FIRST
1. Symbol ``s`` in [0, window) stands for level ``base + s``; symbol ``window`` is the escape,
   followed by the level's zigzag form in ``value_bits`` bits (8, 16 or 32). Levels outside the
   window, or without a code, take the escape, so any level round-trips.
2. The encoder reads one packed entry per element: ``code << LENGTH_BITS | length`` (length 0 =
   escape).
3. The decoder reads multi-symbol tables: one 12-bit lookup yields every whole code in those
   12 bits, up to 8 bytes of levels (1-bit codes are common for quantized gradients), written
   by one 8-byte store. Escapes and the last few elements go through the single-symbol table.
4. Payloads are chunked (kernels/chunks.py); kernels/lanes.py decodes four chunks at a time
   with these tables and calls ``rare_symbol`` and ``decode_chunk`` from here.
"""
import numpy as np
from numba import njit, uint64, int64
from numba.cpython.unsafe.numbers import trailing_zeros

from .bits import (settle, join64, WORD_BITS, put_bits, put_bits_long, flush_bits, peek64,
                   top_bits, zigzag, unzigzag, buffer_at, buffer_position)
from .errors import OK, PAYLOAD_OVERRUN, INVALID_CODE, VALUE_OVERFLOW, PAYLOAD_UNDERRUN
from .maxima import MAX_CODE_BITS, TABLE_SIZE, LENGTH_BITS, LENGTH_MASK
from .stores import count_equal64, load8, store8, sampled_eighths, LITTLE_ENDIAN

# A packed encoder entry is a length entry (maxima.py): code << LENGTH_BITS | length.


# Histograms count into this many interleaved tables: consecutive equal levels (runs of zeros)
# would otherwise serialize on one counter's store-to-load latency.
HISTOGRAM_LANES = 4


# The histogram counts ranges of HISTOGRAM_RANGE levels; in one where at least
# ONE_LEVEL_EIGHTHS of 8 sampled 8-byte blocks hold a single level (kernels/stores.py), such blocks
# count at once (measured: TernGrad levels 2-3x, QSGD s = 1 1.1-1.3x faster; from 5 eighths
# QSGD s = 2 turns slower).
HISTOGRAM_RANGE = 1 << 16
ONE_LEVEL_EIGHTHS = 6


# Windows of at most this many levels are counted one level at a time by a compare pass that
# LLVM vectorizes (measured: ~0.03 ns per element and level against 0.25-0.6 ns per element for
# the table increments on QSGD s = 1..4 and TernGrad levels, windows of 3 to 7).
COMPARE_WINDOW = 8


@njit(cache=True, nogil=True)
def _count_equal(levels, level):
    """Elements of ``levels`` equal to ``level`` (of the levels' dtype), 64 bytes per step
    (``count_equal64``)."""
    n = uint64(levels.shape[0])
    per = uint64(64 // levels.itemsize)
    count = uint64(0)
    i = uint64(0)
    while i + per <= n:
        count += count_equal64(levels, i, level)
        i += per
    while i < n:
        count += uint64(levels[i] == level)
        i += uint64(1)
    return int64(count)


@njit(cache=True, nogil=True)
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
        if sampled_eighths(levels, i, stop, uint64(0), True) >= ONE_LEVEL_EIGHTHS:
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


@njit(cache=True, nogil=True)
def pack_entries(symbols, codes, lengths, n_symbols):
    """Encoder entries ``code << LENGTH_BITS | length`` per symbol id (uint32, ``n_symbols``;
    0 = not coded) from the coded ``symbols`` with their ``codes`` and ``lengths``."""
    entries = np.zeros(n_symbols, dtype=np.uint32)
    for i in range(symbols.shape[0]):
        entries[symbols[i]] = (codes[i] << LENGTH_BITS) | lengths[i]
    return entries


@njit(cache=True, nogil=True)
def _codes_until_escape(levels, i, stop, base, window, entries, block_pattern, block_bits, out32,
                        acc, n_pending, word_pos):
    """Hot loop of ``encode_levels``: write codes of elements i.. until one needs the escape
    (or ``stop``); returns (i, acc, n_pending, word_pos). Four codes per flush step while they
    fit the 64-bit accumulator with the pending bits (joined before they enter it: one shift
    and one or on its chain), else two (<= 24 bits: with < 32 pending they always fit). With
    ``block_bits`` > 0, 8 bytes of levels equal to ``block_pattern`` (the level whose code is
    all zero bits, repeated) are written at once as ``block_bits`` (<= 32) zero bits."""
    i, stop, w = uint64(i), uint64(stop), uint64(window)
    n_pending, word_pos = uint64(n_pending), uint64(word_pos)
    one, code_shift, length_mask = uint64(1), uint64(LENGTH_BITS), uint64(LENGTH_MASK)
    two, three = uint64(2), uint64(3)
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
            if i + three < stop:
                v0, v1 = uint64(int64(levels[i]) - base), uint64(int64(levels[i + one]) - base)
                v2 = uint64(int64(levels[i + two]) - base)
                v3 = uint64(int64(levels[i + three]) - base)
                if v0 < w and v1 < w and v2 < w and v3 < w:
                    e0, e1 = uint64(entries[v0]), uint64(entries[v1])
                    e2, e3 = uint64(entries[v2]), uint64(entries[v3])
                    len0, len1 = e0 & length_mask, e1 & length_mask
                    len2, len3 = e2 & length_mask, e3 & length_mask
                    pair0, pair1 = len0 + len1, len2 + len3
                    if len0 != 0 and len1 != 0 and len2 != 0 and len3 != 0 and \
                            n_pending + pair0 + pair1 < uint64(64):
                        low = ((e2 >> code_shift) << len3) | (e3 >> code_shift)
                        high = (((e0 >> code_shift) << len1) | (e1 >> code_shift)) << pair1
                        acc = (acc << (pair0 + pair1)) | high | low
                        word, n_pending, full = settle(acc, n_pending + pair0 + pair1)
                        out32[word_pos] = word
                        word_pos += full
                        i += uint64(4)
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


@njit(cache=True, nogil=True)
def put_escape(out32, acc, n_pending, word_pos, esc, level, value_bits):
    """Write an escaped level (rare path): the escape entry's code, then the level's zigzag form
    in ``value_bits`` bits; returns the new (acc, n_pending, word_pos)."""
    acc, n_pending, word_pos = put_bits(out32, acc, n_pending, word_pos, esc >> LENGTH_BITS,
                                        esc & LENGTH_MASK)
    return put_bits_long(out32, acc, n_pending, word_pos, zigzag(level), value_bits)


# The Huffman writer takes 8-byte blocks of the all-zero-code level whole in a chunk where at
# least BLOCK_EIGHTHS of 8 sampled blocks are such blocks (kernels/stores.py).
BLOCK_EIGHTHS = 5


@njit(cache=True, nogil=True)
def _encode_chunk(levels, start, stop, base, window, entries, value_bits, block_pattern,
                  block_bits, out32, word_pos):
    """Write elements [start, stop) (one chunk) from ``word_pos``; returns (words end, bits).
    ``block_pattern``, ``block_bits``: as ``_codes_until_escape``, used when the chunk's sample
    has enough such blocks."""
    first_word = word_pos
    acc = uint64(0)
    n_pending = int64(0)        # typed: a literal 0 compiles every callee a second time
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


@njit(cache=True, nogil=True)
def zero_code_block(levels, base, window, entries):
    """(pattern, bits) for the block fast path: 8 bytes of levels that all take the code of
    zero bits (canonical Huffman gives the all-zero code to the first symbol of the shortest
    length), and the bits they cost; bits 0 when no such code or more than 32 bits."""
    block = 8 // levels.itemsize
    for s in range(window):
        length = int64(entries[s] & LENGTH_MASK)
        if length > 0 and entries[s] >> LENGTH_BITS == 0:
            if length * block > 32:
                break
            copies = np.full(block, base + s, dtype=levels.dtype)
            return load8(copies, 0), length * block
    return uint64(0), 0


@njit(cache=True, nogil=True)
def encode_levels(levels, base, window, entries, value_bits, chunk, out32, chunk_bits):
    """Write every level's code (or escape + zigzag value), chunk by chunk (kernels/chunks.py);
    fills ``chunk_bits`` and returns the words used."""
    n = levels.shape[0]
    word_pos = int64(0)         # typed: a literal 0 compiles every callee a second time
    block_pattern, block_bits = zero_code_block(levels, base, window, entries)
    for c in range(chunk_bits.shape[0]):
        word_pos, chunk_bits[c] = _encode_chunk(levels, c * chunk, min(n, (c + 1) * chunk), base,
                                                window, entries, value_bits, block_pattern,
                                                block_bits, out32, word_pos)
    return word_pos


# Decoder tables (``multi_symbol_tables``), each indexed by a 12-bit prefix of the stream:
#   levels[p]  uint64: the levels of the whole codes that begin the prefix, at most
#              8 // itemsize of them, laid out as that many elements of the level dtype in native
#              order, so one unaligned 8-byte store (stores.store8) writes them all;
#   counts[p]  uint8: how many (0: the prefix begins with an escape or no code, which the lane
#              loop of kernels/lanes.py leaves to ``rare_symbol``);
#   bits[p]    uint8: the bits they take (<= 12).
# Count and bits sit in byte tables, not in the levels word (docs/design.md, "Kernels").
# The table decoders pass them as one tuple, indexed by these names; the rlh/shs tables
# (tokens.lookup_tables) add the four-lane loop's own counts and bits (kernels/lanes.py).
TABLE_LEVELS, TABLE_COUNTS, TABLE_BITS, TABLE_LANE_COUNTS, TABLE_LANE_BITS = range(5)


# Byte patterns of the cumulative-bits word ``multi_symbol_tables`` keeps per prefix: byte k
# holds the bits of the first k + 1 codes (<= 12 < 0x80, so bytewise compares cannot borrow
# across bytes), bytes past the count hold NO_CODES (more than any prefix has). BYTES_ONE times
# a byte is that byte in all eight.
BYTES_ONE = 0x0101010101010101
BYTES_HIGH = 0x8080808080808080
NO_CODES = 0x7F7F7F7F7F7F7F7F


@njit(cache=True, nogil=True)
def _all_zero_prefix(table, window, base, itemsize):
    """(levels word, count, cumulative-bits word) of the all-zero prefix: the all-zero code
    (canonical: the first code of the shortest length) as often as it fits in 12 bits."""
    per_word = 8 // itemsize
    width = 8 * itemsize
    mask = (uint64(1) << uint64(width)) - uint64(1) if itemsize < 8 else ~uint64(0)
    e = table[0]
    length = int64(e & LENGTH_MASK)
    s = int64(e >> LENGTH_BITS)
    word, count, cum = uint64(0), 0, uint64(NO_CODES)
    if length != 0 and s != window:
        count = min(MAX_CODE_BITS // length, per_word)
        for k in range(count):
            slot = k if LITTLE_ENDIAN else per_word - 1 - k
            word |= (uint64(base + s) & mask) << uint64(width * slot)
            cum = (cum & ~(uint64(0xFF) << uint64(8 * k))) | (uint64(length * (k + 1)) <<
                                                             uint64(8 * k))
    return word, count, cum


@njit(cache=True, nogil=True)
def multi_symbol_tables(table, window, base, itemsize):
    """(levels, counts, bits) decoder tables (see above) from a single-symbol ``table``
    (kernels/huffman.py) for levels of ``itemsize`` bytes; symbol s is level base + s.

    One step per prefix, no loop over its codes: prefix p opens with one code of L bits, and
    the codes after it are those of the prefix c = (p << L) mod 2**12 that end within its first
    12 - L bits. c has more trailing zeros than p, so prefixes go in order of decreasing trailing
    zeros (the all-zero prefix first, its own successor, by ``_all_zero_prefix``); a bytewise
    compare of c's cumulative bits with 12 - L says how many of its codes to keep.
    """
    per_word = uint64(8 // itemsize)
    width = uint64(8 * itemsize)
    mask = (uint64(1) << width) - uint64(1) if itemsize < 8 else ~uint64(0)
    ones, high, none = uint64(BYTES_ONE), uint64(BYTES_HIGH), uint64(NO_CODES)
    byte, top_byte = uint64(8), uint64(1) << uint64(63)
    levels = np.empty(TABLE_SIZE, dtype=np.uint64)
    counts = np.empty(TABLE_SIZE, dtype=np.uint8)
    bits = np.empty(TABLE_SIZE, dtype=np.uint8)
    cums = np.empty(TABLE_SIZE, dtype=np.uint64)
    word, count, cum = _all_zero_prefix(table, window, base, itemsize)
    levels[0], counts[0], cums[0] = word, count, cum
    bits[0] = (cum >> uint64(8 * (count - 1))) & uint64(0xFF) if count else 0
    for zeros in range(MAX_CODE_BITS - 1, -1, -1):
        for k in range(1 << (MAX_CODE_BITS - 1 - zeros)):
            p = (2 * k + 1) << zeros                       # exactly ``zeros`` trailing zeros
            e = uint64(table[p])
            length = e & uint64(LENGTH_MASK)
            s = int64(e >> uint64(LENGTH_BITS))
            ok = (length != uint64(0)) & (s != window)
            c = (uint64(p) << length) & uint64(TABLE_SIZE - 1)
            # c's codes that end past 12 - L bits: bytes with cum >= 13 - L (high bit set).
            over = ((cums[c] | high) - (uint64(MAX_CODE_BITS + 1) - length) * ones) & high
            kept = uint64(trailing_zeros(over | top_byte)) >> uint64(3)
            n = min(kept + uint64(1), per_word)
            keep = (uint64(1) << (byte * n)) - uint64(1) if n < byte else ~uint64(0)
            cum = ((((cums[c] << byte) + length * ones) & keep) | (none & ~keep))
            level = uint64(base + s) & mask
            if width == uint64(64):                        # 8-byte levels: one per word
                word = level
            elif LITTLE_ENDIAN:
                word = (levels[c] << width) | level
            else:
                word = (levels[c] >> width) | (level << (uint64(64) - width))
            levels[p] = word if ok else uint64(0)
            counts[p] = n if ok else uint64(0)
            bits[p] = ((cum >> (byte * (n - uint64(1)))) & uint64(0xFF)) if ok else uint64(0)
            cums[p] = cum if ok else none
    return levels, counts, bits


# A window of 64 bits feeds this many lookups on the one-chunk path: 4 * 12 = 48 <= 64.
LOOKUPS_PER_WINDOW = 4


@njit(cache=True, nogil=True)
def one_symbol(words, bit_pos, end_bit, code, out, i):
    """Decode the symbol at ``bit_pos`` into out[i] through the single-symbol table; it must end
    by ``end_bit``. Returns (status, bit_pos after it)."""
    table, base, window, value_bits, lo, hi = code
    if bit_pos > end_bit:
        return PAYLOAD_OVERRUN, bit_pos
    e = table[peek64(words, bit_pos) >> uint64(64 - MAX_CODE_BITS)]
    length = int64(e & LENGTH_MASK)
    if length == 0:
        return INVALID_CODE, bit_pos
    s = int64(e >> LENGTH_BITS)
    after = bit_pos + length
    if s != window:
        if after > end_bit:
            return PAYLOAD_OVERRUN, bit_pos
        out[i] = base + s
        return OK, after
    # escape: the raw zigzag value follows the code
    if after + value_bits > end_bit:
        return PAYLOAD_OVERRUN, bit_pos
    level = unzigzag(top_bits(peek64(words, after), value_bits))
    if level < lo or level > hi:
        return VALUE_OVERFLOW, bit_pos
    out[i] = level
    return OK, after + value_bits


@njit(cache=True, nogil=True)
def rare_symbol(words, code, out, buf, end, i, i_limit, bit_limit):
    """The four-lane loop's rare path (kernels/lanes.py): the symbol at the top of bit buffer
    (buf, end) through the single-symbol table, if it ends by ``i_limit`` and ``bit_limit``
    (uint64s). Returns (decoded, buf, end, i) after it (unchanged when not decoded)."""
    if i >= i_limit:
        return False, buf, end, i
    status, after = one_symbol(words, int64(buffer_position(buf, end)), int64(bit_limit), code,
                               out, i)
    if status != OK:
        return False, buf, end, i
    buf, end = buffer_at(words, after)
    return True, buf, end, i + uint64(1)


@njit(cache=True, nogil=True)
def decode_chunk(words, bit_pos, end_bit, code, tables, out, i, stop):
    """Decode elements [i, stop) of one chunk from ``bit_pos``; the chunk must end exactly at
    ``end_bit``. ``tables``: (levels, counts, bits, ...) of ``multi_symbol_tables``. Returns a
    status code (errors.py)."""
    levels, counts, bits = tables[TABLE_LEVELS], tables[TABLE_COUNTS], tables[TABLE_BITS]
    per_word = 8 // out.itemsize
    while i < stop:
        if bit_pos > end_bit:
            return PAYLOAD_OVERRUN
        j = bit_pos >> 6
        win = join64(words[j], words[j + 1], bit_pos & 63)
        used = 0
        single = False
        for _ in range(LOOKUPS_PER_WINDOW):
            if i > stop - per_word:
                single = i < stop                # the last few symbols, one at a time
                break
            x = (win << uint64(used)) >> uint64(64 - MAX_CODE_BITS)
            if counts[x] == 0:
                single = True
                break
            store8(out, i, levels[x])
            i += int64(counts[x])
            used += int64(bits[x])
        bit_pos += used
        if single:                               # escapes, the tail
            status, bit_pos = one_symbol(words, bit_pos, end_bit, code, out, i)
            if status != OK:
                return status
            i += 1
    if bit_pos > end_bit:
        return PAYLOAD_OVERRUN
    if bit_pos < end_bit:
        return PAYLOAD_UNDERRUN
    return OK
