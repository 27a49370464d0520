"""Decoding run-length tokens (encoders ``rlh`` and ``shs``): the token table, the lookup
tables, and the one-chunk path.

READ ME FIRST
1. A token is (level, run length), coded as a Huffman code, then the run's extra bits (rlh:
   kernels/runs.py; shs: none). The token table has one uint64 entry per 12-bit prefix that
   says everything about the token whose code the prefix starts: bits 0-3 code length, bit 4
   escape, bits 5-10 extra bits, bits 11-42 run base, bits 43-63 level index (level = base +
   index); the run is the base plus the extra bits' value. An escape carries a zigzag level in
   ``value_bits`` bits, then, when ``esc_has_run`` (rlh), an Elias-gamma run (else run 1).
2. The lookup tables (``lookup_tables``) have the Huffman decoder's form (kernels/symbols.py):
   per prefix, the whole tokens whose code and extra bits lie in its 12 bits, their levels as
   one 8-byte word, the levels they make and the bits they take. Slots of the word past the
   last token's start repeat its level, so a long last run is that level written on (a fill).
   Two count/bits tables: the one-chunk path's, whose last token may run past the word
   (up to MAX_LOOKUP_LEVELS levels in all: a sparse stream's long runs take one lookup each),
   and the four-lane loop's (kernels/lanes.py), whose tokens all end within the word (one store, no
   branch). A prefix that starts no such token (escape, invalid code, code and extra bits past
   12, a longer run) has count 0 and goes through the token table.
3. ``code``, the tuple the decoders pass around, indexed by the CODE_* names: (token table,
   base, value_bits, esc_has_run, lo, hi), lo/hi the level dtype's range.
"""
import numpy as np
from numba import njit, uint64, int64

from .bits import peek64, top_bits, unzigzag, buffer_at, buffer_position, LOOKUPS_PER_BUFFER
from .elias import read_gamma
from .errors import (OK, PAYLOAD_OVERRUN, INVALID_CODE, RUN_OVERFLOW, VALUE_OVERFLOW,
                     PAYLOAD_UNDERRUN)
from .maxima import (MAX_CODE_BITS, MAX_LOOKUP_LEVELS, TABLE_SIZE, TOKEN_ESCAPE,  # noqa: F401
                     TOKEN_EXTRA_MASK, TOKEN_EXTRA_SHIFT, TOKEN_LENGTH_MASK, TOKEN_LEVEL_SHIFT,
                     TOKEN_RUN_MASK, TOKEN_RUN_SHIFT)
from .runs import BUCKET_BASE, BUCKET_EXTRA
from .stores import store8, levels_per_word, last_level, LITTLE_ENDIAN

# A token table entry (uint64, ``token_table``): maxima.py's token layout.

# ``code``, the decoders' tuple (note 3), by position.
CODE_TABLE, CODE_BASE, CODE_VALUE_BITS, CODE_ESC_HAS_RUN, CODE_LO, CODE_HI = range(6)



@njit(cache=True, nogil=True)
def token_table(lengths, codes, sym_level_index, sym_run_base, sym_extra, esc_symbol):
    """Token table (note 1) from per-symbol descriptions; entries of uncoded prefixes are 0.
    The escape has no description: the description arrays may end before ``esc_symbol``."""
    table = np.zeros(TABLE_SIZE, dtype=np.uint64)
    for s in range(lengths.shape[0]):
        if lengths[s] > 0 and s == esc_symbol:
            _put_token(table, lengths[s], codes[s], True, 0, 0, 0)
        elif lengths[s] > 0:
            _put_token(table, lengths[s], codes[s], False, sym_level_index[s],
                       sym_run_base[s], sym_extra[s])
    return table


@njit(cache=True, inline="always")
def _put_token(table, length, code, escape, level_index, run_base, extra):
    """Enter one symbol's token in every prefix its code starts."""
    e = uint64(length)
    if escape:
        e |= uint64(TOKEN_ESCAPE)
    else:
        e |= (uint64(extra) << uint64(TOKEN_EXTRA_SHIFT)) | \
            (uint64(run_base) << uint64(TOKEN_RUN_SHIFT)) | \
            (uint64(level_index) << uint64(TOKEN_LEVEL_SHIFT))
    shift = MAX_CODE_BITS - length
    first = int64(code) << shift
    for k in range(first, first + (1 << shift)):
        table[k] = e


