"""CUDA kernels of encoder ``rla``: kernels/ans_tokens.py's coder on the device, writing and
reading the very same bytes; the encoder a thread per chunk walking the chunk's runs, the
decoder a warp per chunk.

READ ME FIRST
1. Encoding takes three kernels and two trips to the host. ``token_statistics`` counts every
   token's symbol under its context (rows: contexts, ans_tokens.py note 5, with the anchor's
   ``after_anchor``) and every chunk's tokens and extra bits; the host plans the tables from
   the counts as it plans them for host levels. ``encode_chunks`` codes every chunk's tokens
   backwards into its scratch slot, as cuda_ans.encode_chunks codes levels (and
   cuda_ans.pack_chunks lays the slots out) but a thread per chunk. ``write_extras`` writes
   every chunk's extras from its bit offset into a zeroed buffer, the two words it may share
   with its neighbours ORed atomically (cuda_bits.put and flush).
2. The device codes only tensors without escapes: every level in the window and at most
   ANS_MAX_TOKENS token symbols; the encoder checks, and codes a host copy otherwise. Token
   symbols are cuda_tokens.token_symbol's RUNS symbols.
3. ``decode_chunks`` runs a block of LANES threads per chunk, thread l holding state l
   (ans_tokens.py note 2), a step of 32 tokens at a time. A token's table depends on the
   token before it (whether its level is the anchor), its extras' position on every extra
   before it and its first level on every run before it: each lane decodes its slot under
   both contexts (no state changes yet), then one thread walks the step's 32 candidates in
   order (``_walk``: a shared-memory read, a table's context bit and at most one extras
   read per token) and places every token, and then every lane takes its state, its unit
   (the units of a step lie in lane order) and writes its run. It checks what
   ans_tokens.decode_token_chunk checks, escapes included (a host-written stream may hold
   them); the block writes its chunk's status.
Units: rANS positions are 16-bit units, extras positions bits; ``chunk`` is levels per chunk.
"""
from numba import config, cuda, int32, int64, uint32, uint64

from .ans import HEADER_UNITS, LANES, STATE_LOW, UNIT_BITS, UNIT_MASK
from .ans_tokens import STATES
from .cuda_ans import get_symbol, opening_state, put_symbol, unit_at
from .bits import WORD_MASK, WORD_SHIFT
from .cuda_bits import flush, peek64, put, unzigzag
from .cuda_decode import read_gamma
from .cuda_quantize import put_level
from .cuda_tokens import RUNS, run_bucket, token_symbol
from .errors import (OK, BAD_STATE, PAYLOAD_OVERRUN, PAYLOAD_UNDERRUN, RUN_OVERFLOW,
                     VALUE_OVERFLOW)
from .maxima import (ANS_ESCAPE, ANS_LEVEL_SHIFT, ANS_TOKEN_ANCHOR, ANS_TOKEN_BUCKET_SHIFT,
                     ANS_TOKEN_INDEX_MASK)

# Threads per block of the encoder's kernels (a thread per chunk); one under the simulator
# (cuda_ans.py note 5).
RLA_BLOCK = 1 if config.ENABLE_CUDASIM else 32
# The decoder's shared scalars of a step (note 3): status, the next extra bit, the next token's
# context, the units the step reads, the level after its last token.
STEP_STATUS, STEP_AT, STEP_CONTEXT, STEP_UNITS, STEP_NEXT, STEP_FIELDS = range(6)


@cuda.jit(device=True, inline=True)
def _chunk(c, chunk, n):
    """(first level, level end) of chunk c."""
    start = int64(c) * chunk
    return start, min(int64(n), start + chunk)


@cuda.jit(device=True, inline=True)
def _run_end(levels, i, stop):
    """The end (exclusive) of the run of equal levels from level i, cut at ``stop``."""
    v = levels[i]
    i += 1
    while i < stop and levels[i] == v:
        i += 1
    return i


@cuda.jit(device=True, inline=True)
def _run_start(levels, i, start):
    """The first level of the run of equal levels that ends at level i, cut at ``start``."""
    v = levels[i]
    while i > start and levels[i - 1] == v:
        i -= 1
    return i


