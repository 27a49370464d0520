"""CUDA decode kernels: table-driven decoding of chunked huffman/sh and rlh/shs payloads, and
the fixed-width raw payload, with the CPU decoders' checks and status codes (errors.py).

READ ME FIRST
1. One block of BLOCK threads per chunk, each thread a slice of the chunk's bits, with no
   index of where codes start inside a chunk (the stream is the CPU's, unchanged). A chunk is
   a chain of codes, each starting where the one before ends, so only slice 0 knows where its
   first code starts (the chunk's first bit). The others start at their slice's first bit,
   likely mid-code, and decode anyway: a prefix code falls back into step with the true code
   boundaries within a few codes. Each slice decodes up to the first boundary at or past its
   end, which is where the next slice must start; a slice whose start changes decodes again,
   until none changes (after round r slices 0..r are right, so at most BLOCK rounds, and
   each decodes at most its slice: hostile streams cost at most the serial decode's work per
   thread). Then a block scan of the slices' level counts gives each its first output level,
   and every slice decodes a last time, writing its levels. The block first copies the
   4096-entry lookup table into shared memory.
2. The words are bits.bytes_to_words of the payload (native uint64 of big-endian bytes, two zero
   words of padding), so a 64-bit peek at any position up to the payload's end is in bounds;
   every read is preceded by a check of the position against the chunk's declared end.
3. Errors of a slice that started mid-code mean nothing; once the starts agree, every slice
   decodes the true codes, and the first slice's error is the chunk's. The counts must add up
   to the chunk's levels and the codes end on its last bit, else the chunk is rejected as the
   serial decoder would reject it (the message may name another check). Thread 0 writes the
   chunk's status into ``status``; the host raises the first non-zero.
4. Every decoder puts its levels through cuda_quantize.put_level: into a levels array, or
   dequantized into a float total, assigned or added (that module's note 4).
5. ``decode_streams`` decodes a group of streams of the same chunk size and level dtype in
   one launch, into one destination array: the N ranks' streams of a bucket, summed into its
   total in rank order; the summed shards of a two-phase gather, each into its own slice of
   the bucket; the streams of many buckets, each bucket's total a slice of one array. A
   stream table (STREAM_*) gives each stream its words, chunk offsets and bits, levels,
   first output element, code kind, window, escape widths, scales and put mode (the first
   of a slice assigns, the others add); the words, chunk arrays and scales of all streams
   are concatenated. Streams that write the same elements form a set, consecutive in the
   table; a block table (BLOCK_*) gives every block a chunk index c and a set, and the block
   decodes chunk c of the set's first stream, then of its second and so on (a stream with
   fewer chunks skips the block, the whole block alike), a barrier between them, so that
   every level's additions come in stream order (a level may be written by another thread
   of the block for each stream), as the host sums them. Sets run in parallel, a block per
   chunk of their longest stream.
Units: positions are int64 bits of the payload; ``chunk`` is levels per chunk.
"""
from numba import cuda, int64, uint32, uint64

from .cuda_bits import BLOCK, block_scan, peek64, unzigzag
from .cuda_quantize import put_level
from .errors import OK, PAYLOAD_OVERRUN, INVALID_CODE, RUN_OVERFLOW, VALUE_OVERFLOW, BAD_ELIAS
from .maxima import (LENGTH_BITS, LENGTH_MASK, MAX_CODE_BITS, MAX_ELIAS_VALUE_BITS, TABLE_SIZE,
                     TOKEN_ESCAPE,
                     TOKEN_EXTRA_MASK, TOKEN_EXTRA_SHIFT, TOKEN_LENGTH_MASK, TOKEN_LEVEL_SHIFT,
                     TOKEN_RUN_MASK, TOKEN_RUN_SHIFT)

_TOP = uint64(64 - MAX_CODE_BITS)


@cuda.jit(device=True, inline=True)
def _chunk(c, starts, chunk_bits, chunk, n):
    """(first level, level end, first bit, end bit) of chunk c."""
    i = int64(c) * chunk
    return i, min(int64(n), i + chunk), starts[c], starts[c] + chunk_bits[c]


