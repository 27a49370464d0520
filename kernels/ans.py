"""rANS coding of levels (encoder ``ans``): normalized frequencies, the coder's tables, and the
chunk encoder and decoder.

READ ME FIRST
1. A symbol s of probability f_s / M (M = 2**ANS_PROB_BITS, f_s >= 1 a whole number of slots,
   the f_s summing to M) moves the coder's state x to C(s, x) = (x // f_s) * M + x % f_s + c_s
   (c_s: the slots below s's). That adds log2(M / f_s) bits to x, fractions of a bit included:
   this is where ANS beats Huffman, whose codes are whole bits. Decoding reads s from the low
   ANS_PROB_BITS bits of x (``decode_table``) and undoes C.
2. The state stays in [STATE_LOW, 2**31): before coding s the encoder writes x's low 16 bits
   (one unit) and shifts them out if C would leave that range (x >= f_s * 2**19); after
   decoding, a state below STATE_LOW takes one unit in. 16-bit units with a 15-bit lower
   bound: one unit always restores the range, so renormalizing is one branch, never a loop.
   31 (not 32!) bits: the encoder's division x // f_s is a multiplication by a 32-bit
   reciprocal (``encode_tables``, Alverson's method as in Giesen's ryg_rans), exact for every
   x below 2**31.
3. The encoder runs backwards: the last symbol is coded first and the decoder reads units
   forwards. LANES = 32 states interleave, element i of a chunk on lane i % 32: a step is
   one symbol on every lane, and within a step the decoder takes the units of the lanes that
   renormalize in increasing lane order. So a GPU warp decodes a step at once, a lane per
   thread, each lane's unit found by counting the lanes below it that renormalize
   (kernels/cuda_ans.py), and a CPU core overlaps 32 dependency chains. The encoder starts
   every state at STATE_LOW and a chunk's stream opens with the final states (lane 0 first,
   32 bits each, high unit first), then the units. A decoder must end every chunk with every
   state back at STATE_LOW and every unit read: any other end means a corrupted or forged
   chunk.
4. Chunks (kernels/chunks.py) are independent streams, each starting on a 32-bit word; a unit
   at 16-bit position u of the payload is the high or low half of its big-endian word.
5. Levels outside the window [base, base + window) take the escape symbol (``window``); their
   values travel outside the coded stream (horovod_huffman/codec/encoders/ans.py) and the decoder
   takes them in order from ``escapes``.
6. Contexts: the elements are cut into blocks of 2**block_bits levels, each block has a class,
   and each class its own frequencies and tables (rows of the 2-D tables); element i is coded
   with the table of classes[i >> block_bits]. Blocks hold a multiple of four levels and
   chunks a whole number of blocks, so four lanes' symbols of one step (lanes 4g .. 4g + 3)
   never span two blocks: the CPU coders look the class up once per four. Without
   contexts there is one class and one block per 2**63 levels.
Units: frequencies in slots of 1/M; positions in 16-bit units unless named ``bits``.
"""
import sys

import numpy as np
from numba import njit, int64, uint64
from numba.cpython.unsafe.numbers import trailing_zeros

from .bits import flush_bits, peek64, put_bits
from .errors import (OK, PAYLOAD_OVERRUN, PAYLOAD_UNDERRUN, BAD_STATE, ESCAPE_MISMATCH,
                     VALUE_OVERFLOW)
from .varints import OUT_OF_RANGE, READ_OK, TOO_LONG, TRUNCATED, read_uints
from .maxima import (ANS_BIAS_SHIFT, ANS_BOUND_MASK, ANS_COMPLEMENT_SHIFT, ANS_ESCAPE,
                     ANS_FREQ_MASK, ANS_LEVEL_SHIFT, ANS_OFFSET_MASK, ANS_OFFSET_SHIFT,
                     ANS_PROB_BITS, ANS_PROB_SCALE, ANS_RECIPROCAL_BITS, ANS_RECIPROCAL_MASK)

# The states' range [STATE_LOW, 2**STATE_BITS) (note 2) and the unit that renormalizes.
STATE_LOW = 1 << 15
STATE_BITS = 31
UNIT_BITS = 16
UNIT_MASK = (1 << UNIT_BITS) - 1
# A payload's 64-bit big-endian words hold 2**UNITS_PER_WORD_LOG2 units; a unit's bit offset
# in its word is a multiple of 2**UNIT_BITS_LOG2.
UNITS_PER_WORD_LOG2 = 2
UNIT_BITS_LOG2 = 4
# Unit u of a payload is element u ^ UNIT_SWAP of its native words' uint16 view: a big-endian
# word's first unit is its high one, the last element of the four on a little-endian host.
UNIT_SWAP = (1 << UNITS_PER_WORD_LOG2) - 1 if sys.byteorder == "little" else 0
# The same for the uint16 view of 32-bit words (the encoder's output).
WORD_UNIT_SWAP = 1 if sys.byteorder == "little" else 0
# Group g's count of a step is byte g ^ COUNT_BYTE_SWAP, from the low end, of the step's word.
COUNT_BYTE_SWAP = 0 if sys.byteorder == "little" else 7
# Interleaved states per chunk, one per lane (note 3): a GPU warp's threads, so that a warp codes
# a chunk with a state in every thread; and the units that open a chunk, their final values.
LANES = 32
HEADER_UNITS = LANES * 2
# Lanes the CPU coders keep in registers at once (note 6): eight groups of them a step.
GROUP_LANES = 4
assert LANES == 8 * GROUP_LANES, "a step's group counts are the eight bytes of one word"
# A state at or above frequency << RENORM_SHIFT would leave the range once coded (note 2).
RENORM_SHIFT = STATE_BITS - ANS_PROB_BITS

