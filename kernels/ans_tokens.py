"""rANS coding of run-length tokens (encoder ``rla``): ``rlh``'s (level, run) tokens with their
joint symbols coded by kernels/ans.py's coder instead of Huffman codes.

READ ME FIRST
1. The tokens and their symbols are ``rlh``'s (kernels/runs.py, note 1): symbol = run bucket *
   window + level index, the escape RUN_BUCKETS * window. Runs are cut at chunk boundaries, so
   every chunk of levels is a whole number of tokens.
2. A chunk's token symbols are one rANS stream (kernels/ans.py, notes 1-4) with LANES = 32
   interleaved states, token j of the chunk on state j % 32, coded with the table of its
   context (note 5). A step of 32 tokens reads its units in lane order, as ``ans``'s steps do,
   so a GPU warp decodes a step at once (kernels/cuda_rla.py); a core decodes the tokens one
   after another, the state of each in a small array.
3. What the symbols do not say travels in a second bit stream, the extras, MSB-first after all
   chunks' rANS streams (from the next 32-bit word): per token, in order, its bucket's extra
   bits (the run's low BUCKET_EXTRA[b] bits; the bucket gives the rest), or for an escape the
   level as a zigzag field of the dtype's value bits and the run as an Elias-gamma code. Each
   chunk's extras follow the previous chunk's without padding; the parameters give every
   chunk's extra bits.
4. Decoding a chunk takes tokens until its levels are filled; it must end with every rANS unit
   and every extra bit of the chunk read and every state back at STATE_LOW.
5. Contexts: a token is coded with the table of its context, 1 where the previous token of its
   chunk has the anchor level (the level 0 where the window holds it), else 0 (the chunk's
   first token, an escape before it, any other level). The anchor's runs alternate with other
   tokens: after an anchor token the next one almost never is one, which one table would
   still give a share of its slots. ``after_anchor[s]`` (uint8, per symbol) is the context
   that a token of symbol s gives the next one; the decoder finds it in the token's decode
   entry (ANS_TOKEN_ANCHOR; on the host, its slot entry: ``decode_table``), a shift and
   an AND on the path from one token to the next.
Units: positions of the rANS streams in 16-bit units, of the extras in bits.
"""
import numpy as np
from numba import njit, int64, uint64

from .ans import (HEADER_UNITS, LANES, STATE_LOW, UNIT_BITS, UNIT_MASK, encode_records,
                  end_status, open_states, payload_units, put_symbol, store_units, unit_at)
from .bits import WORD_BITS, flush_bits, peek64, put_bits, unzigzag, zigzag
from .elias import put_gamma, read_gamma
from .errors import (OK, PAYLOAD_OVERRUN, PAYLOAD_UNDERRUN, BAD_STATE, RUN_OVERFLOW,
                     VALUE_OVERFLOW)
from .maxima import (ANS_ESCAPE, ANS_FREQ_MASK, ANS_LEVEL_SHIFT, ANS_OFFSET_MASK,
                     ANS_OFFSET_SHIFT, ANS_PROB_BITS, ANS_PROB_SCALE, ANS_TOKEN_ANCHOR,
                     ANS_TOKEN_BUCKET_SHIFT, ANS_TOKEN_INDEX_MASK, MAX_RUN_EXTRA_BITS,
                     MAX_SYMBOLS, RUN_BUCKETS)
from .runs import (BUCKET_BASE, BUCKET_EXTRA, LONG_RUN_SYMBOL, bucket_and_extra,
                   long_runs_dense, run_symbol)
from .stores import last_level, level_word, levels_per_word, store8

# Interleaved states per chunk (note 2); HEADER_UNITS (ans.py) open a chunk: their final values.
STATES = LANES

# Symbols below this many windows (run buckets 0..2: runs of 1..3) have no extra bits.
PLAIN_BUCKETS = 3
assert (BUCKET_EXTRA[:PLAIN_BUCKETS] == 0).all() and (BUCKET_EXTRA[PLAIN_BUCKETS:] > 0).all()


