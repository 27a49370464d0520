"""MSB-first bit I/O shared by every kernel.

READ ME FIRST
1. Streams are MSB-first: the first bit of a stream is the most significant bit of byte 0, so
   canonical Huffman codes and Elias codes appear exactly as written in the textbooks.
2. The writer emits 32-bit words into a native ``uint32`` array; the caller turns that into
   big-endian bytes once at the end (``words_to_bytes``). The accumulator keeps fewer than 32
   pending bits between calls, so one ``put_bits`` of up to 32 bits never overflows 64 bits.
3. The reader never trusts a length: a peek reads two words, so callers must keep
   ``bit_pos <= payload_bits`` and the word array must carry ``READ_PAD_WORDS`` zero words past
   the payload. Every decoder checks ``bit_pos`` against ``payload_bits`` before each peek.
4. Hot loops use only the scalar helpers (``push_bits``, ``word_below``, ``settle``,
   ``join64``): passing an array into a jitted helper costs an atomic reference-count pair per
   call in Numba, more than the whole per-symbol budget (docs/design.md). Helpers that take
   arrays (``put_bits``, ``put_bits_long``, ``peek64``) are for rare paths: escapes, long codes,
   headers.
5. Hot loops keep their counters and indices ``uint64``: Numba wraps negative signed indices
   with extra instructions and registers, and the spills that followed put the bit counter's
   dependency chain through memory. They store a word on every step and advance ``word_pos``
   only when it is complete (``settle``): no unpredictable branch. That store may land one word
   past the data, so a buffer needs one spare word (``out_words`` leaves two). (docs/design.md
   has the measurements behind both.)
6. Table-driven decoders keep a bit buffer per chain: a uint64 whose top bits are the next
   stream bits, then one sentinel 1 bit, then zeros (``buffer_at``). Consuming n bits is one
   shift left; the sentinel's place tells how many bits are left, so the chain state is just
   (buffer, ``end``: the stream position after the buffered bits). ``buffer_refill`` loads from
   ``end``, which was fixed at the previous refill: the load is off the chain of lookups, which
   then waits only for one shift and one or (docs/design.md has the measurement against
   peeking at the bit position every step).

Writer state is three locals threaded through calls: ``acc`` (uint64, pending bits right-aligned),
``n_pending`` (bits in ``acc``, 0..31) and ``word_pos`` (next uint32 slot).
"""
import numpy as np
from numba import njit, uint64, int64
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

from .stores import big_endian, load8, store4_bytes

# peek64 reads words[j] and words[j + 1] where j = bit_pos >> 6 and bit_pos may sit at the very
# end of the payload; two zero words cover that read and one 48-bit multi-symbol step beyond it.
READ_PAD_WORDS = 2


# Words are 32 bits and a put writes at most 32: with fewer than 32 bits pending, one put never
# overflows the 64-bit accumulator. Longer values go through put_bits_long (Elias codes of
# 33-bit values reach 65 bits).
WORD_BITS = 32
# A bit position's word: position >> WORD_SHIFT; its bit within the word: position & WORD_MASK.
WORD_SHIFT = 5
WORD_MASK = WORD_BITS - 1
assert 1 << WORD_SHIFT == WORD_BITS


@njit(cache=True, inline="always")
def push_bits(acc, n_pending, value, n_bits):
    """Append the low ``n_bits`` (0..32) of ``value`` to the accumulator (n_pending < 32 before).

    The caller then stores a word when ``n_pending >= WORD_BITS`` (see ``word_below``).
    """
    return (acc << uint64(n_bits)) | uint64(value), n_pending + n_bits


@njit(cache=True, inline="always")
def word_below(acc, n_pending):
    """The 32-bit word sitting just above the ``n_pending`` newest bits of ``acc``."""
    return np.uint32((acc >> uint64(n_pending)) & uint64(0xFFFFFFFF))


