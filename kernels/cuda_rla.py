"""CUDA kernels of encoder ``rla``: kernels/ans_tokens.py's coder on the device, a warp per
chunk, writing and reading the very same bytes.

READ ME FIRST
1. Encoding codes a batch of parts (tensors laid end to end, note 6) in three kernels and
   two trips to the host, each kernel a block of LANES threads per chunk.
   ``token_statistics`` finds a chunk's tokens, thread l the runs that end in the l-th slice
   of its levels: it stores every token's last level (less the chunk's first, lo) at
   ends[lo + k] (a chunk's tokens are at most its levels, so every chunk's slot is its own
   levels' place), then counts every token's symbol under its context (ans_tokens.py note 5:
   whether the token before it has level 0; in shared memory where both rows fit
   SHARED_BINS), every chunk's tokens and extra bits, and its first and last tokens
   (FOUND_*). Token k's run is ends[lo + k] - ends[lo + k - 1], so every kernel after it
   finds any token, and the token before it, in two or three loads. The host plans every
   part's tables from the counts as it plans them for host levels. A part whose chunks grow
   takes its counts from those of its chunks as they were (gpu.rla_grown: a run that crosses
   a vanished chunk end becomes one token, and the token after the end takes its context
   from the token before it); its ends are found again at the new size, in place, with
   nothing copied back. ``encode_chunks`` codes the chunk's tokens backwards into its scratch
   slot as cuda_ans.encode_chunks codes levels, token k on lane k % 32 (cuda_ans.unit_layout
   and pack_chunks then lay the slots out, and give every part's extras their first bit).
   ``write_extras`` writes the extras 32 tokens at a time, each token's bits placed by a
   prefix sum of the widths before it and ORed atomically into a zeroed buffer.
2. The device codes only tensors without escapes: every level in the window and at most
   ANS_MAX_TOKENS token symbols; the encoder checks, and codes a host copy otherwise. Token
   symbols are those of kernels/runs.py (run bucket * window + level - base).
   ``token_statistics`` counts a level outside its window in the escape's bin: a part counted
   in a window guessed before its range was known (gpu.rla_range_statistics) whose levels
   pass it is counted again in its own.
3. The decoder runs a block of LANES threads per chunk, thread l holding state l
   (ans_tokens.py note 2), a step of 32 tokens at a time. A token's table depends on the
   token before it (whether its level is the anchor), its extras' position on every extra
   before it and its first level on every run before it: each lane decodes its slot under
   both contexts (no state changes yet), then one thread walks the step's 32 candidates in
   order (``_walk``: a shared-memory read, a table's context bit and at most one extras
   read per token) and places every token, and then every lane takes its state, its unit
   (the units of a step lie in lane order) and writes its run. It checks what
   ans_tokens.decode_token_chunk checks, escapes included (a host-written stream may hold
   them); the block writes its chunk's status.
5. Decoding runs in groups, as ``ans``'s does (cuda_ans.py note 8, nested chunk sizes
   included): one launch decodes every stream a gpu.StreamGroup holds. The stream table has
   cuda_decode's common columns, then STREAM_TABLES .. STREAM_CHUNK; the streams' tables are
   rows of one array, and ``extra_bounds`` gives every chunk of every stream its extras.
6. The encoder's tables: a chunk table with a row per chunk of every part (RLA_LO ..
   RLA_BITS), each part cut into chunks of its own plan's size from its first level, and a
   parts table (RLA_BASE .. RLA_CONTEXTS). ``token_statistics`` reads a row's first three
   columns and its part's first three.
7. These warp kernels call, of other modules' device functions, only those that never name
   ``cuda`` (cuda_ans.py note 5), but for ``read_gamma``, which only the walking thread calls.
Units: rANS positions are 16-bit units, extras positions bits, chunk sizes levels.
"""
from numba import cuda, int32, int64, uint32, uint64

from .ans import HEADER_UNITS, LANES, STATE_LOW, UNIT_BITS
from .cuda_ans import (chunks_within, close_lane, coded_state, emit_unit, get_symbol,
                       opening_state, set_of, unit_at)
from .bits import WORD_MASK, WORD_SHIFT
from .cuda_bits import peek64, unzigzag
from .cuda_decode import (STREAM_CHUNKS, STREAM_COMMON, STREAM_LEVELS, STREAM_MODE, STREAM_OUT,
                          STREAM_SCALES, STREAM_WORDS, read_gamma)