assert STATE_LOW % ANS_PROB_SCALE == 0 and STATE_LOW << UNIT_BITS == 1 << STATE_BITS
assert (STATE_LOW >> ANS_PROB_BITS) << UNIT_BITS == 1 << RENORM_SHIFT
assert UNIT_BITS << UNITS_PER_WORD_LOG2 == 64 and 1 << UNIT_BITS_LOG2 == UNIT_BITS


# ---- Frequencies ----------------------------------------------------------------------------

@njit(cache=True)
def _slot_ratios():
    """log2((f + 1) / f) at f = 1 .. ANS_PROB_SCALE (entry 0 unused): the bits a slot added
    to a symbol of f slots saves per occurrence, and the bits one taken from f + 1 costs. The
    same scalar log2 as a call at each move, so ``normalize`` moves the same slots."""
    ratios = np.zeros(ANS_PROB_SCALE + 1)
    for f in range(1, ANS_PROB_SCALE + 1):
        ratios[f] = np.log2((f + 1) / f)
    return ratios


SLOT_RATIOS = _slot_ratios()
SLOT_RATIOS.setflags(write=False)


@njit(cache=True, nogil=True)
def normalize(counts):
    """Frequencies (int64 slots summing to ANS_PROB_SCALE) for symbol ``counts`` (int64): every
    symbol that occurs gets at least one slot. Starts from the proportional share rounded to
    nearest (at least 1), then moves one slot at a time where it costs the fewest bits over the
    counts: to the symbol whose count times log2 gain per added slot is largest, or from the
    one whose loss is smallest, the lowest symbol among equals (the candidates wait in a heap).
    Needs at least one and at most ANS_PROB_SCALE symbols that occur."""
    n = counts.shape[0]
    total = 0
    for s in range(n):
        total += counts[s]
    freqs = np.zeros(n, dtype=np.int64)
    used = 0
    for s in range(n):
        if counts[s] > 0:
            freqs[s] = max(1, (2 * counts[s] * ANS_PROB_SCALE + total) // (2 * total))
            used += freqs[s]
    # Adding: the largest gain first; taking: the smallest loss first (the negated loss
    # largest), only from symbols of more than one slot.
    step = 1 if used < ANS_PROB_SCALE else -1
    key = np.empty(n)
    heap = np.empty(n, dtype=np.int64)
    size = 0
    for s in range(n):
        if counts[s] > 0 and (step > 0 or freqs[s] > 1):
            key[s] = _move_value(counts[s], freqs[s], step)
            heap[size] = s
            size += 1
    for at in range(size // 2 - 1, -1, -1):
        _sift_down(heap, size, key, at)
    for _ in range(abs(ANS_PROB_SCALE - used)):
        best = heap[0]
        freqs[best] += step
        if step < 0 and freqs[best] == 1:
            size -= 1
            heap[0] = heap[size]
        else:
            key[best] = _move_value(counts[best], freqs[best], step)
        _sift_down(heap, size, key, 0)
    return freqs


@njit(cache=True, inline="always")
def _move_value(count, freq, step):
    """What moving one slot to (``step`` 1) or from (-1) a symbol of ``count`` and ``freq``
    slots is worth in bits over its count: the gain, or the loss negated."""
    if step > 0:
        return count * SLOT_RATIOS[freq]
    return -(count * SLOT_RATIOS[freq - 1])


@njit(cache=True)
def _sift_down(heap, size, key, at):
    """Restore the heap order below position ``at`` of heap[:size] (symbol ids): a parent
    before its children, the larger key first, the lower id among equal keys."""
    while True:
        first = at
        for child in (2 * at + 1, 2 * at + 2):
            if child < size:
                c, f = heap[child], heap[first]
                if key[c] > key[f] or (key[c] == key[f] and c < f):
                    first = child
        if first == at:
            return
        heap[at], heap[first] = heap[first], heap[at]
        at = first


@njit(cache=True, nogil=True)
def cumulative(freqs):
    """The slots below each symbol (int64): c_s of note 1."""
    cum = np.empty(freqs.shape[0], dtype=np.int64)
    at = 0
    for s in range(freqs.shape[0]):
        cum[s] = at
        at += freqs[s]
    return cum


# ---- Tables ---------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def encode_tables(freqs):
    """(entries, reciprocals) per symbol (uint64; zero for symbols of frequency 0). An entry is
    maxima.py's ANS encode layout, a reciprocal its ANS reciprocal layout (x // f as
    ((x * rcp) >> 32) >> shift for every x < 2**31). Frequency 1 takes rcp = 2**32 - 1, shift 0
    (q = x - 1) and a bias one scale larger, which gives the same C."""
    n = freqs.shape[0]
    cum = cumulative(freqs)
    entries = np.zeros(n, dtype=np.uint64)
    rcps = np.zeros(n, dtype=np.uint64)
    for s in range(n):
        f = freqs[s]
        if f == 0:
            continue
        bias = cum[s]
        if f == 1:
            rcp, shift = ANS_RECIPROCAL_MASK, 0
            bias += ANS_PROB_SCALE - 1
        else:
            shift = 0
            while f > (1 << shift):
                shift += 1
            rcp = ((1 << (shift + ANS_RECIPROCAL_BITS - 1)) + f - 1) // f
            shift -= 1
        entries[s] = (uint64(bias) << uint64(ANS_BIAS_SHIFT)) | \
            (uint64(ANS_PROB_SCALE - f) << uint64(ANS_COMPLEMENT_SHIFT)) | \
            (uint64(f) << uint64(RENORM_SHIFT))
        rcps[s] = uint64(rcp) | (uint64(shift) << uint64(ANS_RECIPROCAL_BITS))
    return entries, rcps


@njit(cache=True, nogil=True)
def coder_tables(freqs):
    """``encode_tables`` of every row of ``freqs`` (2-D, a table per row): (entries,
    reciprocals), each of the same shape as ``freqs``."""
    entries = np.empty(freqs.shape, dtype=np.uint64)
    rcps = np.empty(freqs.shape, dtype=np.uint64)
    for t in range(freqs.shape[0]):
        entries[t], rcps[t] = encode_tables(freqs[t])
    return entries, rcps


@njit(cache=True, nogil=True)
def decode_table(freqs, base, escape):
    """The decode table (maxima.py's ANS decode layout, ANS_PROB_SCALE uint64 entries) of
    ``freqs`` (summing to the scale, checked by the caller): slot j belongs to the symbol s with
    c_s <= j < c_s + f_s; symbol s is level base + s, or for s == ``escape`` an escape."""
    table = np.empty(ANS_PROB_SCALE, dtype=np.uint64)
    slot = 0
    for s in range(freqs.shape[0]):
        f = freqs[s]
        level = uint64(np.uint32(np.int32(base + s))) << uint64(ANS_LEVEL_SHIFT)
        flag = uint64(ANS_ESCAPE) if s == escape else uint64(0)
        for k in range(f):
            table[slot] = level | flag | (uint64(k) << uint64(ANS_OFFSET_SHIFT)) | uint64(f)
            slot += 1
    return table


@njit(cache=True, nogil=True)
def decode_tables(freqs, base, escape):
    """``decode_table`` of every row of ``freqs`` (2-D, a table per row), one row each."""
    tables = np.empty((freqs.shape[0], ANS_PROB_SCALE), dtype=np.uint64)
    for t in range(freqs.shape[0]):
        tables[t] = decode_table(freqs[t], base, escape)
    return tables


# ---- Encoding -------------------------------------------------------------------------------

# A symbol's encode record (``encode_records``): its bound, and a reciprocal of its frequency
# f with a fixed shift, RECORD_SHIFT: x // f is (x * rcp) >> RECORD_SHIFT with rcp =
# ceil(2**RECORD_SHIFT / f), exact for every state it is applied to (x < f * 2**RENORM_SHIFT:
# the error x * (rcp - 2**RECORD_SHIFT / f) / 2**RECORD_SHIFT stays below f / 2**24 <= 1 / f,
# and the product below 2**63). Against ``encode_tables``'s 32-bit reciprocals (which the
# device keeps) the shift is one per coder, not a field loaded per symbol, and frequency 1
# needs no case of its own. Each field is loaded without a shift or a mask.
RECORD_SHIFT = 2 * ANS_PROB_BITS + RENORM_SHIFT
ENCODE_RECORD = np.dtype([("rcp", np.uint64), ("bound", np.uint32), ("bias", np.uint16),
                          ("complement", np.uint16)], align=True)
assert ENCODE_RECORD.itemsize == 16, "a record is one 16-byte load apart from the next"
assert (1 << (RENORM_SHIFT + RECORD_SHIFT)) + (ANS_PROB_SCALE << RENORM_SHIFT) < 2**63, \
    "x < f * 2**RENORM_SHIFT times ceil(2**RECORD_SHIFT / f) fits 63 bits"
assert ANS_PROB_SCALE <= 0xFFFF and ANS_BOUND_MASK <= 0xFFFFFFFF, "every field fits"


@njit(cache=True, nogil=True)
def encode_records(entries):
    """The ``ENCODE_RECORD`` of every symbol of ``encode_tables``'s ``entries`` (rows of C
    symbols, uint64: each symbol's bound, complement and cumulative frequency), flattened: row
    c's symbol s at c * C + s; symbols of frequency 0 get a zero record. (The reciprocals are
    the records' own; ``encode_tables``'s are the device coders'.)"""
    flat = entries.reshape(entries.size)
    records = np.zeros(flat.size, dtype=ENCODE_RECORD)
    for k in range(flat.size):
        e = flat[k]
        f = (e & uint64(ANS_BOUND_MASK)) >> uint64(RENORM_SHIFT)
        if f == uint64(0):
            continue
        bias = e >> uint64(ANS_BIAS_SHIFT)
        if f == uint64(1):                   # encode_tables's frequency-1 bias, undone
            bias -= uint64(ANS_PROB_SCALE - 1)
        records[k].rcp = ((uint64(1) << uint64(RECORD_SHIFT)) + f - uint64(1)) // f
        records[k].bound = e & uint64(ANS_BOUND_MASK)
        records[k].bias = bias
        records[k].complement = uint64(ANS_PROB_SCALE) - f
    return records


@njit(cache=True, inline="always")
def put_symbol(x, k, records, units, u):
    """Code the symbol of record k (``encode_records``) on state x (uint64), writing a unit
    below ``u`` when the state must renormalize first; returns (x, u)."""
    r = records[k]
    renorm = x >= uint64(r.bound)
    units[u - uint64(1)] = x & uint64(UNIT_MASK)        # kept only when renormalizing
    u -= uint64(1) if renorm else uint64(0)
    x = x >> uint64(UNIT_BITS) if renorm else x
    q = (x * r.rcp) >> uint64(RECORD_SHIFT)
    return x + uint64(r.bias) + q * uint64(r.complement), u


@njit(cache=True, inline="always")
def _record(level, row_at, level_at, base, window, escapes):
    """The record index of a level in the row at ``row_at``: its index in the window, else the
    escape (``window``), after the row. ``level_at``: row_at - base (wrapping), the index of
    level 0 (the base folded into the row). ``escapes`` False: every level lies in the window
    (a literal, so the compare is compiled out)."""
    if escapes:
        v = uint64(int64(level) - base)
        return row_at + (v if v < window else window)
    return level_at + uint64(int64(level))


@njit(cache=True, inline="always")
def _code_group(levels, i, row_at, level_at, base, window, records, escapes, units, u,
                x0, x1, x2, x3):
    """Code levels i .. i + 3 of one step on four lanes (states x0 .. x3), the last first, their
    units below ``u``; returns the states and u after them."""
    x3, u = put_symbol(x3, _record(levels[i + uint64(3)], row_at, level_at, base, window,
                                   escapes), records, units, u)
    x2, u = put_symbol(x2, _record(levels[i + uint64(2)], row_at, level_at, base, window,
                                   escapes), records, units, u)
    x1, u = put_symbol(x1, _record(levels[i + uint64(1)], row_at, level_at, base, window,
                                   escapes), records, units, u)
    x0, u = put_symbol(x0, _record(levels[i], row_at, level_at, base, window, escapes),
                       records, units, u)
    return x0, x1, x2, x3, u


@njit(cache=True, nogil=True)
def encode_chunk(levels, start, stop, base, window, records, row, classes, block_bits,
                 escapes, groups, counts, heads, out32, w):
    """Code levels[start:stop] into 32-bit words from ``out32[w]`` (big-endian pairs of units,
    an odd last unit padded with zeros; out32 must hold GROUP_LANES units past the stream),
    element i with the table of class classes[i >> block_bits] (rows of ``row`` records of the
    flattened ``records``: ``put_symbol``; ``_record``'s index, ``escapes`` a literal): the
    LANES final states (lane 0 first, high unit first), then the renormalization units in the
    order the decoder reads them. Returns (the stream's bits, the next word). Scratch:
    ``groups`` (uint16, LANES / GROUP_LANES rows of at least ceil((stop - start) / LANES) *
    GROUP_LANES + GROUP_LANES + 1 units), ``counts`` (uint8, a row per step, a column per
    group) and ``heads`` (uint64, LANES + LANES / GROUP_LANES).
    Two passes (note 3). Each group of GROUP_LANES lanes is coded backwards through every step
    with its states in registers, its units into its row of ``groups`` from the row's end, and
    the step's count of them into ``counts``: within a row a step's units lie in increasing
    lane order and the steps in increasing order, as the decoder reads them (a group of four
    never spans two blocks: note 6). Then ``_interleave`` merges the rows step by step."""
    base, window, row = int64(base), uint64(window), uint64(row)
    shift = uint64(block_bits)
    first = uint64(start)
    n = uint64(stop) - first
    steps = (n + uint64(LANES - 1)) // uint64(LANES)
    full = n // uint64(LANES)                    # the steps every lane takes part in
    top = uint64(groups.shape[1] - GROUP_LANES)  # (GROUP_LANES spare: _interleave's reads)
    for g in range(LANES // GROUP_LANES):
        units = groups[g]
        lane = uint64(GROUP_LANES * g)
        x0 = x1 = x2 = x3 = uint64(STATE_LOW)
        u = top
        if full < steps:                         # the last step, not whole: lane by lane
            for k in range(3, -1, -1):
                i = first + full * uint64(LANES) + lane + uint64(k)
                if i >= first + n:
                    continue
                row_at = uint64(classes[i >> shift]) * row
                r = _record(levels[i], row_at, row_at - uint64(base), base, window, escapes)
                if k == 3:
                    x3, u = put_symbol(x3, r, records, units, u)
                elif k == 2:
                    x2, u = put_symbol(x2, r, records, units, u)
                elif k == 1:
                    x1, u = put_symbol(x1, r, records, units, u)
                else:
                    x0, u = put_symbol(x0, r, records, units, u)
            counts[full, g] = np.uint8(top - u)
        t = full
        while t > uint64(0):
            t -= uint64(1)
            i = first + t * uint64(LANES) + lane
            row_at = uint64(classes[i >> shift]) * row
            v = u
            x0, x1, x2, x3, u = _code_group(levels, i, row_at, row_at - uint64(base), base,
                                            window, records, escapes, units, u, x0, x1, x2, x3)
            counts[t, g] = np.uint8(v - u)
        heads[lane], heads[lane + uint64(1)] = x0, x1
        heads[lane + uint64(2)], heads[lane + uint64(3)] = x2, x3
        heads[uint64(LANES + g)] = u + uint64(g * groups.shape[1])   # the row's first unit,
        #                                                               in groups' flat view
    return _interleave(groups, counts, steps, heads, out32, w)


@njit(cache=True, inline="always")
def _put_unit(view, at, unit):
    """Unit ``at`` of a stream written to 32-bit words through their uint16 ``view``, the
    stream's first word even in it: the high half of word at // 2 first."""
    view[at ^ uint64(WORD_UNIT_SWAP)] = unit


@njit(cache=True, inline="always")
def _interleave(groups, counts, steps, heads, out32, w):
    """Write ``encode_chunk``'s stream from word ``w`` of ``out32``: the final states
    (heads[:LANES]), then the rows' units step by step, group by group. A step's eight counts
    are read as one word, and only the groups with units are visited (at s = 8 about one in
    four), each group's units copied as a fixed GROUP_LANES (the surplus is overwritten by the
    next copy, or lies past the stream). ``heads[LANES:]``: each row's first unit in the flat
    view of ``groups``. Returns (the stream's bits, the next word)."""
    view = out32[w:].view(np.uint16)
    p = uint64(0)
    for lane in range(LANES):
        x = heads[lane]
        _put_unit(view, p, x >> uint64(UNIT_BITS))
        _put_unit(view, p + uint64(1), x & uint64(UNIT_MASK))
        p += uint64(2)
    flat = groups.reshape(groups.size)
    at = heads[LANES:]
    words = counts.reshape(counts.size).view(np.uint64)
    for t in range(steps):
        m = words[t]
        while m:
            low = trailing_zeros(m)
            g = uint64(low >> 3) ^ uint64(COUNT_BYTE_SWAP)
            c = (m >> uint64(low & ~7)) & uint64(0xFF)
            m &= ~(uint64(0xFF) << uint64(low & ~7))
            a = at[g]
            for k in range(GROUP_LANES):
                _put_unit(view, p + uint64(k), flat[a + uint64(k)])
            at[g] = a + c
            p += c
    if p % uint64(2):
        _put_unit(view, p, uint64(0))            # the last word's low half
    return int64(p) * UNIT_BITS, w + int64((p + uint64(1)) // uint64(2))


@njit(cache=True, nogil=True)
def encode_chunks(levels, base, window, entries, classes, block_bits, chunk, escapes, out32,
                  chunk_bits):
    """Code every chunk of ``levels`` into ``out32`` (uint32 words, chunks on word bounds,
    GROUP_LANES units to spare past the last) with the tables (rows: classes) of
    ``encode_tables``'s ``entries``; ``escapes``: whether a level may lie outside the window
    (the chunk encoder is compiled for each: without escapes a level's symbol is its index, no
    compare). Fills ``chunk_bits`` (bits of each chunk's stream, odd units padded) and returns
    the words written."""
    n = levels.shape[0]
    most = min(n, chunk)
    steps = (most + LANES - 1) // LANES
    groups = np.empty((LANES // GROUP_LANES, steps * GROUP_LANES + GROUP_LANES + 1),
                      dtype=np.uint16)
    counts = np.empty((max(steps, 1), LANES // GROUP_LANES), dtype=np.uint8)
    heads = np.empty(LANES + LANES // GROUP_LANES, dtype=np.uint64)
    records = encode_records(entries)
    w = 0
    for c in range(chunk_bits.shape[0]):
        start = c * chunk
        stop = min(n, start + chunk)
        if escapes:                              # (literal arguments: two compiled chunk coders)
            chunk_bits[c], w = encode_chunk(levels, start, stop, base, window, records,
                                            entries.shape[1], classes, block_bits, True,
                                            groups, counts, heads, out32, w)
        else:
            chunk_bits[c], w = encode_chunk(levels, start, stop, base, window, records,
                                            entries.shape[1], classes, block_bits, False,
                                            groups, counts, heads, out32, w)
    return w


@njit(cache=True, inline="always")
def store_units(units, first, out32, w):
    """Copy a chunk's stream, units[first:], into 32-bit words from ``out32[w]`` (an odd last
    unit padded with zeros); returns (the stream's bits, the next word)."""
    count = units.shape[0] - first
    pairs = count // 2
    src, dst = uint64(first), uint64(w)                 # (unsigned: no negative-index wrap)
    for k in range(uint64(pairs)):
        out32[dst + k] = (np.uint32(units[src + 2 * k]) << np.uint32(UNIT_BITS)) | \
            np.uint32(units[src + 2 * k + uint64(1)])
    w += pairs
    if count % 2:
        out32[w] = np.uint32(units[first + count - 1]) << np.uint32(UNIT_BITS)
        w += 1
    return count * UNIT_BITS, w


# ---- Decoding -------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def unit_at(units, u):
    """The 16-bit unit at position u of a payload of big-endian 64-bit words, from ``units``,
    the uint16 view of its native words (``payload_units``)."""
    return uint64(units[u ^ uint64(UNIT_SWAP)])


@njit(cache=True, inline="always")
def payload_units(words):
    """The uint16 view of a payload's native 64-bit words that ``unit_at`` reads (a view per
    call of ``unit_at`` would cost a reference count per unit)."""
    return words.view(np.uint16)


@njit(cache=True, inline="always")
def get_symbol(x, tables, t):
    """(state before its renormalization, table entry) after decoding one symbol from x with
    class t's table."""
    e = tables[t, x & uint64(ANS_PROB_SCALE - 1)]
    return take_symbol(x, e), e


@njit(cache=True, inline="always")
def take_symbol(x, e):
    """The state before its renormalization after decoding the symbol of entry ``e`` (the
    table's entry at x's low ANS_PROB_BITS) from x."""
    return (e & uint64(ANS_FREQ_MASK)) * (x >> uint64(ANS_PROB_BITS)) + \
        ((e >> uint64(ANS_OFFSET_SHIFT)) & uint64(ANS_OFFSET_MASK))


@njit(cache=True, inline="always")
def _renorm(x, units, u, selects):
    """A state below STATE_LOW takes the unit at u: returns (x, u). ``selects`` (a literal):
    the unit is loaded either way (u must lie inside the payload) and taken by a select, not a
    branch: where a state renormalizes every few symbols, whether it does is a coin toss that
    the branch predictor loses, and where it rarely does, the branch is cheaper."""
    if selects:
        low = uint64(x < uint64(STATE_LOW))
        unit = unit_at(units, u)
        return (x << (low << uint64(UNIT_BITS_LOG2))) | (unit & (uint64(0) - low)), u + low
    if x < uint64(STATE_LOW):
        return (x << uint64(UNIT_BITS)) | unit_at(units, u), u + uint64(1)
    return x, u


@njit(cache=True, inline="always")
def _level_of(e):
    """The level of a decode entry that is no escape."""
    return np.int32(np.uint32(e >> uint64(ANS_LEVEL_SHIFT)))


@njit(cache=True, inline="always")
def _level(e, escapes, k):
    """The level of a decode entry, or for an escape escapes[k]; returns (level, k after)."""
    if e & uint64(ANS_ESCAPE):
        return escapes[k], k + uint64(1)
    return int64(_level_of(e)), k


@njit(cache=True, nogil=True)
def decode_chunk(units, first_bit, n_bits, coder, out, start, stop, escapes, k, k_stop,
                 selects):
    """Decode levels out[start:stop] from the chunk stream of ``n_bits`` bits at ``first_bit``
    of ``units`` (the payload's ``payload_units``); its escapes take escapes[k:k_stop] in order,
    all of them. ``coder``: (tables, classes, block_bits), element i decoded with the table of
    class classes[i >> block_bits]. Returns a status (errors.py).
    Without escapes, whole steps go through the unchecked batches first (``selects``:
    ``_renorm``'s); the rest is decoded symbol by symbol with every check."""
    states = np.empty(LANES, dtype=np.uint64)
    status, u, end = open_chunk(units, first_bit, n_bits, states)
    if status != OK:
        return status
    i = uint64(start)
    if k == k_stop:
        status, i, u = _unchecked_steps(units, coder, out, states, i, uint64(stop), u, end,
                                        selects)
        if status != OK:
            return status
    status, u, k = _checked_symbols(units, coder, out, states, i, uint64(start), uint64(stop),
                                    u, end, escapes, uint64(k), uint64(k_stop))
    if status != OK:
        return status
    return end_status(states, u, end)


@njit(cache=True, inline="always")
def open_chunk(units, first_bit, n_bits, states):
    """Read the opening states of the chunk stream of ``n_bits`` bits at ``first_bit`` into
    ``states`` (one per lane: ``states.shape[0]`` of them): returns (status, its first unit
    after them, its end unit)."""
    header = uint64(2 * states.shape[0])
    if first_bit % UNIT_BITS or n_bits % UNIT_BITS or n_bits < header * UNIT_BITS:
        return PAYLOAD_UNDERRUN, uint64(0), uint64(0)
    u = uint64(first_bit // UNIT_BITS)
    end = u + uint64(n_bits // UNIT_BITS)
    if not open_states(units, u, states):
        return BAD_STATE, uint64(0), uint64(0)
    return OK, u + header, end


@njit(cache=True, inline="always")
def open_states(units, u, states):
    """Read a chunk's opening states (32 bits each, high unit first; as many as ``states``
    holds) from unit u into ``states``; False where one lies outside [STATE_LOW,
    2**STATE_BITS)."""
    for lane in range(states.shape[0]):
        x = (unit_at(units, u) << uint64(UNIT_BITS)) | unit_at(units, u + uint64(1))
        if x < uint64(STATE_LOW) or x >= uint64(1 << STATE_BITS):
            return False
        states[lane] = x
        u += uint64(2)
    return True


@njit(cache=True, nogil=True)
def _unchecked_steps(units, coder, out, states, i, stop, u, end, selects):
    """Decode whole steps (a symbol on every lane) from element i (a multiple of LANES from the
    chunk's start) in batches that cannot read past ``end`` even if every state renormalizes
    at every symbol, each batch as long as the units left allow (a state reads a unit only
    every 16 / (its symbols' bits) symbols, so batches stay long until the chunk's last
    units). A step goes four lanes at a time, their states in registers and one class lookup
    for the four (a group never spans two blocks). Updates ``states``; returns (status, i, u)
    after them: ESCAPE_MISMATCH at an escape, which a chunk without declared escapes must not
    hold."""
    tables, classes, shift = coder
    shift = uint64(shift)
    while True:
        safe = min((stop - i) // uint64(LANES), (end - u) // uint64(LANES))
        if safe == uint64(0):
            break
        for _ in range(safe):
            for g in range(LANES // 4):
                j = i + uint64(4 * g)
                t = classes[j >> shift]
                x0, e0 = get_symbol(states[4 * g], tables, t)
                x1, e1 = get_symbol(states[4 * g + 1], tables, t)
                x2, e2 = get_symbol(states[4 * g + 2], tables, t)
                x3, e3 = get_symbol(states[4 * g + 3], tables, t)
                if (e0 | e1 | e2 | e3) & uint64(ANS_ESCAPE):
                    return ESCAPE_MISMATCH, i, u
                out[j] = _level_of(e0)
                out[j + uint64(1)] = _level_of(e1)
                out[j + uint64(2)] = _level_of(e2)
                out[j + uint64(3)] = _level_of(e3)
                x0, u = _renorm(x0, units, u, selects)
                x1, u = _renorm(x1, units, u, selects)
                x2, u = _renorm(x2, units, u, selects)
                x3, u = _renorm(x3, units, u, selects)
                states[4 * g], states[4 * g + 1] = x0, x1
                states[4 * g + 2], states[4 * g + 3] = x2, x3
            i += uint64(LANES)
    return OK, i, u


@njit(cache=True, nogil=True)
def _checked_symbols(units, coder, out, states, i, start, stop, u, end, escapes, k, k_stop):
    """Decode elements [i, stop) one at a time (element j on lane (j - start) % LANES), each
    unit read tested against ``end`` and each escape against the declared ones
    (escapes[k:k_stop]). Updates ``states``; returns (status, u, k) after them."""
    tables, classes, shift = coder
    shift = uint64(shift)
    while i < stop:
        lane = (i - start) & uint64(LANES - 1)
        x, e = get_symbol(states[lane], tables, classes[i >> shift])
        if e & uint64(ANS_ESCAPE) and k >= k_stop:
            return ESCAPE_MISMATCH, u, k
        out[i], k = _level(e, escapes, k)
        if x < uint64(STATE_LOW):
            if u >= end:
                return PAYLOAD_OVERRUN, u, k
            x = (x << uint64(UNIT_BITS)) | unit_at(units, u)
            u += uint64(1)
        states[lane] = x
        i += uint64(1)
    return (OK if k == k_stop else ESCAPE_MISMATCH), u, k


@njit(cache=True, nogil=True)
def end_status(states, u, end):
    """A chunk decoded must have read exactly its units and brought every state back to
    STATE_LOW, where the encoder started it (note 3)."""
    if u > end:
        return PAYLOAD_OVERRUN
    if u < end:
        return PAYLOAD_UNDERRUN
    for x in states:
        if x != uint64(STATE_LOW):
            return BAD_STATE
    return OK


@njit(cache=True, nogil=True)
def decode_chunks(words, starts, chunk_bits, chunk, coder, out, escapes, escape_starts,
                  selects):
    """Decode every chunk into ``out`` (``coder`` as for ``decode_chunk``); chunk c's escapes
    are escapes[escape_starts[c]:escape_starts[c + 1]]. ``selects``: renormalize by selects
    (``_renorm``; the chunk decoder is compiled for each). Returns OK, or the status of the
    first failure met."""
    if selects:                                 # (literal arguments: two compiled decoders)
        return _decode_chunks(words, starts, chunk_bits, chunk, coder, out, escapes,
                              escape_starts, True)
    return _decode_chunks(words, starts, chunk_bits, chunk, coder, out, escapes,
                          escape_starts, False)


@njit(cache=True, nogil=True)
def _decode_chunks(words, starts, chunk_bits, chunk, coder, out, escapes, escape_starts,
                   selects):
    """``decode_chunks`` with ``selects`` a literal."""
    n = out.shape[0]
    units = payload_units(words)
    for c in range(starts.shape[0]):
        start = c * chunk
        status = decode_chunk(units, starts[c], chunk_bits[c], coder, out, start,
                              min(n, start + chunk), escapes, escape_starts[c],
                              escape_starts[c + 1], selects)
        if status != OK:
            return status
    return OK


# ---- Frequency tables in the parameters -----------------------------------------------------

@njit(cache=True, nogil=True)
def frequency_fields(freqs, out):
    """The parameter fields of every frequency table (rows of ``freqs``) into ``out``: per
    table the coded-symbol count, then per coded symbol the gap to its id from the previous
    one's + 1 and its frequency - 1 (horovod_huffman/codec/encoders/ans.py ``write_frequencies``);
    returns the fields written (at most rows * (2 * symbols + 1))."""
    n = 0
    for t in range(freqs.shape[0]):
        at = n
        n += 1
        last = -1
        for s in range(freqs.shape[1]):
            if freqs[t, s]:
                out[n] = s - last - 1
                out[n + 1] = freqs[t, s] - 1
                n += 2
                last = s
        out[at] = (n - at - 1) // 2
    return n


@njit(cache=True, nogil=True)
def frequencies_from_fields(pairs, freqs):
    """A frequency table from its parameter fields (``frequency_fields``: per coded symbol the
    gap + 1 and the frequency - 1, flat) into ``freqs`` (zeros, one per symbol id); returns
    (the last id named, the frequencies' sum). Stops at the first id past ``freqs``, which it
    returns (the caller raises)."""
    last, total = -1, 0
    for k in range(0, pairs.shape[0] - 1, 2):
        last += pairs[k] + 1
        if last >= freqs.shape[0]:
            return last, total
        freqs[last] = pairs[k + 1] + 1
        total += pairs[k + 1] + 1
    return last, total


# Reasons ``read_frequency_tables`` stops early, besides varints.py's.
NAMES_PAST, WRONG_SUM = 4, 5
assert READ_OK == 0 and NAMES_PAST > max(TRUNCATED, TOO_LONG, OUT_OF_RANGE)


@njit(cache=True, nogil=True)
def read_frequency_tables(data, pos, freqs):
    """Read a frequency table per row of ``freqs`` (int64 zeros, a column per symbol id) from
    the varints at data[pos:] (uint8), as ``frequency_fields`` writes them, each checked: its
    coded-symbol count in [1, min(ANS_PROB_SCALE, ids)], its fields in [0, max(ids,
    ANS_PROB_SCALE)], ids inside the row (``frequencies_from_fields``) and frequencies summing
    to ANS_PROB_SCALE. Returns (reason, table, field, value, position after): READ_OK; a
    varints.py reason for the table's field ``field`` (0: the count, k > 0: field k - 1 of its
    pairs); NAMES_PAST (``value``: the id named) or WRONG_SUM (``value``: the sum)."""
    n_symbols = freqs.shape[1]
    most = min(ANS_PROB_SCALE, n_symbols)
    count = np.empty(1, dtype=np.int64)
    pairs = np.empty(2 * most, dtype=np.int64)
    for t in range(freqs.shape[0]):
        reason, _, pos = read_uints(data, pos, 1, most, count)
        if reason != READ_OK:
            return reason, t, 0, 0, pos
        fields = pairs[:2 * count[0]]
        reason, k, pos = read_uints(data, pos, 0, max(n_symbols, ANS_PROB_SCALE), fields)
        if reason != READ_OK:
            return reason, t, k + 1, 0, pos
        last, total = frequencies_from_fields(fields, freqs[t])
        if last >= n_symbols:
            return NAMES_PAST, t, 0, last, pos
        if total != ANS_PROB_SCALE:
            return WRONG_SUM, t, 0, total, pos
    return READ_OK, freqs.shape[0], 0, 0, pos


# ---- Class ids (note 6; the plan's statistics: ans_plans.py) -------------------------------

@njit(cache=True, nogil=True)
def pack_classes(classes, bits, out):
    """Every block's class as a ``bits``-bit field (1..8), MSB-first, into ``out`` (uint8,
    ceil(len(classes) * bits / 8) bytes, the last one's unused low bits zero)."""
    acc, pending, pos = uint64(0), 0, 0
    for b in range(classes.shape[0]):
        acc = (acc << uint64(bits)) | uint64(classes[b])
        pending += bits
        if pending >= 8:
            pending -= 8
            out[pos] = (acc >> uint64(pending)) & uint64(0xFF)
            pos += 1
    if pending:
        out[pos] = (acc << uint64(8 - pending)) & uint64(0xFF)


@njit(cache=True, nogil=True)
def unpack_classes(data, bits, out):
    """``pack_classes`` undone: len(out) ``bits``-bit fields (1..8), MSB-first, from ``data``
    (uint8, at least ceil(len(out) * bits / 8) bytes) into ``out`` (uint8); returns the
    largest class."""
    acc, pending, pos, largest = uint64(0), 0, 0, 0
    mask = uint64((1 << bits) - 1)
    for b in range(out.shape[0]):
        if pending < bits:
            acc = (acc << uint64(8)) | uint64(data[pos])
            pos += 1
            pending += 8
        pending -= bits
        out[b] = (acc >> uint64(pending)) & mask
        largest = max(largest, out[b])
    return largest


# ---- Escapes (note 5) -----------------------------------------------------------------------

@njit(cache=True, nogil=True)
def escaped_levels(levels, base, window, chunk, counts):
    """The levels outside [base, base + window), in order (int64), counting them per chunk
    into ``counts``."""
    n = levels.shape[0]
    out = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        v = int64(levels[i]) - base
        if v < 0 or v >= window:
            out[k] = levels[i]
            counts[i // chunk] += 1
            k += 1
    return out[:k]


@njit(cache=True, nogil=True)
def write_escapes(values, vbits, out32, word_pos):
    """Append ``values`` (int64) as zigzag ``vbits``-bit fields from word ``word_pos``; returns
    the words used in all."""
    acc, n_pending, w = uint64(0), 0, word_pos
    for k in range(values.shape[0]):
        v = values[k]
        z = (uint64(v) << uint64(1)) ^ uint64(v >> 63)
        acc, n_pending, w = put_bits(out32, acc, n_pending, w, z, vbits)
    return flush_bits(out32, acc, n_pending, w)


@njit(cache=True, nogil=True)
def read_escapes(words, first_bit, count, vbits, lo, hi, out):
    """Read ``count`` zigzag ``vbits``-bit levels from ``first_bit`` into ``out`` (int64); the
    caller has checked they lie within the payload. VALUE_OVERFLOW for a level outside
    [lo, hi]."""
    for k in range(count):
        z = peek64(words, first_bit + k * vbits) >> uint64(64 - vbits)
        v = int64(z >> uint64(1)) ^ -int64(z & uint64(1))
        if v < lo or v > hi:
            return VALUE_OVERFLOW
        out[k] = v
    return OK