@cuda.jit(device=True, inline=True)
def _token(words, tab, tokens, bit_pos, end_bit, base, window, vbits, esc_has_run, lo, hi):
    """(status, level, run, bit position after it) of the code at ``bit_pos`` (< end_bit):
    with ``tokens`` a rlh/shs token (``tab`` entries as tokens.token_table), else a
    huffman/sh level (entries ``symbol << LENGTH_BITS | length``; symbol ``window`` escapes a
    zigzag level in ``vbits`` bits), with the CPU decoders' checks."""
    e = tab[peek64(words, bit_pos) >> _TOP]
    if tokens:
        length = int64(e & uint64(TOKEN_LENGTH_MASK))
    else:
        length = int64(e & uint64(LENGTH_MASK))
    if length == 0:
        return INVALID_CODE, int64(0), int64(0), bit_pos
    bit_pos += length
    if bit_pos > end_bit:
        return PAYLOAD_OVERRUN, int64(0), int64(0), bit_pos
    if tokens:
        if e & uint64(TOKEN_ESCAPE):
            return _escaped_token(words, bit_pos, end_bit, vbits, esc_has_run, lo, hi)
        level, run, bit_pos = _coded_token(words, e, bit_pos, base)
        return OK, level, run, bit_pos
    s = int64(e >> uint64(LENGTH_BITS))
    if s != window:
        return OK, base + s, int64(1), bit_pos
    return _escaped_token(words, bit_pos, end_bit, vbits, False, lo, hi)


@cuda.jit(device=True, inline=True)
def _walk(words, tab, tokens, entry, stop_bit, end_bit, base, window, vbits, esc_has_run, lo,
          hi, levels, dest, first):
    """Decode from the code boundary ``entry`` until the first boundary at or past
    ``stop_bit``: (status, levels decoded, that boundary). More than ``levels`` (the chunk's)
    is RUN_OVERFLOW, which also bounds the count. With ``first`` >= 0 the levels are also
    put at first, first + 1, ... (``dest``: put_level's (out, total, scales, bucket, mode)).
    ``entry`` < 0 (no boundary known) decodes nothing and passes -1 on; so does an error (the
    status says which)."""
    if entry < 0:
        return OK, int64(0), int64(-1)
    bit_pos = entry
    count = int64(0)
    while bit_pos < stop_bit:
        st, level, run, bit_pos = _token(words, tab, tokens, bit_pos, end_bit, base, window,
                                         vbits, esc_has_run, lo, hi)
        if st != OK:
            return st, count, int64(-1)
        if run > levels - count:
            return RUN_OVERFLOW, count, int64(-1)
        if first >= 0:
            out, total, scales, bucket, mode = dest
            for j in range(first + count, first + count + run):
                put_level(out, total, scales, bucket, mode, j, level)
        count += run
    return OK, count, bit_pos


# Columns of a group's stream table (int64, a row per stream, note 5): those every group has
# (STREAM_COMMON of them; cuda_ans.py's group decoder has its own after them), then the code's.
(STREAM_WORDS, STREAM_CHUNKS, STREAM_LEVELS, STREAM_OUT, STREAM_SCALES, STREAM_MODE,
 STREAM_COMMON) = range(7)
(STREAM_TOKENS, STREAM_BASE, STREAM_WINDOW, STREAM_VBITS, STREAM_ESC_HAS_RUN,
 STREAM_FIELDS) = range(STREAM_COMMON, STREAM_COMMON + 6)
# A block's row (note 5): its chunk index, and its set, the streams [first, end) of the table.
BLOCK_CHUNK, BLOCK_FIRST, BLOCK_END, BLOCK_FIELDS = range(4)