from .cuda_quantize import PUT_ADD, put_level
from .cuda_tokens import SHARED_BINS
from .errors import (OK, BAD_STATE, PAYLOAD_OVERRUN, PAYLOAD_UNDERRUN, RUN_OVERFLOW,
                     VALUE_OVERFLOW)
from .maxima import (ANS_BOUND_MASK, ANS_ESCAPE, ANS_LEVEL_SHIFT, ANS_TOKEN_ANCHOR,
                     ANS_TOKEN_BUCKET_SHIFT, ANS_TOKEN_INDEX_MASK, RUN_BUCKETS)

# The decoder's shared scalars of a step (note 3): status, the next extra bit, the next token's
# context, the units the step reads, the level after its last token.
STEP_STATUS, STEP_AT, STEP_CONTEXT, STEP_UNITS, STEP_NEXT, STEP_FIELDS = range(6)
# The columns of a group's stream table (cuda_decode.py STREAM_*, note 5) that are ``rla``'s:
# the first row of its tables and their count (its contexts), its base, the bounds of its
# escaped levels, their value bits, its chunk size.
(STREAM_TABLES, STREAM_CONTEXTS, STREAM_BASE, STREAM_LO, STREAM_HI, STREAM_VBITS, STREAM_CHUNK,
 STREAM_FIELDS) = range(STREAM_COMMON, STREAM_COMMON + 8)
# Levels of a run that run buckets 0..2 hold one each (runs.BUCKET_BASE): runs of 1..3.
PLAIN_RUNS = 3
# The encoder's chunk table (note 6): a chunk's first level and end in the flat levels array,
# its part, its tokens (``token_statistics``'s count), where its scratch slot ends and the
# bit its extras start at; and its parts table: a part's base, window, where its counts
# start, the first row of its tables and their count (contexts: 1 or 2).
RLA_LO, RLA_HI, RLA_PART, RLA_TOKENS, RLA_SLOT_END, RLA_BITS, RLA_CHUNK_FIELDS = range(7)
RLA_BASE, RLA_WINDOW, RLA_COUNTS, RLA_TABLE, RLA_CONTEXTS, RLA_PART_FIELDS = range(6)
# What ``token_statistics`` finds of a chunk (a row of ``found``): its tokens and extra bits;
# its first token's run and level; its last token's run, level and context. The host grows
# chunks from these without counting again (note 1).
(FOUND_TOKENS, FOUND_BITS, FOUND_FIRST_RUN, FOUND_FIRST_LEVEL, FOUND_LAST_RUN,
 FOUND_LAST_LEVEL, FOUND_LAST_CONTEXT, FOUND_FIELDS) = range(8)


@cuda.jit(device=True, inline=True)
def _lane_sums(value, lane, votes):
    """(the sum of ``value`` over the lanes below ``lane``, over every lane) of the block's
    LANES threads (``votes``: a shared int64 array of LANES). Every thread of the block must
    call it at the same point."""
    votes[lane] = value
    cuda.syncthreads()
    below = int64(0)
    total = int64(0)
    for j in range(LANES):
        v = votes[j]
        total += v
        if j < lane:
            below += v
    cuda.syncthreads()
    return below, total


@cuda.jit(device=True, inline=True)
def _run_bucket(run):
    """runs.run_bucket of a run below 2**32 (cuda_tokens.run_bucket's, kept in this module:
    note 7)."""
    if run <= PLAIN_RUNS:
        return run - 1
    b = 31 - int64(cuda.clz(uint32(run)))      # the bit length of run, less one
    return 3 + (b - 2) * 2 + ((run >> (b - 1)) & 1)


@cuda.jit(device=True, inline=True)
def _token(levels, ends, lo, k, base, window):
    """The symbol of token k of the chunk from level ``lo``, whose run ends are ends[lo:]
    (note 1)."""
    end = int64(ends[lo + k])
    previous = int64(ends[lo + k - 1]) if k > 0 else int64(-1)
    return _run_bucket(end - previous) * window + int64(levels[lo + end]) - base


@cuda.jit(device=True, inline=True)
def _context(levels, ends, lo, k):
    """Token k's context (ans_tokens.py note 5): 1 where the token before it in its chunk
    has level 0, else 0."""
    return int64(k > 0 and levels[lo + int64(ends[lo + k - 1])] == 0)