@njit(cache=True, inline="always")
def settle(acc, n_pending):
    """Branch-free flush step for ``n_pending`` (uint64) < 64: returns (the word to store at
    ``word_pos``, the new n_pending (< 32), words completed (0 or 1, added to ``word_pos``))."""
    full = n_pending >> uint64(5)
    n_pending -= full << uint64(5)
    return np.uint32(acc >> n_pending), n_pending, full


@njit(cache=True, inline="always")
def join64(word, next_word, bit_offset):
    """64 stream bits starting ``bit_offset`` (0..63) bits into ``word``, first bit in the MSB."""
    s = uint64(bit_offset)
    # (x >> 1) >> (63 - s) is x >> (64 - s) without the undefined shift by 64 when s == 0.
    return (word << s) | ((next_word >> uint64(1)) >> (uint64(63) - s))


@njit(cache=True, inline="always")
def put_bits(out32, acc, n_pending, word_pos, value, n_bits):
    """Append the low ``n_bits`` (0..32) of ``value``; returns the new (acc, n_pending, word_pos)."""
    acc = (acc << uint64(n_bits)) | uint64(value)
    n_pending += n_bits
    if n_pending >= 32:
        n_pending -= 32
        out32[word_pos] = np.uint32((acc >> uint64(n_pending)) & uint64(0xFFFFFFFF))
        word_pos += 1
    return acc, n_pending, word_pos


@njit(cache=True, inline="always")
def put_bits_long(out32, acc, n_pending, word_pos, value, n_bits):
    """Append the low ``n_bits`` (0..64) of ``value``, high part first."""
    if n_bits > 32:
        hi_bits = n_bits - 32
        acc, n_pending, word_pos = put_bits(out32, acc, n_pending, word_pos,
                                            uint64(value) >> uint64(32), hi_bits)
        n_bits = 32
    mask = (uint64(1) << uint64(n_bits)) - uint64(1) if n_bits < 64 else ~uint64(0)
    return put_bits(out32, acc, n_pending, word_pos, uint64(value) & mask, n_bits)


@njit(cache=True, inline="always")
def flush_bits(out32, acc, n_pending, word_pos):
    """Write the pending bits, zero-padded to a word; returns the number of words used."""
    if n_pending > 0:
        out32[word_pos] = np.uint32((acc << uint64(32 - n_pending)) & uint64(0xFFFFFFFF))
        word_pos += 1
    return word_pos


@njit(cache=True, inline="always")
def peek64(words, bit_pos):
    """The 64 bits starting at ``bit_pos`` (>= 0; indices uint64, note 5)."""
    b = uint64(bit_pos)
    j = b >> uint64(6)
    return join64(words[j], words[j + uint64(1)], b & uint64(63))


# Stream bits a refilled buffer holds (the 64th bit is the sentinel): room for five 12-bit lookups.
BUFFER_BITS = 63
# Lookups the table decoders make between refills: 5 * 12 = 60 <= BUFFER_BITS (measured: the
# lane loop 1.05x faster than with 4).
LOOKUPS_PER_BUFFER = 5


@njit(cache=True, inline="always")
def buffer_at(words, bit_pos):
    """A bit buffer (note 6) holding the BUFFER_BITS stream bits from ``bit_pos``; returns
    (buffer, end) as uint64."""
    b = uint64(bit_pos)
    return peek64(words, b) | uint64(1), b + uint64(BUFFER_BITS)


@njit(cache=True, inline="always")
def buffer_refill(words, buf, end):
    """Top the buffer up to BUFFER_BITS bits; returns the new (buffer, end). Reads the 64 bits at
    ``end``, so ``end`` must lie within the payload plus READ_PAD_WORDS words."""
    spent = uint64(trailing_zeros(buf))        # bits consumed since the last refill
    kept = uint64(BUFFER_BITS) - spent
    return (buf & (buf - uint64(1))) | (peek64(words, end) >> kept) | uint64(1), end + spent


