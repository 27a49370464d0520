"""Elias gamma, delta and omega codes, and the two Elias-based tensor encodings of the paper.

READ ME FIRST
1. Codes are the textbook bit strings, MSB-first: gamma(5) = 00101, delta(5) = 01101,
   omega(16) = 10100100000. They code integers >= 1, so a level travels as zigzag(level) + 1.
2. No code here is decoded bit by bit: gamma and delta count leading zeros in one instruction,
   omega reads a whole group per step, and every code of <= 12 bits comes from one lookup in
   a 4096-entry table (``ELIAS_TABLES``) built from the slow path at import.
3. Values are < 2**41 (levels fit 32 bits, runs and gaps are bounded by the 2**40 element cap),
   so every omega code fits one 64-bit put.
"""
import numpy as np
from numba import njit, uint64, int64

from .bits import (push_bits, word_below, join64, WORD_BITS, put_bits_long,
                   flush_bits, peek64, top_bits, bit_length, count_leading_zeros, zigzag,
                   unzigzag)
from .errors import OK, PAYLOAD_OVERRUN, RUN_OVERFLOW, VALUE_OVERFLOW, \
    PAYLOAD_UNDERRUN, BAD_ELIAS
from .maxima import (LENGTH_BITS, LENGTH_MASK, MAX_CODE_BITS, MAX_ELIAS_VALUE_BITS,  # noqa: F401
                     MAX_RUN, TABLE_SIZE)

GAMMA = 0
DELTA = 1
OMEGA = 2


@njit(cache=True, inline="always")
def gamma_bits(value):
    """Length in bits of gamma(value), value >= 1."""
    return 2 * bit_length(value) - 1


@njit(cache=True, inline="always")
def delta_bits(value):
    n = bit_length(value)
    return n - 1 + gamma_bits(n)


@njit(cache=True, inline="always")
def omega_code(value):
    """(code bits, length) of omega(value), value >= 1; built right to left: the terminating 0,
    then each group prepended. Values below 2**41 keep the length within 64 bits."""
    code = uint64(0)
    total = 1
    m = int64(value)
    while m > 1:
        n = bit_length(m)
        code |= uint64(m) << uint64(total)
        total += n
        m = n - 1
    return code, total


def _omega_length(value):
    """Length in bits of omega(value), value >= 1 (the terminating 0 and every group)."""
    length = 1
    while value > 1:
        length += value.bit_length()
        value = value.bit_length() - 1
    return length


# omega's length depends only on the value's bit length: OMEGA_BITS[bit_length(value)].
OMEGA_BITS = np.array([1] + [_omega_length(1 << (b - 1)) for b in range(1, 65)], dtype=np.int64)


@njit(cache=True, inline="always")
def omega_bits(value):
    """The length in bits of omega(value), value >= 1: one lookup."""
    return OMEGA_BITS[bit_length(value)]


@njit(cache=True, inline="always")
def code_bits(kind, value):
    if kind == GAMMA:
        return gamma_bits(value)
    if kind == DELTA:
        return delta_bits(value)
    return omega_bits(value)


@njit(cache=True, inline="always")
def short_code(kind, value):
    """(code bits, length) of a code of value >= 1, when it is at most WORD_BITS long;
    length 0 means the code is longer (use ``put_code``)."""
    n = bit_length(value)
    if kind == GAMMA:
        if 2 * n - 1 > WORD_BITS:
            return uint64(0), 0
        return uint64(value), 2 * n - 1
    if kind == DELTA:
        g = 2 * bit_length(n) - 1
        if g + n - 1 > WORD_BITS:
            return uint64(0), 0
        low = uint64(value) & ((uint64(1) << uint64(n - 1)) - uint64(1))
        return (uint64(n) << uint64(n - 1)) | low, g + n - 1
    code, total = omega_code(value)
    if total > WORD_BITS:
        return uint64(0), 0
    return code, total


@njit(cache=True, inline="always")
def put_gamma(out32, acc, n_pending, word_pos, value):
    """Append gamma(value), value >= 1 (< 2**64); returns (acc, n_pending, word_pos, bits)."""
    n = bit_length(value)
    acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos, 0, n - 1)
    acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos, value, n)
    return acc, n_pending, word_pos, 2 * n - 1


@njit(cache=True, inline="always")
def put_delta(out32, acc, n_pending, word_pos, value):
    n = bit_length(value)
    acc, n_pending, word_pos, g = put_gamma(out32, acc, n_pending, word_pos, n)
    low = uint64(value) & ((uint64(1) << uint64(n - 1)) - uint64(1))
    acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos, low, n - 1)
    return acc, n_pending, word_pos, g + n - 1


@njit(cache=True, inline="always")
def put_omega(out32, acc, n_pending, word_pos, value):
    code, total = omega_code(value)
    acc, n_pending, word_pos = put_bits_long(out32, acc, n_pending, word_pos, code, total)
    return acc, n_pending, word_pos, total