@cuda.jit(cache=True)
def decode_streams(words, streams, blocks, starts, chunk_bits, tables, chunk, lo, hi, out,
                   total, scales, bucket, status):
    """A group of huffman/sh or rlh/shs payloads (note 5): level j of stream s put by
    put_level(out[its first element:], total[its first element:], scales[its first scale:],
    bucket, its mode, j, level). Block b decodes chunk blocks[b, BLOCK_CHUNK] of every stream
    of its set that has one, in order, with a barrier between them. ``tables``: a 4096-entry
    lookup table per stream (uint64 entries, as ``_token`` reads them); ``status``: a status
    per chunk of every stream, chunk c of stream s at its STREAM_CHUNKS + c. Grid: a block of
    BLOCK threads per row of ``blocks``."""
    tab = cuda.shared.array(TABLE_SIZE, uint64)
    exits = cuda.shared.array(BLOCK, int64)
    scratch = cuda.shared.array(BLOCK, int64)
    errors = cuda.shared.array(BLOCK, int64)
    verdict = cuda.shared.array(1, int64)
    changed = cuda.shared.array(1, int64)
    t = cuda.threadIdx.x
    b = cuda.blockIdx.x
    c = blocks[b, BLOCK_CHUNK]
    for s in range(blocks[b, BLOCK_FIRST], blocks[b, BLOCK_END]):
        row = streams[s]
        n = row[STREAM_LEVELS]
        if c * chunk >= n:                  # the same for the whole block: no barrier skipped
            continue
        cuda.syncthreads()                  # the stream before is written, its table unused
        for j in range(t, TABLE_SIZE, BLOCK):
            tab[j] = tables[s, j]
        at = row[STREAM_CHUNKS]
        first, stop, start, end = _chunk(c, starts[at:], chunk_bits[at:], chunk, n)
        to = row[STREAM_OUT]
        dest = (out[to:], total[to:], scales[row[STREAM_SCALES]:], bucket, row[STREAM_MODE])
        cuda.syncthreads()
        _decode_chunk(words[row[STREAM_WORDS]:], tab, row[STREAM_TOKENS] != 0,
                      row[STREAM_BASE], row[STREAM_WINDOW], row[STREAM_VBITS],
                      row[STREAM_ESC_HAS_RUN] != 0, lo, hi, first, stop, start, end, dest,
                      exits, scratch, errors, verdict, changed)
        if t == 0:
            status[at + c] = verdict[0]


