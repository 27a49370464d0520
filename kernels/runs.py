"""Run-length tokens: the run-length buckets of ``rlh`` and the generic token decoder that
``rlh`` and ``shs`` share.

READ ME FIRST
1. A token is (level, run length). ``rlh`` codes the pair jointly: symbol = run bucket *
   window + level index (bucket-major: the run-1 symbols of every level sit together, so their
   counters and code entries share cache lines), followed by the bucket's extra bits. Runs 1..3
   have a bucket each; from 4 on, every octave splits in two buckets (one mantissa bit), like
   DEFLATE's lengths. The escape is symbol RUN_BUCKETS * window.
4. Encoding first compacts run boundaries without data-dependent branches (``run_ends``), then
   walks tokens: a branch per run length costs a misprediction whenever run lengths vary.
2. A run never exceeds MAX_RUN (2**32 - 1) elements, so a bucket base always fits 32 bits;
   runs are cut at chunk boundaries (kernels/chunks.py, 2**16 levels), far below that.
3. The decoder reads one uint64 table entry per token, which says everything about it:
   bits 0-3 code length, bit 4 escape, bits 5-10 extra bits, bits 11-42 run base,
   bits 43-63 level index (level = base + index). A second table (``pair_table``) decodes two
   run-1 tokens per lookup when both codes fit in the 12-bit prefix, which halves the serial
   lookup chain on dense levels, where most runs have length 1.
"""
import numpy as np
from numba import njit, uint64, int64

from .bits import (push_bits, word_below, window64, WORD_BITS, put_bits, put_bits_long,
                   flush_bits, peek64, top_bits, bit_length, zigzag, unzigzag)
from .elias import put_gamma, read_gamma
from .errors import OK, PAYLOAD_OVERRUN, INVALID_CODE, RUN_OVERFLOW, VALUE_OVERFLOW, \
    PAYLOAD_UNDERRUN
from .huffman import MAX_CODE_BITS, TABLE_SIZE

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


@njit(cache=True)
def run_ends(levels, chunk, ends, chunk_runs):
    """Write the index of the last element of every run into ``ends``, runs cut at chunk
    boundaries (kernels/chunks.py); ``chunk_runs[c]`` = runs in chunks 0..c. Returns the number
    of runs. Branch-free: every index is stored, the count advances at run ends only."""
    n = levels.shape[0]
    one = uint64(1)
    t = uint64(0)
    for c in range(chunk_runs.shape[0]):
        # Unsigned indices: Numba skips its negative-index wraparound check (3x faster here).
        i = uint64(c * chunk)
        stop = uint64(min(n, (c + 1) * chunk))
        while i < stop - one:
            ends[t] = i
            t += uint64(levels[i] != levels[i + one])
            i += one
        ends[t] = stop - one
        t += one
        chunk_runs[c] = t
    return int64(t)


@njit(cache=True)
def rlh_histogram(levels, ends, n_runs, base, window, counts):
    """Joint (run bucket, level index) token counts; ``counts[RUN_BUCKETS * window]`` = escapes."""
    esc = RUN_BUCKETS * window
    prev = -1
    for k in range(n_runs):
        end = int64(ends[k])
        run = end - prev
        prev = end
        v = int64(levels[end]) - base
        if v >= 0 and v < window:
            counts[run_bucket(run) * window + v] += 1
        else:
            counts[esc] += 1


@njit(cache=True)
def _encode_until_escape(levels, ends, k, n_runs, prev, base, window, entries, bucket_extra,
                         out32, acc, n_pending, word_pos, n_bits):
    """Hot loop of ``encode_rlh``: write tokens from run ``k`` on until one needs the escape
    (or a code with extra bits over 32); returns the state and the index of that token."""
    while k < n_runs:
        end = int64(ends[k])
        run = end - prev
        v = int64(levels[end]) - base
        if v < 0 or v >= window:
            break
        if run < 4:                               # buckets 0..2: no extra bits
            e = uint64(entries[(run - 1) * window + v])
            length = int64(e & uint64(0xF))
            if length == 0:
                break
            acc, n_pending = push_bits(acc, n_pending, e >> uint64(4), length)
        else:
            b = run_bucket(run)
            e = uint64(entries[b * window + v])
            extra = bucket_extra[b]
            length = int64(e & uint64(0xF)) + extra
            if length == extra or length > WORD_BITS:
                break
            code = ((e >> uint64(4)) << uint64(extra)) | uint64(run & ((1 << extra) - 1))
            acc, n_pending = push_bits(acc, n_pending, code, length)
        n_bits += length
        if n_pending >= WORD_BITS:
            n_pending -= WORD_BITS
            out32[word_pos] = word_below(acc, n_pending)
            word_pos += 1
        prev = end
        k += 1
    return k, prev, acc, n_pending, word_pos, n_bits