@njit(cache=True, inline="always")
def put_code(kind, out32, acc, n_pending, word_pos, value):
    if kind == GAMMA:
        return put_gamma(out32, acc, n_pending, word_pos, value)
    if kind == DELTA:
        return put_delta(out32, acc, n_pending, word_pos, value)
    return put_omega(out32, acc, n_pending, word_pos, value)


@njit(cache=True, inline="always")
def read_gamma(words, bit_pos, total_bits):
    """(value, new bit_pos, status) of one gamma code."""
    zeros = count_leading_zeros(peek64(words, bit_pos))
    if zeros >= MAX_ELIAS_VALUE_BITS:
        return uint64(0), bit_pos, BAD_ELIAS
    bit_pos += zeros
    if bit_pos > total_bits:
        return uint64(0), bit_pos, PAYLOAD_OVERRUN
    return top_bits(peek64(words, bit_pos), zeros + 1), bit_pos + zeros + 1, OK


@njit(cache=True, inline="always")
def read_delta(words, bit_pos, total_bits):
    n, bit_pos, status = read_gamma(words, bit_pos, total_bits)
    if status != OK:
        return uint64(0), bit_pos, status
    if n > MAX_ELIAS_VALUE_BITS:
        return uint64(0), bit_pos, BAD_ELIAS
    if bit_pos > total_bits:
        return uint64(0), bit_pos, PAYLOAD_OVERRUN
    low = uint64(0)
    if n > 1:
        low = top_bits(peek64(words, bit_pos), n - 1)
    return (uint64(1) << uint64(n - 1)) | low, bit_pos + n - 1, OK


@njit(cache=True, inline="always")
def read_omega(words, bit_pos, total_bits):
    n = uint64(1)
    while True:
        if bit_pos > total_bits:
            return uint64(0), bit_pos, PAYLOAD_OVERRUN
        win = peek64(words, bit_pos)
        if (win >> uint64(63)) == 0:
            return n, bit_pos + 1, OK
        if n >= MAX_ELIAS_VALUE_BITS:
            return uint64(0), bit_pos, BAD_ELIAS
        group = int64(n) + 1
        n = top_bits(win, group)
        bit_pos += group


@njit(cache=True, inline="always")
def read_slow(kind, words, bit_pos, total_bits):
    if kind == GAMMA:
        return read_gamma(words, bit_pos, total_bits)
    if kind == DELTA:
        return read_delta(words, bit_pos, total_bits)
    return read_omega(words, bit_pos, total_bits)


@njit(cache=True, nogil=True)
def _build_table(kind):
    """Entry per 12-bit prefix: a length entry (maxima.py), ``value << LENGTH_BITS | length``,
    for codes of <= 12 bits, else 0."""
    table = np.zeros(TABLE_SIZE, dtype=np.uint64)
    words = np.zeros(4, dtype=np.uint64)
    for prefix in range(TABLE_SIZE):
        words[0] = uint64(prefix) << uint64(64 - MAX_CODE_BITS)
        value, end, status = read_slow(kind, words, 0, MAX_CODE_BITS)
        if status == OK and end <= MAX_CODE_BITS:
            table[prefix] = (value << uint64(LENGTH_BITS)) | uint64(end)
    return table


@njit(cache=True, nogil=True)
def read_long(kind, words, bit_pos, total_bits):
    """Rare path: a code longer than the table's 12 bits (takes arrays; see bits.py)."""
    return read_slow(kind, words, bit_pos, total_bits)


ELIAS_TABLES = np.stack([_build_table(GAMMA), _build_table(DELTA), _build_table(OMEGA)])


# ---- per-symbol encoders: elias_gamma, elias_delta, elias_omega ----------------------------

@njit(cache=True, nogil=True)
def encoded_bits(levels, kind):
    """Payload bits of the per-symbol code of zigzag(level) + 1."""
    total = 0
    for i in range(levels.shape[0]):
        total += code_bits(kind, zigzag(levels[i]) + uint64(1))
    return total


@njit(cache=True, inline="always")
def _level_from(value, lo, hi):
    level = unzigzag(value - uint64(1))
    ok = value >= 1 and value <= uint64(1) << uint64(33) and level >= lo and level <= hi
    return level, ok


@njit(cache=True, inline="always")
def _end_status(bit_pos, total_bits):
    if bit_pos > total_bits:
        return PAYLOAD_OVERRUN
    if bit_pos < total_bits:
        return PAYLOAD_UNDERRUN
    return OK


# ---- elias_rle: omega(zigzag(level) + 1), omega(run) per run --------------------------------

@njit(cache=True, nogil=True)
def rle_bits(levels):
    n = levels.shape[0]
    total = 0
    i = 0
    while i < n:
        j = i + 1
        stop = min(n, i + MAX_RUN)
        while j < stop and levels[j] == levels[i]:
            j += 1
        total += omega_bits(zigzag(levels[i]) + uint64(1)) + omega_bits(j - i)
        i = j
    return total


# ---- qsgd_elias: per non-zero, omega(gap), sign bit, omega(|level|) -------------------------

@njit(cache=True, nogil=True)
def qsgd_bits(levels):
    total = 0
    prev = -1
    for i in range(levels.shape[0]):
        v = int64(levels[i])
        if v != 0:
            total += omega_bits(i - prev) + 1 + omega_bits(abs(v))
            prev = i
    return total


