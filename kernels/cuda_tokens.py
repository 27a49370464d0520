"""CUDA encode kernels: the token streams of ``huffman``/``sh``, ``rlh`` and ``shs``, and the
fixed-width ``raw`` stream, bit for bit as the CPU kernels write them.

READ ME FIRST
1. One thread block per chunk (chunks.py), BLOCK threads (cuda_bits.py). Thread t owns the
   levels [t * seg, (t + 1) * seg) of its chunk, seg = ceil(chunk / BLOCK), and every token that
   ENDS there. A token's run begins after the previous token's end, which a block max-scan finds
   (``segment_prev``) however many segments a run spans.
2. A launch codes a batch: several tensors (parts) laid end to end in one flat levels array,
   each with its own window and code. The chunk table ``chunks`` has a row per chunk of every
   part (CHUNK_LO, CHUNK_HI: its first level and end in the flat array; CHUNK_PART), and
   ``parts`` a row per part (PART_*: its window, escape symbol, where its code's entries start
   in ``entries`` and its histogram in ``counts``; an escape symbol of -1: a part the launch
   does not code). A part's chunks are those of the tensor alone, so each part's stream is
   the one the tensor alone gives.
3. Passes, one kernel each, every chunk of every part in one grid: ``chunk_ranges`` (each
   part's least and greatest level), ``segment_prev`` (run starts), ``count_tokens`` (symbol
   histograms: the code of huffman and rlh, and every code's bound on its payload),
   ``segment_bits`` (bits per segment, a block sum scan gives every segment's bit offset and
   every chunk's bits), ``write_tokens``. Between the last two each part's chunks are laid
   out on 32-bit words exactly as the CPU encoder lays them out, every part from a word of
   its own: where the host has given every part a region of words before the launch, by
   ``chunk_layout`` on the device; else (a part past its region) by the host, from the
   chunks' bits.
4. A segment's words are its own except its first (the previous segment may end inside it) and
   its last partial one: those two are ORed atomically into a zeroed buffer, the others stored.
5. Modes: LEVELS, every level is a token (huffman, sh); RUNS, maximal runs of equal levels
   (rlh); ZERO_RUNS, maximal zero runs, every non-zero level its own token (shs). Symbols and
   escapes are those of symbols.py and runs.py; ``entries`` are their length entries
   (``code << LENGTH_BITS | length``, maxima.py).
Units: positions and offsets are int64 bits of the payload; counts are tokens.
"""
from numba import cuda, int32, int64, uint32, uint64

from .bits import WORD_MASK, WORD_SHIFT
from .cuda_bits import BLOCK, zigzag, put, flush, block_scan
from .maxima import LENGTH_BITS, LENGTH_MASK, RUN_BUCKETS

LEVELS, RUNS, ZERO_RUNS = 0, 1, 2
# Shared-memory histogram bins (int32, 16 KiB): every rlh and shs alphabet (<= 4096 symbols
# plus the escape); wider huffman windows count straight into global memory.
SHARED_BINS = 4097
# Columns of the chunk table and of the parts table (note 2).
CHUNK_LO, CHUNK_HI, CHUNK_PART, CHUNK_FIELDS = 0, 1, 2, 3
PART_BASE, PART_WINDOW, PART_ESC, PART_ENTRIES, PART_COUNTS, PART_FIELDS = 0, 1, 2, 3, 4, 5


@cuda.jit(device=True, inline=True)
def bit_length32(x):
    """Bits needed to write x (0 <= x < 2**32); 0 for 0."""
    return 32 - int64(cuda.clz(uint32(x)))


@cuda.jit(device=True, inline=True)
def _segment(chunk, chunks):
    """(first level, end) of this thread's segment, and its chunk's first level and end (this
    block's row of the chunk table; ``chunk``: the most levels a chunk holds)."""
    c = cuda.blockIdx.x
    chunk_lo = chunks[c, CHUNK_LO]
    chunk_hi = chunks[c, CHUNK_HI]
    seg = (chunk + BLOCK - 1) // BLOCK
    lo = min(chunk_hi, chunk_lo + int64(cuda.threadIdx.x) * seg)
    return lo, min(chunk_hi, lo + seg), chunk_lo, chunk_hi