@cuda.jit(device=True, inline=True)
def _is_run_end(levels, p, stop):
    """Whether level p is the last of its run, runs cut at ``stop``."""
    return p + 1 == stop or levels[p] != levels[p + 1]


@cuda.jit(cache=True)
def token_statistics(levels, chunks, parts, bucket_extra, ends, counts, found):
    """Block c (LANES threads) finds the tokens of row c of the chunk table ``chunks`` (note
    6): stores token k's last level, less the chunk's first level lo, in ends[lo + k], adds
    every token to its part's counts (int64, zeroed; two rows of RUN_BUCKETS * window + 1
    from its PART_COUNTS: context 0, then 1) and fills row c of ``found`` (FOUND_FIELDS
    columns: the chunk's tokens, their extra bits, and its first and last tokens). Thread l
    takes the l-th slice of the chunk's levels and the tokens that end there."""
    votes = cuda.shared.array(LANES, int64)
    bins = cuda.shared.array(SHARED_BINS, int32)
    c = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    start, stop, part = chunks[c, RLA_LO], chunks[c, RLA_HI], chunks[c, RLA_PART]
    base, window = parts[part, RLA_BASE], parts[part, RLA_WINDOW]
    at = parts[part, RLA_COUNTS]
    n_bins = 2 * (RUN_BUCKETS * window + 1)
    in_shared = n_bins <= SHARED_BINS
    if in_shared:
        for b in range(lane, n_bins, LANES):
            bins[b] = 0
    seg = (stop - start + LANES - 1) // LANES
    lo = min(stop, start + lane * seg)
    hi = min(stop, lo + seg)
    n_found = int64(0)
    for p in range(lo, hi):
        n_found += _is_run_end(levels, p, stop)
    k, total = _lane_sums(n_found, lane, votes)
    first = k
    for p in range(lo, hi):
        if _is_run_end(levels, p, stop):
            ends[start + k] = p - start
            k += 1
    cuda.syncthreads()                  # every run end stored
    bits = int64(0)
    half = n_bins // 2
    for k in range(first, first + n_found):
        previous = int64(ends[start + k - 1]) if k > 0 else int64(-1)
        bucket = _run_bucket(int64(ends[start + k]) - previous)
        v = int64(levels[start + int64(ends[start + k])]) - base
        # (a level outside the window: the escape's bin; note 2)
        s = bucket * window + v if 0 <= v < window else RUN_BUCKETS * window
        where = _context(levels, ends, start, k) * half + s
        if in_shared:
            cuda.atomic.add(bins, where, int32(1))
        else:
            cuda.atomic.add(counts, at + where, int64(1))
        bits += bucket_extra[bucket]
    _, bits = _lane_sums(bits, lane, votes)         # (its barriers end the counting)
    if in_shared:
        for b in range(lane, n_bins, LANES):
            if bins[b] != 0:
                cuda.atomic.add(counts, at + b, int64(bins[b]))
    if lane == 0 and total > 0:                 # (a chunk has a level, so a token)
        last = int64(ends[start + total - 1])
        found[c, FOUND_TOKENS] = total
        found[c, FOUND_BITS] = bits
        found[c, FOUND_FIRST_RUN] = int64(ends[start]) + 1
        found[c, FOUND_FIRST_LEVEL] = levels[start]
        found[c, FOUND_LAST_RUN] = last - (int64(ends[start + total - 2]) if total > 1
                                           else int64(-1))
        found[c, FOUND_LAST_LEVEL] = levels[start + last]
        found[c, FOUND_LAST_CONTEXT] = _context(levels, ends, start, total - 1)


