"""CUDA rANS kernels (encoder ``ans``): the chunk coder of kernels/ans.py on the device, one
thread per chunk, writing and reading the very same bytes.

READ ME FIRST
1. Encoding runs in two passes: ``encode_chunks`` codes every chunk backwards into its own slot
   of a scratch array (``stride`` units per chunk, the stream ending at the slot's end) and
   records its unit count; the host turns the counts into word offsets (kernels/chunks.py);
   ``pack_chunks`` copies every chunk's units to its offset as big-endian pairs, as
   ``ans.encode_chunks`` lays them out.
2. Escaped levels are left to the host (the encoder copies such tensors over first); the
   device coder maps every level to its window index, which the caller guarantees exists.
3. Decoding checks what the CPU decoder checks: the states' range, every unit read against the
   chunk's end, escapes against those declared for the chunk, and the states back at
   STATE_LOW with every unit read; each thread writes its chunk's status.
"""
from numba import config, cuda, int64, uint32, uint64

from .ans import (HEADER_UNITS, STATE_BITS, STATE_LOW, STATES, UNIT_BITS, UNIT_BITS_LOG2,
                  UNIT_MASK, UNITS_PER_WORD_LOG2)
from .ans_plans import SAMPLE_HASH
from .errors import OK, PAYLOAD_OVERRUN, PAYLOAD_UNDERRUN, BAD_STATE, ESCAPE_MISMATCH
from .maxima import (ANS_BIAS_SHIFT, ANS_BOUND_MASK, ANS_COMPLEMENT_SHIFT, ANS_ESCAPE,
                     ANS_FREQ_MASK, ANS_LEVEL_SHIFT, ANS_OFFSET_MASK, ANS_OFFSET_SHIFT,
                     ANS_PROB_BITS, ANS_PROB_SCALE, ANS_RECIPROCAL_BITS, ANS_RECIPROCAL_MASK)

# Chunks (threads) per block: each thread runs one long serial chain. The simulator gets one:
# it swaps a module's ``cuda`` for its fake one around every call of a device function from
# another module, and threads of one block running such calls at once race on that swap
# (the output is the same for any block size).
ANS_BLOCK = 1 if config.ENABLE_CUDASIM else 32


@cuda.jit(device=True, inline=True)
def put_symbol(x, s, entries, rcps, t, scratch, u):
    """Code symbol s of class t's table on state x, writing a unit below ``u`` first when x
    must renormalize; returns (x, u)."""
    e = entries[t, s]
    if x >= e & uint64(ANS_BOUND_MASK):
        u -= 1
        scratch[u] = uint32(x & uint64(UNIT_MASK))
        x >>= uint64(UNIT_BITS)
    r = rcps[t, s]
    q = ((x * (r & uint64(ANS_RECIPROCAL_MASK))) >> uint64(ANS_RECIPROCAL_BITS)) >> \
        (r >> uint64(ANS_RECIPROCAL_BITS))
    return x + (e >> uint64(ANS_BIAS_SHIFT)) + q * \
        ((e >> uint64(ANS_COMPLEMENT_SHIFT)) & uint64(ANS_FREQ_MASK)), u


@cuda.jit
def encode_chunks(levels, base, entries, rcps, classes, block_bits, chunk, stride, scratch,
                  counts):
    """Thread c codes chunk c backwards into scratch[c * stride:(c + 1) * stride] (its stream
    ends at the slot's end: the four final states, high unit first, then the units in reading
    order), element i with the table of class classes[i >> block_bits], and stores its unit
    count in counts[c]."""
    c = cuda.grid(1)
    if c >= counts.shape[0]:
        return
    start = int64(c) * chunk
    stop = min(int64(levels.shape[0]), start + chunk)
    slot_end = int64(c + 1) * stride
    u = slot_end
    states = cuda.local.array(STATES, uint64)
    for k in range(STATES):
        states[k] = uint64(STATE_LOW)
    for i in range(stop - 1, start - 1, -1):
        lane = (i - start) % STATES
        states[lane], u = put_symbol(states[lane], uint64(int64(levels[i]) - base), entries, rcps,
                               classes[i >> block_bits], scratch, u)
    counts[c] = slot_end - flush_states(states, scratch, u)