@njit(cache=True)
def _encode_rlh_chunk(levels, ends, k, k_end, prev, base, window, entries, value_bits,
                      bucket_extra, out32, word_pos):
    """Write tokens k..k_end-1 (one chunk, first element prev + 1) from ``word_pos``; returns
    (words end, bits). The hot loop runs until a token it cannot write from registers; that
    token (an escape, or a code with more than 32 extra bits) is written here."""
    esc = entries[RUN_BUCKETS * window]
    acc = uint64(0)
    n_pending = 0
    n_bits = 0
    while True:
        k, prev, acc, n_pending, word_pos, n_bits = _encode_until_escape(
            levels, ends, k, k_end, prev, base, window, entries, bucket_extra, out32, acc,
            n_pending, word_pos, n_bits)
        if k >= k_end:
            break
        end = int64(ends[k])
        run = end - prev
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
            n_bits += int64(e & uint64(0xF)) + extra
        else:                                     # escape: code, raw level, gamma run
            acc, n_pending, word_pos = put_bits(out32, acc, n_pending, word_pos, esc >> 4,
                                                esc & 0xF)
            acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos,
                                                     zigzag(level), value_bits)
            acc, n_pending, word_pos, g_bits = put_gamma(out32, acc, n_pending, word_pos, run)
            n_bits += (esc & 0xF) + value_bits + g_bits
        prev = end
        k += 1
    return flush_bits(out32, acc, n_pending, word_pos), n_bits


@njit(cache=True)
def encode_rlh(levels, ends, chunk_runs, chunk, base, window, entries, value_bits, bucket_extra,
               out32, chunk_bits):
    """Write (level, run) tokens chunk by chunk; fills ``chunk_bits``, returns the words used."""
    word_pos = 0
    k = 0
    for c in range(chunk_runs.shape[0]):
        word_pos, chunk_bits[c] = _encode_rlh_chunk(
            levels, ends, k, chunk_runs[c], c * chunk - 1, base, window, entries, value_bits,
            bucket_extra, out32, word_pos)
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


PAIR_FLAG = 1 << 4
PAIR_SHIFT = 8          # pair entry: length | flag | first index << 8 | second index << 32
PAIR_INDEX_MASK = (1 << 24) - 1


@njit(cache=True, inline="always")
def _plain_single(e):
    """A table entry for a run-1 token without extra bits or escape."""
    return (e & uint64(0xF)) != 0 and (e & uint64(ENTRY_ESCAPE)) == 0 and \
        ((e >> uint64(EXTRA_SHIFT)) & uint64(0x3F)) == 0 and \
        ((e >> uint64(RUN_SHIFT)) & uint64(0xFFFFFFFF)) == 1


@njit(cache=True)
def pair_table(table):
    """Entries decoding two run-1 tokens whose codes both lie in the 12-bit prefix; else 0."""
    pairs = np.zeros(TABLE_SIZE, dtype=np.uint64)
    for prefix in range(TABLE_SIZE):
        first = table[prefix]
        if not _plain_single(first):
            continue
        used = int64(first & uint64(0xF))
        second = table[(prefix << used) & (TABLE_SIZE - 1)]
        if not _plain_single(second) or int64(second & uint64(0xF)) > MAX_CODE_BITS - used:
            continue
        pairs[prefix] = uint64(used + int64(second & uint64(0xF))) | uint64(PAIR_FLAG) \
            | ((first >> uint64(LEVEL_SHIFT)) << uint64(PAIR_SHIFT)) \
            | ((second >> uint64(LEVEL_SHIFT)) << uint64(32))
    return pairs


