"""Device-side bit helpers shared by the CUDA encode and decode kernels (numba.cuda).

READ ME FIRST
1. Same conventions as bits.py: MSB-first streams in 32-bit words on the writing side, native
   uint64 words of the big-endian payload on the reading side (bits.bytes_to_words).
2. The CUDA simulator swaps a module's ``cuda`` for its fake module around each call of one of
   its device functions from another module, and a thread returning from such a call swaps
   it back under the feet of a thread still inside one that uses an intrinsic. So the
   functions here that threads of one block call at any time (peek64, zigzag, unzigzag) use
   none; ``block_scan`` uses them only between barriers every thread reaches; ``put`` and
   ``flush`` use an atomic OR on the words a segment shares. The bit-length helpers live
   beside their only callers (cuda_tokens.bit_length32, cuda_decode.leading_zeros64), whose
   module keeps the fake ``cuda`` for the whole kernel.
3. Block scans run in shared memory with ``syncthreads`` (no warp intrinsics, which the simulator
   lacks); every thread of the block must call them.
Units: bit counts and positions are int64 bits; BLOCK is threads per block.
"""
from numba import config, cuda, int64, uint32, uint64

# Threads per encode block (one block per chunk): 2**16-level chunks give 256-level segments,
# long enough to amortize a segment's two atomics, short enough for 256 threads of parallelism.
# The simulator runs every thread as a Python thread, so it gets 16 (the output is the same for
# any power of two: it depends on chunks, not segments).
BLOCK = 16 if config.ENABLE_CUDASIM else 256


@cuda.jit(device=True, inline=True)
def zigzag(v):
    """Signed level -> unsigned (0, -1, 1, -2 ... -> 0, 1, 2, 3), as bits.zigzag."""
    v = int64(v)
    return uint64((v << 1) ^ (v >> 63))


@cuda.jit(device=True, inline=True)
def unzigzag(u):
    return int64(u >> uint64(1)) ^ -int64(u & uint64(1))


@cuda.jit(device=True, inline=True)
def peek64(words, bit_pos):
    """64 stream bits from ``bit_pos``, first bit in the MSB (words padded as bits.READ_PAD_WORDS)."""
    j = bit_pos >> 6
    s = uint64(bit_pos & 63)
    return (words[j] << s) | ((words[j + 1] >> uint64(1)) >> (uint64(63) - s))


@cuda.jit(device=True, inline=True)
def put(out, acc, pending, word_pos, shared_word, value, n_bits):
    """Append the low ``n_bits`` (0..32) of ``value`` (pending < 32 before); a completed word is
    stored, with atomic OR when it is ``shared_word`` (a word another thread also writes)."""
    acc = (acc << uint64(n_bits)) | uint64(value)
    pending += n_bits
    if pending >= 32:
        pending -= 32
        word = uint32((acc >> uint64(pending)) & uint64(0xFFFFFFFF))
        if word_pos == shared_word:
            cuda.atomic.or_(out, word_pos, word)
        else:
            out[word_pos] = word
        word_pos += 1
    return acc, pending, word_pos


@cuda.jit(device=True, inline=True)
def flush(out, acc, pending, word_pos):
    """OR the pending bits (zero-padded) into their word, which the next segment may share."""
    if pending > 0:
        cuda.atomic.or_(out, word_pos, uint32((acc << uint64(32 - pending)) & uint64(0xFFFFFFFF)))


@cuda.jit(device=True, inline=True)
def block_scan(scratch, value, maximum):
    """Inclusive prefix sum (``maximum`` False) or prefix maximum (True) of ``value`` over the
    block (Hillis-Steele in the int64 shared ``scratch`` of BLOCK entries)."""
    t = cuda.threadIdx.x
    scratch[t] = value
    cuda.syncthreads()
    offset = 1
    while offset < BLOCK:
        other = scratch[t - offset] if t >= offset else value
        cuda.syncthreads()
        if maximum:
            if other > scratch[t]:
                scratch[t] = other
        elif t >= offset:
            scratch[t] += other
        cuda.syncthreads()
        offset *= 2
    result = scratch[t]
    cuda.syncthreads()
    return result