def anchor_contexts(base, window):
    """``after_anchor`` (uint8 per token symbol) with level 0 as the anchor where the window
    [base, base + window) holds it (its tokens give context 1), else all zeros (note 5)."""
    escape = window * RUN_BUCKETS
    after_anchor = np.zeros(escape + 1, dtype=np.uint8)
    if base <= 0 < base + window:
        after_anchor[-base:escape:window] = 1
    return after_anchor


@njit(cache=True, nogil=True)
def token_contexts(levels, ends, symbols, chunk_runs, base, window, after_anchor, counts,
                   marked):
    """Add every token's symbol to the row of its context (note 5) in ``counts`` (contexts x
    symbols, int64), first giving a LONG_RUN_SYMBOL placeholder (kernels/vector_runs.py) its
    symbol as ``runs.count_symbols`` does: one pass for both. Where a sample finds
    placeholders common (``long_runs_dense``), every token's symbol is found again from its run
    without a branch (``_dense_contexts``); otherwise tokens with extras (note 3) take a
    branch. Where a sample finds these rare too (not ``extras_dense``), that branch also
    writes each one's index and ``marked_run`` into the rows of ``marked`` (uint64, as many
    rows as tokens, 2 columns), in order, and their count is returned (``write_extras`` then
    visits them alone, without loading the tokens' run ends again); else -1."""
    n_tokens = chunk_runs[-1] if chunk_runs.shape[0] else 0
    if long_runs_dense(symbols, n_tokens):
        _dense_contexts(levels, ends, symbols, chunk_runs, base, window, after_anchor,
                        counts)
        return -1
    if extras_dense(symbols, n_tokens, window):
        _sparse_contexts(levels, ends, symbols, chunk_runs, base, window, after_anchor,
                         counts, None)
        return -1
    return _sparse_contexts(levels, ends, symbols, chunk_runs, base, window, after_anchor,
                            counts, marked)


@njit(cache=True, nogil=True)
def _sparse_contexts(levels, ends, symbols, chunk_runs, base, window, after_anchor, counts,
                     marked):
    """``token_contexts`` with a branch per token with extras (a placeholder among them),
    which writes the token's row of ``marked`` unless that is None (a compile-time choice:
    docs/design.md); returns their count."""
    long_run = uint64(LONG_RUN_SYMBOL)
    plain = uint64(PLAIN_BUCKETS) * uint64(window)
    one = uint64(1)
    flat = counts.reshape(counts.size)
    row_after = after_anchor.astype(np.uint64) * uint64(counts.shape[1])
    k = uint64(0)
    n_marked = 0
    for c in range(chunk_runs.shape[0]):
        t = uint64(0)
        stop = uint64(chunk_runs[c])
        while k < stop:
            symbol = uint64(symbols[k])
            if symbol >= plain:                    # rare in dense levels
                # (count_symbols's lines: as a helper taking levels and ends they cost the
                # pass 0.61 -> 0.78 ns per level, docs/design.md)
                end = uint64(ends[k])
                start = uint64(ends[k - one]) + one if k > uint64(0) else uint64(0)
                if symbol == long_run:
                    symbol = run_symbol(start, end, levels[end], base, window)
                    symbols[k] = symbol
                if marked is not None:
                    marked[n_marked, 0] = k
                    marked[n_marked, 1] = marked_run(end + one - start, symbol)
                    n_marked += 1
            flat[t + symbol] += 1
            t = row_after[symbol]
            k += uint64(1)
    return n_marked


@njit(cache=True, nogil=True)
def _dense_contexts(levels, ends, symbols, chunk_runs, base, window, after_anchor, counts):
    """``token_contexts`` without a branch per token: each token's symbol is computed from its
    run (``bucket_and_extra``'s branch-free form) and taken where the token holds a
    placeholder; its context's row is found by a table (``row_after``, the flat offset of
    the row that each symbol gives the next token)."""
    long_run = uint64(LONG_RUN_SYMBOL)
    one, w = uint64(1), uint64(window)
    flat = counts.reshape(counts.size)
    row_after = after_anchor.astype(np.uint64) * uint64(counts.shape[1])
    k, start = uint64(0), uint64(0)                  # start: the token's run's first level
    for c in range(chunk_runs.shape[0]):
        t = uint64(0)
        stop = uint64(chunk_runs[c])
        while k < stop:
            end = uint64(ends[k])
            bucket, _ = bucket_and_extra(end + one - start, False)
            start = end + one
            symbol = uint64(symbols[k])
            if symbol == long_run:                  # (a select: both sides computed)
                symbol = bucket * w + uint64(int64(levels[end]) - base)
            symbols[k] = symbol
            flat[t + symbol] += 1
            t = row_after[symbol]
            k += one


