"""CUDA rANS kernels (encoder ``ans``): the chunk coder of kernels/ans.py on the device, a warp
per chunk and a thread per lane, writing and reading the very same bytes; and the per-state
helpers that kernels/cuda_rla.py's token coder shares.

READ ME FIRST
1. A chunk's LANES = 32 states are a warp's threads (kernels/ans.py note 3): a block of LANES
   threads codes one chunk, thread l holding lane l's state in a register, and steps through
   the chunk a symbol per lane at a time. Where a step's units go is the one thing the lanes
   share: ``lane_counts`` gives each lane how many lanes below it renormalize (its unit's rank
   in the step) and how many do in all (how far the stream moves), through a vote in shared
   memory between two barriers.
2. Encoding runs in three kernels over a batch of parts (tensors laid end to end, note 6):
   ``encode_chunks`` codes every chunk of every part backwards into its own slot of a scratch
   array (the stream ending at the slot's end) and records its unit count; ``unit_layout``
   turns the counts into word offsets as kernels/chunks.py does, every part in a region of
   its own that the host gave it before the launch (gpu._packed); ``pack_chunks`` copies
   every chunk's units to its offset as big-endian pairs, as ``ans.encode_chunks`` lays them
   out, a block per chunk.
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
   functions and cuda_quantize.put_level, which never names ``cuda`` (cuda_rla.py's call
   only such functions of this module). ``unit_layout``, a block kernel, calls
   cuda_tokens.part_slice, which names no ``cuda`` either, and cuda_bits.block_scan, which
   uses it only between barriers that every thread reaches (cuda_bits.py note 2).
6. The encoder's tables. ``chunks`` has a row per chunk of every part (ENCODE_*: its first
   level and end in the flat levels array, its part, where its scratch slot ends), each part
   cut into chunks of its own plan's size from its first level. ``parts`` has a row per part
   (PART_*: where it starts, its base, the first row of ``entries``/``rcps`` its classes' tables
   take, where its block classes start in ``classes``, and log2 of its block size; a part
   without contexts has one class, one entry of ``classes`` and blocks of 2**63
   levels, encoders/ans.py NO_BLOCKS).
7. The plans' statistics, over a batch cut into chunks as cuda_tokens' note 2 says, with a
   parts table of STAT_* columns (a part with STAT_COLS 0 is not counted). ``block_maxima``
   first gives every block's largest |level| (and every larger block's, for the second block
   size a plan may try); ``context_counts`` then counts the symbols of the sampled blocks in
   the rows of their maxima, as kernels/ans_plans.py ``block_maxima`` and ``class_counts`` do
   on the host, so that the device plans the host's tables. A level outside its part's
   window, or in a block whose maximum passes the rows, is not counted: a part counted in a
   window guessed before its range was known (gpu.ans_range_statistics) is counted again.
8. Decoding runs in groups, as the Huffman family's does (cuda_decode.py note 5): one launch
   decodes every stream a gpu.StreamGroup holds into one destination array, streams that
   write the same elements in order. The streams of a set may have different chunk sizes
   (each rank's stream chose its own, encoders/base.py GrowingChunks): a block takes the
   elements of one chunk of the set's largest size and decodes, stream by stream, every chunk
   that lies there, so that every element still gets its additions in stream order. That
   needs every chunk size of a set to divide the largest: chunks grow by doubling, and the
   group flushes before a stream whose chunks would not nest (gpu._nests). The
   stream table has cuda_decode's common columns, then STREAM_TABLES, STREAM_CLASSES,
   STREAM_BLOCK_BITS and STREAM_CHUNK; the streams' tables are rows of one array, their
   classes, escapes and chunk arrays concatenated, and ``escape_bounds`` gives every chunk of
   every stream its escapes' first index and end.
"""
from numba import cuda, int32, int64, uint32, uint64

from .ans import (HEADER_UNITS, LANES, STATE_BITS, STATE_LOW, UNIT_BITS, UNIT_BITS_LOG2,
                  UNIT_MASK, UNITS_PER_WORD_LOG2)
from .ans_plans import SAMPLE_HASH
from .cuda_decode import (BLOCK_CHUNK, BLOCK_END, BLOCK_FIRST, STREAM_CHUNKS, STREAM_COMMON,
                          STREAM_LEVELS, STREAM_MODE, STREAM_OUT, STREAM_SCALES, STREAM_WORDS)