@njit(cache=True, nogil=True)
def rlh_token_table(lengths, codes, window):
    """Token table for rlh's symbols: bucket * window + level index, the escape last. Visits
    the coded symbols only (an s = 127 alphabet has ~16K symbols, a few hundred coded)."""
    escape = lengths.shape[0] - 1
    table = np.zeros(TABLE_SIZE, dtype=np.uint64)
    for s in np.flatnonzero(lengths):
        bucket = s // window
        level_index = s - bucket * window
        if s == escape:
            bucket = 0
        _put_token(table, lengths[s], codes[s], s == escape, level_index, BUCKET_BASE[bucket],
                   BUCKET_EXTRA[bucket])
    return table


@njit(cache=True, inline="always")
def _token_run(e, window):
    """Run of the token of entry ``e`` whose code opens the 64-bit ``window`` (its code and
    extra bits must lie in the window); uint64."""
    length = e & uint64(TOKEN_LENGTH_MASK)
    extra = (e >> uint64(TOKEN_EXTRA_SHIFT)) & uint64(TOKEN_EXTRA_MASK)
    run = (e >> uint64(TOKEN_RUN_SHIFT)) & uint64(TOKEN_RUN_MASK)
    if extra > uint64(0):
        run += (window << length) >> (uint64(64) - extra)
    return run


@njit(cache=True, nogil=True)
def _first_tokens(table, base, itemsize):
    """The first token of every 12-bit prefix, for the lookup tables: (bits it takes, 0 where
    the tables leave it to the token table; its run; its level in every slot of a word)."""
    width = uint64(8 * itemsize)
    mask = (uint64(1) << width) - uint64(1) if itemsize < 8 else ~uint64(0)
    repeat = ~uint64(0) // mask                   # a level times this fills every slot
    top = uint64(64 - MAX_CODE_BITS)
    take = np.zeros(TABLE_SIZE, dtype=np.int64)
    runs = np.empty(TABLE_SIZE, dtype=np.int64)
    word_of = np.empty(TABLE_SIZE, dtype=np.uint64)
    for p in range(TABLE_SIZE):
        e = table[p]
        length = int64(e & uint64(TOKEN_LENGTH_MASK))
        used = length + int64((e >> uint64(TOKEN_EXTRA_SHIFT)) & uint64(TOKEN_EXTRA_MASK))
        if length == 0 or (e & uint64(TOKEN_ESCAPE)) or used > MAX_CODE_BITS:
            continue
        run = int64(_token_run(e, uint64(p) << top))
        if run > MAX_LOOKUP_LEVELS:
            continue
        take[p], runs[p] = used, run
        word_of[p] = (uint64(base + int64(e >> uint64(TOKEN_LEVEL_SHIFT))) & mask) * repeat
    return take, runs, word_of


@njit(cache=True, nogil=True)
def lookup_tables(table, base, itemsize):
    """(levels, counts, bits, lane counts, lane bits) for levels of ``itemsize`` bytes from a
    token ``table`` (note 2): uint64 words and uint8 tables of TABLE_SIZE entries. Each prefix
    chains the first tokens (``_first_tokens``) of the prefixes its codes leave."""
    per_word = 8 // itemsize
    width = uint64(8 * itemsize)
    take, runs, word_of = _first_tokens(table, base, itemsize)
    levels = np.zeros(TABLE_SIZE, dtype=np.uint64)
    counts = np.zeros(TABLE_SIZE, dtype=np.uint8)
    bits = np.zeros(TABLE_SIZE, dtype=np.uint8)
    lane_counts = np.zeros(TABLE_SIZE, dtype=np.uint8)
    lane_bits = np.zeros(TABLE_SIZE, dtype=np.uint8)
    for p in range(TABLE_SIZE):
        used, count, word = 0, 0, uint64(0)
        lane_count, lane_used = -1, 0
        x = p
        while count < per_word:                     # a token may start within the word
            t = take[x]
            if t == 0 or t > MAX_CODE_BITS - used or count + runs[x] > MAX_LOOKUP_LEVELS:
                break
            if lane_count < 0 and count + runs[x] > per_word:
                lane_count, lane_used = count, used   # the lane tables stop before it
            # slots from ``count`` on take this token's level
            shift = width * uint64(count)
            if LITTLE_ENDIAN:
                keep = (uint64(1) << shift) - uint64(1)
            else:
                keep = ~((~uint64(0)) >> shift) if count > 0 else uint64(0)
            word = (word & keep) | (word_of[x] & ~keep)
            count += runs[x]
            used += t
            x = (p << used) & (TABLE_SIZE - 1)
        if lane_count < 0:
            lane_count, lane_used = count, used
        levels[p], counts[p], bits[p] = word, count, used
        lane_counts[p], lane_bits[p] = lane_count, lane_used
    return levels, counts, bits, lane_counts, lane_bits