@njit(cache=True, inline="always")
def close_states(states, units, u):
    """Write the final ``states`` below unit ``u`` (state 0 first in reading order, each high
    unit first); returns the chunk stream's first unit."""
    for lane in range(STATES - 1, -1, -1):
        x = states[lane]
        units[u - uint64(1)] = x & uint64(UNIT_MASK)
        units[u - uint64(2)] = x >> uint64(UNIT_BITS)
        u -= uint64(2)
    return int64(u)


@njit(cache=True, nogil=True)
def _encode_token_chunk(symbols, start, stop, records, row_after, states, units):
    """Code the token symbols[start:stop] backwards into ``units`` as kernels/ans.py's
    ``encode_chunk`` codes levels, token i on state (i - start) % STATES (``states``:
    scratch of STATES) with the table of its context (note 5): the row that ``row_after``
    (uint64 per symbol) gives the symbol before it, of the flattened ``records``
    (``put_symbol``); returns the first unit of the chunk's stream."""
    u = uint64(units.shape[0])
    one, mask = uint64(1), uint64(STATES - 1)
    states[:] = STATE_LOW
    first, i = uint64(start), uint64(stop)      # (unsigned: no negative-index wrap)
    if i > first:
        symbol = uint64(symbols[i - one])
        while i > first + one:
            i -= one
            before = uint64(symbols[i - one])
            lane = (i - first) & mask
            states[lane], u = put_symbol(states[lane], symbol + row_after[before], records,
                                         units, u)
            symbol = before
        states[0], u = put_symbol(states[0], symbol, records, units, u)   # context 0
    return close_states(states, units, u)


@njit(cache=True, nogil=True)
def encode_token_chunks(symbols, chunk_runs, entries, after_anchor, out32, chunk_bits):
    """Code every chunk's token ``symbols`` (uint32; chunk c holds tokens chunk_runs[c - 1] ..
    chunk_runs[c] - 1) into ``out32`` (uint32 words, chunks on word bounds) with the tables
    (rows: contexts) of ``encode_tables``'s ``entries``; fills ``chunk_bits`` and returns the
    words written."""
    most = 0
    k = 0
    for c in range(chunk_runs.shape[0]):
        most = max(most, chunk_runs[c] - k)
        k = chunk_runs[c]
    units = np.empty(most + HEADER_UNITS + 1, dtype=np.uint16)
    row_after = after_anchor.astype(np.uint64) * uint64(entries.shape[1])
    records = encode_records(entries)
    states = np.empty(STATES, dtype=np.uint64)
    w = 0
    k = 0
    for c in range(chunk_runs.shape[0]):
        first = _encode_token_chunk(symbols, k, chunk_runs[c], records, row_after, states,
                                    units)
        chunk_bits[c], w = store_units(units, first, out32, w)
        k = chunk_runs[c]
    return w


# A marked token's second column (``token_contexts``): its run << MARKED_RUN_SHIFT | symbol.
# Runs are cut at chunks of at most 2**31 levels (encoders/base.py).
MARKED_RUN_SHIFT = 32
MARKED_SYMBOL_MASK = (1 << MARKED_RUN_SHIFT) - 1
assert MAX_SYMBOLS <= 1 << MARKED_RUN_SHIFT and 2**31 < 1 << (64 - MARKED_RUN_SHIFT)


@njit(cache=True, inline="always")
def marked_run(run, symbol):
    """A marked token's run (at most a chunk's levels) and symbol in one uint64."""
    return (uint64(run) << uint64(MARKED_RUN_SHIFT)) | uint64(symbol)


# extras_dense samples this many tokens for the share with extras; from 1 in
# DENSE_EXTRAS_SHARE on, write_extras sends every token through the branch-free writer.
EXTRAS_SAMPLE = 1024
DENSE_EXTRAS_SHARE = 32