@njit(cache=True, inline="always")
def buffer_position(buf, end):
    """Stream position of the buffer's first bit."""
    return end - (uint64(BUFFER_BITS) - uint64(trailing_zeros(buf)))


@njit(cache=True, inline="always")
def top_bits(peeked, n_bits):
    """The first ``n_bits`` (1..64) of 64 peeked bits as an integer."""
    return peeked >> uint64(64 - n_bits)


@njit(cache=True, inline="always")
def bit_length(x):
    """Bits needed to write ``x`` (uint64); 0 for 0."""
    return 64 - int64(leading_zeros(uint64(x)))


@njit(cache=True, inline="always")
def count_leading_zeros(peeked):
    """Leading zero bits of 64 peeked bits (64 for 0)."""
    return int64(leading_zeros(uint64(peeked)))


@njit(cache=True, inline="always")
def zigzag(v):
    """Signed level -> unsigned: 0, -1, 1, -2, 2 ... -> 0, 1, 2, 3, 4 (int64 in, uint64 out)."""
    v = int64(v)
    return uint64((v << 1) ^ (v >> 63))


@njit(cache=True, inline="always")
def unzigzag(u):
    """Inverse of ``zigzag`` (uint64 in, int64 out)."""
    u = uint64(u)
    return int64(u >> uint64(1)) ^ -int64(u & uint64(1))


@njit(cache=True, nogil=True)
def store_payload(out32, n_bytes, dst, start):
    """Write the first ``n_bytes`` of the stream in ``out32`` (native uint32 words) to
    dst[start:start + n_bytes] (uint8) as big-endian bytes, the wire order."""
    full = uint64(n_bytes) // uint64(4)
    first = uint64(start)
    for k in range(full):
        store4_bytes(dst, first + uint64(4) * k, big_endian(out32[k]))
    for b in range(full * uint64(4), uint64(n_bytes)):
        shift = uint64(24) - uint64(8) * (b & uint64(3))
        dst[first + b] = np.uint8((out32[b >> uint64(2)] >> shift) & np.uint32(0xFF))


def write_payload(out32, n_bits, dst, start):
    """Write the first ``n_bits`` of ``out32`` (the words written) to dst[start:] as big-endian
    bytes, ceil(n_bits / 8) of them; checks that the words hold that many bits."""
    n_bytes = (n_bits + 7) // 8
    if n_bytes > 4 * out32.size:
        raise ValueError(f"{n_bits} payload bits but {out32.size} words written")
    if n_bytes:
        store_payload(out32, n_bytes, dst, start)


def words_to_bytes(out32, n_bits):
    """Big-endian bytes (a new uint8 array) of the first ``n_bits`` written into ``out32``."""
    out = np.empty((n_bits + 7) // 8, dtype=np.uint8)
    write_payload(out32, n_bits, out, 0)
    return out


@njit(cache=True, nogil=True)
def load_payload(payload, words):
    """words[k] = the native uint64 of big-endian payload bytes 8k..8k+7 (zeros past the end of
    ``payload``); ``words`` must hold at least ceil(len(payload) / 8) words."""
    n = uint64(payload.shape[0])
    full = n // uint64(8)
    for k in range(full):
        words[k] = big_endian(load8(payload, uint64(8) * k))
    for k in range(full, uint64(words.shape[0])):
        words[k] = 0
    for b in range(full * uint64(8), n):
        words[full] |= uint64(payload[b]) << (uint64(56) - uint64(8) * (b & uint64(7)))


def bytes_to_words(payload):
    """Native uint64 words of a big-endian byte payload (uint8 array or bytes-like), with
    READ_PAD_WORDS zero words after."""
    if not isinstance(payload, np.ndarray):
        payload = np.frombuffer(payload, dtype=np.uint8)
    words = np.empty((len(payload) + 7) // 8 + READ_PAD_WORDS, dtype=np.uint64)
    load_payload(payload, words)
    return words