@cuda.jit(cache=True)
def encode_chunks(levels, chunks, parts, entries, rcps, ends, scratch, counts):
    """Block c (LANES threads) codes the tokens of row c of the chunk table (note 6; run
    ends from ``token_statistics``) backwards into its slot of scratch, which ends at its
    RLA_SLOT_END, as cuda_ans.encode_chunks codes levels, thread l the tokens of lane l, each
    with its part's table of its context (rows from its part's RLA_TABLE: one, or
    RLA_CONTEXTS = 2, the second for tokens after one of level 0); counts[c] gets its unit
    count."""
    votes = cuda.shared.array(LANES, int64)
    c = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    start, part = chunks[c, RLA_LO], chunks[c, RLA_PART]
    n = chunks[c, RLA_TOKENS]
    base, window = parts[part, RLA_BASE], parts[part, RLA_WINDOW]
    table = parts[part, RLA_TABLE]
    two = parts[part, RLA_CONTEXTS] == 2
    slot_end = chunks[c, RLA_SLOT_END]
    u = slot_end
    x = uint64(STATE_LOW)
    t = (n + LANES - 1) // LANES
    while t > 0:
        t -= 1
        k = t * LANES + lane
        renorm = False
        e = uint64(0)
        r = uint64(0)
        if k < n:
            s = _token(levels, ends, start, k, base, window)
            row = table + (_context(levels, ends, start, k) if two else 0)
            e = entries[row, s]
            r = rcps[row, s]
            renorm = x >= e & uint64(ANS_BOUND_MASK)
        below, total = _lane_sums(int64(renorm), lane, votes)
        x = emit_unit(x, renorm, scratch, u - total + below)
        if k < n:
            x = coded_state(x, e, r)
        u -= total
    first = close_lane(x, lane, scratch, u)
    if lane == 0:
        counts[c] = slot_end - first


@cuda.jit(cache=True)
def write_extras(chunks, bucket_extra, ends, extra_starts, out):
    """Block c (LANES threads) writes the extras of row c of the chunk table (note 6: every
    run's low bucket_extra[its bucket] bits, run ends from ``token_statistics``) into ``out``
    (uint32, zeroed) from bit RLA_BITS (bits after its part's first extra) + extra_starts[c]
    (its part's first extra bit; -1: the chunk is not written), 32 tokens at a time, each
    token's bits ORed in atomically."""
    votes = cuda.shared.array(LANES, int64)
    c = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    start = chunks[c, RLA_LO]
    at = chunks[c, RLA_BITS] + extra_starts[c]
    if extra_starts[c] < 0:
        return
    n = chunks[c, RLA_TOKENS]
    for first in range(0, n, LANES):
        k = first + lane
        width = int64(0)
        run = int64(0)
        if k < n:
            run = int64(ends[start + k]) - (int64(ends[start + k - 1]) if k > 0 else int64(-1))
            width = bucket_extra[_run_bucket(run)]
        below, total = _lane_sums(width, lane, votes)
        if width > 0:
            _or_bits(out, at + below, uint64(run) & ((uint64(1) << uint64(width)) - uint64(1)),
                     width)
        at += total


@cuda.jit(device=True, inline=True)
def _or_bits(out, at, value, width):
    """OR the ``width`` (1..32) bits of ``value`` into ``out`` (uint32 words, bits MSB-first)
    from bit ``at``, atomically: other threads write the same words."""
    word = at >> WORD_SHIFT
    spill = (at & WORD_MASK) + width - 32           # bits past the word's end
    if spill <= 0:
        cuda.atomic.or_(out, word, uint32(value << uint64(-spill)))
    else:
        cuda.atomic.or_(out, word, uint32(value >> uint64(spill)))
        cuda.atomic.or_(out, word + 1, uint32((value << uint64(32 - spill)) &
                                              uint64(0xFFFFFFFF)))


