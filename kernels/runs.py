"""Run-length tokens: the run-length buckets of ``rlh`` and the generic token decoder that
``rlh`` and ``shs`` share.

READ ME FIRST
1. A token is (level, run length). ``rlh`` codes the pair jointly: symbol = run bucket *
   window + level index (bucket-major: the run-1 symbols of every level sit together, so their
   counters and code entries share cache lines), followed by the bucket's extra bits. Runs 1..3
   have a bucket each; from 4 on, every octave splits in two buckets (one mantissa bit), like
   DEFLATE's lengths. The escape is symbol RUN_BUCKETS * window.
4. Encoding first compacts run boundaries without data-dependent branches (``run_ends``), then
   walks tokens: a branch per run length costs a misprediction whenever run lengths vary. The
   histogram pass stores each token's symbol; the writer reads it with the run end.
2. A run never exceeds MAX_RUN (2**32 - 1) elements, so a bucket base always fits 32 bits;
   runs are cut at chunk boundaries (kernels/chunks.py, 2**16 levels), far below that.
3. The decoder reads one uint64 table entry per token, which says everything about it:
   bits 0-3 code length, bit 4 escape, bits 5-10 extra bits, bits 11-42 run base,
   bits 43-63 level index (level = base + index). A second table (``token_multi_table``, in
   the multi-symbol format of kernels/stores.py) yields up to four levels per lookup from
   tokens whose code and extra bits fit in the 12-bit prefix, which shortens the serial lookup
   chain; for 1-byte levels a token whose run passes the four levels ends the entry as a fill
   (FILL_SHIFT: up to FILL_MAX more levels of its level), so runs of 4..260
   decode in the same lookup as short ones. Dense chunks decode four at a time (four
   independent chains), as the Huffman decoder's do.
"""
import numpy as np
from numba import njit, uint64, int64, literally
from numba.extending import overload

from .bits import (settle, window64, WORD_BITS, put_bits, put_bits_long, flush_bits, peek64,
                   top_bits, bit_length, unzigzag)
from .elias import put_gamma, read_gamma
from .errors import OK, PAYLOAD_OVERRUN, INVALID_CODE, RUN_OVERFLOW, VALUE_OVERFLOW, \
    PAYLOAD_UNDERRUN
from .huffman import MAX_CODE_BITS, TABLE_SIZE
from .stores import (load8, store8, sampled_eighths, put_four, MULTI_SYMBOL_MAX, MULTI_SHIFT,
                     MULTI_SYMBOL_BITS, LITTLE_ENDIAN)
from .symbols import put_escape, four_chunk_bounds, BYTES_ONE

# Levels per multi-level entry (the format of kernels/stores.py).
MULTI_SYMBOLS = 4


@njit(cache=True, inline="always")
def with_level(entry, count, s, base, byte_levels):
    """Multi-level ``entry`` with symbol ``s`` (level base + s, s <= MULTI_SYMBOL_MAX) as its
    level number ``count`` (< MULTI_SYMBOLS): byte ``count`` of the 32-bit store for a 1-byte
    level dtype (kernels/stores.py), else the 14-bit symbol field ``count``."""
    if byte_levels:
        byte = count if LITTLE_ENDIAN else MULTI_SYMBOLS - 1 - count
        return entry | (uint64((base + s) & 0xFF) << uint64(MULTI_SHIFT + 8 * byte))
    return entry | (uint64(s) << uint64(MULTI_SHIFT + MULTI_SYMBOL_BITS * count))


MAX_RUN = (1 << 32) - 1
# Buckets 0..2 are runs 1..3; then two per octave for bit lengths 3..32: 3 + 2 * 30 = 63.
RUN_BUCKETS = 63

ENTRY_ESCAPE = 1 << 4
EXTRA_SHIFT = 5
RUN_SHIFT = 11
LEVEL_SHIFT = 43


@njit(cache=True, inline="always")
def run_bucket(run):
    """Bucket of a run length (1..MAX_RUN)."""
    if run < 4:
        return run - 1
    b = bit_length(run) - 1                  # >= 2
    mantissa = (run >> (b - 1)) & 1
    return 3 + (b - 2) * 2 + mantissa


