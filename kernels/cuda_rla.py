"""CUDA kernels of encoder ``rla``: kernels/ans_tokens.py's coder on the device, one thread per
chunk walking the chunk's runs, writing and reading the very same bytes.

READ ME FIRST
1. Encoding takes three kernels and two trips to the host. ``token_statistics`` counts every
   token's symbol under its context (rows: contexts, ans_tokens.py note 5, with the anchor's
   ``after_anchor``) and every chunk's tokens and extra bits; the host plans the tables from
   the counts as it plans them for host levels. ``encode_chunks`` codes every chunk's tokens
   backwards into its scratch slot, as cuda_ans.encode_chunks codes levels (and
   cuda_ans.pack_chunks lays the slots out) but a thread per chunk. ``write_extras`` writes every chunk's extras from
   its bit offset into a zeroed buffer, the two words it may share with its neighbours ORed
   atomically (cuda_bits.put and flush).
2. The device codes only tensors without escapes: every level in the window and at most
   ANS_MAX_TOKENS token symbols; the encoder checks, and codes a host copy otherwise. Token
   symbols are cuda_tokens.token_symbol's RUNS symbols.
3. ``decode_chunks`` checks what ans_tokens.decode_token_chunk checks (escapes included: a
   host-written stream may hold them); every thread writes its chunk's status.
Units: rANS positions are 16-bit units, extras positions bits; ``chunk`` is levels per chunk.
"""
from numba import config, cuda, int64, uint32, uint64

from .ans import STATE_LOW, UNIT_BITS, UNIT_MASK
from .ans_tokens import HEADER_UNITS, STATES
from .cuda_ans import get_symbol, opening_state, put_symbol, refill
from .bits import WORD_MASK, WORD_SHIFT
from .cuda_bits import flush, peek64, put, unzigzag
from .cuda_decode import read_gamma
from .cuda_quantize import put_level
from .cuda_tokens import RUNS, run_bucket, token_symbol
from .errors import (OK, BAD_STATE, PAYLOAD_OVERRUN, PAYLOAD_UNDERRUN, RUN_OVERFLOW,
                     VALUE_OVERFLOW)
from .maxima import (ANS_ESCAPE, ANS_LEVEL_SHIFT, ANS_TOKEN_ANCHOR, ANS_TOKEN_BUCKET_SHIFT,
                     ANS_TOKEN_INDEX_MASK)

# Threads per block of these kernels (a thread per chunk); one under the simulator
# (cuda_ans.py note 5).
RLA_BLOCK = 1 if config.ENABLE_CUDASIM else 32


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
    """Thread c decodes chunk c of a stream of ``size`` levels from its rANS stream
    (chunk_bits[c] bits at starts[c]) and its extras (bits extra_starts[c] ..
    extra_starts[c + 1] - 1), with the token decode ``tables`` (rla.token_table, a row per
    context, the anchor's tokens flagged); escaped levels must lie in [lo, hi]. Every level
    but 0 goes where cuda_quantize.put_level's (out, total, scales, bucket, mode) say; runs of
    level 0 are not written, so what a level 0 would write must be zero already (adding 0 to a
    total changes nothing). status[c] gets its status."""
    c = cuda.grid(1)
    if c >= starts.shape[0]:
        return
    start, stop = _chunk(c, chunk, size)
    status[c] = _decode_chunk(words, starts[c], chunk_bits[c], extra_starts[c],
                              extra_starts[c + 1], tables, base, lo, hi, vbits,
                              bucket_base, bucket_extra, out, total, scales, bucket, mode,
                              start, stop)


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
def _decode_chunk(words, first_bit, n_bits, at, extras_end, tables, base, lo, hi, vbits,
                  bucket_base, bucket_extra, out, total, scales, bucket, mode, i, stop):
    """Decode levels out[i:stop] from a chunk's rANS stream (``n_bits`` bits at
    ``first_bit``) and its extras, bits at .. extras_end - 1 (the host's
    ans_tokens.decode_token_chunk, the same checks); returns a status."""
    states = cuda.local.array(STATES, uint64)
    status, u, end = open_chunk(words, first_bit, n_bits, states)
    if status != OK:
        return status
    lane = 0
    t = int64(0)
    while i < stop:
        x, e = get_symbol(states[lane], tables, t)
        x, u, ok = refill(x, words, u, end)
        if not ok:
            return PAYLOAD_OVERRUN
        states[lane] = x
        lane = (lane + 1) % STATES
        field = e >> uint64(ANS_LEVEL_SHIFT)
        if e & uint64(ANS_ESCAPE):
            st, level, run, at = _escaped_token(words, at, extras_end, vbits, lo, hi)
            if st != OK:
                return st
            t = int64(0)
        else:
            b = int64(field >> uint64(ANS_TOKEN_BUCKET_SHIFT))
            extra = bucket_extra[b]
            if at + extra > extras_end:
                return PAYLOAD_OVERRUN
            run = int64(bucket_base[b])
            if extra > 0:
                run += int64(peek64(words, at) >> uint64(64 - extra))
            at += extra
            level = base + int64(field & uint64(ANS_TOKEN_INDEX_MASK))
            t = int64((e & uint64(ANS_TOKEN_ANCHOR)) != uint64(0))
        if run > stop - i:
            return RUN_OVERFLOW
        if level != 0:                    # the caller zeroed out: runs of 0 are most levels
            for j in range(i, i + run):
                put_level(out, total, scales, bucket, mode, j, level)
        i += run
    if at != extras_end:
        return PAYLOAD_UNDERRUN
    return end_status(states, u, end)


@cuda.jit(device=True, inline=True)
def flush_states(states, scratch, u):
    """Write the final states below unit ``u`` (state 0 first in reading order, each high unit
    first); returns the stream's first unit."""
    for k in range(STATES - 1, -1, -1):
        scratch[u - 1] = uint32(states[k] & uint64(UNIT_MASK))
        scratch[u - 2] = uint32(states[k] >> uint64(UNIT_BITS))
        u -= 2
    return u


@cuda.jit(device=True, inline=True)
def open_chunk(words, first_bit, n_bits, states):
    """(status, the unit after the states, the end unit) of a chunk's stream of ``n_bits``
    from bit ``first_bit``, its four states read into ``states``: PAYLOAD_UNDERRUN where the
    stream is not whole units holding at least the states, BAD_STATE where one is out of
    range."""
    if first_bit % UNIT_BITS or n_bits % UNIT_BITS or n_bits < HEADER_UNITS * UNIT_BITS:
        return PAYLOAD_UNDERRUN, int64(0), int64(0)
    u = int64(first_bit // UNIT_BITS)
    end = u + int64(n_bits // UNIT_BITS)
    for lane in range(STATES):
        x, ok = opening_state(words, u + 2 * lane)
        if not ok:
            return BAD_STATE, u, end
        states[lane] = x
    return OK, u + HEADER_UNITS, end


@cuda.jit(device=True, inline=True)
def end_status(states, u, end):
    """A chunk decoded without error must have read every unit up to ``end`` and left every
    state at STATE_LOW."""
    if u < end:
        return PAYLOAD_UNDERRUN
    for lane in range(STATES):
        if states[lane] != uint64(STATE_LOW):
            return BAD_STATE
    return OK