# ---- one encoder and one decoder for every Elias stream ------------------------------------

LAYOUT_SYMBOLS = 0     # elias_gamma/delta/omega: one code per level
LAYOUT_RUNS = 1        # elias_rle: omega(level), omega(run) per run
LAYOUT_GAPS = 2        # qsgd_elias: omega(gap), sign bit, omega(|level|) per non-zero


@njit(cache=True, nogil=True)
def encode_stream(levels, kind, layout, out32):
    """Write an Elias stream of the given layout; returns (words used, payload bits).

    Each code is emitted at one place: pushed from a register when it is at most 32 bits
    (``short_code``), through ``put_code`` otherwise.
    """
    n = levels.shape[0]
    acc = uint64(0)
    n_pending = 0
    word_pos = 0
    n_bits = 0
    prev = -1
    i = 0
    while i < n:
        v = int64(levels[i])
        j = i + 1
        if layout == LAYOUT_RUNS:
            stop = min(n, i + MAX_RUN)
            while j < stop and levels[j] == levels[i]:
                j += 1
        elif layout == LAYOUT_GAPS and v == 0:
            i = j
            continue
        for part in range(3 if layout == LAYOUT_GAPS else (2 if layout == LAYOUT_RUNS else 1)):
            if layout == LAYOUT_GAPS:
                value = uint64(i - prev) if part == 0 else uint64(abs(v))
            else:
                value = zigzag(v) + uint64(1) if part == 0 else uint64(j - i)
            if layout == LAYOUT_GAPS and part == 1:
                code, length = uint64(v < 0), 1          # the sign bit, 1 = negative
            else:
                code, length = short_code(kind, value)
            if length > 0:
                acc, n_pending = push_bits(acc, n_pending, code, length)
                if n_pending >= WORD_BITS:
                    n_pending -= WORD_BITS
                    out32[word_pos] = word_below(acc, n_pending)
                    word_pos += 1
            else:
                acc, n_pending, word_pos, length = put_code(kind, out32, acc, n_pending,
                                                            word_pos, value)
            n_bits += length
        prev = i
        i = j
    return flush_bits(out32, acc, n_pending, word_pos), n_bits


@njit(cache=True, nogil=True)
def decode_stream(words, total_bits, kind, table, layout, lo, hi, out):
    """Fill ``out`` from an Elias stream of the given layout; returns a status code.

    For LAYOUT_GAPS, ``out`` must arrive zero-filled: only the non-zeros are written. Every code
    is read at one place: a table lookup for codes of <= 12 bits, ``read_long`` otherwise.
    """
    n = out.shape[0]
    i = 0               # LAYOUT_SYMBOLS, LAYOUT_RUNS: next element to write
    prev = -1           # LAYOUT_GAPS: index of the previous non-zero
    second = False      # LAYOUT_RUNS, LAYOUT_GAPS: the next code is the second of a pair
    level = int64(0)
    negative = False
    bit_pos = int64(0)      # typed: a literal 0 compiles every callee a second time
    while True:
        if layout == LAYOUT_GAPS:
            if not second and bit_pos >= total_bits:
                break
        elif i >= n:
            break
        if bit_pos > total_bits:
            return PAYLOAD_OVERRUN
        j = bit_pos >> 6
        e = table[join64(words[j], words[j + 1], bit_pos & 63) >> uint64(64 - MAX_CODE_BITS)]
        if e != 0:
            value = e >> uint64(LENGTH_BITS)
            bit_pos += int64(e & uint64(LENGTH_MASK))
        else:
            value, bit_pos, status = read_long(kind, words, bit_pos, total_bits)
            if status != OK:
                return status
        if layout == LAYOUT_SYMBOLS or (layout == LAYOUT_RUNS and not second):
            level, ok = _level_from(value, lo, hi)
            if not ok:
                return VALUE_OVERFLOW
            if layout == LAYOUT_SYMBOLS:
                out[i] = level
                i += 1
            second = layout == LAYOUT_RUNS
        elif layout == LAYOUT_RUNS:
            if value > uint64(n - i):
                return RUN_OVERFLOW
            out[i:i + int64(value)] = level
            i += int64(value)
            second = False
        elif not second:                      # LAYOUT_GAPS: the gap, then the sign bit
            if value > uint64(n - 1 - prev):
                return RUN_OVERFLOW
            prev += int64(value)
            if bit_pos >= total_bits:
                return PAYLOAD_OVERRUN
            j = bit_pos >> 6
            negative = (join64(words[j], words[j + 1], bit_pos & 63) >> uint64(63)) == 1
            bit_pos += 1
            second = True
        else:                                 # LAYOUT_GAPS: the magnitude
            if value > uint64(1) << uint64(32):
                return VALUE_OVERFLOW
            level = -int64(value) if negative else int64(value)
            if level < lo or level > hi:
                return VALUE_OVERFLOW
            out[prev] = level
            second = False
    if second:
        return PAYLOAD_OVERRUN
    return _end_status(bit_pos, total_bits)