@cuda.jit(device=True, inline=True)
def _is_end(levels, i, chunk_hi, mode):
    """Whether a token ends at level i."""
    if mode == LEVELS or i == chunk_hi - 1:
        return True
    if mode == RUNS:
        return levels[i] != levels[i + 1]
    return levels[i] != 0 or levels[i + 1] != 0


@cuda.jit(device=True, inline=True)
def run_bucket(run):
    """runs.run_bucket for runs below 2**32."""
    if run < 4:
        return run - 1
    b = bit_length32(run) - 1
    return 3 + (b - 2) * 2 + ((run >> (b - 1)) & 1)


@cuda.jit(device=True, inline=True)
def token_symbol(mode, level, run, base, window):
    """Histogram symbol of a LEVELS or RUNS token (window, resp. RUN_BUCKETS * window: escape)."""
    v = int64(level) - base
    if mode == RUNS:
        if v < 0 or v >= window:
            return RUN_BUCKETS * window
        return run_bucket(run) * window + v
    if v < 0 or v >= window:
        return window
    return v


@cuda.jit(device=True, inline=True)
def _coded(mode, level, run, base, window, entries, bucket_extra):
    """(entry, extra bits) of a token's code; entry 0 when the token takes the escape."""
    v = int64(level) - base
    if v < 0 or v >= window:
        return uint32(0), int64(0)
    if mode == RUNS:
        b = run_bucket(run)
        return uint32(entries[b * window + v]), int64(bucket_extra[b])
    return uint32(entries[v]), int64(0)


@cuda.jit(device=True, inline=True)
def _token_bits(mode, level, run, base, window, entries, esc, vbits, bucket_extra, k):
    """Payload bits of one token (mirrors ``_write_token``)."""
    if mode == ZERO_RUNS and level == 0:
        full = run // k
        bits = full * int64(entries[window + k - 1] & LENGTH_MASK)
        if run > full * k:
            bits += int64(entries[window + run - full * k - 1] & LENGTH_MASK)
        return bits
    e, extra = _coded(mode, level, run, base, window, entries, bucket_extra)
    if e & LENGTH_MASK:
        return int64(e & LENGTH_MASK) + extra
    bits = int64(entries[esc] & LENGTH_MASK) + vbits
    if mode == RUNS:
        bits += 2 * bit_length32(run) - 1          # Elias-gamma run length
    return bits


@cuda.jit(device=True, inline=True)
def _write_token(out, acc, pending, word_pos, shared, mode, level, run, base, window, entries,
                 esc, vbits, bucket_extra, k):
    """Append one token as the CPU kernels write it; returns the writer state."""
    if mode == ZERO_RUNS and level == 0:
        full = run // k
        e = entries[window + k - 1]
        for _ in range(full):
            acc, pending, word_pos = put(out, acc, pending, word_pos, shared, e >> LENGTH_BITS,
                                         e & LENGTH_MASK)
        if run > full * k:
            e = entries[window + run - full * k - 1]
            acc, pending, word_pos = put(out, acc, pending, word_pos, shared, e >> LENGTH_BITS,
                                         e & LENGTH_MASK)
        return acc, pending, word_pos
    e, extra = _coded(mode, level, run, base, window, entries, bucket_extra)
    if e & LENGTH_MASK:
        acc, pending, word_pos = put(out, acc, pending, word_pos, shared, e >> LENGTH_BITS,
                                     e & LENGTH_MASK)
        if extra > 0:
            acc, pending, word_pos = put(out, acc, pending, word_pos, shared,
                                         run & ((1 << extra) - 1), extra)
        return acc, pending, word_pos
    e = entries[esc]                                # escape: code, raw zigzag level (, run)
    acc, pending, word_pos = put(out, acc, pending, word_pos, shared, e >> LENGTH_BITS,
                                 e & LENGTH_MASK)
    acc, pending, word_pos = put(out, acc, pending, word_pos, shared, zigzag(level), vbits)
    if mode == RUNS:
        n_bits = bit_length32(run)
        acc, pending, word_pos = put(out, acc, pending, word_pos, shared, 0, n_bits - 1)
        acc, pending, word_pos = put(out, acc, pending, word_pos, shared, run, n_bits)
    return acc, pending, word_pos