@njit(cache=True, inline="always")
def bucket_and_extra(run, short_likely):
    """(bucket, extra bits) of a run length (uint64, 1..MAX_RUN). With ``short_likely`` (dense
    levels: most runs are 1) runs 1..3 take a branch, cheapest when it predicts well; otherwise
    one branch-free formula: the branch mispredicts whenever short and long runs mix
    (measured: RLH histogram 1.5-2x and writer 1.1-1.4x faster with the formula on QSGD
    s = 2..16 levels, 1.4x slower on s = 127). Callers pass a constant (``literally``), so each
    compiled loop holds one form."""
    one, two, three = uint64(1), uint64(2), uint64(3)
    bits = uint64(bit_length(run))                 # the octave; its next bit is the mantissa
    if short_likely:
        if run <= three:
            return run - one, uint64(0)
        return bits * two - three + ((run >> (bits - two)) & one), bits - two
    # Wrapping arithmetic; the run == 1 term corrects bits = 1.
    is_one = uint64(run == one)
    bucket = bits * two - three + (((run << one) >> (bits - one)) & one) + is_one
    return bucket, bits - two + is_one


@njit(cache=True, inline="always")
def short_runs_likely(n_runs, n):
    """Whether most runs are short (runs >= half the levels): ``bucket_and_extra``'s mode."""
    return 2 * n_runs >= n


def bucket_tables():
    """(run base, extra bits) per bucket, as int64 arrays of RUN_BUCKETS entries."""
    base = np.empty(RUN_BUCKETS, dtype=np.int64)
    extra = np.empty(RUN_BUCKETS, dtype=np.int64)
    for b in range(RUN_BUCKETS):
        if b < 3:
            base[b], extra[b] = b + 1, 0
        else:
            octave = (b - 3) // 2 + 2
            base[b] = (2 | ((b - 3) & 1)) << (octave - 1)
            extra[b] = octave - 1
    return base, extra


BUCKET_BASE, BUCKET_EXTRA = bucket_tables()


# run_ends skips 8-byte blocks without a run end in a chunk where at least 7 of 8 sampled
# blocks have none (measured: TernGrad levels 2-3x faster; where fewer blocks are clean the
# test costs more than it skips).
CLEAN_EIGHTHS = 7