@cuda.jit(device=True, inline=True)
def _decode_chunk(words, tab, tokens, base, window, vbits, esc_has_run, lo, hi, first, stop,
                  start, end, dest, exits, scratch, errors, verdict, changed):
    """Decode the chunk of levels [first, stop) at bits [start, end) (note 1), every thread of
    the block; its status in verdict[0]. The shared arrays: ``exits``, ``scratch``,
    ``errors`` (BLOCK entries each), ``verdict`` and ``changed`` (one)."""
    t = cuda.threadIdx.x
    # Thread t's slice of the chunk's bits: it decodes the codes that start in it.
    per = max(int64(1), (end - start + BLOCK - 1) // BLOCK)
    stop_bit = min(start + (t + 1) * per, end)
    entry = min(start + t * per, end)
    # Rounds: a slice entered at a code boundary ends at one, which is where the next slice
    # enters; slice 0 enters at the chunk's first bit, so after round r slices 0..r are right,
    # and a slice that enters mid-code falls into step with the true codes within a few
    # (Huffman codes resynchronize). Until nothing changes: at most BLOCK rounds.
    st, count, out_bit, stale = OK, int64(0), int64(-1), True
    while True:
        if stale:
            st, count, out_bit = _walk(words, tab, tokens, entry, stop_bit, end, base, window,
                                       vbits, esc_has_run, lo, hi, stop - first, dest, -1)
        exits[t] = out_bit
        if t == 0:
            changed[0] = 0
        cuda.syncthreads()
        truth = start if t == 0 else exits[t - 1]
        cuda.syncthreads()
        stale = truth != entry
        if stale:
            entry = truth
            changed[0] = 1
        cuda.syncthreads()
        if changed[0] == 0:
            break
        cuda.syncthreads()
    ends = block_scan(scratch, count, False)          # levels up to the end of each slice
    _verdict(st, ends, out_bit, first, stop, end, scratch, errors, verdict)
    if verdict[0] == OK:
        _walk(words, tab, tokens, entry, stop_bit, end, base, window, vbits, esc_has_run, lo,
              hi, stop - first, dest, first + ends - count)


@cuda.jit(device=True, inline=True)
def _verdict(st, ends, out_bit, first, stop, end, scratch, errors, verdict):
    """The chunk's status into verdict[0], for every thread: the error of the first slice that
    has one; else PAYLOAD_OVERRUN where the codes end past the chunk's last bit, RUN_OVERFLOW
    where they hold more levels than the chunk, and PAYLOAD_OVERRUN where fewer (a serial
    decoder would read on past the end). ``ends``: block_scan of the slices' level counts."""
    t = cuda.threadIdx.x
    errors[t] = st
    key = block_scan(scratch, BLOCK - t if st != OK else 0, True)
    if t == BLOCK - 1:
        if key > 0:
            verdict[0] = errors[BLOCK - key]
        elif out_bit > end:
            verdict[0] = PAYLOAD_OVERRUN
        elif ends > stop - first:
            verdict[0] = RUN_OVERFLOW
        elif ends < stop - first:
            verdict[0] = PAYLOAD_OVERRUN
        else:
            verdict[0] = OK
    cuda.syncthreads()


@cuda.jit(device=True, inline=True)
def _coded_token(words, e, bit_pos, base):
    """(level, run, bit position after the run's extra bits) of a coded token whose table entry
    is ``e`` and whose code ends at ``bit_pos``."""
    extra = int64((e >> uint64(TOKEN_EXTRA_SHIFT)) & uint64(TOKEN_EXTRA_MASK))
    run = int64((e >> uint64(TOKEN_RUN_SHIFT)) & uint64(TOKEN_RUN_MASK))
    if extra > 0:
        run += int64(peek64(words, bit_pos) >> uint64(64 - extra))
        bit_pos += extra
    return base + int64(e >> uint64(TOKEN_LEVEL_SHIFT)), run, bit_pos


@cuda.jit(device=True, inline=True)
def _escaped_token(words, bit_pos, end_bit, vbits, esc_has_run, lo, hi):
    """(status, level, run, bit position after it) of an escaped token whose escape code ends
    at ``bit_pos``: a zigzag level in ``vbits`` bits, checked against [lo, hi], then with
    ``esc_has_run`` an Elias-gamma run (else run 1)."""
    level = unzigzag(peek64(words, bit_pos) >> uint64(64 - vbits))
    bit_pos += vbits
    if level < lo or level > hi:
        return VALUE_OVERFLOW, level, int64(0), bit_pos
    if not esc_has_run:
        return OK, level, int64(1), bit_pos
    if bit_pos > end_bit:
        return PAYLOAD_OVERRUN, level, int64(0), bit_pos
    st, run, bit_pos = read_gamma(words, bit_pos, end_bit)
    return st, level, run, bit_pos


@cuda.jit(device=True, inline=True)
def leading_zeros64(w):
    """Leading zero bits of a uint64 (64 for 0). ``cuda.clz`` counts 32-bit words only: the
    simulator counts 64-bit zeros as if the value were 32 bits wide."""
    high = uint32(w >> uint64(32))
    if high != 0:
        return int64(cuda.clz(high))
    return 32 + int64(cuda.clz(uint32(w & uint64(0xFFFFFFFF))))


@cuda.jit(device=True, inline=True)
def read_gamma(words, bit_pos, end_bit):
    """(status, value, bit position after it) of the Elias-gamma code at ``bit_pos``, as
    elias.read_gamma: its zeros must stop short of MAX_ELIAS_VALUE_BITS and of ``end_bit``."""
    zeros = leading_zeros64(peek64(words, bit_pos))
    if zeros >= MAX_ELIAS_VALUE_BITS:
        return BAD_ELIAS, int64(0), bit_pos
    bit_pos += zeros
    if bit_pos > end_bit:
        return PAYLOAD_OVERRUN, int64(0), bit_pos
    return OK, int64(peek64(words, bit_pos) >> uint64(63 - zeros)), bit_pos + zeros + 1


@cuda.jit(cache=True)
def decode_fixed(words, base, width, hi, n, out, total, scales, bucket, mode, status):
    """raw: level i < n = base + the ``width`` bits at i * width (the host has checked the
    payload is exactly n * width bits), put by ``put_level``. Any grid; status[0] becomes
    VALUE_OVERFLOW on a level > hi."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        level = base
        if width > 0:
            level += int64(peek64(words, int64(i) * width) >> uint64(64 - width))
        if level > hi:
            status[0] = VALUE_OVERFLOW
        else:
            put_level(out, total, scales, bucket, mode, i, level)


@cuda.jit(cache=True)
def put_constant(level, n, out, total, scales, bucket, mode):
    """Levels 0 .. n - 1 all ``level`` (a constant stream), put by ``put_level``. Any grid."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        put_level(out, total, scales, bucket, mode, i, level)


@cuda.jit(cache=True)
def put_levels(levels, out, total, scales, bucket, mode):
    """Every level of a levels array that a decoder wrote, put by ``put_level`` (mode other
    than PUT_LEVEL). Any grid."""
    for i in range(cuda.grid(1), levels.shape[0], cuda.gridsize(1)):
        put_level(out, total, scales, bucket, mode, i, levels[i])