from .cuda_quantize import put_level
from .cuda_bits import BLOCK, block_scan
from .cuda_tokens import CHUNK_HI, CHUNK_LO, CHUNK_PART, SHARED_BINS, part_slice
from .errors import OK, PAYLOAD_OVERRUN, PAYLOAD_UNDERRUN, BAD_STATE, ESCAPE_MISMATCH
from .maxima import (ANS_BIAS_SHIFT, ANS_BOUND_MASK, ANS_COMPLEMENT_SHIFT, ANS_ESCAPE,
                     ANS_FREQ_MASK, ANS_LEVEL_SHIFT, ANS_OFFSET_MASK, ANS_OFFSET_SHIFT,
                     ANS_PROB_BITS, ANS_PROB_SCALE, ANS_RECIPROCAL_BITS, ANS_RECIPROCAL_MASK)

# Threads per block of ``pack_chunks`` (a block per chunk).
PACK_BLOCK = 128
# ``lane_counts`` packs two counts of at most LANES in one vote.
COUNT_SHIFT = 8
assert LANES < 1 << COUNT_SHIFT
# Columns of the encoder's chunk table and parts table (note 6).
ENCODE_LO, ENCODE_HI, ENCODE_PART, ENCODE_SLOT_END, ENCODE_FIELDS = range(5)
PART_OFFSET, PART_BASE, PART_TABLE, PART_CLASSES, PART_BITS, PART_FIELDS = range(6)
# The columns of a group's stream table (cuda_decode.py STREAM_*, note 8) that are ``ans``'s:
# the first row of its classes' tables, where its block classes start, log2 of its block size,
# its chunk size.
(STREAM_TABLES, STREAM_CLASSES, STREAM_BLOCK_BITS, STREAM_CHUNK,
 STREAM_FIELDS) = range(STREAM_COMMON, STREAM_COMMON + 5)
# Columns of the statistics' parts table (note 7): where the part starts, its base, its
# counts' row width (window + 1; 0: not counted), log2 of its block size (-1: no contexts,
# one row of counts), every how many blocks one is counted, where its blocks' maxima start
# (int32), where its larger blocks' maxima start (-1: none) and their log2 size, where its
# larger blocks' counts start after its own, where its counts start (int64), and how many
# bins it counts in all.
(STAT_OFFSET, STAT_BASE, STAT_COLS, STAT_BITS, STAT_STRIDE, STAT_MAXIMA, STAT_LARGER,
 STAT_LARGER_BITS, STAT_LARGER_AT, STAT_COUNTS, STAT_BINS, STAT_FIELDS) = range(12)


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


@cuda.jit(device=True, inline=True)
def emit_unit(x, renorm, scratch, at):
    """State x after its encoder's renormalization: where ``renorm``, its low unit goes to
    scratch[at] and x keeps the rest."""
    if renorm:
        scratch[at] = uint32(x & uint64(UNIT_MASK))
        x >>= uint64(UNIT_BITS)
    return x


@cuda.jit(device=True, inline=True)
def close_lane(x, lane, scratch, u):
    """Write lane ``lane``'s final state x into the states that open a chunk's stream, just
    below unit u (lane 0 first, high unit first); returns the stream's first unit."""
    first = u - HEADER_UNITS
    scratch[first + 2 * lane] = uint32(x >> uint64(UNIT_BITS))
    scratch[first + 2 * lane + 1] = uint32(x & uint64(UNIT_MASK))
    return first


@cuda.jit(device=True, inline=True)
def set_of(blocks, b, streams, chunk_column):
    """Row b of a group's block table (note 8): (its set's first stream and end, the first
    element of its chunk, the set's largest chunk size, which column ``chunk_column`` of the
    stream table gives)."""
    first, end = blocks[b, BLOCK_FIRST], blocks[b, BLOCK_END]
    largest = int64(1)
    for s in range(first, end):
        largest = max(largest, streams[s, chunk_column])
    return first, end, blocks[b, BLOCK_CHUNK] * largest, largest


@cuda.jit(device=True, inline=True)
def chunks_within(lo, largest, n, chunk):
    """The chunks [first, end) of a stream of ``n`` levels in chunks of ``chunk`` that lie in
    the elements [lo, lo + largest) (whole ones: every chunk size of a set divides the
    largest, note 8)."""
    return lo // chunk, min((n + chunk - 1) // chunk, (lo + largest) // chunk)


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