@njit(cache=True)
def run_ends(levels, chunk, ends, chunk_runs):
    """Write the index of the last element of every run into ``ends``, runs cut at chunk
    boundaries (kernels/chunks.py); ``chunk_runs[c]`` = runs in chunks 0..c. Returns the number
    of runs. Branch-free per element: every index is stored, the count advances at run ends
    only (an index is kept once the count moves past it). In sparse chunks (CLEAN_EIGHTHS) a
    block of 8 bytes of levels equal to the 8 bytes one level on holds no run end and is
    skipped whole."""
    n = levels.shape[0]
    one = uint64(1)
    block = uint64(8 // levels.itemsize)         # levels per 8-byte load (kernels/stores.py)
    t = uint64(0)
    for c in range(chunk_runs.shape[0]):
        # Unsigned indices: Numba skips its negative-index wraparound check (3x faster here).
        i = uint64(c * chunk)
        stop = uint64(min(n, (c + 1) * chunk))
        sparse = sampled_eighths(levels, i, stop, uint64(0), True) >= CLEAN_EIGHTHS
        while sparse and i + block < stop:       # elements i..i+block-1 and their successors
            if load8(levels, i) == load8(levels, i + one):
                i += block
                continue
            end = i + block
            while i < end:
                ends[t] = i
                t += uint64(levels[i] != levels[i + one])
                i += one
        while i < stop - one:
            ends[t] = i
            t += uint64(levels[i] != levels[i + one])
            i += one
        ends[t] = stop - one
        t += one
        chunk_runs[c] = t
    return int64(t)


@njit(cache=True)
def rlh_histogram(levels, ends, n_runs, base, window, counts, symbols):
    """Joint (run bucket, level index) token counts; ``counts[RUN_BUCKETS * window]`` = escapes.
    Writes each token's symbol to ``symbols`` (uint32, n_runs) for the writer."""
    if short_runs_likely(n_runs, levels.shape[0]):
        _count_tokens(levels, ends, n_runs, base, window, counts, symbols, True)
    else:
        _count_tokens(levels, ends, n_runs, base, window, counts, symbols, False)


@njit(cache=True)
def _count_tokens(levels, ends, n_runs, base, window, counts, symbols, short):
    """``rlh_histogram``'s loop, compiled once per ``short`` (``bucket_and_extra``'s mode)."""
    literally(short)
    w = uint64(window)
    esc = uint64(RUN_BUCKETS) * w
    one = uint64(1)
    start = uint64(0)                              # first element of the run
    for k in range(uint64(n_runs)):
        end = uint64(ends[k])
        run = end + one - start
        start = end + one
        v = uint64(int64(levels[end]) - base)     # out of the window: v >= w
        bucket, _ = bucket_and_extra(run, short)
        symbol = bucket * w + v if v < w else esc
        symbols[k] = symbol
        counts[symbol] += 1


@njit(cache=True)
def writer_entries(entries, window, bucket_extra):
    """Per token symbol, what the writer's hot loop needs (uint64): code << 16 | extra bits << 8
    | code and extra bits together; 0 for the escape, symbols without a code, and tokens over
    32 bits (written by the chunk writer's slow path)."""
    w = window
    out = np.zeros(entries.shape[0], dtype=np.uint64)
    for s in range(RUN_BUCKETS * w):
        length = int64(entries[s] & 0xF)
        extra = int64(bucket_extra[s // w])
        if length > 0 and length + extra <= WORD_BITS:
            out[s] = (uint64(entries[s] >> 4) << uint64(16)) | uint64(extra << 8) | \
                uint64(length + extra)
    return out


@njit(cache=True, inline="always")
def _written_token(e, end, start):
    """(bits, length) of a token from its writer entry and run [start, end] (uint64)."""
    one = uint64(1)
    extra = (e >> uint64(8)) & uint64(0xFF)
    bits = ((e >> uint64(16)) << extra) | ((end + one - start) & ((one << extra) - one))
    return bits, e & uint64(0xFF)


@njit(cache=True)
def _encode_until_escape(ends, symbols, k, n_runs, start, tokens, out32, acc, n_pending,
                         word_pos):
    """Hot loop of ``encode_rlh``: write tokens from run ``k`` (first element ``start``) on until
    one the writer entries (``tokens``) leave to the slow path; returns (k, start, acc,
    n_pending, word_pos) at that token. Two tokens per flush step while they fit 32 bits
    together (dense levels: mostly short codes without extra bits), else one."""
    k, n_runs, start = uint64(k), uint64(n_runs), uint64(start)
    n_pending, word_pos = uint64(n_pending), uint64(word_pos)
    one, word_bits = uint64(1), uint64(WORD_BITS)
    while True:
        while k + one < n_runs:
            e0, e1 = tokens[symbols[k]], tokens[symbols[k + one]]
            if (e0 & uint64(0xFF)) == 0 or (e1 & uint64(0xFF)) == 0 or \
                    (e0 & uint64(0xFF)) + (e1 & uint64(0xFF)) > word_bits:
                break
            end0, end1 = uint64(ends[k]), uint64(ends[k + one])
            bits0, length0 = _written_token(e0, end0, start)
            bits1, length1 = _written_token(e1, end1, end0 + one)
            acc = (((acc << length0) | bits0) << length1) | bits1
            word, n_pending, full = settle(acc, n_pending + length0 + length1)
            out32[word_pos] = word
            word_pos += full
            start = end1 + one
            k += uint64(2)
        if k >= n_runs:
            break
        e = tokens[symbols[k]]
        if (e & uint64(0xFF)) == 0:
            break
        end = uint64(ends[k])
        bits, length = _written_token(e, end, start)
        acc = (acc << length) | bits
        word, n_pending, full = settle(acc, n_pending + length)
        out32[word_pos] = word
        word_pos += full
        start = end + one
        k += one
    return int64(k), int64(start), acc, int64(n_pending), int64(word_pos)


@njit(cache=True)
def _encode_rlh_chunk(levels, ends, symbols, k, k_end, start, base, window, entries, tokens,
                      value_bits, bucket_extra, out32, word_pos):
    """Write tokens k..k_end-1 (one chunk, first element ``start``) from ``word_pos``; returns
    (words end, bits). The hot loop runs until a token it cannot write from registers; that
    token (an escape, or a code with extra bits over 32 bits) is written here."""
    esc = entries[RUN_BUCKETS * window]
    first_word = word_pos
    acc = uint64(0)
    n_pending = 0
    while True:
        k, start, acc, n_pending, word_pos = _encode_until_escape(
            ends, symbols, k, k_end, start, tokens, out32, acc, n_pending, word_pos)
        if k >= k_end:
            break
        end = int64(ends[k])
        run = end + 1 - start
        level = levels[end]
        v = int64(level) - base
        e = uint64(0)
        b = 0
        if v >= 0 and v < window:
            b = run_bucket(run)
            e = uint64(entries[b * window + v])
        if e & uint64(0xF):                       # a code with long extra bits
            extra = bucket_extra[b]
            acc, n_pending, word_pos = put_bits(out32, acc, n_pending, word_pos, e >> uint64(4),
                                                int64(e & uint64(0xF)))
            acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos,
                                                     run & ((1 << extra) - 1), extra)
        else:                                     # escape: code, raw level, gamma run
            acc, n_pending, word_pos = put_escape(out32, acc, n_pending, word_pos, esc, level,
                                                  value_bits)
            acc, n_pending, word_pos, _ = put_gamma(out32, acc, n_pending, word_pos, run)
        start = end + 1
        k += 1
    n_bits = (word_pos - first_word) * WORD_BITS + n_pending
    return flush_bits(out32, acc, n_pending, word_pos), n_bits


@njit(cache=True)
def encode_rlh(levels, ends, symbols, chunk_runs, chunk, base, window, entries, value_bits,
               bucket_extra, out32, chunk_bits):
    """Write (level, run) tokens chunk by chunk (``symbols`` from ``rlh_histogram``); fills
    ``chunk_bits``, returns the words used."""
    tokens = writer_entries(entries, window, bucket_extra)
    word_pos = 0
    k = 0
    for c in range(chunk_runs.shape[0]):
        word_pos, chunk_bits[c] = _encode_rlh_chunk(
            levels, ends, symbols, k, chunk_runs[c], c * chunk, base, window, entries, tokens,
            value_bits, bucket_extra, out32, word_pos)
        k = chunk_runs[c]
    return word_pos


@njit(cache=True)
def token_table(lengths, codes, sym_level_index, sym_run_base, sym_extra, esc_symbol):
    """Token decode table (see module doc) from per-symbol descriptions."""
    table = np.zeros(TABLE_SIZE, dtype=np.uint64)
    for s in range(lengths.shape[0]):
        length = lengths[s]
        if length == 0:
            continue
        e = uint64(length)
        if s == esc_symbol:
            e |= uint64(ENTRY_ESCAPE)
        else:
            e |= (uint64(sym_extra[s]) << uint64(EXTRA_SHIFT)) \
                | (uint64(sym_run_base[s]) << uint64(RUN_SHIFT)) \
                | (uint64(sym_level_index[s]) << uint64(LEVEL_SHIFT))
        shift = MAX_CODE_BITS - length
        first = int64(codes[s]) << shift
        for k in range(first, first + (1 << shift)):
            table[k] = e
    return table


# Fill entries (1-byte levels): a multi-level entry whose last token's run does not fit in its
# four levels carries the rest as a fill: the count of further levels (<= FILL_MAX) in the top
# 16 bits (FILL_SHIFT), their level in the byte below (FILL_LEVEL_SHIFT). Tokens of runs >= 4
# whose code and extra bits lie in the 12-bit prefix then decode in the same lookup as short
# ones (measured: rlh decode on QSGD s = 8..16 levels, where such runs hold half the levels).
FILL_LEVEL_SHIFT = 40
FILL_SHIFT = 48
FILL_MAX = 256
# Elements a decode loop needs before the chunk's end to apply any multi-level entry.
ENTRY_ROOM = MULTI_SYMBOLS + FILL_MAX + 8


# Fill entries pay where the code gives tokens of runs >= 4 at least this probability (QSGD
# s = 1..16: 0.08-0.47); at s = 127 (0.02) the four-chunk loop without fill code is 1.2-1.3x
# faster, so those streams decode without fills.
FILL_MIN_SHARE = 0.05


@njit(cache=True)
def fills_pay(table, byte_levels):
    """Whether to decode with fill entries: 1-byte levels and a code whose 12-bit prefixes
    start a token of run >= 4 with probability >= FILL_MIN_SHARE (``table``: token_table)."""
    if not byte_levels:
        return False
    long_runs = 0
    for e in table:
        long_runs += ((e >> uint64(RUN_SHIFT)) & uint64(0xFFFFFFFF)) >= uint64(MULTI_SYMBOLS)
    return long_runs >= FILL_MIN_SHARE * TABLE_SIZE


@njit(cache=True)
def rlh_token_table(lengths, codes, window):
    """``token_table`` for rlh's symbols: bucket * window + level index, the escape last."""
    n = lengths.shape[0] - 1
    level_index = np.empty(n, dtype=np.int64)
    run_base = np.empty(n, dtype=np.int64)
    extra = np.empty(n, dtype=np.int64)
    for s in range(n):
        bucket = s // window
        level_index[s] = s - bucket * window
        run_base[s] = BUCKET_BASE[bucket]
        extra[s] = BUCKET_EXTRA[bucket]
    return token_table(lengths, codes, level_index, run_base, extra, n)


@njit(cache=True)
def token_multi_table(table, base, byte_levels, fills):
    """Multi-level entries (the format of kernels/stores.py) for the
    prefixes that start with tokens without escape whose code and extra bits lie wholly in the
    12-bit prefix, up to MULTI_SYMBOLS levels in all; with ``fills`` (1-byte levels only), the
    token that would pass MULTI_SYMBOLS ends the entry as a fill (FILL_SHIFT) of up to FILL_MAX
    further levels. Prefixes starting otherwise get 0."""
    multi = np.zeros(TABLE_SIZE, dtype=np.uint64)
    for prefix in range(TABLE_SIZE):
        used = 0
        count = 0
        entry = uint64(0)
        while True:
            e = table[(prefix << used) & (TABLE_SIZE - 1)]
            length = int64(e & uint64(0xF))
            extra = int64((e >> uint64(EXTRA_SHIFT)) & uint64(0x3F))
            s = int64(e >> uint64(LEVEL_SHIFT))
            if length == 0 or length + extra > MAX_CODE_BITS - used or \
                    (e & uint64(ENTRY_ESCAPE)) or s > MULTI_SYMBOL_MAX:
                break
            run = int64((e >> uint64(RUN_SHIFT)) & uint64(0xFFFFFFFF))
            if extra:
                run += ((prefix << (used + length)) & (TABLE_SIZE - 1)) >> (MAX_CODE_BITS - extra)
            fill = count + run - MULTI_SYMBOLS
            if fill > 0 and not (fills and fill <= FILL_MAX):
                break
            while count < MULTI_SYMBOLS and run > 0:
                entry = with_level(entry, count, s, base, byte_levels)
                count += 1
                run -= 1
            used += length + extra
            if fill > 0:
                entry |= (uint64(fill) << uint64(FILL_SHIFT)) | \
                    (uint64((base + s) & 0xFF) << uint64(FILL_LEVEL_SHIFT))
                break
        if count > 0:
            multi[prefix] = entry | uint64(used) | uint64(count << 4)
    return multi


def store_fill(out, i, entry):
    """Write the fill of a multi-level ``entry`` at out[i:] with one 8-byte store and return
    the index after it: the four-chunk loop's form, for fills of at most 8 levels (the caller
    checks; the longer ones take ``_one_token``); no branch. Compiled only (Numba overload)."""
    raise NotImplementedError("store_fill runs inside Numba-compiled code only")


@overload(store_fill, inline="always")
def _store_fill(out, i, entry):
    if out.dtype.bitwidth != 8:
        def no_fill(out, i, entry):                 # wider dtypes: entries carry no fill
            return i
        return no_fill

    def fill_bytes(out, i, entry):
        level = (entry >> uint64(FILL_LEVEL_SHIFT)) & uint64(0xFF)
        store8(out, i, level * uint64(BYTES_ONE))
        return i + (entry >> uint64(FILL_SHIFT))
    return fill_bytes


# Chunks coded in at least this many bits per level decode four at a time (measured on the
# benchmark's tensors with fill entries: QSGD s = 8..16, 0.96-1.9 bits per level, 2-2.7x faster
# than before fills; at s = 4, 0.6-0.84 bits, where fills of more than 8 levels are common and
# leave the four-chunk loop for ``_one_token``, one chunk at a time is 1.15-1.3x faster).
DENSE_BITS_PER_LEVEL = 0.9


# Status of ``_tokens_until_escape`` when it stops at an escape code (not an error).
_AT_ESCAPE = 1


@njit(cache=True, inline="always")
def _one_token(win, b, table, base, out, i, stop):
    """Decode the token at the top of the 64-bit window ``win`` (read at bit ``b``) into
    out[i:] unless it is an escape, an invalid code or a run past ``stop``; returns (decoded,
    b, i) after it, or unchanged when not decoded. All uint64."""
    e = table[win >> uint64(64 - MAX_CODE_BITS)]
    length = e & uint64(0xF)
    if length == 0 or (e & uint64(ENTRY_ESCAPE)) != 0:
        return False, b, i
    extra = (e >> uint64(EXTRA_SHIFT)) & uint64(0x3F)
    run = (e >> uint64(RUN_SHIFT)) & uint64(0xFFFFFFFF)
    if extra > 0:                        # code + extra <= 12 + 30 bits: inside the window
        run += (win << length) >> (uint64(64) - extra)
    if run > stop - i:
        return False, b, i
    level = base + int64(e >> uint64(LEVEL_SHIFT))
    end = i + run
    while i < end:
        out[i] = level
        i += uint64(1)
    return True, b + length + extra, i


@njit(cache=True)
def _four_token_chunks(words, starts, chunk_bits, c0, chunk, table, multi, base, out, fills):
    """Hot loop of ``decode_tokens``: chunks c0..c0+3 advance together (four independent
    chains), each per iteration by up to two multi-level entries from one 64-bit window (52
    bits left after the first: a whole entry) or else one token (``_one_token``); stops when
    a chunk lacks room for a multi-level entry, has passed its end, or meets a token it cannot
    decode here (escape, invalid code, run overflow); ``fills`` (a constant): entries may carry
    fills (``store_fill``). Returns the four (bit position, element index) pairs where they
    stopped; indices are uint64 (kernels/bits.py, note 5). (All four first lookups come before
    any branch: measured 7x faster than a lookup after each chunk's branch. The second entry
    is written out here: as an inlined helper its stores were lost, a Numba inlining fault with
    ``put_four`` inlined twice.)"""
    literally(fills)
    (b0, b1, b2, b3, e0, e1, e2, e3, i0, i1, i2, i3,
     stop0, stop1, stop2, stop3) = four_chunk_bounds(starts, chunk_bits, c0, chunk, out.shape[0])
    top, room = uint64(64 - MAX_CODE_BITS), uint64(ENTRY_ROOM)
    # Entries below this have no fill or one of <= 8 levels (the fill count is the top bits).
    short_fill = uint64(9) << uint64(FILL_SHIFT)
    count_shift, count_mask, used_mask = uint64(4), uint64(7), uint64(0xF)
    while (i0 + room <= stop0 and i1 + room <= stop1 and i2 + room <= stop2 and
           i3 + room <= stop3 and
           b0 <= e0 and b1 <= e1 and b2 <= e2 and b3 <= e3):
        w0, w1 = peek64(words, b0), peek64(words, b1)
        w2, w3 = peek64(words, b2), peek64(words, b3)
        m0, m1, m2, m3 = multi[w0 >> top], multi[w1 >> top], multi[w2 >> top], multi[w3 >> top]
        if m0 != 0 and (not fills or m0 < short_fill):
            put_four(out, i0, m0, base)
            used = m0 & used_mask
            i0 += (m0 >> count_shift) & count_mask
            if fills:
                i0 = store_fill(out, i0, m0)
            m0 = multi[(w0 << used) >> top]          # a second entry from the window
            if m0 != 0 and (not fills or m0 < short_fill) and i0 + room <= stop0:
                put_four(out, i0, m0, base)
                used += m0 & used_mask
                i0 += (m0 >> count_shift) & count_mask
                if fills:
                    i0 = store_fill(out, i0, m0)
            b0 += used
        else:
            ok, b0, i0 = _one_token(w0, b0, table, base, out, i0, stop0)
            if not ok:
                break
        if m1 != 0 and (not fills or m1 < short_fill):
            put_four(out, i1, m1, base)
            used = m1 & used_mask
            i1 += (m1 >> count_shift) & count_mask
            if fills:
                i1 = store_fill(out, i1, m1)
            m1 = multi[(w1 << used) >> top]          # a second entry from the window
            if m1 != 0 and (not fills or m1 < short_fill) and i1 + room <= stop1:
                put_four(out, i1, m1, base)
                used += m1 & used_mask
                i1 += (m1 >> count_shift) & count_mask
                if fills:
                    i1 = store_fill(out, i1, m1)
            b1 += used
        else:
            ok, b1, i1 = _one_token(w1, b1, table, base, out, i1, stop1)
            if not ok:
                break
        if m2 != 0 and (not fills or m2 < short_fill):
            put_four(out, i2, m2, base)
            used = m2 & used_mask
            i2 += (m2 >> count_shift) & count_mask
            if fills:
                i2 = store_fill(out, i2, m2)
            m2 = multi[(w2 << used) >> top]          # a second entry from the window
            if m2 != 0 and (not fills or m2 < short_fill) and i2 + room <= stop2:
                put_four(out, i2, m2, base)
                used += m2 & used_mask
                i2 += (m2 >> count_shift) & count_mask
                if fills:
                    i2 = store_fill(out, i2, m2)
            b2 += used
        else:
            ok, b2, i2 = _one_token(w2, b2, table, base, out, i2, stop2)
            if not ok:
                break
        if m3 != 0 and (not fills or m3 < short_fill):
            put_four(out, i3, m3, base)
            used = m3 & used_mask
            i3 += (m3 >> count_shift) & count_mask
            if fills:
                i3 = store_fill(out, i3, m3)
            m3 = multi[(w3 << used) >> top]          # a second entry from the window
            if m3 != 0 and (not fills or m3 < short_fill) and i3 + room <= stop3:
                put_four(out, i3, m3, base)
                used += m3 & used_mask
                i3 += (m3 >> count_shift) & count_mask
                if fills:
                    i3 = store_fill(out, i3, m3)
            b3 += used
        else:
            ok, b3, i3 = _one_token(w3, b3, table, base, out, i3, stop3)
            if not ok:
                break
    return (int64(b0), int64(b1), int64(b2), int64(b3),
            int64(i0), int64(i1), int64(i2), int64(i3))


@njit(cache=True)
def _tokens_until_escape(words, bit_pos, total_bits, table, multi, base, out, i, n, fills):
    """Hot loop of ``_decode_token_range``: decode tokens into elements [i, n) from ``bit_pos``
    until ``n`` or an escape code; returns (status, i, bit_pos), bit_pos past the escape code
    when the status is _AT_ESCAPE. Tokens come from one 64-bit window while code and extra bits
    fit in it; indices are uint64 (kernels/bits.py, note 5). ``fills``: ``multi`` has fill
    entries."""
    bit_pos, total_bits, i, n = uint64(bit_pos), uint64(total_bits), uint64(i), uint64(n)
    one, top, length_mask = uint64(1), uint64(64 - MAX_CODE_BITS), uint64(0xF)
    room = uint64(ENTRY_ROOM)
    while i < n:
        if bit_pos > total_bits:
            return PAYLOAD_OVERRUN, int64(i), int64(bit_pos)
        j = bit_pos >> uint64(6)
        win = window64(words[j], words[j + one], bit_pos & uint64(63))
        used = uint64(0)
        while i < n:
            prefix = (win << used) >> top
            m = multi[prefix]
            if m != 0 and i + room <= n:            # up to four levels (and a fill) at once
                put_four(out, i, m, base)
                i += (m >> uint64(4)) & uint64(7)
                if fills:                          # a loop: fills here are long (sparse levels)
                    fill_level = (m >> uint64(FILL_LEVEL_SHIFT)) & uint64(0xFF)
                    stop = i + (m >> uint64(FILL_SHIFT))
                    while i < stop:
                        out[i] = fill_level
                        i += one
                used += m & length_mask
                if used > top:
                    break
                continue
            e = table[prefix]
            length = e & length_mask
            if length == 0:
                return INVALID_CODE, int64(i), int64(bit_pos)
            if e & uint64(ENTRY_ESCAPE):
                return _AT_ESCAPE, int64(i), int64(bit_pos + used + length)
            extra = (e >> uint64(EXTRA_SHIFT)) & uint64(0x3F)
            if used + length + extra > uint64(64):
                break                              # refill the window first
            run = (e >> uint64(RUN_SHIFT)) & uint64(0xFFFFFFFF)
            if extra > 0:
                run += (win << (used + length)) >> (uint64(64) - extra)
            used += length + extra
            if run > n - i:
                return RUN_OVERFLOW, int64(i), int64(bit_pos)
            level = base + int64(e >> uint64(LEVEL_SHIFT))
            stop = i + run
            while i < stop:
                out[i] = level
                i += one
            if used > top:
                break
        bit_pos += used
    return OK, int64(i), int64(bit_pos)


@njit(cache=True)
def _decode_token_range(words, bit_pos, total_bits, table, multi, base, value_bits, esc_has_run,
                        lo, hi, out, i, n, fills):
    """Decode elements [i, n) of one chunk from ``bit_pos``; the chunk must end exactly at
    ``total_bits``. Returns a status code (errors.py).

    An escape carries a zigzag level in ``value_bits`` bits, then, when ``esc_has_run``, an
    Elias-gamma run length (otherwise the run is 1).
    """
    while True:
        status, i, bit_pos = _tokens_until_escape(words, bit_pos, total_bits, table, multi,
                                                  base, out, i, n, fills)
        if status != _AT_ESCAPE:
            break
        status, i, bit_pos = _escaped_token(words, total_bits, bit_pos, value_bits, esc_has_run,
                                            lo, hi, out, i, n)
        if status != OK:
            return status
    if status != OK:
        return status
    if bit_pos > total_bits:
        return PAYLOAD_OVERRUN
    if bit_pos < total_bits:
        return PAYLOAD_UNDERRUN
    return OK


@njit(cache=True)
def decode_tokens(words, starts, chunk_bits, chunk, table, multi, base, value_bits, esc_has_run,
                  lo, hi, out, fills):
    """Fill ``out`` from a chunked token payload; returns a status code (errors.py).

    Dense chunks (>= DENSE_BITS_PER_LEVEL) go four at a time through ``_four_token_chunks``
    while it can; then each chunk finishes on the single-chunk path, which handles escapes and
    errors and checks that the chunk ends exactly at its declared bit length. ``fills``: whether
    ``multi`` has fill entries (``fills_pay``); the four-chunk loop is compiled with or without
    their code.
    """
    n = out.shape[0]
    n_chunks = starts.shape[0]
    for c0 in range(0, n_chunks, 4):
        group = min(4, n_chunks - c0)
        bit_pos = starts[c0:c0 + group].copy()             # where each chunk resumes
        index = np.arange(c0, c0 + group) * chunk
        if group == 4 and chunk_bits[c0:c0 + 4].sum() >= 4 * chunk * DENSE_BITS_PER_LEVEL:
            if fills:
                stopped = _four_token_chunks(words, starts, chunk_bits, c0, chunk, table, multi,
                                             base, out, True)
            else:
                stopped = _four_token_chunks(words, starts, chunk_bits, c0, chunk, table, multi,
                                             base, out, False)
            for k in range(4):
                bit_pos[k], index[k] = stopped[k], stopped[4 + k]
        for k in range(group):
            c = c0 + k
            status = _decode_token_range(words, bit_pos[k], starts[c] + chunk_bits[c], table,
                                         multi, base, value_bits, esc_has_run, lo, hi, out,
                                         index[k], min(n, (c + 1) * chunk), fills)
            if status != OK:
                return status
    return OK


@njit(cache=True)
def _escaped_token(words, total_bits, bit_pos, value_bits, esc_has_run, lo, hi, out, i, n):
    """Rare path: raw level (and gamma run) after an escape code; returns (status, i, bit_pos)."""
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


@njit(cache=True)
def encode_shs(levels, base, window, run_limit, entries, value_bits, chunk, out32, chunk_bits):
    """Write ``shs`` tokens chunk by chunk (zero runs cut at chunk boundaries, kernels/chunks.py):
    non-zero levels one by one, zero runs as run symbols. Symbol ``window + r - 1`` is a run of
    r zeros (1 <= r <= run_limit = k); a longer run is split into runs of k and one remainder;
    symbol ``window + k`` is the escape. Fills ``chunk_bits``, returns the words used."""
    n = levels.shape[0]
    word_pos = 0
    for c in range(chunk_bits.shape[0]):
        word_pos, chunk_bits[c] = _encode_shs_chunk(levels, c * chunk, min(n, (c + 1) * chunk),
                                                    base, window, run_limit, entries, value_bits,
                                                    out32, word_pos)
    return word_pos


@njit(cache=True)
def _shs_until_escape(levels, i, stop, base, window, run_limit, entries, out32, acc, n_pending,
                      word_pos):
    """Hot loop of ``_encode_shs_chunk``: write elements i.. until one needs the escape (or
    ``stop``); returns (i, acc, n_pending, word_pos)."""
    i, stop, w, k = uint64(i), uint64(stop), uint64(window), uint64(run_limit)
    n_pending, word_pos = uint64(n_pending), uint64(word_pos)
    one, code_shift, length_mask = uint64(1), uint64(4), uint64(0xF)
    full_run = uint64(entries[w + k - one])
    while i < stop:
        level = int64(levels[i])
        if level == 0:
            j = i + one
            while j < stop and levels[j] == 0:
                j += one
            run = j - i
            rem = run % k
            n_tokens = run // k + (one if rem > 0 else uint64(0))
            for t in range(n_tokens):
                e = full_run if t < run // k else uint64(entries[w + rem - one])
                acc = (acc << (e & length_mask)) | (e >> code_shift)
                word, n_pending, full = settle(acc, n_pending + (e & length_mask))
                out32[word_pos] = word
                word_pos += full
            i = j
            continue
        v = uint64(level - base)                  # out of the window: v >= w
        if v >= w:
            break
        e = uint64(entries[v])
        if e & length_mask == 0:
            break
        acc = (acc << (e & length_mask)) | (e >> code_shift)
        word, n_pending, full = settle(acc, n_pending + (e & length_mask))
        out32[word_pos] = word
        word_pos += full
        i += one
    return int64(i), acc, int64(n_pending), int64(word_pos)


@njit(cache=True)
def _encode_shs_chunk(levels, start, stop, base, window, run_limit, entries, value_bits, out32,
                      word_pos):
    """Write one chunk's ``shs`` tokens (elements [start, stop)) from ``word_pos``; returns
    (words end, bits)."""
    esc = entries[window + run_limit]
    first_word = word_pos
    acc = uint64(0)
    n_pending = 0
    i = start
    while True:
        i, acc, n_pending, word_pos = _shs_until_escape(levels, i, stop, base, window, run_limit,
                                                        entries, out32, acc, n_pending, word_pos)
        if i >= stop:
            break
        acc, n_pending, word_pos = put_escape(out32, acc, n_pending, word_pos, esc, levels[i],
                                              value_bits)
        i += 1
    n_bits = (word_pos - first_word) * WORD_BITS + n_pending
    return flush_bits(out32, acc, n_pending, word_pos), n_bits