@njit(cache=True)
def _decode_token_range(words, bit_pos, total_bits, table, pairs, base, value_bits, esc_has_run,
                        lo, hi, out, i, n):
    """Decode elements [i, n) of one chunk from ``bit_pos``; the chunk must end exactly at
    ``total_bits``. Returns a status code (errors.py).

    Tokens are decoded from one 64-bit window while code and extra bits fit in it. An escape
    carries a zigzag level in ``value_bits`` bits, then, when ``esc_has_run``, an Elias-gamma
    run length (otherwise the run is 1).
    """
    while i < n:
        if bit_pos > total_bits:
            return PAYLOAD_OVERRUN
        j = bit_pos >> 6
        win = window64(words[j], words[j + 1], bit_pos & 63)
        used = 0
        while i < n:
            prefix = (win << uint64(used)) >> uint64(64 - MAX_CODE_BITS)
            pe = pairs[prefix]
            if pe != 0 and i + 1 < n:             # two run-1 tokens in one lookup
                out[i] = base + int64((pe >> uint64(PAIR_SHIFT)) & uint64(PAIR_INDEX_MASK))
                out[i + 1] = base + int64(pe >> uint64(32))
                i += 2
                used += int64(pe & uint64(0xF))
                if used > 64 - MAX_CODE_BITS:
                    break
                continue
            e = table[prefix]
            length = int64(e & uint64(0xF))
            if length == 0:
                return INVALID_CODE
            if e & uint64(ENTRY_ESCAPE):
                status, i, bit_pos = _escaped_token(words, total_bits, bit_pos + used + length,
                                                    value_bits, esc_has_run, lo, hi, out, i, n)
                if status != OK:
                    return status
                used = 0
                break
            extra = int64((e >> uint64(EXTRA_SHIFT)) & uint64(0x3F))
            if used + length + extra > 64:
                break                              # refill the window first
            run = int64((e >> uint64(RUN_SHIFT)) & uint64(0xFFFFFFFF))
            if extra > 0:
                run += int64((win << uint64(used + length)) >> uint64(64 - extra))
            used += length + extra
            if run > n - i:
                return RUN_OVERFLOW
            level = base + int64(e >> uint64(LEVEL_SHIFT))
            if run == 1:
                out[i] = level
            else:
                out[i:i + run] = level
            i += run
            if used > 64 - MAX_CODE_BITS:
                break
        bit_pos += used
    if bit_pos > total_bits:
        return PAYLOAD_OVERRUN
    if bit_pos < total_bits:
        return PAYLOAD_UNDERRUN
    return OK


@njit(cache=True)
def decode_tokens(words, starts, chunk_bits, chunk, table, pairs, base, value_bits, esc_has_run,
                  lo, hi, out):
    """Fill ``out`` from a chunked token payload, chunk after chunk; returns a status code.

    (Interleaving chunks as ``symbols.decode_levels`` does was measured slower here: a token's
    run fill makes the chunks advance unevenly, and per-chunk state in arrays costs more than
    the overlap gains.)
    """
    n = out.shape[0]
    for c in range(starts.shape[0]):
        status = _decode_token_range(words, starts[c], starts[c] + chunk_bits[c], table, pairs,
                                     base, value_bits, esc_has_run, lo, hi, out, c * chunk,
                                     min(n, (c + 1) * chunk))
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
        word_pos, chunk_bits[c] = _encode_shs_chunk(levels[c * chunk:min(n, (c + 1) * chunk)],
                                                    base, window, run_limit, entries, value_bits,
                                                    out32, word_pos)
    return word_pos


@njit(cache=True)
def _encode_shs_chunk(levels, base, window, run_limit, entries, value_bits, out32, word_pos):
    """Write one chunk's ``shs`` tokens (``levels`` is the chunk's view) from ``word_pos``;
    returns (words end, bits)."""
    n = levels.shape[0]
    esc = entries[window + run_limit]
    full_run = entries[window + run_limit - 1]
    acc = uint64(0)
    n_pending = 0
    n_bits = 0
    i = 0
    while i < n:
        level = int64(levels[i])
        if level == 0:
            j = i + 1
            while j < n and levels[j] == 0:
                j += 1
            run = j - i
            rem = run % run_limit
            for c in range(run // run_limit + (1 if rem > 0 else 0)):
                e = full_run if c < run // run_limit else entries[window + rem - 1]
                acc, n_pending = push_bits(acc, n_pending, e >> 4, e & 0xF)
                if n_pending >= WORD_BITS:
                    n_pending -= WORD_BITS
                    out32[word_pos] = word_below(acc, n_pending)
                    word_pos += 1
                n_bits += e & 0xF
            i = j
            continue
        v = level - base
        e = entries[v] if v >= 0 and v < window else np.uint32(0)
        if e & 0xF:
            acc, n_pending = push_bits(acc, n_pending, e >> 4, e & 0xF)
            if n_pending >= WORD_BITS:
                n_pending -= WORD_BITS
                out32[word_pos] = word_below(acc, n_pending)
                word_pos += 1
            n_bits += e & 0xF
        else:
            acc, n_pending, word_pos = put_bits(out32, acc, n_pending, word_pos, esc >> 4, esc & 0xF)
            acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos,
                                                     zigzag(level), value_bits)
            n_bits += (esc & 0xF) + value_bits
        i += 1
    return flush_bits(out32, acc, n_pending, word_pos), n_bits
