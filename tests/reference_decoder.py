"""A second, independent reader of the wire format, written from docs/wire-format.md alone.

READ ME FIRST
1. Nothing here comes from ``horovod_huffman`` or ``kernels``: every field is read as the
   document describes it, with plain Python ints and bytes (NumPy only for the arrays
   returned). Where this reader and ``horovod_huffman.decode`` agree on a stream, the
   document is enough to read it.
2. It is slow (a few microseconds per level) and strict: every check the document states
   (ranges, lengths, padding, the rANS chunks' final states, every bit consumed) raises
   ``FormatError`` naming the field.
3. Checksums (XXH3-64, seed 0) are verified with the ``xxhash`` package.

Units: positions in bits unless named otherwise; *n* in levels.
"""
import struct
from collections import namedtuple

import numpy as np
import xxhash

# ---- Constants of docs/wire-format.md ----------------------------------------------------------

STREAM_MAGIC, STREAM_VERSION = b"HHUF", 4
MESSAGE_MAGIC, MESSAGE_VERSION = b"HHQT", 3
STREAM_HEADER = struct.Struct("<4sBBBBQIQ")        # 28 bytes
MESSAGE_HEADER = struct.Struct("<4sBBBBQ")         # 16 bytes, then 8 bytes per dimension
CHECKSUM_BYTES = 8
COVERED = 0x01
MAX_ELEMENTS = 1 << 40
MAX_PARAM_BYTES = 1 << 20
MAX_VARINT_BYTES = 10
MAX_NDIM = 32

ENCODER_NAMES = {0: "raw", 1: "huffman", 2: "rlh", 3: "sh", 4: "shs", 5: "elias_gamma",
                 6: "elias_delta", 7: "elias_omega", 8: "elias_rle", 9: "qsgd_elias",
                 10: "ans", 11: "rla"}
LEVEL_DTYPES = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 3: np.dtype(np.int32),
                4: np.dtype(np.int64)}
FLOAT_DTYPES = {1: "float16", 2: "float32", 3: "float64", 4: "bfloat16"}
INT16, INT32 = 2, 3                                 # dtype codes of the row model's residuals

MAX_CODE_BITS = 12                                  # canonical codebooks
MAX_CODED_SYMBOLS = 1 << MAX_CODE_BITS
HUFFMAN_MAX_WINDOW = 1 << 16
RUN_BUCKETS = 63                                    # rlh, rla
RUN_MAX_WINDOW = 2080
SHS_MAX_WINDOW, SHS_MAX_K = 4096, 2048
RAW_MAX_WIDTH = 32
PROB_BITS = 12                                      # rANS: probabilities in 1/4096
PROB_SCALE = 1 << PROB_BITS
ANS_MAX_WINDOW = PROB_SCALE - 1
STATE_LOW, STATE_HIGH = 1 << 15, 1 << 31            # a state lies in [STATE_LOW, STATE_HIGH)
UNIT_BITS = 16
# Interleaved rANS states of a chunk: ans, rla.
ANS_STATES = RLA_STATES = 32
ANS_MAX_CLASSES, ANS_MIN_BLOCK_BITS, ANS_MAX_BLOCK_BITS = 8, 2, 40
CLIP_MAX, PROFILE_MAX, GAIN_MAX, GAIN_SHIFT = 32511, 127, 32767, 7


class FormatError(ValueError):
    """A stream that docs/wire-format.md does not allow; the message names the field."""


def _check(ok, message):
    if not ok:
        raise FormatError(message)


def level_range(dtype_code):
    """(least, largest) level of a dtype code: int64 streams carry int32-range levels."""
    bits = {1: 8, 2: 16, 3: 32, 4: 32}[dtype_code]
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def value_bits(dtype_code):
    """Bits of a zigzag level field: 8, 16 or 32."""
    return {1: 8, 2: 16, 3: 32, 4: 32}[dtype_code]


def unzigzag(u):
    """0, 1, 2, 3, 4 ... -> 0, -1, 1, -2, 2 ..."""
    return (u >> 1) if u % 2 == 0 else -((u + 1) >> 1)