@njit(cache=True, nogil=True)
def extras_dense(symbols, n_tokens, window):
    """Whether a sample of the first ``n_tokens`` token ``symbols`` holds at least 1 in
    DENSE_EXTRAS_SHARE with extras (note 3; a LONG_RUN_SYMBOL placeholder is one)."""
    plain = uint64(PLAIN_BUCKETS) * uint64(window)
    stride = max(1, n_tokens // EXTRAS_SAMPLE)
    with_extras = 0
    for k in range(0, n_tokens, stride):
        with_extras += uint64(symbols[k]) >= plain
    return DENSE_EXTRAS_SHARE * with_extras >= -(-n_tokens // stride)


@njit(cache=True, nogil=True)
def write_extras(levels, ends, symbols, chunk_runs, chunk, window, vbits, out32, extra_bits,
                 marked):
    """Write every token's extras (note 3) into ``out32`` from word 0; fills ``extra_bits``
    (the bits of each chunk's extras) and returns the words written. Only tokens of run
    buckets PLAIN_BUCKETS and up, and escapes, have extras. ``marked``: their rows (index
    and ``marked_run``), in order, where ``token_contexts`` wrote them (it does where they
    are rare), else None.
    Where they are rare (marked, or below 1 in DENSE_EXTRAS_SHARE in ``extras_dense``'s
    sample), they alone are visited (``_marked_extras``; unmarked, found by a pass first);
    otherwise every token is written without a branch, zero bits for most
    (``_dense_extras``)."""
    escape = uint64(RUN_BUCKETS) * uint64(window)
    # Each symbol's extra bits, looked up per token (no division by the window per token);
    # the escape's entry is never read.
    symbol_extra = np.zeros(escape + uint64(1), dtype=np.uint64)
    for b in range(RUN_BUCKETS):
        symbol_extra[b * window:(b + 1) * window] = BUCKET_EXTRA[b]
    if marked is None:                              # (a compile-time choice)
        n_tokens = chunk_runs[-1] if chunk_runs.shape[0] else 0
        if extras_dense(symbols, n_tokens, window):
            return _dense_extras(levels, ends, symbols, chunk_runs, chunk, escape,
                                 symbol_extra, vbits, out32, extra_bits)
        return _marked_extras(levels, ends, chunk_runs, escape, symbol_extra, vbits, out32,
                              extra_bits, _with_extras(ends, symbols, n_tokens, window))
    return _marked_extras(levels, ends, chunk_runs, escape, symbol_extra, vbits, out32,
                          extra_bits, marked)


@njit(cache=True, nogil=True)
def _with_extras(ends, symbols, n_tokens, window):
    """The rows of ``token_contexts``'s ``marked`` for the first ``n_tokens`` tokens: each
    token with extras' index and ``marked_run``, in order."""
    plain = uint64(PLAIN_BUCKETS) * uint64(window)
    found = np.empty((n_tokens, 2), dtype=np.uint64)
    n = 0
    last_end = uint64(0) - uint64(1)                 # (wrapping: the first run starts at 0)
    for k in range(n_tokens):
        end = uint64(ends[k])
        symbol = uint64(symbols[k])
        if symbol >= plain:
            found[n, 0] = k
            found[n, 1] = marked_run(end - last_end, symbol)
            n += 1
        last_end = end
    return found[:n]


@njit(cache=True, nogil=True)
def _marked_extras(levels, ends, chunk_runs, escape, symbol_extra, vbits, out32, extra_bits,
                   marked):
    """``write_extras`` visiting the ``marked`` tokens (every token with extras) alone: their
    rows give their runs and symbols, and only an escape loads its run's end (for its
    level). Bits are appended as ``_dense_extras`` appends them."""
    word_bits = uint64(WORD_BITS)
    acc, at, chunk_at = uint64(0), uint64(0), uint64(0)
    c = 0
    for j in range(marked.shape[0]):
        k = marked[j, 0]
        while k >= uint64(chunk_runs[c]):          # the chunks before k's
            extra_bits[c] = at - chunk_at
            c, chunk_at = c + 1, at
        symbol = marked[j, 1] & uint64(MARKED_SYMBOL_MASK)
        run = marked[j, 1] >> uint64(MARKED_RUN_SHIFT)
        if symbol == escape:
            acc, at = _append_escape(out32, acc, at, levels[ends[k]], vbits, run)
        else:
            acc, at = _append_extra(out32, acc, at, run, symbol_extra[symbol])
    while c < chunk_runs.shape[0]:                  # k's chunk and those after it
        extra_bits[c] = at - chunk_at
        c, chunk_at = c + 1, at
    return flush_bits(out32, acc, int64(at % word_bits), int64(at // word_bits))


@njit(cache=True, nogil=True)
def _dense_extras(levels, ends, symbols, chunk_runs, chunk, escape, symbol_extra, vbits,
                  out32, extra_bits):
    """``write_extras`` without a branch per token (but the escape's, rarely taken): every
    token appends its symbol's extra bits (0..MAX_RUN_EXTRA_BITS, most of them 0) with
    ``_append_extra``; ``flush_bits`` writes the last, partial word."""
    one, word_bits = uint64(1), uint64(WORD_BITS)
    acc, at = uint64(0), uint64(0)
    k = uint64(0)
    for c in range(chunk_runs.shape[0]):
        chunk_at = at
        last_end = uint64(c * chunk) - one                 # (wrapping for the first chunk)
        stop = uint64(chunk_runs[c])
        while k < stop:
            symbol = uint64(symbols[k])
            end = uint64(ends[k])
            run = end - last_end
            last_end = end
            if symbol == escape:
                acc, at = _append_escape(out32, acc, at, levels[end], vbits, run)
            else:
                acc, at = _append_extra(out32, acc, at, run, symbol_extra[symbol])
            k += one
        extra_bits[c] = at - chunk_at
    return flush_bits(out32, acc, int64(at % word_bits), int64(at // word_bits))


@njit(cache=True, inline="always")
def _append_extra(out32, acc, at, run, extra):
    """Append the low ``extra`` (0..MAX_RUN_EXTRA_BITS) bits of ``run`` at bit ``at`` without
    a branch: the 32 bits of ``acc`` that end where word (at + extra) >> 5 begins are stored
    at word at >> 5, the word just completed where the bits crossed its end, else a stale
    value that the bits completing that word overwrite. Returns (acc, at)."""
    word_bits = uint64(WORD_BITS)
    acc = (acc << extra) | (run & ((uint64(1) << extra) - uint64(1)))
    word = at // word_bits
    at += extra
    out32[word] = np.uint32((acc >> (at % word_bits)) & uint64(0xFFFFFFFF))
    return acc, at


@njit(cache=True, inline="always")
def _append_escape(out32, acc, at, level, vbits, run):
    """``_put_escape`` at bit ``at`` of the branch-free writer (``_append_extra``): returns
    (acc, at)."""
    word_bits = uint64(WORD_BITS)
    acc, n_pending, w, _ = _put_escape(out32, acc, int64(at % word_bits),
                                       int64(at // word_bits), level, vbits, int64(run))
    return acc, uint64(w) * word_bits + uint64(n_pending)


@njit(cache=True, inline="always")
def _put_escape(out32, acc, n_pending, w, level, vbits, run):
    """Append an escape's extras: ``level`` as a zigzag field of ``vbits`` bits, then
    ``run`` as an Elias-gamma code; returns (acc, n_pending, w, the bits appended)."""
    acc, n_pending, w = put_bits(out32, acc, n_pending, w, zigzag(level), vbits)
    acc, n_pending, w, g = put_gamma(out32, acc, n_pending, w, run)
    return acc, n_pending, w, vbits + g


@njit(cache=True, inline="always")
def _extra(words, at, n_bits):
    """The ``n_bits`` (0..57) bits at bit ``at`` (two shifts: none is by 64 bits, and 0 bits
    need no branch)."""
    return (peek64(words, at) >> uint64(1)) >> uint64(63 - n_bits)


@njit(cache=True, nogil=True)
def _escaped_token(words, at, extras_end, vbits, lo, hi):
    """(level, run, the next extra bit, status) of an escape's extras at bit ``at`` (note 3):
    its level in [lo, hi] as a zigzag field of ``vbits`` bits, its run a gamma code, both
    before ``extras_end``. A call of its own (escapes are rare): the token loop stays short."""
    if at + vbits > extras_end:
        return int64(0), uint64(0), at, PAYLOAD_OVERRUN
    level = unzigzag(_extra(words, at, vbits))
    if level < lo or level > hi:
        return int64(0), uint64(0), at, VALUE_OVERFLOW
    run, at, status = read_gamma(words, at + vbits, extras_end)
    if status == OK and at > extras_end:
        status = PAYLOAD_OVERRUN
    return level, run, at, status


# The host decoder's table (``decode_table``, uint64), made from the token decode tables (two
# rows; one context: its row twice) so that a token's path takes few loads and operations:
#   entries 0 .. ANS_PROB_SCALE - 1, one per slot: context 0's half in bits 0..31, context 1's
#       in bits 32..63 (``entry >> half``, half 0 or SLOT_HALF, selects the token's context).
#       A half: its symbol's record index | anchor << SLOT_ANCHOR_BIT | (slot - the symbol's
#       first slot) << SLOT_OFFSET_SHIFT;
#   records, two entries from index ANS_PROB_SCALE + 2 * (context * ANS_PROB_SCALE + the
#       symbol's first slot): frequency | RECORD_ESCAPE | extra bits << RECORD_EXTRA_SHIFT |
#       run base << RECORD_RUN_SHIFT, then the level in every level of 8 bytes (``store8``'s
#       word).
TABLE_ENTRIES = 5 * ANS_PROB_SCALE
SLOT_RECORD_MASK = (8 << ANS_PROB_BITS) - 1
SLOT_ANCHOR_BIT = ANS_PROB_BITS + 3
SLOT_OFFSET_SHIFT = SLOT_ANCHOR_BIT + 1
SLOT_HALF = 32
# (half entry >> HALF_FROM_ANCHOR) & SLOT_HALF: the half that the token gives the next one.
HALF_FROM_ANCHOR = SLOT_ANCHOR_BIT - 5
RECORD_ESCAPE = ANS_FREQ_MASK + 1
RECORD_EXTRA_SHIFT = 16
RECORD_EXTRA_MASK = 0x3F
RECORD_SPECIAL = RECORD_ESCAPE | RECORD_EXTRA_MASK << RECORD_EXTRA_SHIFT
RECORD_RUN_SHIFT = 32
assert TABLE_ENTRIES <= SLOT_RECORD_MASK + 1 and 1 << (SLOT_ANCHOR_BIT - HALF_FROM_ANCHOR) == SLOT_HALF
assert SLOT_OFFSET_SHIFT + ANS_PROB_BITS <= SLOT_HALF and RECORD_ESCAPE < 1 << RECORD_EXTRA_SHIFT
assert MAX_RUN_EXTRA_BITS <= RECORD_EXTRA_MASK and RECORD_EXTRA_SHIFT + 6 <= RECORD_RUN_SHIFT
assert int(BUCKET_BASE.max()) < 1 << (64 - RECORD_RUN_SHIFT), "a run base fits its field"


@njit(cache=True, nogil=True)
def decode_table(tables, base, out):
    """The table of the layout above for ``out``'s dtype from the token decode ``tables``
    (rla.token_table: one or two rows) of the window from level ``base``."""
    scale = ANS_PROB_SCALE
    table = np.zeros(TABLE_ENTRIES, dtype=np.uint64)
    for c in range(2):
        row = tables[min(c, tables.shape[0] - 1)]
        for slot in range(scale):
            e = row[slot]
            offset = int64((e >> uint64(ANS_OFFSET_SHIFT)) & uint64(ANS_OFFSET_MASK))
            r = scale + 2 * (c * scale + slot - offset)
            anchor = int64((e & uint64(ANS_TOKEN_ANCHOR)) != uint64(0))
            half = r | anchor << SLOT_ANCHOR_BIT | offset << SLOT_OFFSET_SHIFT
            table[slot] |= uint64(half) << uint64(SLOT_HALF * c)
            if offset == 0:
                record = e & uint64(ANS_FREQ_MASK)
                if e & uint64(ANS_ESCAPE):
                    table[r] = record | uint64(RECORD_ESCAPE)
                else:
                    field = e >> uint64(ANS_LEVEL_SHIFT)
                    b = field >> uint64(ANS_TOKEN_BUCKET_SHIFT)
                    table[r] = record | uint64(BUCKET_EXTRA[b]) << uint64(RECORD_EXTRA_SHIFT) \
                        | uint64(BUCKET_BASE[b]) << uint64(RECORD_RUN_SHIFT)
                    level = base + int64(field & uint64(ANS_TOKEN_INDEX_MASK))
                    table[r + 1] = level_word(uint64(level), out)
    return table


# Levels below which a batch is not worth its call.
MIN_BATCH = 64


@njit(cache=True, inline="always")
def store_room(size, per_word):
    """The first index from which ``store8``'s word of ``per_word`` levels would pass the end
    of an array of ``size`` levels: a store at any index below it stays inside (0 where none
    fits). uint64."""
    return size - per_word + uint64(1) if size >= per_word else uint64(0)


@njit(cache=True, inline="always")
def batch_until(i, stop, room, u, last):
    """The level at which a batch of tokens from level i and unit u (``_tokens`` without its
    tests) stops: ``stop``, ``room`` (``store_room``: a token stores at its first level), or
    i + (last - u). A token takes at least one level and reads at most one unit, the one at
    its u, so the batch's tokens read units below u + (until - i) <= ``last``, the array's last
    unit. uint64; for u < last and i < min(stop, room)."""
    return min(stop, room, i + (last - u))


@njit(cache=True, nogil=True)
def decode_token_chunk(words, units, first_bit, n_bits, table, extras, out, start, stop, lo, hi,
                       vbits):
    """Decode levels out[start:stop] from a chunk's rANS stream (``n_bits`` bits at
    ``first_bit``) and its extras, bits extras[0]..extras[1] - 1 of ``words``, with
    ``decode_table``'s ``table``. ``words``: the payload with bits.bytes_to_words's zero
    words after it; ``units`` their ans.payload_units. Levels of escapes must lie in [lo, hi].
    Returns a status (errors.py).
    A token takes at least one level and reads at most one unit, so the tokens of levels
    [i, i + n) read inside ``units`` if n units are left in it, whatever the units hold:
    they go in batches without the test of each unit read against the chunk's end (a batch
    that read past it fails after it) and, 8 bytes or more before the end of ``out``, without
    ``store8``'s test. A chunk before the payload's last takes one batch; where a batch would
    cover under a quarter of the levels left, they take the tests token by token."""
    if first_bit % UNIT_BITS or n_bits % UNIT_BITS or n_bits < HEADER_UNITS * UNIT_BITS:
        return PAYLOAD_UNDERRUN
    u = uint64(first_bit // UNIT_BITS)
    end = u + uint64(n_bits // UNIT_BITS)
    states = np.empty(STATES, dtype=np.uint64)
    if not open_states(units, u, states):
        return BAD_STATE
    u += uint64(HEADER_UNITS)
    at, extras_end = int64(extras[0]), int64(extras[1])
    per_word, size = uint64(levels_per_word(out)), uint64(out.shape[0])
    i, stop = uint64(start), uint64(stop)
    room = store_room(size, per_word)
    half = uint64(0)                        # the chunk's first token: context 0
    lane = uint64(0)                        # the next token's state
    last = uint64(units.shape[0] - 1)       # (unit_at(units, last) is the array's last unit)
    while u < last and i < min(stop, room):
        until = batch_until(i, stop, room, u, last)
        if until - i < max(uint64(MIN_BATCH), (stop - i) >> uint64(2)):
            break
        status, i, u, at, half, lane = _tokens(words, units, table, out, i, until, stop, u,
                                               end, at, extras_end, half, states, lane, lo, hi,
                                               vbits, False)
        if status != OK:
            return status
        if u > end:
            return PAYLOAD_OVERRUN
    status, i, u, at, half, lane = _tokens(words, units, table, out, i, stop, stop, u, end, at,
                                           extras_end, half, states, lane, lo, hi, vbits, True)
    if status != OK:
        return status
    if i != stop:
        return RUN_OVERFLOW
    if at != extras_end:
        return PAYLOAD_UNDERRUN
    return end_status(states, u, end)


@njit(cache=True, nogil=True)
def _tokens(words, units, table, out, i, until, stop, u, end, at, extras_end, half, states,
            lane, lo, hi, vbits, checked):
    """Decode tokens from level i while i < ``until`` (a run may end past it, not past
    ``stop``) on ``states`` (updated; the next token's on states[lane], the next's on
    states[lane + 1] and so on, around the array),
    ``half`` the slot entries' half that the token before gives (``decode_table``).
    ``checked`` (a literal): test each unit read against ``end`` and each ``store8`` against
    the end of ``out``; False where the caller's batch keeps both inside their arrays.
    Returns (status, i, u, the next extra bit, half, the next token's state)."""
    scale, one = uint64(ANS_PROB_SCALE), uint64(1)
    mask = uint64(STATES - 1)
    per_word, size = uint64(levels_per_word(out)), uint64(out.shape[0])
    status = OK
    while i < until:
        x = states[lane]
        slot = x & (scale - one)
        s = table[slot] >> half
        half = (s >> uint64(HALF_FROM_ANCHOR)) & uint64(SLOT_HALF)
        r = s & uint64(SLOT_RECORD_MASK)
        record, word = table[r], table[r + one]
        x = (record & uint64(ANS_FREQ_MASK)) * (x >> uint64(ANS_PROB_BITS)) + \
            ((s >> uint64(SLOT_OFFSET_SHIFT)) & uint64(ANS_PROB_SCALE - 1))
        # Selects, not branches: renormalizing is random. The unit is loaded whether it is
        # taken or not, so no branch guards the load: checked, u <= end (at end, a unit of
        # the next chunk or of the zero words after the payload: bits.bytes_to_words);
        # in a batch, u stays inside ``units`` and may pass end, which the caller tests.
        unit = unit_at(units, u)
        low = x < uint64(STATE_LOW)
        states[lane] = (x << uint64(UNIT_BITS)) | unit if low else x
        lane = (lane + one) & mask
        u += uint64(low)
        if checked and u > end:
            status = PAYLOAD_OVERRUN
            break
        run = record >> uint64(RECORD_RUN_SHIFT)
        # A test per kind of token with extras (one test with both inside its branch: slower,
        # docs/design.md). An escape is a call of its own, which keeps the loop's registers.
        if record & uint64(RECORD_ESCAPE):
            level, run, at, status = _escaped_token(words, at, extras_end, vbits, lo, hi)
            if status != OK:
                break
            word = level_word(uint64(level), out)
        elif record & uint64(RECORD_SPECIAL):       # runs of 4 or more
            extra = int64((record >> uint64(RECORD_EXTRA_SHIFT)) & uint64(RECORD_EXTRA_MASK))
            if at + extra > extras_end:
                status = PAYLOAD_OVERRUN
                break
            run += _extra(words, at, extra)
            at += extra
        # Most runs are short: 8 bytes of the level whatever the run (the next tokens
        # overwrite the surplus), and a fill only past them; within 8 bytes of the end of
        # ``out``, the run alone.
        if not checked or i + per_word <= size:
            store8(out, i, word)
            if run > per_word:
                if run > stop - i:
                    status = RUN_OVERFLOW
                    break
                out[i + per_word:i + run] = last_level(word, out)
        else:
            if run > stop - i:
                status = RUN_OVERFLOW
                break
            out[i:i + run] = last_level(word, out)
        i += run
    return status, i, u, at, half, lane


@njit(cache=True, nogil=True)
def decode_token_chunks(words, starts, chunk_bits, extra_starts, chunk, tables, base, out, lo, hi,
                        vbits):
    """Decode every chunk into ``out`` with the token decode ``tables`` of the window from
    level ``base`` (``decode_table``): chunk c's extras are bits extra_starts[c] ..
    extra_starts[c + 1] - 1. Returns the first non-OK status, else OK."""
    n = out.shape[0]
    units = payload_units(words)
    table = decode_table(tables, base, out)
    for c in range(starts.shape[0]):
        first = c * chunk
        stop = min(n, first + chunk)
        status = decode_token_chunk(words, units, starts[c], chunk_bits[c], table,
                                    extra_starts[c:c + 2], out, first, stop, lo, hi, vbits)
        if status != OK:
            return status
    return OK
