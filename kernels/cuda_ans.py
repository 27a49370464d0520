"""CUDA rANS kernels (encoder ``ans``): the chunk coder of kernels/ans.py on the device, a warp
per chunk and a thread per lane, writing and reading the very same bytes; and the per-state
helpers that kernels/cuda_rla.py's serial token coder shares.

READ ME FIRST
1. A chunk's LANES = 32 states are a warp's threads (kernels/ans.py note 3): a block of LANES
   threads codes one chunk, thread l holding lane l's state in a register, and steps through
   the chunk a symbol per lane at a time. Where a step's units go is the one thing the lanes
   share: ``lane_counts`` gives each lane how many lanes below it renormalize (its unit's rank
   in the step) and how many do in all (how far the stream moves), through a vote in shared
   memory between two barriers.
2. Encoding runs in two kernels: ``encode_chunks`` codes every chunk backwards into its own
   slot of a scratch array (``stride`` units per chunk, the stream ending at the slot's end)
   and records its unit count; the host turns the counts into word offsets
   (kernels/chunks.py); ``pack_chunks`` copies every chunk's units to its offset as big-endian
   pairs, as ``ans.encode_chunks`` lays them out, a block per chunk.
3. Escaped levels are left to the host (the encoder copies such tensors over first); the
   device coder maps every level to its window index, which the caller guarantees exists.
4. Decoding checks what the CPU decoder checks: the states' range, every unit read against the
   chunk's end, escapes against those declared for the chunk, and every state back at
   STATE_LOW with every unit read; the block writes its chunk's status. A step's checks are
   made for the whole step, so where a corrupted chunk fails two ways at once the device may
   name the other failure than the host (both raise DecodeError).
5. Under the Numba simulator a block's threads are Python threads, and a call from one module's
   kernel into another module's device function swaps that module's ``cuda`` for a fake one,
   which threads of one block race on: the warp kernels here call only this module's device
   functions and cuda_quantize.put_level, which never names ``cuda``. The serial kernels of
   cuda_rla.py run a thread per block there (cuda_rla.RLA_BLOCK).
"""
from numba import cuda, int32, int64, uint32, uint64

from .ans import (HEADER_UNITS, LANES, STATE_BITS, STATE_LOW, UNIT_BITS, UNIT_BITS_LOG2,
                  UNIT_MASK, UNITS_PER_WORD_LOG2)
from .ans_plans import SAMPLE_HASH
from .cuda_quantize import put_level
from .errors import OK, PAYLOAD_OVERRUN, PAYLOAD_UNDERRUN, BAD_STATE, ESCAPE_MISMATCH
from .maxima import (ANS_BIAS_SHIFT, ANS_BOUND_MASK, ANS_COMPLEMENT_SHIFT, ANS_ESCAPE,
                     ANS_FREQ_MASK, ANS_LEVEL_SHIFT, ANS_OFFSET_MASK, ANS_OFFSET_SHIFT,
                     ANS_PROB_BITS, ANS_PROB_SCALE, ANS_RECIPROCAL_BITS, ANS_RECIPROCAL_MASK)

# Threads per block of ``pack_chunks`` (a block per chunk).
PACK_BLOCK = 128
# ``lane_counts`` packs two counts of at most LANES in one vote.
COUNT_SHIFT = 8
assert LANES < 1 << COUNT_SHIFT


# ---- Per-state steps ------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def coded_state(x, e, r):
    """State x (already renormalized) after coding the symbol of encode entry e and reciprocal
    r (kernels/ans.py ``encode_tables``)."""
    q = ((x * (r & uint64(ANS_RECIPROCAL_MASK))) >> uint64(ANS_RECIPROCAL_BITS)) >> \
        (r >> uint64(ANS_RECIPROCAL_BITS))
    return x + (e >> uint64(ANS_BIAS_SHIFT)) + q * \
        ((e >> uint64(ANS_COMPLEMENT_SHIFT)) & uint64(ANS_FREQ_MASK))


@cuda.jit(device=True, inline=True)
def put_symbol(x, s, entries, rcps, t, scratch, u):
    """Code symbol s of class t's table on state x, writing a unit below ``u`` first when x
    must renormalize; returns (x, u)."""
    e = entries[t, s]
    if x >= e & uint64(ANS_BOUND_MASK):
        u -= 1
        scratch[u] = uint32(x & uint64(UNIT_MASK))
        x >>= uint64(UNIT_BITS)
    return coded_state(x, e, rcps[t, s]), u


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
def unit_at(words, u):
    """The 16-bit unit at position u of a payload of big-endian 64-bit words."""
    last = (1 << UNITS_PER_WORD_LOG2) - 1
    return (words[u >> UNITS_PER_WORD_LOG2] >> uint64((last - (u & last)) << UNIT_BITS_LOG2)) & \
        uint64(UNIT_MASK)


@cuda.jit(device=True, inline=True)
def opening_state(words, u):
    """(the 32-bit state of the two units at u, high unit first; whether it lies in
    [STATE_LOW, 2**STATE_BITS))."""
    x = (unit_at(words, u) << uint64(UNIT_BITS)) | unit_at(words, u + 1)
    return x, x >= uint64(STATE_LOW) and x < uint64(1 << STATE_BITS)


@cuda.jit(device=True, inline=True)
def int32_of(v):
    """The int32 whose two's complement is the low 32 bits of v."""
    v = int64(v & uint64(0xFFFFFFFF))
    return v - (int64(1) << 32) if v >= (int64(1) << 31) else v