@njit(cache=True, nogil=True)
def escaped_token(words, total_bits, bit_pos, value_bits, esc_has_run, lo, hi, out, i, n):
    """Raw level (and gamma run) after an escape code at ``bit_pos``; writes its run at out[i:]
    unless it passes ``n``. Returns (status, i, bit_pos) after it."""
    if bit_pos > total_bits:
        return PAYLOAD_OVERRUN, i, bit_pos
    level = unzigzag(top_bits(peek64(words, bit_pos), value_bits))
    bit_pos += value_bits
    if level < lo or level > hi:
        return VALUE_OVERFLOW, i, bit_pos
    run = int64(1)
    if esc_has_run:
        if bit_pos > total_bits:
            return PAYLOAD_OVERRUN, i, bit_pos
        r, bit_pos, status = read_gamma(words, bit_pos, total_bits)
        if status != OK:
            return status, i, bit_pos
        run = int64(r)
    if run > n - i:
        return RUN_OVERFLOW, i, bit_pos
    out[i:i + run] = level
    return OK, i + run, bit_pos


# ``one_token``'s status at an escape code (not an error): its bit position is past the code.
AT_ESCAPE = -1


@njit(cache=True, inline="always")
def one_token(words, bit_pos, end_bit, code, out, i, stop):
    """Decode the token at ``bit_pos`` into out[i:] through the token table; it must end by
    ``end_bit`` and ``stop``. Returns (status, i, bit_pos) after it (unchanged on error; past
    the code at AT_ESCAPE). Calls nothing that takes an array (bits.py note 2: each such call
    costs its callers a reference-count pair per token)."""
    table, base = code[CODE_TABLE], code[CODE_BASE]
    if bit_pos > end_bit:
        return PAYLOAD_OVERRUN, i, bit_pos
    win = peek64(words, bit_pos)
    e = table[win >> uint64(64 - MAX_CODE_BITS)]
    length = int64(e & uint64(TOKEN_LENGTH_MASK))
    if length == 0:
        return INVALID_CODE, i, bit_pos
    if e & uint64(TOKEN_ESCAPE):
        return AT_ESCAPE, i, bit_pos + length
    after = bit_pos + length + int64((e >> uint64(TOKEN_EXTRA_SHIFT)) & uint64(TOKEN_EXTRA_MASK))
    if after > end_bit:
        return PAYLOAD_OVERRUN, i, bit_pos
    run = _token_run(e, win)                  # code + extra <= 12 + 31 bits
    if i > stop or run > uint64(stop - i):
        return RUN_OVERFLOW, i, bit_pos
    level = base + int64(e >> uint64(TOKEN_LEVEL_SHIFT))
    k, end = uint64(i), uint64(i) + run
    while k < end:                            # unsigned: no wraparound test, a memset
        out[k] = level
        k += uint64(1)
    return OK, int64(end), after


@njit(cache=True, nogil=True)
def rare_token(words, code, out, buf, end, i, i_limit, bit_limit):
    """The four-lane loop's rare path (kernels/lanes.py): the token at the top of bit buffer
    (buf, end) through the token table, if it ends by ``i_limit`` and ``bit_limit`` (uint64s)
    and is no escape (the one-chunk path takes those). Returns (decoded, buf, end, i) after it
    (unchanged when not decoded)."""
    status, j, after = one_token(words, int64(buffer_position(buf, end)), int64(bit_limit),
                                 code, out, int64(i), int64(i_limit))
    if status != OK:
        return False, buf, end, i
    buf, end = buffer_at(words, after)
    return True, buf, end, uint64(j)