@cuda.jit(cache=True)
def encode_chunks(levels, chunks, parts, entries, rcps, classes, scratch, counts):
    """Block c codes row c of the chunk table ``chunks`` (note 6) backwards into its slot of
    scratch, which ends at its ENCODE_SLOT_END, thread l the elements of lane l, element i of
    part p with the table of row parts[p, PART_TABLE] + classes[parts[p, PART_CLASSES] +
    ((i - parts[p, PART_OFFSET]) >> parts[p, PART_BITS])] of ``entries`` and ``rcps``; the
    stream ends at the slot's end: the final states, lane 0 first, high unit first, then the
    units in reading order. counts[c] gets its unit count."""
    votes = cuda.shared.array(LANES, int32)
    c = int64(cuda.blockIdx.x)
    lane = int64(cuda.threadIdx.x)
    start = chunks[c, ENCODE_LO]
    stop = chunks[c, ENCODE_HI]
    part = chunks[c, ENCODE_PART]
    slot_end = chunks[c, ENCODE_SLOT_END]
    offset = parts[part, PART_OFFSET]
    base = parts[part, PART_BASE]
    table = parts[part, PART_TABLE]
    first_class = parts[part, PART_CLASSES]
    block_bits = parts[part, PART_BITS]
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
            k = table + int64(classes[first_class + ((i - offset) >> block_bits)])
            s = int64(levels[i]) - base
            e = entries[k, s]
            r = rcps[k, s]
            renorm = x >= e & uint64(ANS_BOUND_MASK)
        below, total, _, _ = lane_counts(renorm, False, lane, votes)
        x = emit_unit(x, renorm, scratch, u - total + below)
        if i < stop:
            x = coded_state(x, e, r)
        u -= total
    first = close_lane(x, lane, scratch, u)
    if lane == 0:
        counts[c] = slot_end - first


@cuda.jit(cache=True)
def unit_layout(counts, first, regions, extras, word_starts, extra_starts):
    """Lay every part's chunks out in its region of the payload (regions[p] = (first word,
    end word); part p's chunks are rows first[p]..first[p + 1]) as the CPU coders lay chunks
    of counts[c] 16-bit units out, each from a word, into word_starts; then its extras
    (extras[p] bits, rla's: extra_starts[c] gets their first bit for each of its chunks) and
    a spare word. A part that would pass its region's end gets word_starts and extra_starts
    -1 for every chunk, which ``pack_chunks`` and cuda_rla.write_extras skip. Grid: a block
    of BLOCK threads per part, each thread a run of its chunks (cuda_tokens.part_slice),
    placed by a block scan of the runs' words (note 5)."""
    scratch = cuda.shared.array(BLOCK, int64)
    p = cuda.blockIdx.x
    a, b = part_slice(first, p, int64(cuda.threadIdx.x))
    words = int64(0)
    for c in range(a, b):
        words += (counts[c] + 1) >> 1
    w = regions[p, 0] + block_scan(scratch, words, False) - words
    extras_at = regions[p, 0] + scratch[BLOCK - 1]          # after every chunk of the part
    fits = extras_at + ((extras[p] + 31) >> 5) + 1 <= regions[p, 1]
    for c in range(a, b):
        word_starts[c] = w if fits else -1
        extra_starts[c] = extras_at << 5 if fits else -1
        w += (counts[c] + 1) >> 1