@cuda.jit(cache=True)
def token_statistics(levels, chunk, base, window, after_anchor, bucket_extra, counts, n_tokens,
                     extra_bits):
    """Thread c adds every token of chunk c to counts[its context, its symbol] and stores the
    chunk's tokens in n_tokens[c] and their extra bits in extra_bits[c]."""
    c = cuda.grid(1)
    if c >= n_tokens.shape[0]:
        return
    i, stop = _chunk(c, chunk, levels.shape[0])
    t = int64(0)
    k = int64(0)
    bits = int64(0)
    while i < stop:
        j = _run_end(levels, i, stop)
        s = token_symbol(RUNS, levels[i], j - i, base, window)
        cuda.atomic.add(counts, (t, s), 1)
        t = int64(after_anchor[s])
        bits += bucket_extra[s // window]
        k += 1
        i = j
    n_tokens[c] = k
    extra_bits[c] = bits


@cuda.jit(cache=True)
def encode_chunks(levels, chunk, base, window, entries, rcps, after_anchor, n_tokens, stride,
                  scratch, counts):
    """Thread c codes chunk c's tokens backwards into scratch[c * stride:(c + 1) * stride] (its
    stream ends at the slot's end, as cuda_ans.encode_chunks lays it out), token j on state
    j % 4 with the table of its context, and stores its unit count in counts[c]."""
    c = cuda.grid(1)
    if c >= counts.shape[0]:
        return
    start, stop = _chunk(c, chunk, levels.shape[0])
    slot_end = int64(c + 1) * stride
    u = slot_end
    states = cuda.local.array(STATES, uint64)
    for lane in range(STATES):
        states[lane] = uint64(STATE_LOW)
    lo = _run_start(levels, stop - 1, start)
    s = token_symbol(RUNS, levels[lo], stop - lo, base, window)
    k = n_tokens[c]
    while k > 0:
        k -= 1
        t = int64(0)
        previous_lo, previous_s = lo, s
        if lo > start:                  # the context comes from the token before this one
            previous_lo = _run_start(levels, lo - 1, start)
            previous_s = token_symbol(RUNS, levels[previous_lo], lo - previous_lo, base, window)
            t = int64(after_anchor[previous_s])
        lane = k % STATES
        states[lane], u = put_symbol(states[lane], uint64(s), entries, rcps, t, scratch, u)
        lo, s = previous_lo, previous_s
    counts[c] = slot_end - flush_states(states, scratch, u)


@cuda.jit(cache=True)
def write_extras(levels, chunk, bucket_extra, bit_starts, out):
    """Thread c writes chunk c's extras (every run's low bucket_extra[its bucket] bits) into
    ``out`` (uint32, zeroed) from bit bit_starts[c]."""
    c = cuda.grid(1)
    if c >= bit_starts.shape[0]:
        return
    i, stop = _chunk(c, chunk, levels.shape[0])
    at = bit_starts[c]
    word_pos = at >> WORD_SHIFT
    pending = at & WORD_MASK            # zero bits standing for the previous chunk's
    shared = word_pos if pending else int64(-1)
    acc = uint64(0)
    while i < stop:
        j = _run_end(levels, i, stop)
        extra = bucket_extra[run_bucket(j - i)]
        if extra > 0:
            acc, pending, word_pos = put(out, acc, pending, word_pos, shared,
                                         uint64(j - i) & ((uint64(1) << uint64(extra)) - uint64(1)),
                                         extra)
        i = j
    flush(out, acc, pending, word_pos)


@cuda.jit(cache=True)
def decode_chunks(words, starts, chunk_bits, extra_starts, chunk, tables, base, lo, hi, vbits,
                  bucket_base, bucket_extra, size, out, total, scales, bucket, mode, status):
    """Block c (LANES threads) decodes chunk c of a stream of ``size`` levels from its rANS
    stream (chunk_bits[c] bits at starts[c]) and its extras (bits extra_starts[c] ..
    extra_starts[c + 1] - 1), with the token decode ``tables`` (rla.token_table, a row per
    context, the anchor's tokens flagged), thread l the tokens of lane l (note 3); escaped
    levels must lie in [lo, hi]. Every level but 0 goes where cuda_quantize.put_level's
    (out, total, scales, bucket, mode) say; runs of level 0 are not written, so what a level
    0 would write must be zero already (adding 0 to a total changes nothing). status[c] gets
    the chunk's status."""
    entries = cuda.shared.array((2, LANES), uint64)
    lows = cuda.shared.array(LANES, int32)
    firsts = cuda.shared.array(LANES, int64)
    runs = cuda.shared.array(LANES, int64)
    levels = cuda.shared.array(LANES, int64)
    picks = cuda.shared.array(LANES, int32)
    step = cuda.shared.array(STEP_FIELDS, int64)
    c = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    i, stop = _chunk(c, chunk, size)
    first_bit, n_bits = starts[c], chunk_bits[c]
    extras_end = extra_starts[c + 1]
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
        if _any_lane(not ok, lane, lows):
            st = BAD_STATE
        u += HEADER_UNITS
    if lane == 0:
        step[STEP_STATUS] = st
        step[STEP_AT] = extra_starts[c]
        step[STEP_CONTEXT] = 0                          # the chunk's first token: context 0
    last_row = tables.shape[0] - 1
    while st == OK and i < stop:                        # the same in every thread
        # Every lane decodes its slot under both contexts; lane 0 then walks the step's
        # tokens in order, choosing each one's context and placing its run and extras.
        x0, e0 = get_symbol(x, tables, 0)
        x1, e1 = get_symbol(x, tables, last_row)
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
                if level != 0:                # the caller zeroed out: runs of 0 are most levels
                    for j in range(at_level, at_level + runs[lane]):
                        put_level(out, total, scales, bucket, mode, j, level)
            u += step[STEP_UNITS]
            i = step[STEP_NEXT]
    if st == OK:
        if step[STEP_AT] != extras_end or u < end:
            st = PAYLOAD_UNDERRUN
        elif _any_lane(x != uint64(STATE_LOW), lane, lows):
            st = BAD_STATE
    if lane == 0:
        status[c] = st


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


@cuda.jit(device=True, inline=True)
def _any_lane(flag, lane, votes):
    """Whether ``flag`` holds in any thread of the block (``votes``: a shared int32 array of
    LANES); every thread must call it at the same point."""
    cuda.syncthreads()
    votes[lane] = int32(flag)
    cuda.syncthreads()
    found = False
    for j in range(LANES):
        found = found or votes[j] != 0
    cuda.syncthreads()
    return found


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


@cuda.jit(device=True, inline=True)
def flush_states(states, scratch, u):
    """Write the final states below unit ``u`` (state 0 first in reading order, each high unit
    first); returns the stream's first unit."""
    for k in range(STATES - 1, -1, -1):
        scratch[u - 1] = uint32(states[k] & uint64(UNIT_MASK))
        scratch[u - 2] = uint32(states[k] >> uint64(UNIT_BITS))
        u -= 2
    return u