@njit(cache=True, nogil=True)
def decode_chunk(words, bit_pos, end_bit, code, tables, out, i, stop):
    """Decode elements [i, stop) of one chunk from ``bit_pos``; the chunk must end exactly at
    ``end_bit``. ``tables``: ``lookup_tables``. Returns a status code (errors.py).

    Five lookups per bit buffer while the chunk has room for five whole lookups (their counts
    with fills where MAX_LOOKUP_LEVELS levels fit, else the lane counts), then a token through
    the token table when the next prefix has count 0 or room ran out."""
    levels, counts, bits, lane_counts, lane_bits = tables
    per_word = uint64(levels_per_word(out))
    pos, end, i, stop = uint64(bit_pos), uint64(end_bit), uint64(i), uint64(stop)
    long_room = uint64(LOOKUPS_PER_BUFFER * MAX_LOOKUP_LEVELS) + per_word
    lane_room = uint64(LOOKUPS_PER_BUFFER) * per_word
    while i < stop:
        if pos > end:
            return PAYLOAD_OVERRUN
        if i + long_room <= stop:
            pos, i, more = _long_lookups(words, pos, levels, counts, bits, out, i, per_word)
            if more:
                continue
        elif i + lane_room <= stop:
            pos, i, more = _lane_lookups(words, pos, levels, lane_counts, lane_bits, out, i)
            if more:
                continue
        if i >= stop:
            break
        status, i, pos = _next_token(words, pos, end, code, out, i, stop)
        if status != OK:
            return status
    if pos > end:
        return PAYLOAD_OVERRUN
    if pos < end:
        return PAYLOAD_UNDERRUN
    return OK


@njit(cache=True, inline="always")
def _long_lookups(words, pos, levels, counts, bits, out, i, per_word):
    """Five lookups through the one-chunk counts from bit ``pos`` into ``out[i:]``, which must
    have room for five lookups of MAX_LOOKUP_LEVELS levels and a word. Returns (pos, i) after
    them and whether the next prefix is a lookup too (count > 0). All uint64."""
    buf, at = buffer_at(words, pos)
    for _ in range(LOOKUPS_PER_BUFFER):
        x = buf >> uint64(64 - MAX_CODE_BITS)
        c = uint64(counts[x])
        w = levels[x]
        store8(out, i, w)
        if c > per_word:                    # a fill: the last level, written on
            fill = last_level(w, out)
            for k in range(i + per_word, i + c):
                out[k] = fill
        buf <<= uint64(bits[x])
        i += c
    return buffer_position(buf, at), i, counts[buf >> uint64(64 - MAX_CODE_BITS)] != 0


@njit(cache=True, inline="always")
def _lane_lookups(words, pos, levels, lane_counts, lane_bits, out, i):
    """Five lookups through the four-lane counts (every token within its word: one store
    each) from bit ``pos`` into ``out[i:]``, which must have room for five words. Returns
    (pos, i) after them and whether the next prefix is a lookup too. All uint64."""
    buf, at = buffer_at(words, pos)
    for _ in range(LOOKUPS_PER_BUFFER):
        x = buf >> uint64(64 - MAX_CODE_BITS)
        store8(out, i, levels[x])
        buf <<= uint64(lane_bits[x])
        i += uint64(lane_counts[x])
    return buffer_position(buf, at), i, lane_counts[buf >> uint64(64 - MAX_CODE_BITS)] != 0


@njit(cache=True, inline="always")
def _next_token(words, pos, end, code, out, i, stop):
    """The token at bit ``pos`` through the token table, an escape included, into
    ``out[i:stop]``: (status, i, pos) after it (uint64; unchanged unless OK)."""
    status, j, after = one_token(words, int64(pos), int64(end), code, out, int64(i),
                                 int64(stop))
    if status == AT_ESCAPE:
        status, j, after = escaped_token(words, int64(end), after, code[CODE_VALUE_BITS],
                                         code[CODE_ESC_HAS_RUN], code[CODE_LO],
                                         code[CODE_HI], out, int64(i), int64(stop))
    if status != OK:
        return status, i, pos
    return status, uint64(j), uint64(after)