@cuda.jit(cache=True)
def pack_chunks(scratch, slot_ends, counts, word_starts, out32):
    """Block c writes chunk c's units (the last ``counts[c]`` of its slot, which ends at
    slot_ends[c]) as big-endian pairs into out32 from word ``word_starts[c]``, an odd last
    unit in a high half; its threads take the pairs in turn. A chunk whose word_starts is -1
    is not written."""
    c = cuda.blockIdx.x
    if word_starts[c] < 0:
        return
    n = counts[c]
    first = slot_ends[c] - n
    w = word_starts[c]
    for k in range(2 * int64(cuda.threadIdx.x), n, 2 * int64(cuda.blockDim.x)):
        low = scratch[first + k + 1] if k + 1 < n else uint32(0)
        out32[w + k // 2] = (scratch[first + k] << uint32(UNIT_BITS)) | low


@cuda.jit(cache=True)
def decode_streams(words, streams, blocks, starts, chunk_bits, tables, classes, escapes,
                   escape_bounds, out, total, scales, bucket, status):
    """A group of ``ans`` payloads (note 8), as cuda_decode.decode_streams decodes the Huffman
    family's: block b takes the levels [c * G, (c + 1) * G) of its set, c = blocks[b,
    BLOCK_CHUNK] and G the set's largest chunk size, and decodes the chunks there of every
    stream of the set in order, a barrier between them, thread l the elements of lane l.
    Element i of stream s has the table of row streams[s, STREAM_TABLES] +
    classes[streams[s, STREAM_CLASSES] + (i >> streams[s, STREAM_BLOCK_BITS])] of ``tables``;
    chunk k of the group (streams[s, STREAM_CHUNKS] + its index) takes the escapes
    escapes[escape_bounds[k, 0]:escape_bounds[k, 1]] in order; every level is put by
    put_level(out[its first element:], total[its first element:], scales[its first scale:],
    bucket, its mode, i, level). status[k] gets the chunk's status. Grid: a block of LANES
    threads per row of ``blocks``."""
    votes = cuda.shared.array(LANES, int32)
    b = cuda.blockIdx.x
    lane = int64(cuda.threadIdx.x)
    first, end, lo, largest = set_of(blocks, b, streams, STREAM_CHUNK)
    for s in range(first, end):
        n = streams[s, STREAM_LEVELS]
        chunk = streams[s, STREAM_CHUNK]
        to = streams[s, STREAM_OUT]
        c_first, c_end = chunks_within(lo, largest, n, chunk)
        for c in range(c_first, c_end):
            cuda.syncthreads()              # the chunk before is written
            k = streams[s, STREAM_CHUNKS] + c
            st = _decode_chunk(words[streams[s, STREAM_WORDS]:], starts[k], chunk_bits[k],
                               c * chunk, min(n, c * chunk + chunk), tables,
                               streams[s, STREAM_TABLES], classes[streams[s, STREAM_CLASSES]:],
                               streams[s, STREAM_BLOCK_BITS], escapes, escape_bounds[k, 0],
                               escape_bounds[k, 1], out[to:], total[to:],
                               scales[streams[s, STREAM_SCALES]:], bucket,
                               streams[s, STREAM_MODE], lane, votes)
            if lane == 0:
                status[k] = st


@cuda.jit(device=True, inline=True)
def _decode_chunk(words, first_bit, n_bits, start, stop, tables, table, classes, block_bits,
                  escapes, k, k_stop, out, total, scales, bucket, mode, lane, votes):
    """Decode the levels [start, stop) of a stream from its bits [first_bit, first_bit +
    n_bits), every thread of the block its lane's (note 1), element i with the table of row
    table + classes[i >> block_bits], its escapes escapes[k:k_stop] in order; returns the
    chunk's status, the same in every thread."""
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
    steps = (stop - start + LANES - 1) // LANES
    t = int64(0)
    while st == OK and t < steps:           # st is the same in every thread
        i = start + t * LANES + lane
        low = False
        escape = False
        e = uint64(0)
        if i < stop:
            x, e = get_symbol(x, tables, table + int64(classes[i >> block_bits]))
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
    return st


# ---- Statistics -----------------------------------------------------------------------------

@cuda.jit(device=True, inline=True)
def sampled(b, stride):
    """Whether block b is the one of its ``stride`` blocks that ans_plans.sampled_block
    names."""
    w = b // stride
    return b - w * stride == int64(((uint64(w) * uint64(SAMPLE_HASH)) >> uint64(40)) %
                                   uint64(stride))


@cuda.jit(device=True, inline=True)
def _blocks_of(chunks, parts):
    """This block's chunk and its part's blocks (note 7): (part, the chunk's first level and
    end, the part's first level, log2 of its block size, where its maxima start, where its
    larger blocks' maxima start and their log2 size)."""
    c = cuda.blockIdx.x
    part = chunks[c, CHUNK_PART]
    return (part, chunks[c, CHUNK_LO], chunks[c, CHUNK_HI], parts[part, STAT_OFFSET],
            parts[part, STAT_BITS], parts[part, STAT_MAXIMA], parts[part, STAT_LARGER],
            parts[part, STAT_LARGER_BITS])


@cuda.jit(cache=True)
def block_maxima(levels, chunks, parts, maxima):
    """The largest |level| of every block of a part with contexts (STAT_BITS >= 0, note 7),
    merged with an atomic maximum into maxima (int32, zeroed) from its STAT_MAXIMA, and of
    the blocks of 2**STAT_LARGER_BITS levels from its STAT_LARGER where that is not -1.
    Grid: a block per row of the chunk table ``chunks`` (cuda_tokens' note 2); thread t takes
    a run of consecutive levels of the chunk and merges once per block it meets."""
    part, chunk_lo, chunk_hi, offset, bits, first, larger, larger_bits = _blocks_of(chunks,
                                                                                   parts)
    if parts[part, STAT_COLS] == 0 or bits < 0:
        return
    seg = (chunk_hi - chunk_lo + cuda.blockDim.x - 1) // cuda.blockDim.x
    i = min(chunk_hi, chunk_lo + int64(cuda.threadIdx.x) * seg)
    hi = min(chunk_hi, i + seg)
    while i < hi:
        b = (i - offset) >> bits
        end = min(hi, offset + ((b + 1) << bits))
        m = int64(0)
        for j in range(i, end):
            m = max(m, abs(int64(levels[j])))
        cuda.atomic.max(maxima, first + b, int32(m))
        if larger >= 0:
            cuda.atomic.max(maxima, larger + ((i - offset) >> larger_bits), int32(m))
        i = end


@cuda.jit(device=True, inline=True)
def _count(bins, counts, in_shared, at, where):
    """Add one to bin ``where`` of a part's counts: in shared memory (``bins``), or in
    counts[at + where]."""
    if in_shared:
        cuda.atomic.add(bins, where, int32(1))
    else:
        cuda.atomic.add(counts, at + where, int64(1))


@cuda.jit(cache=True)
def context_counts(levels, chunks, parts, maxima, counts):
    """Every part's symbol counts (note 7) added to ``counts`` (int64, zeroed) from its
    STAT_COUNTS: without contexts (STAT_BITS -1), level - base of every level in row 0;
    with contexts, for the one block in every STAT_STRIDE that ``sampled`` names, at row
    (its block's maximum) and column level - base, and the same for the larger blocks from
    STAT_LARGER_AT where STAT_LARGER is not -1. Rows are STAT_COLS wide. Counted in shared
    memory where the part's STAT_BINS fit SHARED_BINS. Grid: a block per chunk."""
    bins = cuda.shared.array(SHARED_BINS, int32)
    t = cuda.threadIdx.x
    part, chunk_lo, chunk_hi, offset, bits, first, larger, larger_bits = _blocks_of(chunks,
                                                                                   parts)
    cols = parts[part, STAT_COLS]
    if cols == 0:
        return
    base = parts[part, STAT_BASE]
    stride = parts[part, STAT_STRIDE]
    larger_at = parts[part, STAT_LARGER_AT]
    at = parts[part, STAT_COUNTS]
    n_bins = parts[part, STAT_BINS]
    # The bins of one block size: every row of the window's columns and the escape's.
    plane = larger_at if larger >= 0 else n_bins
    in_shared = n_bins <= SHARED_BINS
    if in_shared:
        for b in range(t, n_bins, cuda.blockDim.x):
            bins[b] = 0
    cuda.syncthreads()
    for i in range(chunk_lo + t, chunk_hi, cuda.blockDim.x):
        # The rows the level is counted in (-1: none), found before the level is read: the
        # warps of blocks that are not sampled read no level.
        row = int64(-1)
        larger_row = int64(-1)
        if bits < 0:
            row = 0
        else:
            b = (i - offset) >> bits
            if sampled(b, stride):
                row = int64(maxima[first + b])
            if larger >= 0:
                b = (i - offset) >> larger_bits
                if sampled(b, stride):
                    larger_row = int64(maxima[larger + b])
        if row < 0 and larger_row < 0:
            continue
        s = int64(levels[i]) - base
        if s < 0 or s >= cols - 1:
            continue
        if row >= 0 and row * cols < plane:
            _count(bins, counts, in_shared, at, row * cols + s)
        if larger_row >= 0 and larger_row * cols < plane:
            _count(bins, counts, in_shared, at, larger_at + larger_row * cols + s)
    cuda.syncthreads()
    if in_shared:
        for b in range(t, n_bins, cuda.blockDim.x):
            if bins[b] != 0:
                cuda.atomic.add(counts, at + b, int64(bins[b]))
