"""Run-length tokens: encoding ``rlh``'s (level, run length) tokens and ``shs``'s zero runs.

READ ME FIRST
1. A token is (level, run length). ``rlh`` codes the pair jointly: symbol = run bucket *
   window + level index (bucket-major: the run-1 symbols of every level sit together, so their
   counters and code entries share cache lines), followed by the bucket's extra bits. Runs 1..3
   have a bucket each; from 4 on, every octave splits in two buckets (one mantissa bit), like
   DEFLATE's lengths. The escape is symbol RUN_BUCKETS * window.
2. A run never exceeds MAX_RUN (2**32 - 1) elements, so a bucket base always fits 32 bits;
   runs are cut at chunk boundaries (kernels/chunks.py, 2**16 levels), far below that.
3. Encoding first compacts run boundaries without data-dependent branches (``run_ends``), then
   walks tokens: a branch per run length costs a misprediction whenever run lengths vary. The
   histogram pass stores each token's symbol; the writer reads it with the run end. On CPUs
   with AVX-512, int8 levels take kernels/vector_runs.py instead of ``run_ends`` and most of
   the histogram's work (``count_symbols``).
4. Decoding: kernels/tokens.py (the tables, the one-chunk path) and kernels/lanes.py.
"""
import numpy as np
from numba import njit, uint64, int64

from .bits import (settle, WORD_BITS, put_bits, put_bits_long, flush_bits, bit_length)
from .elias import put_gamma
from .stores import load8, sampled_eighths, LITTLE_ENDIAN
from .maxima import (LENGTH_BITS, LENGTH_MASK, MAX_RUN, PLAIN_CODE_SHIFT,  # noqa: F401
                     PLAIN_LENGTH_MASK, PLAIN_NONE, RUN_BUCKETS, WRITER_CODE_SHIFT,
                     WRITER_EXTRA_SHIFT, WRITER_FIELD_MASK, WRITER_MAX_BITS, MAX_SYMBOLS)
from .symbols import put_escape