@cuda.jit(device=True, inline=True)
def flush_states(states, scratch, u):
    """Write the final states below unit ``u`` (state 0 first in reading order, each high unit
    first); returns the stream's first unit."""
    for k in range(STATES - 1, -1, -1):
        scratch[u - 1] = uint32(states[k] & uint64(UNIT_MASK))
        scratch[u - 2] = uint32(states[k] >> uint64(UNIT_BITS))
        u -= 2
    return u


@cuda.jit
def pack_chunks(scratch, stride, counts, word_starts, out32):
    """Thread c writes chunk c's units (the last ``counts[c]`` of its slot) as big-endian
    pairs into out32 from word ``word_starts[c]``, an odd last unit in a high half."""
    c = cuda.grid(1)
    if c >= counts.shape[0]:
        return
    first = int64(c + 1) * stride - counts[c]
    w = word_starts[c]
    for k in range(0, counts[c], 2):
        low = scratch[first + k + 1] if k + 1 < counts[c] else uint32(0)
        out32[w + k // 2] = (scratch[first + k] << uint32(UNIT_BITS)) | low


@cuda.jit(device=True, inline=True)
def unit_at(words, u):
    """The 16-bit unit at position u of a payload of big-endian 64-bit words."""
    last = (1 << UNITS_PER_WORD_LOG2) - 1
    return (words[u >> UNITS_PER_WORD_LOG2] >> uint64((last - (u & last)) << UNIT_BITS_LOG2)) & \
        uint64(UNIT_MASK)


def _chunk_decoder(selects):
    """The ``decode_chunks`` kernel renormalizing with ``refill`` or, with ``selects``,
    ``refill_select`` (compiled apart, as the CPU decoder is for its literal argument)."""
    take = refill_select if selects else refill

    @cuda.jit(device=True)
    def decode_chunk(words, first_bit, n_bits, tables, classes, block_bits, out, start, stop,
                     escapes, k, k_stop):
        """Decode out[start:stop] from one chunk's stream; returns its status. Four levels a
        step, one per state, the states in registers: their four chains overlap (a state array
        indexed by the lane lives in local memory, a load and a store on every level's chain).
        A group of four never spans two blocks (kernels/ans.py note 6): one class lookup a
        step."""
        states = cuda.local.array(STATES, uint64)
        status, u, end = open_chunk(words, first_bit, n_bits, states)
        if status != OK:
            return status
        x0, x1, x2, x3 = states[0], states[1], states[2], states[3]
        i = start
        while i + STATES <= stop:
            t = classes[i >> block_bits]
            x0, e0 = get_symbol(x0, tables, t)
            x1, e1 = get_symbol(x1, tables, t)
            x2, e2 = get_symbol(x2, tables, t)
            x3, e3 = get_symbol(x3, tables, t)
            k, ok0 = put_level(out, i, e0, escapes, k, k_stop)
            k, ok1 = put_level(out, i + 1, e1, escapes, k, k_stop)
            k, ok2 = put_level(out, i + 2, e2, escapes, k, k_stop)
            k, ok3 = put_level(out, i + 3, e3, escapes, k, k_stop)
            if not (ok0 and ok1 and ok2 and ok3):
                return ESCAPE_MISMATCH
            x0, u, r0 = take(x0, words, u, end)
            x1, u, r1 = take(x1, words, u, end)
            x2, u, r2 = take(x2, words, u, end)
            x3, u, r3 = take(x3, words, u, end)
            if not (r0 and r1 and r2 and r3):
                return PAYLOAD_OVERRUN
            i += STATES
        states[0], states[1], states[2], states[3] = x0, x1, x2, x3
        lane = 0
        while i < stop:                       # the chunk's last levels, fewer than four
            x, e = get_symbol(states[lane], tables, classes[i >> block_bits])
            k, ok = put_level(out, i, e, escapes, k, k_stop)
            if not ok:
                return ESCAPE_MISMATCH
            x, u, r = take(x, words, u, end)
            if not r:
                return PAYLOAD_OVERRUN
            states[lane] = x
            lane += 1
            i += 1
        if k != k_stop:
            return ESCAPE_MISMATCH
        return end_status(states, u, end)

    @cuda.jit
    def decode_chunks(words, starts, chunk_bits, chunk, tables, classes, block_bits, escapes,
                      escape_starts, out, status):
        """Thread c decodes chunk c into out (element i on state (i - chunk start) % 4, with
        the table of class classes[i >> block_bits]), its escapes taking
        escapes[escape_starts[c]:escape_starts[c + 1]]; status[c] gets its status."""
        c = cuda.grid(1)
        if c >= starts.shape[0]:
            return
        status[c] = decode_chunk(words, starts[c], chunk_bits[c], tables, classes, block_bits,
                                 out, int64(c) * chunk,
                                 min(int64(out.shape[0]), int64(c + 1) * chunk),
                                 escapes, escape_starts[c], escape_starts[c + 1])
    return decode_chunks


@cuda.jit(device=True, inline=True)
def put_level(out, i, e, escapes, k, k_stop):
    """out[i] = the level of decode entry e, or for an escape escapes[k]: (k after, False
    where the chunk's escapes, up to k_stop, are used up)."""
    if e & uint64(ANS_ESCAPE):
        if k >= k_stop:
            return k, False
        out[i] = escapes[k]
        return k + 1, True
    out[i] = int64(int32_of(e >> uint64(ANS_LEVEL_SHIFT)))
    return k, True


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
    if not open_states(words, u, states):
        return BAD_STATE, u, end
    return OK, u + HEADER_UNITS, end


@cuda.jit(device=True, inline=True)
def open_states(words, u, states):
    """Read the four initial states from unit ``u``; False where one lies outside
    [STATE_LOW, 2**STATE_BITS)."""
    for lane in range(STATES):
        x = (unit_at(words, u + 2 * lane) << uint64(UNIT_BITS)) | unit_at(words, u + 2 * lane + 1)
        if x < uint64(STATE_LOW) or x >= uint64(1 << STATE_BITS):
            return False
        states[lane] = x
    return True


@cuda.jit(device=True, inline=True)
def get_symbol(x, tables, t):
    """(the state before renormalization, the decode entry) of state x under table t."""
    e = tables[t, x & uint64(ANS_PROB_SCALE - 1)]
    return (e & uint64(ANS_FREQ_MASK)) * (x >> uint64(ANS_PROB_BITS)) + \
        ((e >> uint64(ANS_OFFSET_SHIFT)) & uint64(ANS_OFFSET_MASK)), e


@cuda.jit(device=True, inline=True)
def refill(x, words, u, end):
    """(x, u, ok): a state below STATE_LOW takes the unit at ``u``; not ok where ``u`` is at
    the chunk's ``end``."""
    if x < uint64(STATE_LOW):
        if u >= end:
            return x, u, False
        x = (x << uint64(UNIT_BITS)) | unit_at(words, u)
        u += 1
    return x, u, True


@cuda.jit(device=True, inline=True)
def refill_select(x, words, u, end):
    """``refill`` by selects: the unit is loaded whether or not the state takes it (the
    chunk's last one past its end), so that whether a state renormalizes is no branch; faster
    where states renormalize every few levels (kernels/ans.py ``_renorm``)."""
    low = x < uint64(STATE_LOW)
    unit = unit_at(words, min(u, end - 1))
    ok = u < end or not low
    return (((x << uint64(UNIT_BITS)) | unit) if low else x), (u + 1 if low else u), ok


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


@cuda.jit(device=True, inline=True)
def int32_of(v):
    """The int32 whose two's complement is the low 32 bits of v."""
    v = int64(v & uint64(0xFFFFFFFF))
    return v - (int64(1) << 32) if v >= (int64(1) << 31) else v


@cuda.jit
def block_maxima(levels, block_bits, out):
    """Thread b: the largest |level| of block b (2**block_bits levels) into out[b]."""
    b = cuda.grid(1)
    if b >= out.shape[0]:
        return
    start = int64(b) << block_bits
    m = int64(0)
    for i in range(start, min(int64(levels.shape[0]), start + (int64(1) << block_bits))):
        m = max(m, abs(int64(levels[i])))
    out[b] = m


@cuda.jit
def class_histograms(levels, base, rows, block_bits, stride, counts):
    """Every element of the one block in every ``stride`` that ans_plans.sampled_block names adds
    one to counts[rows[its block], level - base] (levels in the window: the caller's
    guarantee)."""
    for i in range(cuda.grid(1), levels.shape[0], cuda.gridsize(1)):
        b = i >> block_bits
        w = b // stride
        if b - w * stride == int64(((uint64(w) * uint64(SAMPLE_HASH)) >> uint64(40)) %
                                   uint64(stride)):
            cuda.atomic.add(counts, (rows[b], int64(levels[i]) - base), 1)


# The chunk decoders, renormalizing by branches and by selects (``_chunk_decoder``).
decode_chunks = _chunk_decoder(False)
decode_chunks_selects = _chunk_decoder(True)