@cuda.jit(cache=True)
def decode_streams(words, streams, blocks, starts, chunk_bits, extra_bounds, tables,
                   bucket_base, bucket_extra, out, total, scales, bucket, status):
    """A group of ``rla`` payloads (note 5), as cuda_ans.decode_streams decodes ``ans``'s:
    block b takes the levels [c * G, (c + 1) * G) of its set, c = blocks[b, BLOCK_CHUNK] and
    G the set's largest chunk size, and decodes the chunks there of every stream of the set
    in order, thread l the tokens of lane l (note 3). Stream s decodes with the
    streams[s, STREAM_CONTEXTS] rows of ``tables`` from row streams[s, STREAM_TABLES]
    (rla.token_table: a row per context, the anchor's tokens flagged); chunk k of the group
    (streams[s, STREAM_CHUNKS] + its index) reads its extras from bit extra_bounds[k, 0] to
    extra_bounds[k, 1] of its stream's words. Escaped levels must lie in [STREAM_LO,
    STREAM_HI]. Levels are put by put_level(out[its first element:], total[its first
    element:], scales[its first scale:], bucket, its mode, i, level): a stream that assigns
    (its mode without PUT_ADD) has its chunk's elements put as level 0 by the whole block
    first, and then, as a stream that adds, only its runs of other levels (adding 0 changes
    nothing). status[k] gets the chunk's status. Grid: a block of LANES threads per row of
    ``blocks``."""
    votes = cuda.shared.array(LANES, int64)
    entries = cuda.shared.array((2, LANES), uint64)
    lows = cuda.shared.array(LANES, int32)
    firsts = cuda.shared.array(LANES, int64)
    runs = cuda.shared.array(LANES, int64)
    levels = cuda.shared.array(LANES, int64)
    picks = cuda.shared.array(LANES, int32)
    step = cuda.shared.array(STEP_FIELDS, int64)
    b = cuda.blockIdx.x
    lane = int64(cuda.threadIdx.x)
    first, end, lo, largest = set_of(blocks, b, streams, STREAM_CHUNK)
    for s in range(first, end):
        n = streams[s, STREAM_LEVELS]
        chunk = streams[s, STREAM_CHUNK]
        to = streams[s, STREAM_OUT]
        table = streams[s, STREAM_TABLES]
        mode = streams[s, STREAM_MODE]
        c_first, c_end = chunks_within(lo, largest, n, chunk)
        for c in range(c_first, c_end):
            cuda.syncthreads()              # the chunk before is written
            if not mode & PUT_ADD:          # runs of level 0 are not written: zero them
                for j in range(c * chunk + lane, min(n, c * chunk + chunk), LANES):
                    put_level(out[to:], total[to:], scales[streams[s, STREAM_SCALES]:], bucket,
                              mode, j, 0)
                cuda.syncthreads()
            k = streams[s, STREAM_CHUNKS] + c
            st = _decode_chunk(words[streams[s, STREAM_WORDS]:], starts[k], chunk_bits[k],
                               extra_bounds[k, 0], extra_bounds[k, 1], c * chunk,
                               min(n, c * chunk + chunk), tables, table,
                               table + streams[s, STREAM_CONTEXTS] - 1, streams[s, STREAM_BASE],
                               streams[s, STREAM_LO], streams[s, STREAM_HI],
                               streams[s, STREAM_VBITS], bucket_base, bucket_extra, out[to:],
                               total[to:], scales[streams[s, STREAM_SCALES]:], bucket,
                               mode, lane, votes, entries, lows, firsts,
                               runs, levels, picks, step)
            if lane == 0:
                status[k] = st


@cuda.jit(device=True, inline=True)
def _decode_chunk(words, first_bit, n_bits, at, extras_end, i, stop, tables, row0, row1, base,
                  lo, hi, vbits, bucket_base, bucket_extra, out, total, scales, bucket, mode,
                  lane, votes, entries, lows, firsts, runs, levels, picks, step):
    """Decode levels [i, stop) of a stream from its chunk's rANS stream (``n_bits`` bits at
    ``first_bit``) and its extras (bits at .. extras_end - 1), contexts 0 and 1 with rows
    ``row0`` and ``row1`` of ``tables`` (the same row for one context), every thread of the
    block its lane's (note 3), the rest of the arguments the shared arrays ``_walk`` fills;
    returns the chunk's status, the same in every thread."""
    st = OK
    u = int64(0)
    end = int64(0)
    x = uint64(STATE_LOW)
    if first_bit % UNIT_BITS or n_bits % UNIT_BITS or n_bits < HEADER_UNITS * UNIT_BITS:
        st = PAYLOAD_UNDERRUN
    else:
        u = first_bit // UNIT_BITS
        end = u + n_bits // UNIT_BITS
        x, ok = opening_state(words, u + 2 * lane)
        _, bad = _lane_sums(int64(not ok), lane, votes)
        if bad:
            st = BAD_STATE
        u += HEADER_UNITS
    if lane == 0:
        step[STEP_STATUS] = st
        step[STEP_AT] = at
        step[STEP_CONTEXT] = 0                          # the chunk's first token: context 0
    while st == OK and i < stop:                        # the same in every thread
        # Every lane decodes its slot under both contexts; lane 0 then walks the step's
        # tokens in order, choosing each one's context and placing its run and extras.
        x0, e0 = get_symbol(x, tables, row0)
        x1, e1 = get_symbol(x, tables, row1)
        entries[0, lane] = e0
        entries[1, lane] = e1
        lows[lane] = int32(x0 < uint64(STATE_LOW)) | (int32(x1 < uint64(STATE_LOW)) << 1)
        cuda.syncthreads()
        if lane == 0:
            _walk(words, entries, lows, firsts, runs, levels, picks, step, i, stop, u, end,
                  extras_end, base, lo, hi, vbits, bucket_base, bucket_extra)
        cuda.syncthreads()
        st = step[STEP_STATUS]
        if st == OK:
            at_level = firsts[lane]
            if at_level >= 0:
                pick = picks[lane]
                x = x1 if pick & 1 else x0
                if x < uint64(STATE_LOW):
                    x = (x << uint64(UNIT_BITS)) | unit_at(words, u + (pick >> 1))
                level = levels[lane]
                if level != 0:                # runs of 0 are most levels: zeroed before
                    for j in range(at_level, at_level + runs[lane]):
                        put_level(out, total, scales, bucket, mode, j, level)
            u += step[STEP_UNITS]
            i = step[STEP_NEXT]
    if st == OK:
        if step[STEP_AT] != extras_end or u < end:
            st = PAYLOAD_UNDERRUN
        else:
            _, astray = _lane_sums(int64(x != uint64(STATE_LOW)), lane, votes)
            if astray:
                st = BAD_STATE
    return st