# ---- A warp per chunk -----------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def lane_counts(a, b, lane, votes):
    """For flags a and b of every lane of the block (``votes``: a shared int32 array of LANES):
    (lanes below ``lane`` with a, lanes with a, lanes below with b, lanes with b). Every thread
    of the block must call it at the same point (note 1)."""
    votes[lane] = int32(a) | (int32(b) << COUNT_SHIFT)
    cuda.syncthreads()
    below = int32(0)
    total = int32(0)
    for j in range(LANES):
        v = votes[j]
        total += v
        if j < lane:
            below += v
    cuda.syncthreads()
    low = (1 << COUNT_SHIFT) - 1
    return below & low, total & low, below >> COUNT_SHIFT, total >> COUNT_SHIFT


@cuda.jit
def encode_chunks(levels, base, entries, rcps, classes, block_bits, chunk, stride, scratch,
                  counts):
    """Block c codes chunk c backwards into scratch[c * stride:(c + 1) * stride], thread l the
    elements of lane l (element i with the table of class classes[i >> block_bits]); the
    stream ends at the slot's end: the final states, lane 0 first, high unit first, then the
    units in reading order. counts[c] gets its unit count."""
    votes = cuda.shared.array(LANES, int32)
    c = int64(cuda.blockIdx.x)
    lane = int64(cuda.threadIdx.x)
    start = c * chunk
    stop = min(int64(levels.shape[0]), start + chunk)
    slot_end = (c + 1) * stride
    u = slot_end
    x = uint64(STATE_LOW)
    t = (stop - start + LANES - 1) // LANES
    while t > 0:
        t -= 1
        i = start + t * LANES + lane
        renorm = False
        e = uint64(0)
        r = uint64(0)
        if i < stop:
            k = classes[i >> block_bits]
            s = int64(levels[i]) - base
            e = entries[k, s]
            r = rcps[k, s]
            renorm = x >= e & uint64(ANS_BOUND_MASK)
        below, total, _, _ = lane_counts(renorm, False, lane, votes)
        if renorm:
            scratch[u - total + below] = uint32(x & uint64(UNIT_MASK))
            x >>= uint64(UNIT_BITS)
        if i < stop:
            x = coded_state(x, e, r)
        u -= total
    first = u - HEADER_UNITS
    scratch[first + 2 * lane] = uint32(x >> uint64(UNIT_BITS))
    scratch[first + 2 * lane + 1] = uint32(x & uint64(UNIT_MASK))
    if lane == 0:
        counts[c] = slot_end - first


@cuda.jit
def pack_chunks(scratch, stride, counts, word_starts, out32):
    """Block c writes chunk c's units (the last ``counts[c]`` of its slot) as big-endian pairs
    into out32 from word ``word_starts[c]``, an odd last unit in a high half; its threads
    take the pairs in turn."""
    c = cuda.blockIdx.x
    n = counts[c]
    first = int64(c + 1) * stride - n
    w = word_starts[c]
    for k in range(2 * int64(cuda.threadIdx.x), n, 2 * int64(cuda.blockDim.x)):
        low = scratch[first + k + 1] if k + 1 < n else uint32(0)
        out32[w + k // 2] = (scratch[first + k] << uint32(UNIT_BITS)) | low


@cuda.jit
def decode_chunks(words, starts, chunk_bits, chunk, tables, classes, block_bits, escapes,
                  escape_starts, size, out, total, scales, bucket, mode, status):
    """Block c decodes chunk c of a stream of ``size`` levels, thread l the elements of lane l
    (element i with the table of class classes[i >> block_bits]), its escapes taking
    escapes[escape_starts[c]:escape_starts[c + 1]] in order; every level goes where
    cuda_quantize.put_level's (out, total, scales, bucket, mode) say: into ``out``, or
    dequantized into (or added to) ``total`` in this pass. status[c] gets its status."""
    votes = cuda.shared.array(LANES, int32)
    c = int64(cuda.blockIdx.x)
    lane = int64(cuda.threadIdx.x)
    start = c * chunk
    stop = min(int64(size), start + chunk)
    first_bit, n_bits = starts[c], chunk_bits[c]
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
        _, bad, _, _ = lane_counts(not ok, False, lane, votes)
        if bad:
            st = BAD_STATE
        u += HEADER_UNITS
    k, k_stop = escape_starts[c], escape_starts[c + 1]
    steps = (stop - start + LANES - 1) // LANES
    t = int64(0)
    while st == OK and t < steps:           # st is the same in every thread
        i = start + t * LANES + lane
        low = False
        escape = False
        e = uint64(0)
        if i < stop:
            x, e = get_symbol(x, tables, classes[i >> block_bits])
            low = x < uint64(STATE_LOW)
            escape = (e & uint64(ANS_ESCAPE)) != uint64(0)
        low_below, lows, escape_below, escaped = lane_counts(low, escape, lane, votes)
        if k + escaped > k_stop:
            st = ESCAPE_MISMATCH
        elif u + lows > end:
            st = PAYLOAD_OVERRUN
        else:
            if i < stop:
                put_level(out, total, scales, bucket, mode, i,
                          escapes[k + escape_below] if escape else
                          int32_of(e >> uint64(ANS_LEVEL_SHIFT)))
            if low:
                x = (x << uint64(UNIT_BITS)) | unit_at(words, u + low_below)
            u += lows
            k += escaped
        t += 1
    _, astray, _, _ = lane_counts(x != uint64(STATE_LOW), False, lane, votes)
    if st == OK:
        if k != k_stop:
            st = ESCAPE_MISMATCH
        elif u < end:
            st = PAYLOAD_UNDERRUN
        elif astray:
            st = BAD_STATE
    if lane == 0:
        status[c] = st


# ---- Statistics -----------------------------------------------------------------------------

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
