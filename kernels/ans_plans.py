"""The statistics, estimates and class search of ``ans`` plans (horovod_huffman/codec/encoders/ans.py):
every block's largest |level| and the symbol counts per largest |level| (of a sample of blocks
in large tensors), what a stream of given symbol counts and frequencies costs, and which ranges
of a block's largest |level| share a frequency table.

Counts may be floats: a plan counted over a sample of blocks scales its counts to the tensor.
Units: bits unless named bytes; frequencies in slots of 1/ANS_PROB_SCALE.
"""
import numpy as np
from numba import njit, int64, uint64

from .ans import HEADER_UNITS, LANES, UNIT_BITS, normalize
from .bits import WORD_BITS
from .maxima import ANS_PROB_BITS, ANS_PROB_SCALE

# Parameter bytes of a frequency table per coded symbol (two varints: gap, frequency - 1;
# horovod_huffman/codec/encoders/ans.py write_frequencies).
TABLE_BYTES_PER_SYMBOL = 2
# Estimated parameter bytes of every stream (mode, base, window, chunk size...) and per chunk
# (its bit count).
STREAM_PARAM_BYTES = 12
CHUNK_PARAM_BYTES = 3


def chunk_overhead_bits(lanes):
    """Bits a chunk of ``lanes`` interleaved states adds to its symbols' information: the final
    states' units (each state holds at least 15 of its 31 bits) and half a word of padding."""
    return lanes * (2 * UNIT_BITS - 15) + WORD_BITS // 2


# ``chunk_overhead_bits`` of an ``ans`` chunk.
CHUNK_BITS = chunk_overhead_bits(LANES)
assert CHUNK_BITS == HEADER_UNITS * UNIT_BITS - LANES * 15 + WORD_BITS // 2
# Fibonacci hashing's multiplier (2**64 / golden ratio): ``sampled_block``'s offsets.
SAMPLE_HASH = 0x9E3779B97F4A7C15


# ---- Statistics -----------------------------------------------------------------------------

# The block size (levels) for which ``block_maxima`` compiles a loop of a fixed count, which
# LLVM unrolls into whole vectors (64 int8 levels: one 512-bit register): ans's default.
FIXED_BLOCK = 64


@njit(cache=True, nogil=True)
def block_maxima(levels, block_bits, maxima):
    """The largest |level| of every block of 2**block_bits levels (the last may be shorter)
    into ``maxima`` (int64, one per block): ``_magnitude``, of a fixed count for FIXED_BLOCK
    levels."""
    size = 1 << block_bits
    for b in range(maxima.shape[0]):
        block = levels[b * size:(b + 1) * size]
        if block.shape[0] == FIXED_BLOCK:
            maxima[b] = _magnitude(block, FIXED_BLOCK)
        else:
            maxima[b] = _magnitude(block, block.shape[0])


@njit(cache=True, inline="always")
def _magnitude(block, size):
    """The largest |level| of block[:size] (int64): ``_unsigned_max`` in the levels' own
    width."""
    if block.itemsize == 1:
        return _unsigned_max(block, size, np.uint8)
    if block.itemsize == 2:
        return _unsigned_max(block, size, np.uint16)
    if block.itemsize == 4:
        return _unsigned_max(block, size, np.uint32)
    return _unsigned_max(block, size, np.uint64)


@njit(cache=True, inline="always")
def _unsigned_max(block, size, unsigned):
    """The largest |level| of block[:size] as the ``unsigned`` type of the levels' width (so
    |-2**(w - 1)| = 2**(w - 1) holds), in int64. A pass with selects, not branches: LLVM
    vectorizes that form, one reduction per block (a min/max pair takes two, 1.6-2.3x
    slower; a slice's .max() and .min(), or a pass to a computed end, it does not
    vectorize)."""
    largest = unsigned(0)
    for i in range(size):
        magnitude = unsigned(np.abs(block[i]))
        largest = magnitude if magnitude > largest else largest
    return int64(largest)