@cuda.jit(device=True)
def _escaped_token(words, at, extras_end, vbits, lo, hi):
    """(status, level, run, the next extra bit) of an escape's extras at bit ``at``
    (ans_tokens.py note 3; the host's ``_escaped_token``)."""
    if at + vbits > extras_end:
        return PAYLOAD_OVERRUN, int64(0), int64(0), at
    level = unzigzag(peek64(words, at) >> uint64(64 - vbits))
    if level < lo or level > hi:
        return VALUE_OVERFLOW, int64(0), int64(0), at
    st, run, at = read_gamma(words, at + vbits, extras_end)
    if st == OK and at > extras_end:
        st = PAYLOAD_OVERRUN
    return st, level, run, at


@cuda.jit(device=True)
def _walk(words, entries, lows, firsts, runs, levels, picks, step, i, stop, u, end, extras_end,
          base, lo, hi, vbits, bucket_base, bucket_extra):
    """One thread's pass over a step's tokens (note 3), lane j's token decoded under either
    context in entries[context, j] and lows[j] (bit context: its state renormalizes), from
    level i of a chunk that ends at ``stop`` and unit u of one that ends at ``end``: each
    token takes its context from the token before it (the step's first from
    step[STEP_CONTEXT]), its run's extras (or an escape's level and run) from
    step[STEP_AT] on, and its first level after the runs before it. Fills, per lane, firsts
    (the token's first level, -1 for a lane past the chunk's end), runs, levels and picks
    (context | the rank of its unit among the step's << 1), and step's STATUS, AT, CONTEXT,
    UNITS (units the step reads) and NEXT (the level after its last token). Checks runs
    against ``stop``, extras against ``extras_end``, units against ``end`` and escaped levels
    against [lo, hi]."""
    t = step[STEP_CONTEXT]
    at = step[STEP_AT]
    read = int64(0)
    st = OK
    for j in range(LANES):
        firsts[j] = -1
    for j in range(LANES):
        if i >= stop:
            break
        e = entries[t, j]
        if e & uint64(ANS_ESCAPE):
            st, level, run, at = _escaped_token(words, at, extras_end, vbits, lo, hi)
            if st != OK:
                break
            following = int64(0)
        else:
            field = e >> uint64(ANS_LEVEL_SHIFT)
            b = int64(field >> uint64(ANS_TOKEN_BUCKET_SHIFT))
            extra = bucket_extra[b]
            if at + extra > extras_end:
                st = PAYLOAD_OVERRUN
                break
            run = int64(bucket_base[b])
            if extra > 0:
                run += int64(peek64(words, at) >> uint64(64 - extra))
            at += extra
            level = base + int64(field & uint64(ANS_TOKEN_INDEX_MASK))
            following = int64((e & uint64(ANS_TOKEN_ANCHOR)) != uint64(0))
        if run > stop - i:
            st = RUN_OVERFLOW
            break
        firsts[j] = i
        runs[j] = run
        levels[j] = level
        picks[j] = int32(t | (read << 1))
        read += (lows[j] >> t) & 1
        i += run
        t = following
    if st == OK and u + read > end:
        st = PAYLOAD_OVERRUN
    step[STEP_STATUS] = st
    step[STEP_AT] = at
    step[STEP_CONTEXT] = t
    step[STEP_UNITS] = read
    step[STEP_NEXT] = i