@cuda.jit(device=True, inline=True)
def _part_code(chunks, parts, all_entries):
    """(base, window, entries, escape symbol) of this block's part."""
    part = chunks[cuda.blockIdx.x, CHUNK_PART]
    return (parts[part, PART_BASE], parts[part, PART_WINDOW],
            all_entries[parts[part, PART_ENTRIES]:], parts[part, PART_ESC])


@cuda.jit(device=True, inline=True)
def _block_extremes(lo, hi):
    """(min, max) of every thread's ``lo`` and ``hi`` over the block, valid on thread 0 (every
    thread must call it)."""
    t = cuda.threadIdx.x
    scratch = cuda.shared.array((2, BLOCK), int64)
    scratch[0, t] = lo
    scratch[1, t] = hi
    cuda.syncthreads()
    if t == 0:
        for j in range(1, BLOCK):
            lo = min(lo, scratch[0, j])
            hi = max(hi, scratch[1, j])
    return lo, hi


@cuda.jit(cache=True)
def chunk_ranges(levels, chunks, lo_hi):
    """lo_hi[part, 0] = min, lo_hi[part, 1] = max of every part's levels (int64; start at
    +/- extremes). Grid: a block per chunk."""
    c = cuda.blockIdx.x
    lo = int64(0x7FFFFFFFFFFFFFFF)
    hi = -lo - 1
    for i in range(chunks[c, CHUNK_LO] + cuda.threadIdx.x, chunks[c, CHUNK_HI], BLOCK):
        v = int64(levels[i])
        lo = min(lo, v)
        hi = max(hi, v)
    lo, hi = _block_extremes(lo, hi)
    if cuda.threadIdx.x == 0:
        part = chunks[c, CHUNK_PART]
        cuda.atomic.min(lo_hi, (part, 0), lo)
        cuda.atomic.max(lo_hi, (part, 1), hi)


@cuda.jit(cache=True)
def segment_prev(levels, chunk, chunks, mode, seg_prev):
    """seg_prev[block * BLOCK + t] = the last token end before segment t (chunk start - 1 if
    none). Grid: one block per chunk."""
    lo, hi, chunk_lo, chunk_hi = _segment(chunk, chunks)
    last = chunk_lo - 1
    i = hi - 1
    while i >= lo:
        if _is_end(levels, i, chunk_hi, mode):
            last = i
            break
        i -= 1
    scratch = cuda.shared.array(BLOCK, int64)
    inclusive = block_scan(scratch, last, True)
    t = cuda.threadIdx.x
    scratch[t] = inclusive
    cuda.syncthreads()
    seg_prev[int64(cuda.blockIdx.x) * BLOCK + t] = scratch[t - 1] if t > 0 else chunk_lo - 1


@cuda.jit(cache=True)
def count_tokens(levels, chunk, chunks, mode, seg_prev, parts, k, counts):
    """Add every token's symbols to its part's histogram in ``counts`` (int64: a part's
    starts at its PART_COUNTS and has a bin per symbol, then one for the escape): a LEVELS or
    RUNS token's symbol (``token_symbol``); for ZERO_RUNS, shs's symbols with sparsity
    factor ``k``, those ``_token_bits`` codes: a non-zero level's index in the window (or the
    escape, bin window + k), and a zero run of r levels r // k times the symbol of k zeros
    (window + k - 1) and once that of its r % k left (window + r % k - 1), if any.
    Grid: a block per chunk."""
    lo, hi, chunk_lo, chunk_hi = _segment(chunk, chunks)
    part = chunks[cuda.blockIdx.x, CHUNK_PART]
    base = parts[part, PART_BASE]
    window = parts[part, PART_WINDOW]
    first = parts[part, PART_COUNTS]
    t = cuda.threadIdx.x
    bins = cuda.shared.array(SHARED_BINS, int32)
    n_bins = (window * RUN_BUCKETS if mode == RUNS else window) + 1
    if mode == ZERO_RUNS:
        n_bins += k
    in_shared = n_bins <= SHARED_BINS
    if in_shared:
        for b in range(t, n_bins, BLOCK):
            bins[b] = 0
    cuda.syncthreads()
    prev = seg_prev[int64(cuda.blockIdx.x) * BLOCK + t]
    for i in range(lo, hi):
        if _is_end(levels, i, chunk_hi, mode):
            n = int64(1)
            if mode == ZERO_RUNS:
                s, n, rest = _shs_symbols(levels[i], i - prev, base, window, k)
                if rest > 0:                    # (the run's r % k zeros)
                    _add_bin(bins, counts, first, in_shared, window + rest - 1, 1)
            else:
                s = token_symbol(mode, levels[i], i - prev, base, window)
            prev = i
            if n > 0:
                _add_bin(bins, counts, first, in_shared, s, n)
    cuda.syncthreads()
    if in_shared:
        for b in range(t, n_bins, BLOCK):
            if bins[b] != 0:
                cuda.atomic.add(counts, first + b, int64(bins[b]))