# Placeholder symbol of a run of 4 or more levels (kernels/vector_runs.py), above any alphabet.
LONG_RUN_SYMBOL = 1 << 31
assert LONG_RUN_SYMBOL > MAX_SYMBOLS, "the placeholder must be no symbol of any alphabet"


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
    one branch-free formula: the branch mispredicts whenever short and long runs mix.
    Callers pass a constant (inlined), so each compiled loop holds one form."""
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
RUN_FREE_EIGHTHS = 7


@njit(cache=True, inline="always")
def _eight_run_ends(levels, i, ends, t):
    """``run_ends``'s step over 1-byte levels i..i+7 (and level i + 8): one XOR of two 8-byte
    loads marks the run ends, then a store and a count step per level. Returns the new count;
    uint64."""
    low7 = uint64(0x7F7F7F7F7F7F7F7F)
    d = load8(levels, i) ^ load8(levels, i + uint64(1))
    ended = ((((d & low7) + low7) | d) >> uint64(7))   # byte j: 1 where level i + j ends a run
    for j in range(8):
        ends[t] = i + uint64(j)
        t += (ended >> uint64(8 * j if LITTLE_ENDIAN else 56 - 8 * j)) & uint64(1)
    return t


@njit(cache=True, nogil=True)
def run_ends(levels, chunk, ends, chunk_runs):
    """Write the index of the last element of every run into ``ends``, runs cut at chunk
    boundaries (kernels/chunks.py); ``chunk_runs[c]`` = runs in chunks 0..c. Returns the number
    of runs. Branch-free per element: every index is stored, the count advances at run ends
    only (an index is kept once the count moves past it). In sparse chunks (RUN_FREE_EIGHTHS) a
    block of 8 bytes of levels equal to the 8 bytes one level on holds no run end and is
    skipped whole; 1-byte levels elsewhere go eight at a time (``_eight_run_ends``)."""
    n = levels.shape[0]
    one = uint64(1)
    block = uint64(8 // levels.itemsize)         # levels per 8-byte load (kernels/stores.py)
    t = uint64(0)
    for c in range(chunk_runs.shape[0]):
        # Unsigned indices: Numba skips its negative-index wraparound check (3x faster here).
        i = uint64(c * chunk)
        stop = uint64(min(n, (c + 1) * chunk))
        sparse = sampled_eighths(levels, i, stop, uint64(0), True) >= RUN_FREE_EIGHTHS
        while sparse and i + block < stop:       # elements i..i+block-1 and their successors
            if load8(levels, i) == load8(levels, i + one):
                i += block
                continue
            end = i + block
            while i < end:
                ends[t] = i
                t += uint64(levels[i] != levels[i + one])
                i += one
        while levels.itemsize == 1 and i + uint64(8) < stop:
            t = _eight_run_ends(levels, i, ends, t)
            i += uint64(8)
        while i < stop - one:
            ends[t] = i
            t += uint64(levels[i] != levels[i + one])
            i += one
        ends[t] = stop - one
        t += one
        chunk_runs[c] = t
    return int64(t)


@njit(cache=True, nogil=True)
def rlh_histogram(levels, ends, n_runs, base, window, counts, symbols, covered):
    """Joint (run bucket, level index) token counts; ``counts[RUN_BUCKETS * window]`` = escapes.
    Writes each token's symbol to ``symbols`` (uint32, n_runs) for the writer. ``covered``:
    the window holds every level (no escapes to test for)."""
    if short_runs_likely(n_runs, levels.shape[0]):
        if covered:
            _count_tokens(levels, ends, n_runs, base, window, counts, symbols, True, True)
        else:
            _count_tokens(levels, ends, n_runs, base, window, counts, symbols, True, False)
    elif covered:
        _count_tokens(levels, ends, n_runs, base, window, counts, symbols, False, True)
    else:
        _count_tokens(levels, ends, n_runs, base, window, counts, symbols, False, False)


@njit(cache=True, inline="always")
def _count_tokens(levels, ends, n_runs, base, window, counts, symbols, short, covered):
    """``rlh_histogram``'s loop, inlined once per constant ``short`` (``bucket_and_extra``'s
    mode) and ``covered`` (levels all inside the window: no window test). (Inlined constants
    rather than ``literally``, which types a function twice.)"""
    w = uint64(window)
    esc = uint64(RUN_BUCKETS) * w
    one, three = uint64(1), uint64(3)
    # symbol of a covered level of run r <= 3: (r - 1) * window - base + level
    first = np.empty(4, dtype=np.uint64)
    for r in range(1, 4):
        first[r] = uint64((r - 1) * window - base)
    start = uint64(0)                              # first element of the run
    for k in range(uint64(n_runs)):
        end = uint64(ends[k])
        run = end + one - start
        start = end + one
        if short and covered and run <= three:    # one load and an add for most tokens
            symbol = first[run] + uint64(int64(levels[end]))
        else:
            v = uint64(int64(levels[end]) - base)     # out of the window: v >= w
            bucket, _ = bucket_and_extra(run, short)
            symbol = bucket * w + v if covered or v < w else esc
        symbols[k] = symbol
        counts[symbol] += 1


# count_symbols samples this many tokens for the share of LONG_RUN_SYMBOL placeholders.
LONG_SAMPLE = 1024


@njit(cache=True, nogil=True)
def long_runs_dense(symbols, n_runs):
    """Whether a sample of the first ``n_runs`` token ``symbols`` holds at least 1 in 8
    LONG_RUN_SYMBOL placeholders (runs of 4 or more): then rewriting every symbol from the run
    ends (``rlh_histogram``) beats a mispredicted branch per placeholder."""
    stride = max(1, n_runs // LONG_SAMPLE)
    placeholders = 0
    for k in range(0, n_runs, stride):
        placeholders += symbols[k] == LONG_RUN_SYMBOL
    return 8 * placeholders >= -(-n_runs // stride)


@njit(cache=True, inline="always")
def run_symbol(start, end, level, base, window):
    """The symbol of a run of ``level`` over levels start..end (uint64, both included)."""
    bucket, _ = bucket_and_extra(end + uint64(1) - start, True)
    return bucket * uint64(window) + uint64(int64(level) - base)


@njit(cache=True, nogil=True)
def count_symbols(levels, ends, symbols, n_runs, base, window, counts):
    """``rlh_histogram`` for symbols already written (kernels/vector_runs.py), levels covered
    by the window. Where placeholders are sparse (``long_runs_dense``), count the symbols and
    give each placeholder its symbol from its run's length (a branch, mispredicted where
    placeholders come irregularly); otherwise ``rlh_histogram`` rewrites every symbol from the
    run ends."""
    if long_runs_dense(symbols, n_runs):
        rlh_histogram(levels, ends, n_runs, base, window, counts, symbols, True)
        return
    long_run = uint64(LONG_RUN_SYMBOL)
    one = uint64(1)
    for k in range(uint64(n_runs)):
        symbol = uint64(symbols[k])
        if symbol == long_run:                     # rare in dense levels
            end = uint64(ends[k])
            start = uint64(ends[k - one]) + one if k > uint64(0) else uint64(0)
            symbol = run_symbol(start, end, levels[end], base, window)
            symbols[k] = symbol
        counts[symbol] += 1


@njit(cache=True, nogil=True)
def token_payload_bits(counts, coded, lengths, window, bucket_extra):
    """Payload bits of the non-escaped rlh tokens: codes plus bucket extra bits, over the
    ``coded`` symbols (ids) with their code ``lengths``."""
    total = 0
    for i in range(coded.shape[0]):
        b = coded[i] // window
        if b < RUN_BUCKETS:
            total += counts[coded[i]] * (lengths[i] + bucket_extra[b])
    return total


@njit(cache=True, nogil=True)
def writer_entries(coded, entries, window, bucket_extra):
    """Per token symbol, what the writer's hot loop needs: its writer entry (maxima.py); 0 for
    the escape, symbols without a code, and tokens over
    32 bits (written by the chunk writer's slow path). Filled from the ``coded`` symbols only
    (a few hundred of rlh's ~12K ids)."""
    out = np.zeros(entries.shape[0], dtype=np.uint64)
    for i in range(coded.shape[0]):
        s = coded[i]
        b = s // window
        if b < RUN_BUCKETS:
            extra = int64(bucket_extra[b])
            length = int64(entries[s] & LENGTH_MASK)
            if length + extra <= WRITER_MAX_BITS:
                out[s] = (uint64(entries[s] >> LENGTH_BITS) << uint64(WRITER_CODE_SHIFT)) | \
                    uint64(extra << WRITER_EXTRA_SHIFT) | uint64(length + extra)
    return out


@njit(cache=True, inline="always")
def _written_token(e, end, start):
    """(bits, length) of a token from its writer entry and run [start, end] (uint64)."""
    one = uint64(1)
    extra = (e >> uint64(WRITER_EXTRA_SHIFT)) & uint64(WRITER_FIELD_MASK)
    bits = ((e >> uint64(WRITER_CODE_SHIFT)) << extra) | ((end + one - start) &
                                                          ((one << extra) - one))
    return bits, e & uint64(WRITER_FIELD_MASK)


@njit(cache=True, nogil=True)
def plain_entries(coded, tokens):
    """Plain entries (maxima.py) from the writer entries ``tokens``: tokens without extra bits
    (runs 1..3) keep their code and length, every other symbol gets PLAIN_NONE. Filled from
    the ``coded`` symbols only."""
    out = np.full(tokens.shape[0], PLAIN_NONE, dtype=np.uint64)
    extra_field = uint64(WRITER_FIELD_MASK << WRITER_EXTRA_SHIFT)
    for i in range(coded.shape[0]):
        s = coded[i]
        e = tokens[s]
        if e != uint64(0) and (e & extra_field) == uint64(0):
            out[s] = ((e >> uint64(WRITER_CODE_SHIFT)) << uint64(PLAIN_CODE_SHIFT)) | \
                (e & uint64(WRITER_FIELD_MASK))
    return out


@njit(cache=True, inline="always")
def _write_token(ends, symbols, k, start, tokens, out32, acc, n_pending, word_pos):
    """Write token k (run from ``start``) alone; returns (written, acc, n_pending, word_pos);
    not written when its writer entry leaves it to the slow path. All uint64."""
    e = tokens[symbols[k]]
    if (e & uint64(WRITER_FIELD_MASK)) == 0:
        return False, acc, n_pending, word_pos
    bits, length = _written_token(e, uint64(ends[k]), start)
    acc = (acc << length) | bits
    word, n_pending, full = settle(acc, n_pending + length)
    out32[word_pos] = word
    return True, acc, n_pending, word_pos + full


@njit(cache=True, nogil=True)
def _dense_until_escape(ends, symbols, k, n_runs, start, tokens, plain, out32, acc, n_pending,
                        word_pos):
    """Hot loop of ``encode_rlh`` for dense levels (``short_runs_likely``: most runs 1): write
    tokens from run ``k`` (first element ``start``) on until one the writer entries
    (``tokens``) leave to the slow path; returns (k, start, acc, n_pending, word_pos) at that
    token. Four tokens per flush step from ``plain`` (``plain_entries``: one test per step, no
    run lengths) while they fit the 64-bit accumulator with the pending bits (< 64 together: a
    step completes at most one word), then two, else one written from its writer entry (its
    start read back from the run ends)."""
    k, n_runs, start = uint64(k), uint64(n_runs), uint64(start)
    n_pending, word_pos = uint64(n_pending), uint64(word_pos)
    one, three = uint64(1), uint64(3)
    first, first_start = k, start
    while True:
        written = True
        while written and k + three < n_runs:
            written, acc, n_pending, word_pos = _four_plain(symbols, k, plain, out32, acc,
                                                            n_pending, word_pos)
            k += uint64(4) if written else uint64(0)
        if k + one < n_runs:
            written, acc, n_pending, word_pos = _two_plain(symbols, k, plain, out32, acc,
                                                           n_pending, word_pos)
            if written:
                k += uint64(2)
                continue
        start = first_start if k == first else uint64(ends[k - one]) + one
        if k >= n_runs:
            break
        written, acc, n_pending, word_pos = _write_token(ends, symbols, k, start, tokens,
                                                       out32, acc, n_pending, word_pos)
        if not written:
            break
        k += one
    return int64(k), int64(start), acc, int64(n_pending), int64(word_pos)


@njit(cache=True, inline="always")
def _four_plain(symbols, k, plain, out32, acc, n_pending, word_pos):
    """Tokens k..k+3 in one flush step from their plain entries, if they fit the accumulator
    with the pending bits (< 64 together); returns (written, acc, n_pending, word_pos). All
    uint64. The four codes join first: acc waits on one shift and one or per step."""
    plain_length, code_shift = uint64(PLAIN_LENGTH_MASK), uint64(PLAIN_CODE_SHIFT)
    p0, p1 = plain[symbols[k]], plain[symbols[k + uint64(1)]]
    p2, p3 = plain[symbols[k + uint64(2)]], plain[symbols[k + uint64(3)]]
    length0, length1 = p0 & plain_length, p1 & plain_length
    length2, length3 = p2 & plain_length, p3 & plain_length
    pair0, pair1 = length0 + length1, length2 + length3
    if n_pending + pair0 + pair1 > uint64(63):
        return False, acc, n_pending, word_pos
    low = (((p2 >> code_shift) << length3) | (p3 >> code_shift))
    high = (((p0 >> code_shift) << length1) | (p1 >> code_shift)) << pair1
    acc = (acc << (pair0 + pair1)) | high | low
    word, n_pending, full = settle(acc, n_pending + pair0 + pair1)
    out32[word_pos] = word
    return True, acc, n_pending, word_pos + full


@njit(cache=True, inline="always")
def _two_plain(symbols, k, plain, out32, acc, n_pending, word_pos):
    """Tokens k and k+1 in one flush step from their plain entries, if they fit; returns
    (written, acc, n_pending, word_pos). All uint64."""
    plain_length, code_shift = uint64(PLAIN_LENGTH_MASK), uint64(PLAIN_CODE_SHIFT)
    p0, p1 = plain[symbols[k]], plain[symbols[k + uint64(1)]]
    length0, length1 = p0 & plain_length, p1 & plain_length
    if n_pending + length0 + length1 > uint64(63):
        return False, acc, n_pending, word_pos
    acc = (((acc << length0) | (p0 >> code_shift)) << length1) | (p1 >> code_shift)
    word, n_pending, full = settle(acc, n_pending + length0 + length1)
    out32[word_pos] = word
    return True, acc, n_pending, word_pos + full


@njit(cache=True, nogil=True)
def _sparse_until_escape(ends, symbols, k, n_runs, start, tokens, plain, out32, acc, n_pending,
                         word_pos):
    """Hot loop of ``encode_rlh`` where runs vary: as ``_dense_until_escape``, two tokens per
    flush step from their writer entries and run lengths, else one. ``plain`` is unused (the
    same arguments as the dense loop)."""
    k, n_runs, start = uint64(k), uint64(n_runs), uint64(start)
    n_pending, word_pos = uint64(n_pending), uint64(word_pos)
    one, last_bit = uint64(1), uint64(63)
    total_bits = uint64(WRITER_FIELD_MASK)
    while True:
        while k + one < n_runs:
            e0, e1 = tokens[symbols[k]], tokens[symbols[k + one]]
            length0, length1 = e0 & total_bits, e1 & total_bits
            if length0 == 0 or length1 == 0 or n_pending + length0 + length1 > last_bit:
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
        written, acc, n_pending, word_pos = _write_token(ends, symbols, k, start, tokens, out32,
                                                       acc, n_pending, word_pos)
        if not written:
            break
        start = uint64(ends[k]) + one
        k += one
    return int64(k), int64(start), acc, int64(n_pending), int64(word_pos)



@njit(cache=True, nogil=True)
def _encode_rlh_chunk(levels, ends, symbols, k, k_end, start, base, window, entries, tokens,
                      plain, value_bits, bucket_extra, out32, word_pos, short):
    """Write tokens k..k_end-1 (one chunk, first element ``start``) from ``word_pos``; returns
    (words end, bits). The hot loop runs until a token it cannot write from registers; that
    token (an escape, or a code with extra bits over 32 bits) is written here."""
    esc = entries[RUN_BUCKETS * window]
    first_word = word_pos
    acc = uint64(0)
    n_pending = int64(0)        # typed: a literal 0 compiles every callee a second time
    while True:
        if short:
            k, start, acc, n_pending, word_pos = _dense_until_escape(
                ends, symbols, k, k_end, start, tokens, plain, out32, acc, n_pending, word_pos)
        else:
            k, start, acc, n_pending, word_pos = _sparse_until_escape(
                ends, symbols, k, k_end, start, tokens, plain, out32, acc, n_pending, word_pos)
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
        if e & uint64(LENGTH_MASK):               # a code with long extra bits
            extra = bucket_extra[b]
            acc, n_pending, word_pos = put_bits(out32, acc, n_pending, word_pos,
                                                e >> uint64(LENGTH_BITS),
                                                int64(e & uint64(LENGTH_MASK)))
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


@njit(cache=True, nogil=True)
def encode_rlh(levels, ends, symbols, chunk_runs, chunk, base, window, coded, entries,
               value_bits, bucket_extra, out32, chunk_bits):
    """Write (level, run) tokens chunk by chunk (``symbols`` from ``rlh_histogram``) with the
    code's ``entries`` (``coded``: its coded symbol ids); fills ``chunk_bits``, returns the words
    used."""
    tokens = writer_entries(coded, entries, window, bucket_extra)
    short = short_runs_likely(chunk_runs[-1], levels.shape[0])
    plain = plain_entries(coded, tokens) if short else tokens
    word_pos = int64(0)         # typed: a literal 0 compiles every callee a second time
    k = int64(0)
    for c in range(chunk_runs.shape[0]):
        word_pos, chunk_bits[c] = _encode_rlh_chunk(
            levels, ends, symbols, k, chunk_runs[c], c * chunk, base, window, entries, tokens,
            plain, value_bits, bucket_extra, out32, word_pos, short)
        k = chunk_runs[c]
    return word_pos


@njit(cache=True, nogil=True)
def encode_shs(levels, base, window, run_limit, entries, value_bits, chunk, out32, chunk_bits):
    """Write ``shs`` tokens chunk by chunk (zero runs cut at chunk boundaries, kernels/chunks.py):
    non-zero levels one by one, zero runs as run symbols. Symbol ``window + r - 1`` is a run of
    r zeros (1 <= r <= run_limit = k); a longer run is split into runs of k and one remainder;
    symbol ``window + k`` is the escape. Fills ``chunk_bits``, returns the words used."""
    n = levels.shape[0]
    word_pos = int64(0)         # typed: a literal 0 compiles every callee a second time
    for c in range(chunk_bits.shape[0]):
        word_pos, chunk_bits[c] = _encode_shs_chunk(levels, c * chunk, min(n, (c + 1) * chunk),
                                                    base, window, run_limit, entries, value_bits,
                                                    out32, word_pos)
    return word_pos


@njit(cache=True, nogil=True)
def _shs_until_escape(levels, i, stop, base, window, run_limit, entries, out32, acc, n_pending,
                      word_pos):
    """Hot loop of ``_encode_shs_chunk``: write elements i.. until one needs the escape (or
    ``stop``); returns (i, acc, n_pending, word_pos)."""
    i, stop, w, k = uint64(i), uint64(stop), uint64(window), uint64(run_limit)
    n_pending, word_pos = uint64(n_pending), uint64(word_pos)
    one, code_shift, length_mask = uint64(1), uint64(LENGTH_BITS), uint64(LENGTH_MASK)
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


@njit(cache=True, nogil=True)
def _encode_shs_chunk(levels, start, stop, base, window, run_limit, entries, value_bits, out32,
                      word_pos):
    """Write one chunk's ``shs`` tokens (elements [start, stop)) from ``word_pos``; returns
    (words end, bits)."""
    esc = entries[window + run_limit]
    first_word = word_pos
    acc = uint64(0)
    n_pending = int64(0)
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
