"""CUDA decode kernels: table-driven decoding of chunked huffman/sh and rlh/shs payloads, and
the fixed-width raw payload, with the CPU decoders' checks and status codes (errors.py).

READ ME FIRST
1. One thread per chunk: a chunk is one serial chain of codes (each code's position depends on
   the previous one's length), and the chunk table gives every chain's first bit. Blocks of
   DECODE_BLOCK threads first copy the 4096-entry lookup table into shared memory.
2. The words are bits.bytes_to_words of the payload (native uint64 of big-endian bytes, two zero
   words of padding), so a 64-bit peek at any position up to the payload's end is in bounds;
   every read is preceded by a check of the position against the chunk's declared end.
3. Each thread writes its chunk's status into ``status``; the host raises the first non-zero.
Units: positions are int64 bits of the payload; ``chunk`` is levels per chunk.
"""
from numba import config, cuda, int64, uint32, uint64

from .cuda_bits import peek64, unzigzag, leading_zeros64
from .errors import (OK, PAYLOAD_OVERRUN, INVALID_CODE, RUN_OVERFLOW, VALUE_OVERFLOW,
                     PAYLOAD_UNDERRUN, BAD_ELIAS)
from .maxima import (LENGTH_BITS, LENGTH_MASK, MAX_CODE_BITS, MAX_ELIAS_VALUE_BITS, TABLE_SIZE,
                     TOKEN_ESCAPE,
                     TOKEN_EXTRA_MASK, TOKEN_EXTRA_SHIFT, TOKEN_LENGTH_MASK, TOKEN_LEVEL_SHIFT,
                     TOKEN_RUN_MASK, TOKEN_RUN_SHIFT)

# Chunks (threads) per decode block: few, since each thread runs a long serial chain and the
# block's first job is loading the shared table. The simulator gets one (cuda_ans.ANS_BLOCK).
DECODE_BLOCK = 1 if config.ENABLE_CUDASIM else 32
_TOP = uint64(64 - MAX_CODE_BITS)


@cuda.jit(device=True, inline=True)
def _load_table(tab, table):
    """The block copies the lookup table into shared memory (every thread takes part)."""
    for j in range(cuda.threadIdx.x, TABLE_SIZE, cuda.blockDim.x):
        tab[j] = table[j]
    cuda.syncthreads()


@cuda.jit(device=True, inline=True)
def _chunk(c, starts, chunk_bits, chunk, n):
    """(first level, level end, first bit, end bit) of chunk c."""
    i = int64(c) * chunk
    return i, min(int64(n), i + chunk), starts[c], starts[c] + chunk_bits[c]


@cuda.jit(device=True, inline=True)
def _end_status(status, bit_pos, end_bit):
    """A chunk decoded without error must end exactly at its declared bit length."""
    if status != OK:
        return status
    if bit_pos > end_bit:
        return PAYLOAD_OVERRUN
    if bit_pos < end_bit:
        return PAYLOAD_UNDERRUN
    return OK


@cuda.jit
def decode_levels(words, starts, chunk_bits, chunk, table, base, window, vbits, lo, hi, out,
                  status):
    """huffman/sh: ``table`` entries are ``symbol << LENGTH_BITS | length`` (uint32); symbol
    ``window`` is the escape, followed by a zigzag level in ``vbits`` bits. Grid: >= one thread
    per chunk."""
    tab = cuda.shared.array(TABLE_SIZE, uint32)
    _load_table(tab, table)
    c = cuda.grid(1)
    if c >= starts.shape[0]:
        return
    i, stop, bit_pos, end_bit = _chunk(c, starts, chunk_bits, chunk, out.shape[0])
    st = OK
    while i < stop:
        if bit_pos > end_bit:
            st = PAYLOAD_OVERRUN
            break
        e = tab[peek64(words, bit_pos) >> _TOP]
        length = int64(e & LENGTH_MASK)
        if length == 0:
            st = INVALID_CODE
            break
        bit_pos += length
        s = int64(e >> LENGTH_BITS)
        if s == window:
            if bit_pos > end_bit:
                st = PAYLOAD_OVERRUN
                break
            level = unzigzag(peek64(words, bit_pos) >> uint64(64 - vbits))
            bit_pos += vbits
            if level < lo or level > hi:
                st = VALUE_OVERFLOW
                break
            out[i] = level
        else:
            out[i] = base + s
        i += 1
    status[c] = _end_status(st, bit_pos, end_bit)


@cuda.jit
def decode_tokens(words, starts, chunk_bits, chunk, table, base, vbits, esc_has_run, lo, hi,
                  out, status):
    """rlh/shs: ``table`` entries as tokens.token_table (uint64). An escape carries a zigzag level
    in ``vbits`` bits, then, when ``esc_has_run``, an Elias-gamma run. Grid: >= a thread per
    chunk."""
    tab = cuda.shared.array(TABLE_SIZE, uint64)
    _load_table(tab, table)
    c = cuda.grid(1)
    if c >= starts.shape[0]:
        return
    i, stop, bit_pos, end_bit = _chunk(c, starts, chunk_bits, chunk, out.shape[0])
    st = OK
    while i < stop:
        if bit_pos > end_bit:
            st = PAYLOAD_OVERRUN
            break
        e = tab[peek64(words, bit_pos) >> _TOP]
        length = int64(e & uint64(TOKEN_LENGTH_MASK))
        if length == 0:
            st = INVALID_CODE
            break
        bit_pos += length
        if bit_pos > end_bit:
            st = PAYLOAD_OVERRUN
            break
        if e & uint64(TOKEN_ESCAPE):
            st, level, run, bit_pos = _escaped_token(words, bit_pos, end_bit, vbits, esc_has_run,
                                                     lo, hi)
            if st != OK:
                break
        else:
            level, run, bit_pos = _coded_token(words, e, bit_pos, base)
        if run > stop - i:
            st = RUN_OVERFLOW
            break
        for j in range(i, i + run):
            out[j] = level
        i += run
    status[c] = _end_status(st, bit_pos, end_bit)


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


@cuda.jit
def decode_fixed(words, base, width, hi, out, status):
    """raw: level i = base + the ``width`` bits at i * width (the host has checked the payload
    is exactly n * width bits). Any grid; status[0] becomes VALUE_OVERFLOW on a level > hi."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        level = base
        if width > 0:
            level += int64(peek64(words, int64(i) * width) >> uint64(64 - width))
        if level > hi:
            status[0] = VALUE_OVERFLOW
        else:
            out[i] = level