@cuda.jit(device=True, inline=True)
def _shs_symbols(level, run, base, window, k):
    """(symbol, its count, the zeros of a last shorter run or 0) of a ZERO_RUNS token with
    sparsity factor k, as ``count_tokens`` counts them."""
    if level == 0:
        full = run // k
        return window + k - 1, full, run - full * k
    v = int64(level) - base
    return (window + k if v < 0 or v >= window else v), int64(1), int64(0)


@cuda.jit(device=True, inline=True)
def _add_bin(bins, counts, first, in_shared, s, n):
    """Add n to bin s of the block's shared histogram, or of the part's in ``counts`` from
    ``first``."""
    if in_shared:
        cuda.atomic.add(bins, s, int32(n))
    else:
        cuda.atomic.add(counts, first + s, int64(n))


@cuda.jit(cache=True)
def segment_bits(levels, chunk, chunks, mode, seg_prev, parts, all_entries, vbits, bucket_extra,
                 k, seg_offset, chunk_bits):
    """Bit offset of every segment in its chunk, and every chunk's bits, each chunk coded with
    its part's code (its entries from PART_ENTRIES in ``all_entries``). Grid: block per chunk."""
    lo, hi, chunk_lo, chunk_hi = _segment(chunk, chunks)
    base, window, entries, esc = _part_code(chunks, parts, all_entries)
    idx = int64(cuda.blockIdx.x) * BLOCK + cuda.threadIdx.x
    prev = seg_prev[idx]
    bits = int64(0)
    if esc < 0:                                 # a part not coded in this launch: no bits
        hi = lo
    for i in range(lo, hi):
        if _is_end(levels, i, chunk_hi, mode):
            bits += _token_bits(mode, levels[i], i - prev, base, window, entries, esc, vbits,
                                bucket_extra, k)
            prev = i
    scratch = cuda.shared.array(BLOCK, int64)
    inclusive = block_scan(scratch, bits, False)
    seg_offset[idx] = inclusive - bits
    if cuda.threadIdx.x == BLOCK - 1:
        chunk_bits[cuda.blockIdx.x] = inclusive


@cuda.jit(device=True, inline=True)
def part_slice(first, p, t):
    """(first, end) of the rows of part p (rows first[p]..first[p + 1]) that thread t of a
    block of BLOCK threads takes: a run of consecutive rows, the runs in thread order. (It
    names no ``cuda``: cuda_ans.py note 5.)"""
    lo, hi = first[p], first[p + 1]
    per = (hi - lo + BLOCK - 1) // BLOCK
    a = min(hi, lo + t * per)
    return a, min(hi, a + per)