def ceil_div(a, b):
    return -(-a // b)


# ---- Parameters: varints -------------------------------------------------------------------

class Params:
    """The parameter bytes, read field by field; every field checked against its range."""

    def __init__(self, data):
        self.data, self.pos = bytes(data), 0

    def uint(self, name, lo=0, hi=None):
        """An unsigned LEB128 varint in [lo, hi]."""
        value = 0
        for k in range(MAX_VARINT_BYTES + 1):
            _check(k < MAX_VARINT_BYTES, f"parameter {name}: varint longer than "
                                         f"{MAX_VARINT_BYTES} bytes")
            _check(self.pos < len(self.data), f"parameters end inside {name}")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << (7 * k)
            if byte < 0x80:
                break
        _check(lo <= value and (hi is None or value <= hi),
               f"parameter {name}={value} outside [{lo}, {hi}]")
        return value

    def sint(self, name, lo, hi):
        """A zigzag LEB128 varint in [lo, hi]."""
        value = unzigzag(self.uint(name))
        _check(lo <= value <= hi, f"parameter {name}={value} outside [{lo}, {hi}]")
        return value

    def raw(self, name, n_bytes):
        _check(self.pos + n_bytes <= len(self.data), f"parameters end inside {name}")
        self.pos += n_bytes
        return self.data[self.pos - n_bytes:self.pos]

    def rest(self):
        """Every byte not read yet (a codebook ends the parameters)."""
        return self.raw("the codebook", len(self.data) - self.pos)

    def done(self):
        _check(self.pos == len(self.data),
               f"{len(self.data) - self.pos} parameter bytes after the last field")


# ---- Payload: MSB-first bits ---------------------------------------------------------------

class Bits:
    """Reads bits [pos, end) of ``data`` (bytes), MSB-first: bit 0 is the top bit of byte 0."""

    def __init__(self, data, pos, end, what):
        _check(0 <= pos <= end <= 8 * len(data), f"{what}: bits [{pos}, {end}) outside the "
                                                 f"{8 * len(data)} there are")
        self.data, self.pos, self.end, self.what = data, pos, end, what

    def read(self, n_bits):
        """The next ``n_bits`` as an unsigned integer."""
        _check(self.pos + n_bits <= self.end, f"{self.what}: read past its end")
        if n_bits == 0:
            return 0
        first, last = self.pos >> 3, (self.pos + n_bits + 7) >> 3
        word = int.from_bytes(self.data[first:last], "big")
        self.pos += n_bits
        return (word >> (8 * last - self.pos)) & ((1 << n_bits) - 1)

    def gamma(self):
        """Elias gamma: N - 1 zero bits, then the value in N bits."""
        zeros = 0
        while self.read(1) == 0:
            zeros += 1
            _check(zeros < 64, f"{self.what}: Elias code of more than 64 bits")
        return (1 << zeros) | self.read(zeros)

    def delta(self):
        """Elias delta: gamma(N), then the value's low N - 1 bits."""
        n = self.gamma()
        _check(n <= 64, f"{self.what}: Elias delta length {n}")
        return (1 << (n - 1)) | self.read(n - 1)

    def omega(self):
        """Elias omega: from n = 1, while the next bit is 1, n = that bit and n more bits."""
        n = 1
        while self.read(1) == 1:
            _check(n < 64, f"{self.what}: Elias omega group of more than 64 bits")
            n = (1 << n) | self.read(n)
        return n

    def zigzag_level(self, vbits, lo, hi):
        """A raw level: its zigzag form in ``vbits`` bits, checked against [lo, hi]."""
        level = unzigzag(self.read(vbits))
        _check(lo <= level <= hi, f"{self.what}: raw level {level} outside [{lo}, {hi}]")
        return level

    def finish(self):
        _check(self.pos == self.end, f"{self.what}: {self.end - self.pos} bits left unread")


def round_up_32(bit):
    return ceil_div(bit, 32) * 32


# ---- Chunks and canonical codebooks --------------------------------------------------------

Chunks = namedtuple("Chunks", "size starts bits end")


def read_chunks(params, n):
    """The chunk size C, every chunk's start and bits, and the end of the last chunk."""
    size = params.uint("chunk size", 1, MAX_ELEMENTS)
    count = ceil_div(n, size)
    bits = [params.uint(f"chunk bits {c}") for c in range(count)]
    starts, at = [], 0
    for b in bits:
        starts.append(at)
        at += round_up_32(b)
    return Chunks(size, starts, bits, starts[-1] + bits[-1])


def chunk_levels(chunks, c, n):
    """The indices of chunk c's levels, a range."""
    return range(c * chunks.size, min(n, (c + 1) * chunks.size))


def read_codebook(params, n_symbols):
    """The canonical code of a codebook over ``n_symbols`` ids: {(length, code): id}."""
    count = params.uint("coded symbols", 1, min(MAX_CODED_SYMBOLS, n_symbols))
    data = params.rest()
    bits = Bits(data, 0, 8 * len(data), "codebook")
    lengths, previous = {}, -1
    for _ in range(count):
        symbol = previous + bits.gamma()
        _check(symbol < n_symbols, f"codebook names symbol {symbol} of {n_symbols}")
        length = bits.read(4)
        _check(1 <= length <= MAX_CODE_BITS, f"codebook: code length {length}")
        lengths[symbol], previous = length, symbol
    _check(8 * len(data) - bits.pos < 8 and bits.read(8 * len(data) - bits.pos) == 0,
           "codebook: not padded with zero bits to its last byte")
    _check(sum(1 << (MAX_CODE_BITS - n) for n in lengths.values()) <= 1 << MAX_CODE_BITS,
           "codebook: lengths violate the Kraft inequality")
    codes, code, length_before = {}, 0, 0
    for symbol, length in sorted(lengths.items(), key=lambda item: (item[1], item[0])):
        code <<= length - length_before
        codes[(length, code)] = symbol
        code, length_before = code + 1, length
    return codes


def read_symbol(bits, codes):
    """The symbol whose canonical code comes next."""
    code = 0
    for length in range(1, MAX_CODE_BITS + 1):
        code = (code << 1) | bits.read(1)
        symbol = codes.get((length, code))
        if symbol is not None:
            return symbol
    raise FormatError(f"{bits.what}: no code matches the next {MAX_CODE_BITS} bits")


def run_bucket(q):
    """(base run, extra bits) of run bucket q (0..62)."""
    if q < 3:
        return q + 1, 0
    b, m = (q - 3) // 2 + 2, (q - 3) % 2
    return (2 + m) << (b - 1), b - 1


# ---- Huffman-coded encoders ----------------------------------------------------------------

def decode_huffman(params, payload, payload_bits, n, dtype_code):
    """``huffman`` and ``sh``."""
    lo, hi = level_range(dtype_code)
    mode = params.uint("mode", 0, 1)
    if mode == 1:
        return constant(params, payload_bits, n, lo, hi)
    base = params.sint("base", lo, hi)
    window = params.uint("window", 1, min(HUFFMAN_MAX_WINDOW, hi - base + 1))
    chunks = read_chunks(params, n)
    codes = read_codebook(params, window + 1)
    _check(chunks.end == payload_bits, "chunks do not end at the payload's end")
    out = []
    for c, start in enumerate(chunks.starts):
        bits = Bits(payload, start, start + chunks.bits[c], f"chunk {c}")
        for _ in chunk_levels(chunks, c, n):
            symbol = read_symbol(bits, codes)
            out.append(bits.zigzag_level(value_bits(dtype_code), lo, hi) if symbol == window
                       else base + symbol)
        bits.finish()
    return out


def constant(params, payload_bits, n, lo, hi):
    """Mode 1 of ``huffman``, ``sh`` and ``ans``: one level, an empty payload."""
    level = params.sint("level", lo, hi)
    params.done()
    _check(payload_bits == 0, "constant stream with a payload")
    return [level] * n


def decode_tokens(params, payload, payload_bits, n, dtype_code, shs):
    """``rlh`` (``shs`` False) and ``shs``: tokens (level, run) per chunk."""
    lo, hi = level_range(dtype_code)
    vbits = value_bits(dtype_code)
    base = params.sint("base", lo, hi)
    most = SHS_MAX_WINDOW if shs else RUN_MAX_WINDOW
    window = params.uint("window", 1, min(most, hi - base + 1))
    k = params.uint("k", 1, SHS_MAX_K) if shs else 0
    chunks = read_chunks(params, n)
    escape = window + k if shs else RUN_BUCKETS * window
    codes = read_codebook(params, escape + 1)
    _check(chunks.end == payload_bits, "chunks do not end at the payload's end")
    if shs and not base <= 0 < base + window:
        _check(not any(window <= s < window + k for s in codes.values()),
               "shs codes zero runs but level 0 lies outside the window")
    out = []
    for c, start in enumerate(chunks.starts):
        bits = Bits(payload, start, start + chunks.bits[c], f"chunk {c}")
        stop = chunk_levels(chunks, c, n).stop
        while len(out) < stop:
            symbol = read_symbol(bits, codes)
            if symbol == escape:
                level = bits.zigzag_level(vbits, lo, hi)
                run = 1 if shs else bits.gamma()
            elif shs:
                level, run = (base + symbol, 1) if symbol < window else (0, symbol - window + 1)
            else:
                q, index = divmod(symbol, window)
                level = base + index
                run_base, extra = run_bucket(q)
                run = run_base + bits.read(extra)
            _check(run <= stop - len(out), f"chunk {c}: a run passes the chunk's end")
            out.extend([level] * run)
        bits.finish()
    return out


# ---- Elias and raw -------------------------------------------------------------------------

def decode_elias(params, payload, payload_bits, n, dtype_code, kind):
    """``elias_gamma``, ``elias_delta``, ``elias_omega`` (kind: the code), ``elias_rle`` and
    ``qsgd_elias``."""
    params.done()
    lo, hi = level_range(dtype_code)
    bits = Bits(payload, 0, payload_bits, "payload")
    out = [0] * n

    def level_of(value):
        level = unzigzag(value - 1)
        _check(lo <= level <= hi, f"level {level} outside [{lo}, {hi}]")
        return level
    if kind == "qsgd_elias":
        previous = -1
        while bits.pos < bits.end:
            previous += bits.omega()
            _check(previous < n, f"a non-zero at index {previous} of {n}")
            negative = bits.read(1)
            level = -bits.omega() if negative else bits.omega()
            _check(lo <= level <= hi, f"level {level} outside [{lo}, {hi}]")
            out[previous] = level
        return out
    i = 0
    while i < n:
        if kind == "elias_rle":
            level = level_of(bits.omega())
            run = bits.omega()
            _check(run <= n - i, f"a run of {run} at level {i} of {n}")
        else:
            level = level_of({"elias_gamma": bits.gamma, "elias_delta": bits.delta,
                              "elias_omega": bits.omega}[kind]())
            run = 1
        out[i:i + run] = [level] * run
        i += run
    bits.finish()
    return out


def decode_raw(params, payload, payload_bits, n, dtype_code):
    lo, hi = level_range(dtype_code)
    base = params.sint("base", lo, hi)
    width = params.uint("width", 0, RAW_MAX_WIDTH)
    params.done()
    _check(payload_bits == n * width, f"{payload_bits} payload bits for {n} x {width}")
    bits = Bits(payload, 0, payload_bits, "payload")
    out = [base + bits.read(width) for _ in range(n)]
    _check(all(lo <= v <= hi for v in out), "a level outside the dtype")
    return out


# ---- rANS: frequency tables and chunk streams ----------------------------------------------

class FrequencyTable:
    """A normalized frequency table: ``freq``, ``cum`` (slots below) and ``symbol_of`` (the
    symbol each of the 4096 slots names)."""

    def __init__(self, params, n_symbols, name):
        count = params.uint(f"{name} coded symbols", 1, min(PROB_SCALE, n_symbols))
        self.freq = {}
        symbol = -1
        for _ in range(count):
            symbol += params.uint(f"{name} id gap") + 1
            _check(symbol < n_symbols, f"{name} names symbol {symbol} of {n_symbols}")
            self.freq[symbol] = params.uint(f"{name} frequency") + 1
        _check(sum(self.freq.values()) == PROB_SCALE,
               f"{name}: frequencies add up to {sum(self.freq.values())}, not {PROB_SCALE}")
        self.cum, self.symbol_of = {}, []
        for s in sorted(self.freq):
            self.cum[s] = len(self.symbol_of)
            self.symbol_of.extend([s] * self.freq[s])


class RansChunk:
    """One chunk's rANS stream: ``count`` states, then 16-bit units read as the states need
    them."""

    def __init__(self, payload, start, n_bits, c, count):
        _check(n_bits % UNIT_BITS == 0 and n_bits >= 2 * count * UNIT_BITS,
               f"chunk {c}: {n_bits} bits is no whole number of units past the states")
        self.units = Bits(payload, start, start + n_bits, f"chunk {c}")
        self.states = [self.units.read(32) for _ in range(count)]
        _check(all(STATE_LOW <= x < STATE_HIGH for x in self.states),
               f"chunk {c}: an opening state outside [2^15, 2^31)")

    def decode(self, j, table):
        """The symbol j of the chunk, on state j mod the state count."""
        k = j % len(self.states)
        x = self.states[k]
        slot = x % PROB_SCALE
        s = table.symbol_of[slot]
        x = table.freq[s] * (x // PROB_SCALE) + slot - table.cum[s]
        if x < STATE_LOW:
            x = (x << UNIT_BITS) | self.units.read(UNIT_BITS)
        self.states[k] = x
        return s

    def finish(self):
        _check(all(x == STATE_LOW for x in self.states),
               f"{self.units.what}: final states {self.states}, not 2^15")
        self.units.finish()


# ---- ans -----------------------------------------------------------------------------------

def decode_ans(params, payload, payload_bits, n, dtype_code):
    mode = params.uint("mode", 0, 3)
    if mode != 3:
        return ans_levels(params, mode, payload, payload_bits, n, dtype_code)
    segments, clip = read_row_model(params, n)
    mode = params.uint("residual mode", 0, 2)
    residuals = ans_levels(params, mode, payload, payload_bits, n,
                           INT16 if dtype_code == 1 else INT32)
    lo, hi = level_range(dtype_code)
    out = list(residuals)
    for start, rows, length, profile, gains in segments:
        for r in range(rows):
            for j in range(length):
                prediction = (gains[r] * profile[j] + (1 << (GAIN_SHIFT - 1))) >> GAIN_SHIFT
                out[start + r * length + j] += min(max(prediction, -clip), clip)
    _check(all(lo <= v <= hi for v in out), "a level (residual + prediction) outside the dtype")
    return out


def read_row_model(params, n):
    """The row model: [(start, rows, row length, profile, gains)] and the clip."""
    clip = params.uint("clip", 0, CLIP_MAX)
    count = params.uint("segments")
    shapes, end = [], 0
    for k in range(count):
        gap = params.uint(f"segment {k} gap")
        rows = params.uint(f"segment {k} rows", 1)
        length = params.uint(f"segment {k} row length", 1)
        shapes.append((end + gap, rows, length))
        end += gap + rows * length
        _check(end <= n, f"row model segment {k} ends at {end}, past {n}")
    profiles = [[params.sint("profile", -PROFILE_MAX, PROFILE_MAX) for _ in range(length)]
                for _, _, length in shapes]
    gains = [[params.sint("gain", -GAIN_MAX, GAIN_MAX) for _ in range(rows)]
             for _, rows, _ in shapes]
    return [shape + (p, g) for shape, p, g in zip(shapes, profiles, gains)], clip


def ans_levels(params, mode, payload, payload_bits, n, dtype_code):
    """The rest of an ``ans`` stream of mode 0, 1 or 2: its ``n`` levels."""
    lo, hi = level_range(dtype_code)
    if mode == 1:
        return constant(params, payload_bits, n, lo, hi)
    base = params.sint("base", lo, hi)
    window = params.uint("window", 1, min(ANS_MAX_WINDOW, hi - base + 1))
    n_classes, block_bits = 1, None
    if mode == 2:
        n_classes = params.uint("classes", 2, ANS_MAX_CLASSES)
        block_bits = params.uint("block bits", ANS_MIN_BLOCK_BITS, ANS_MAX_BLOCK_BITS)
    tables = [FrequencyTable(params, window + 1, f"frequency table {t}")
              for t in range(n_classes)]
    chunks = read_chunks(params, n)
    classes = [0]
    if mode == 2:
        _check(chunks.size % (1 << block_bits) == 0, "blocks do not divide the chunks")
        classes = read_classes(params, ceil_div(n, 1 << block_bits), n_classes)
    escape_counts = [0] * len(chunks.starts)
    if any(window in t.freq for t in tables):
        escape_counts = [params.uint(f"escaped levels {c}", 0, chunks.size)
                         for c in range(len(chunks.starts))]
    params.done()
    vbits, n_escapes = value_bits(dtype_code), sum(escape_counts)
    first_escape = round_up_32(chunks.end) if n_escapes else chunks.end
    _check(first_escape + vbits * n_escapes == payload_bits,
           "chunks and escaped levels do not end at the payload's end")
    escape_bits = Bits(payload, first_escape, payload_bits, "escaped levels")
    out = []
    for c, start in enumerate(chunks.starts):
        chunk = RansChunk(payload, start, chunks.bits[c], c, ANS_STATES)
        escapes = iter([escape_bits.zigzag_level(vbits, lo, hi)
                        for _ in range(escape_counts[c])])
        for j, i in enumerate(chunk_levels(chunks, c, n)):
            s = chunk.decode(j, tables[classes[i >> block_bits] if mode == 2 else 0])
            level = next(escapes, None) if s == window else base + s
            _check(level is not None, f"chunk {c}: more escapes than its count")
            out.append(level)
        chunk.finish()
        _check(next(escapes, None) is None, f"chunk {c}: fewer escapes than its count")
    return out


def read_classes(params, n_blocks, n_classes):
    """Every block's class: ceil(log2 K)-bit fields, MSB-first, zero-padded to a byte."""
    width = (n_classes - 1).bit_length()
    data = params.raw("block classes", ceil_div(n_blocks * width, 8))
    bits = Bits(data, 0, 8 * len(data), "block classes")
    classes = [bits.read(width) for _ in range(n_blocks)]
    _check(max(classes) < n_classes, f"a block names class {max(classes)} of {n_classes}")
    _check(bits.read(bits.end - bits.pos) == 0, "block classes: padding is not zero")
    return classes


# ---- rla -----------------------------------------------------------------------------------

def decode_rla(params, payload, payload_bits, n, dtype_code):
    lo, hi = level_range(dtype_code)
    vbits = value_bits(dtype_code)
    base = params.sint("base", lo, hi)
    window = params.uint("window", 1, min(RUN_MAX_WINDOW, hi - base + 1))
    n_tables = params.uint("contexts", 1, 2)
    _check(n_tables == 1 or base <= 0 < base + window,
           "two contexts without level 0 in the window")
    escape = RUN_BUCKETS * window
    tables = [FrequencyTable(params, escape + 1, f"frequency table {t}")
              for t in range(n_tables)]
    chunks = read_chunks(params, n)
    extra_bits = [params.uint(f"extra bits {c}") for c in range(len(chunks.starts))]
    params.done()
    first_extra = round_up_32(chunks.end) if sum(extra_bits) else chunks.end
    _check(first_extra + sum(extra_bits) == payload_bits,
           "chunks and extras do not end at the payload's end")
    out = []
    for c, start in enumerate(chunks.starts):
        chunk = RansChunk(payload, start, chunks.bits[c], c, RLA_STATES)
        extras = Bits(payload, first_extra, first_extra + extra_bits[c], f"chunk {c} extras")
        first_extra += extra_bits[c]
        stop = chunk_levels(chunks, c, n).stop
        j, context = 0, 0
        while len(out) < stop:
            s = chunk.decode(j, tables[context])
            j += 1
            if s == escape:
                level = extras.zigzag_level(vbits, lo, hi)
                run = extras.gamma()
            else:
                q, index = divmod(s, window)
                level = base + index
                run_base, extra = run_bucket(q)
                run = run_base + extras.read(extra)
            context = 1 if n_tables == 2 and s != escape and level == 0 else 0
            _check(run <= stop - len(out), f"chunk {c}: a run passes the chunk's end")
            out.extend([level] * run)
        chunk.finish()
        extras.finish()
    return out


# ---- Streams and messages ------------------------------------------------------------------

DECODERS = {
    0: decode_raw, 1: decode_huffman, 2: lambda *a: decode_tokens(*a, shs=False),
    3: decode_huffman, 4: lambda *a: decode_tokens(*a, shs=True),
    5: lambda *a: decode_elias(*a, kind="elias_gamma"),
    6: lambda *a: decode_elias(*a, kind="elias_delta"),
    7: lambda *a: decode_elias(*a, kind="elias_omega"),
    8: lambda *a: decode_elias(*a, kind="elias_rle"),
    9: lambda *a: decode_elias(*a, kind="qsgd_elias"),
    10: decode_ans, 11: decode_rla,
}
assert set(DECODERS) == set(ENCODER_NAMES)


def checksum_ok(data):
    """Whether the last 8 bytes are the XXH3-64 (seed 0) of the others, little-endian."""
    (stored,) = struct.unpack_from("<Q", data, len(data) - CHECKSUM_BYTES)
    return xxhash.xxh3_64_intdigest(data[:-CHECKSUM_BYTES]) == stored


def stream_header(buf):
    """(encoder id, dtype code, flags, n, parameter bytes, payload bits) of a level stream."""
    data = bytes(buf)
    _check(len(data) >= STREAM_HEADER.size, "stream shorter than its header")
    magic, version, encoder_id, dtype_code, flags, n, n_params, payload_bits = \
        STREAM_HEADER.unpack_from(data, 0)
    _check(magic == STREAM_MAGIC, f"magic {magic!r}")
    _check(version == STREAM_VERSION, f"format version {version}")
    return encoder_id, dtype_code, flags, n, n_params, payload_bits


def decode(buf, covered=False):
    """The levels (a NumPy array of the stream's dtype) of a level stream (``covered``: one
    inside a tensor message, without a checksum of its own)."""
    data = bytes(buf)
    encoder_id, dtype_code, flags, n, n_params, payload_bits = stream_header(data)
    _check(flags == (COVERED if covered else 0), f"flags {flags:#x}")
    _check(n_params <= MAX_PARAM_BYTES, f"parameter bytes {n_params}")
    payload_bytes = ceil_div(payload_bits, 8)
    tail = 0 if covered else CHECKSUM_BYTES
    _check(len(data) == STREAM_HEADER.size + n_params + payload_bytes + tail,
           f"stream length {len(data)} does not match its header")
    _check(covered or checksum_ok(data), "checksum mismatch")
    _check(encoder_id in ENCODER_NAMES, f"encoder id {encoder_id}")
    _check(dtype_code in LEVEL_DTYPES, f"level dtype code {dtype_code}")
    _check(n <= MAX_ELEMENTS, f"element count {n}")
    params = data[STREAM_HEADER.size:STREAM_HEADER.size + n_params]
    payload = data[STREAM_HEADER.size + n_params:STREAM_HEADER.size + n_params + payload_bytes]
    padding = 8 * payload_bytes - payload_bits
    _check(padding == 0 or payload[-1] & ((1 << padding) - 1) == 0,
           "payload not zero-padded to its last byte")
    if n == 0:
        _check(n_params == 0 and payload_bits == 0, "empty stream with parameters or payload")
        return np.zeros(0, dtype=LEVEL_DTYPES[dtype_code])
    levels = DECODERS[encoder_id](Params(params), payload, payload_bits, n, dtype_code)
    _check(len(levels) == n, f"{len(levels)} levels decoded, the header declares {n}")
    return np.array(levels, dtype=LEVEL_DTYPES[dtype_code])


Message = namedtuple("Message", "shape dtype bucket scales levels")


def decode_message(buf):
    """A tensor message: its shape, float dtype name, bucket size, scales (float32) and
    levels."""
    data = bytes(buf)
    _check(len(data) >= MESSAGE_HEADER.size + CHECKSUM_BYTES, "message shorter than its header")
    _check(checksum_ok(data), "message checksum mismatch")
    magic, version, dtype_code, ndim, flags, bucket = MESSAGE_HEADER.unpack_from(data, 0)
    _check(magic == MESSAGE_MAGIC, f"magic {magic!r}")
    _check(version == MESSAGE_VERSION, f"message version {version}")
    _check(dtype_code in FLOAT_DTYPES, f"float dtype code {dtype_code}")
    _check(ndim <= MAX_NDIM and flags == 0, f"ndim {ndim}, flags {flags:#x}")
    _check(1 <= bucket <= MAX_ELEMENTS, f"bucket size {bucket}")
    at = MESSAGE_HEADER.size
    _check(len(data) >= at + 8 * ndim + CHECKSUM_BYTES, "message ends inside its shape")
    shape = struct.unpack_from(f"<{ndim}Q", data, at)
    at += 8 * ndim
    numel = 1
    for d in shape:
        numel *= d
    n_scales = ceil_div(numel, bucket)
    _check(len(data) >= at + 4 * n_scales + CHECKSUM_BYTES, "message ends inside its scales")
    scales = np.frombuffer(data, dtype="<f4", count=n_scales, offset=at).astype(np.float32)
    levels = decode(data[at + 4 * n_scales:len(data) - CHECKSUM_BYTES], covered=True)
    _check(levels.size == numel, f"{levels.size} levels for a shape of {numel}")
    return Message(tuple(shape), FLOAT_DTYPES[dtype_code], bucket, scales, levels)