@njit(cache=True, nogil=True)
def sampled_maxima(levels, block_bits, stride, maxima, sampled):
    """``block_maxima`` of the blocks ``class_counts`` counts (``sampled_block``) only: each
    into its entry of ``maxima`` (the others left unset) and, in order, into ``sampled``;
    returns how many."""
    size = 1 << block_bits
    n = levels.shape[0]
    k = 0
    for w in range(-(-maxima.shape[0] // stride)):
        b = sampled_block(w, stride)
        if b >= maxima.shape[0]:
            break
        block = levels[b * size:min(n, (b + 1) * size)]
        if block.shape[0] == FIXED_BLOCK:
            maxima[b] = _magnitude(block, FIXED_BLOCK)
        else:
            maxima[b] = _magnitude(block, block.shape[0])
        sampled[k] = maxima[b]
        k += 1
    return k


@njit(cache=True, inline="always")
def sampled_block(w, stride):
    """The block a plan counts among blocks w * stride .. (w + 1) * stride - 1: at an offset
    hashed from w (Fibonacci hashing), so that a tensor repeating with a period of a multiple
    of ``stride`` blocks (layers of one shape, one after another) is not sampled at one phase.
    The device computes the same (cuda_ans.sampled, in context_counts)."""
    return int64(w) * stride + int64(((uint64(w) * uint64(SAMPLE_HASH)) >> uint64(40)) %
                                     uint64(stride))


# Lanes of counts ``class_counts`` keeps (each a copy of the counts).
COUNT_LANES = 4
# Levels ``class_counts`` counts into its 32-bit lanes before it adds them to the counts (so
# that no lane wraps).
LANE_LEVELS = 1 << 31


@njit(cache=True, nogil=True)
def class_counts(levels, base, block_bits, stride, maxima, counts):
    """For one block of 2**block_bits levels in every ``stride`` (``sampled_block``) its symbol
    counts added to the row of its largest |level|: counts[maxima[b], level - base]
    (``maxima`` from ``block_maxima``; rows: at least the largest |level| + 1; every level must
    lie in the window). Four lanes of counts break the chains of increments of one counter
    (most levels are one symbol); each lane is a flat uint32 copy of ``counts`` (half the
    cache lines of int64 ones), added to ``counts`` every LANE_LEVELS levels and at the end,
    indexed unsigned, with the base folded into the row's offset (no index wraps: 1.4x faster
    than 3-D lanes)."""
    n = levels.shape[0]
    size = 1 << block_bits
    cols = counts.shape[1]
    plane = counts.shape[0] * cols
    lanes = np.zeros(COUNT_LANES * plane, dtype=np.uint32)
    pending = 0
    for w in range(-(-maxima.shape[0] // stride)):
        b = sampled_block(w, stride)
        if b >= maxima.shape[0]:
            break
        if pending + size > LANE_LEVELS:
            _add_lanes(lanes, counts)
            pending = 0
        row = maxima[b] * cols - base             # + level: the count's index
        block = levels[b * size:min(n, (b + 1) * size)]
        pending += block.shape[0]
        i = 0
        while i + COUNT_LANES <= block.shape[0]:
            for k in range(COUNT_LANES):
                lanes[uint64(row + k * plane + int64(block[i + k]))] += np.uint32(1)
            i += COUNT_LANES
        while i < block.shape[0]:
            lanes[uint64(row + int64(block[i]))] += np.uint32(1)
            i += 1
    _add_lanes(lanes, counts)


@njit(cache=True, inline="always")
def _add_lanes(lanes, counts):
    """Add ``class_counts``'s lanes to ``counts`` and zero them."""
    plane = counts.size
    flat = counts.reshape(plane)
    for k in range(COUNT_LANES):
        for j in range(plane):
            flat[j] += lanes[k * plane + j]
            lanes[k * plane + j] = 0


# ---- Estimates and the class search ---------------------------------------------------------

@njit(cache=True)
def _symbol_bits():
    """ANS_PROB_BITS - log2(f) at f = 1 .. ANS_PROB_SCALE (entry 0 unused): the bits a symbol
    of f slots costs, from the same scalar log2 as a call per symbol, so estimates from the
    table are the same to the last bit."""
    bits = np.zeros(ANS_PROB_SCALE + 1)
    for f in range(1, ANS_PROB_SCALE + 1):
        bits[f] = ANS_PROB_BITS - np.log2(int64(f))
    return bits


SYMBOL_BITS = _symbol_bits()
SYMBOL_BITS.setflags(write=False)


@njit(cache=True, nogil=True)
def coded_bits(counts, freqs, chunks, per_chunk=CHUNK_BITS):
    """Estimated rANS payload bits of symbols with ``counts`` (rows: tables) coded with the
    normalized ``freqs`` (same shape) in ``chunks`` chunks: the information the frequencies
    give the symbols (SYMBOL_BITS each), rounded up, plus ``per_chunk`` bits per chunk
    (``chunk_overhead_bits``)."""
    info = 0.0
    for t in range(counts.shape[0]):
        for s in range(counts.shape[1]):
            if counts[t, s] > 0:
                info += counts[t, s] * SYMBOL_BITS[freqs[t, s]]
    return int(np.ceil(info)) + chunks * per_chunk


@njit(cache=True, nogil=True)
def empirical_information(counts):
    """(the bits of symbols with ``counts`` (rows: tables) each coded with its own row's
    empirical frequencies, the number of symbols that occur in any row's count)."""
    info, used = 0.0, 0
    for t in range(counts.shape[0]):
        total = 0
        for s in range(counts.shape[1]):
            total += counts[t, s]
        for s in range(counts.shape[1]):
            if counts[t, s] > 0:
                info += counts[t, s] * (np.log2(total) - np.log2(counts[t, s]))
                used += 1
    return info, used


def chunks_bytes(chunks):
    """What ``chunks`` chunks add to ``stream_bytes``'s estimate: their ends (CHUNK_BITS each)
    and bit counts, in whole bytes."""
    return chunks * CHUNK_BITS // 8 + CHUNK_PARAM_BYTES * chunks


@njit(cache=True, nogil=True)
def class_bits(n_classes):
    """Bits of one block's class on the wire."""
    bits = 1
    while (1 << bits) < n_classes:
        bits += 1
    return bits


@njit(cache=True, nogil=True)
def stream_bytes(counts, freqs, chunks, n_blocks):
    """Estimated stream bytes without the fixed header: the payload (``coded_bits``) and the
    parameters: frequency tables, chunk bit counts and, with more than one table, the class
    ids of ``n_blocks`` blocks."""
    coded = 0
    for t in range(freqs.shape[0]):
        for s in range(freqs.shape[1]):
            coded += freqs[t, s] != 0
    ids = 0
    if freqs.shape[0] > 1:
        ids = -(-n_blocks * class_bits(freqs.shape[0]) // 8)
    return (coded_bits(counts, freqs, chunks) + 7) // 8 + STREAM_PARAM_BYTES + \
        TABLE_BYTES_PER_SYMBOL * coded + CHUNK_PARAM_BYTES * chunks + ids


@njit(cache=True, nogil=True)
def quantile_classes(share, k, of_used):
    """Cut the distinct block maxima (ascending) where ``share``, the cumulative share of blocks
    up to each, crosses 1/k, 2/k, ...: ``of_used`` gets each maximum's class (from 0, whole
    maxima per class); returns the number of classes (at most k)."""
    n_classes, cut = 0, 0
    for j in range(share.shape[0]):
        this = min(int(share[j] * k - 1e-9), k - 1) if j else 0
        if j == 0 or this > cut:
            n_classes += 1
            cut = this
        of_used[j] = n_classes - 1
    return n_classes


@njit(cache=True, nogil=True)
def merged_counts(counts, used, of_used, n_classes, base, cover):
    """The rows ``used`` of ``counts`` summed per class (``of_used``); with ``cover`` (a sample
    was counted) every level a class may hold (|level| <= its largest maximum, in the window:
    the last column is the escape) gets a count of at least 1."""
    merged = np.zeros((n_classes, counts.shape[1]), dtype=np.int64)
    for j in range(used.shape[0]):
        merged[of_used[j]] += counts[used[j]]
    if cover:
        for j in range(used.shape[0]):
            if j + 1 == used.shape[0] or of_used[j + 1] != of_used[j]:     # a class's largest
                for s in range(counts.shape[1] - 1):
                    if abs(base + s) <= used[j]:
                        merged[of_used[j], s] = max(merged[of_used[j], s], 1)
    return merged


@njit(cache=True, nogil=True)
def best_classes(counts, maxima, n_blocks, choices, base, cover, n, chunks, classes):
    """(frequencies, estimated stream bytes) of the cheapest plan of ``n`` levels in
    ``n_blocks`` blocks whose classes are ranges of the blocks' largest |level|: row m of
    ``counts`` (int64, window + 1 symbols, the escape last) holds the symbol counts of the
    counted blocks whose largest |level| is m, ``maxima`` every block's, or a sample's (each
    below the rows of ``counts``). For k = 1 and every k in
    ``choices`` (ascending, each tried where at least k maxima occur): the maxima in
    ``quantile_classes``'s classes, their counts ``merged_counts``, the estimate
    (``stream_bytes``) over the counts scaled to ``n`` levels. The first cheapest wins; where it
    has more than one class, ``classes`` (uint8, one per entry of ``maxima``) gets each
    block's. The
    frequencies have one row per class."""
    weights = np.zeros(counts.shape[0], dtype=np.int64)
    for b in range(maxima.shape[0]):
        weights[maxima[b]] += 1
    used = np.flatnonzero(weights)
    share = np.cumsum(weights[used]) / maxima.shape[0]
    scale = n / max(1, counts.sum())
    of_used = np.empty(used.shape[0], dtype=np.int64)
    best_of_used = np.zeros(used.shape[0], dtype=np.int64)
    best_freqs = np.zeros((1, counts.shape[1]), dtype=np.int64)
    best_cost = -1
    for c in range(choices.shape[0] + 1):
        k = 1 if c == 0 else choices[c - 1]
        if used.shape[0] < k:
            break
        n_classes = quantile_classes(share, k, of_used)
        merged = merged_counts(counts, used, of_used, n_classes, base, cover)
        freqs = np.empty_like(merged)
        for t in range(n_classes):
            freqs[t] = normalize(merged[t])
        cost = stream_bytes(merged * scale, freqs, chunks, n_blocks)
        if best_cost < 0 or cost < best_cost:
            best_freqs, best_cost = freqs, cost
            best_of_used[:] = of_used
    if best_freqs.shape[0] > 1:
        of_magnitude = np.zeros(counts.shape[0], dtype=np.uint8)
        for j in range(used.shape[0]):
            of_magnitude[used[j]] = best_of_used[j]
        for b in range(maxima.shape[0]):
            classes[b] = of_magnitude[maxima[b]]
    return best_freqs, best_cost