@cuda.jit(cache=True)
def chunk_layout(chunk_bits, first, regions, parts, chunk_start):
    """Lay every coded part's chunks out in its region of the payload (regions[p] = (first
    bit, end bit)) as kernels/chunks.py ``chunk_starts`` lays them out, every chunk from a
    word, into chunk_start; a part whose chunks and a flush word would pass its region's end
    is not written: its PART_ESC becomes -1, which ``write_tokens`` skips. Part p's chunks
    are rows first[p]..first[p + 1] of the chunk table. Grid: a block of BLOCK threads per
    part, each thread a run of its chunks (``part_slice``), placed by a block scan of the
    runs' bits."""
    scratch = cuda.shared.array(BLOCK, int64)
    p = cuda.blockIdx.x
    if parts[p, PART_ESC] < 0 or first[p + 1] == first[p]:
        return                                  # (the whole block)
    a, b = part_slice(first, p, int64(cuda.threadIdx.x))
    bits = int64(0)
    for c in range(a, b):
        bits += (chunk_bits[c] + WORD_MASK) >> WORD_SHIFT << WORD_SHIFT
    at = regions[p, 0] + block_scan(scratch, bits, False) - bits
    for c in range(a, b):
        chunk_start[c] = at
        at += (chunk_bits[c] + WORD_MASK) >> WORD_SHIFT << WORD_SHIFT
    last = b - 1                                # the part's last chunk, if this run ends it
    if a < b and b == first[p + 1] and \
            chunk_start[last] + chunk_bits[last] + (WORD_MASK + 1) > regions[p, 1]:
        parts[p, PART_ESC] = -1


@cuda.jit(cache=True)
def write_tokens(levels, chunk, chunks, mode, seg_prev, parts, all_entries, vbits, bucket_extra,
                 k, seg_offset, chunk_start, out):
    """Write every segment's tokens from chunk_start[chunk] + its offset (bits of ``out``)
    into ``out`` (uint32, zeroed). Grid: one block per chunk."""
    lo, hi, chunk_lo, chunk_hi = _segment(chunk, chunks)
    base, window, entries, esc = _part_code(chunks, parts, all_entries)
    if esc < 0:                                 # a part not coded in this launch
        return
    idx = int64(cuda.blockIdx.x) * BLOCK + cuda.threadIdx.x
    start = chunk_start[cuda.blockIdx.x] + seg_offset[idx]
    word_pos = start >> WORD_SHIFT
    pending = start & WORD_MASK                # zero bits standing for the previous segment's
    shared = word_pos if pending else int64(-1)
    acc = uint64(0)
    prev = seg_prev[idx]
    for i in range(lo, hi):
        if _is_end(levels, i, chunk_hi, mode):
            acc, pending, word_pos = _write_token(out, acc, pending, word_pos, shared, mode,
                                                  levels[i], i - prev, base, window, entries,
                                                  esc, vbits, bucket_extra, k)
            prev = i
    flush(out, acc, pending, word_pos)


@cuda.jit(cache=True)
def level_range(levels, lo_hi):
    """lo_hi[0] = min, lo_hi[1] = max of ``levels`` (int64; start at +/- extremes). Any grid."""
    lo = int64(0x7FFFFFFFFFFFFFFF)
    hi = -lo - 1
    for i in range(cuda.grid(1), levels.shape[0], cuda.gridsize(1)):
        v = int64(levels[i])
        lo = min(lo, v)
        hi = max(hi, v)
    lo, hi = _block_extremes(lo, hi)
    if cuda.threadIdx.x == 0:
        cuda.atomic.min(lo_hi, 0, lo)
        cuda.atomic.max(lo_hi, 1, hi)


@cuda.jit(cache=True)
def fill(out, value):
    """out[:] = value (of out's dtype). Any grid."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = value


@cuda.jit(cache=True)
def gather(levels, positions, out):
    """out[j] = levels[positions[j]] (sampling for sh and shs); ``out`` may be
    ``positions``. Any grid."""
    for j in range(cuda.grid(1), positions.shape[0], cuda.gridsize(1)):
        out[j] = levels[positions[j]]


@cuda.jit(cache=True)
def encode_fixed(levels, base, width, out):
    """``raw``: word w of the stream from the levels whose ``width``-bit fields touch it (one
    thread per word, no atomics). Any grid; width 1..32."""
    n = levels.shape[0]
    for w in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        first = int64(w) * 32
        word = uint64(0)
        for e in range(first // width, min(n, (first + 31) // width + 1)):
            value = uint64(int64(levels[e]) - base)
            end = e * width + width - first      # field end, in bits from the word's MSB
            if end <= 32:
                word |= value << uint64(32 - end)
            else:
                word |= value >> uint64(end - 32)
        out[w] = uint32(word & uint64(0xFFFFFFFF))

