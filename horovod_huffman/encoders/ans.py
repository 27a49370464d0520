"""``ans``: every level coded with rANS under its normalized frequency (kernels/ans.py), so a
level costs log2(M / f) bits, fractions of a bit included, where Huffman spends at least one.

Parameters: mode (0 coded, 1 constant); constant: the level; coded: base, window, the frequency
table (coded-symbol count, then per coded symbol the gap to its id from the previous one's + 1,
and its frequency - 1; symbol ``window`` is the escape), the chunk size and the bits of every
chunk, and when the escape has a frequency, the escaped levels of every chunk. Payload: the
chunks' rANS streams (each on a 32-bit word), then, from the next word, the escaped levels as
zigzag fields of the dtype's value bits.
"""
from collections import namedtuple

import numpy as np

from horovod_huffman.kernels.ans import (decode_chunks, decode_table, encode_chunks,
                                         encode_tables, escaped_levels, normalize, read_escapes,
                                         write_escapes, HEADER_UNITS, UNIT_BITS)
from horovod_huffman.kernels.bits import WORD_BITS
from horovod_huffman.kernels.chunks import CHUNK_LEVELS, payload_bits
from horovod_huffman.kernels.maxima import ANS_MAX_WINDOW, ANS_PROB_BITS, ANS_PROB_SCALE
from horovod_huffman.kernels.stats import level_range
from horovod_huffman.kernels.symbols import level_histogram

from ..device import copy_to_host
from ..errors import DecodeError
from ..params import ParamWriter, dtype_range, value_bits
from . import gpu
from .base import Encoder, out_words, check_status, check_chunk_levels
from .huffman import fill
from .codes import chunk_count, read_chunk_bits, write_chunks

MODE_CODED = 0
MODE_CONSTANT = 1


def _padded(bits):
    """``bits`` rounded up to a whole 32-bit word."""
    return -(-bits // WORD_BITS) * WORD_BITS


class AnsPlan(namedtuple("AnsPlan", "base window freqs")):
    """An ``ans`` code for one tensor: levels base .. base + window - 1 are symbols 0 ..
    window - 1, symbol ``window`` the escape, ``freqs`` their normalized frequencies (int64
    slots of 1 / ANS_PROB_SCALE)."""
    __slots__ = ()

    @classmethod
    def from_counts(cls, base, window, counts):
        """The plan for symbol ``counts`` (window + 1 of them, the escapes' last)."""
        return cls(base, window, normalize(counts))

    def payload_bits(self, counts, chunks):
        """Estimated payload bits for ``counts`` (escapes excluded) in ``chunks`` chunks: the
        information the frequencies give the symbols, plus per chunk the four final states'
        units (each state holds at least 15 of its 31 bits) and a half word of padding."""
        used = counts > 0
        info = float(np.dot(counts[used], ANS_PROB_BITS - np.log2(self.freqs[used])))
        return int(np.ceil(info)) + chunks * (HEADER_UNITS * UNIT_BITS - 4 * 15 + WORD_BITS // 2)


class Ans(Encoder):
    """rANS over the levels, frequencies from the full histogram.

    >>> import numpy as np, horovod_huffman as hh
    >>> x = np.array([0, 0, 0, 1, -1, 0, 2], dtype=np.int8)
    >>> bool((hh.decode(hh.get_encoder("ans").encode(x)) == x).all())
    True
    """
    name = "ans"
    encoder_id = 10
    on_device = True

    def __init__(self, chunk_levels=CHUNK_LEVELS):
        """``chunk_levels``: levels per independently decodable chunk (kernels/chunks.py)."""
        self.chunk_levels = check_chunk_levels(chunk_levels)

    def plan(self, levels):
        """The ``AnsPlan`` of ``levels``: window from their range, frequencies from their full
        histogram."""
        lo, hi = level_range(levels)
        base, window = lo, min(hi - lo + 1, ANS_MAX_WINDOW)
        counts = np.zeros(window + 1, dtype=np.int64)
        level_histogram(levels, base, window, counts)
        return AnsPlan.from_counts(base, window, counts)

    def plan_device(self, levels, stream):
        """``plan`` for device levels: range and histogram on the GPU."""
        lo, hi = gpu.level_range(levels, stream)
        base, window = lo, min(hi - lo + 1, ANS_MAX_WINDOW)
        counts = gpu.token_counts(gpu.Tokens(levels, gpu.LEVELS, stream, self.chunk_levels),
                                  base, window, window + 1)
        return AnsPlan.from_counts(base, window, counts)

    def _encode(self, levels):
        return self.emit(levels, self.plan(levels))

    def _encode_device(self, levels, stream):
        plan = self.plan_device(levels, stream)
        base, window, freqs = plan
        if freqs[window] or np.count_nonzero(freqs) == 1:
            # escapes (or a constant): the host writes them, the very same bytes
            return self.emit(copy_to_host(levels, stream), plan)
        entries, rcps = encode_tables(freqs)
        out32, n_words, chunk_bits = gpu.ans_payload(levels, base, entries, rcps,
                                                     self.chunk_levels, stream)
        n_chunks = chunk_bits.size
        return (self._params(base, window, freqs, chunk_bits, np.zeros(n_chunks, np.int64)),
                out32, n_words, payload_bits(chunk_bits))

    def emit(self, levels, plan):
        """Encode ``levels`` with ``plan``: (params, words, n_words, n_bits)."""
        base, window, freqs = plan
        n_chunks = chunk_count(levels.size, self.chunk_levels)
        if np.count_nonzero(freqs) == 1 and freqs[window] == 0:
            level = base + int(np.flatnonzero(freqs)[0])
            return ParamWriter().uint(MODE_CONSTANT).sint(level).getvalue(), out_words(0), 0, 0
        escapes = np.zeros(0, dtype=np.int64)
        escape_counts = np.zeros(n_chunks, dtype=np.int64)
        if freqs[window]:
            escapes = escaped_levels(levels, base, window, self.chunk_levels, escape_counts)
        vbits = value_bits(levels.dtype)
        chunk_bits = np.zeros(n_chunks, dtype=np.int64)
        # A chunk: four 32-bit states and at most one unit per level, on a word boundary.
        out32 = out_words(WORD_BITS * n_chunks * (HEADER_UNITS // 2 + 1) +
                          UNIT_BITS * levels.size + vbits * escapes.size + WORD_BITS)
        entries, rcps = encode_tables(freqs)
        n_words = encode_chunks(levels, base, window, entries, rcps, self.chunk_levels, out32,
                                chunk_bits)
        bits = payload_bits(chunk_bits)
        if escapes.size:
            n_words = write_escapes(escapes, vbits, out32, n_words)
            bits = _padded(bits) + vbits * escapes.size
        return self._params(base, window, freqs, chunk_bits, escape_counts), out32, n_words, bits

    def _params(self, base, window, freqs, chunk_bits, escape_counts):
        writer = ParamWriter().uint(MODE_CODED).sint(base).uint(window)
        coded = np.flatnonzero(freqs)
        writer.uint(coded.size)
        previous = -1
        for s in coded:
            writer.uint(int(s) - previous - 1).uint(int(freqs[s]) - 1)
            previous = int(s)
        write_chunks(writer, self.chunk_levels, chunk_bits)
        if freqs[window]:
            for count in escape_counts:
                writer.uint(int(count))
        return writer.getvalue()

    @classmethod
    def _decode(cls, reader, words, payload_bits_, out, stream=None):
        lo, hi = dtype_range(out.dtype)
        mode = reader.uint("mode", MODE_CODED, MODE_CONSTANT)
        if mode == MODE_CONSTANT:
            level = reader.sint("level", lo, hi)
            reader.done()
            if payload_bits_ != 0:
                raise DecodeError(f"{cls.name}: constant stream with a non-empty payload")
            fill(out, level, stream)
            return
        base = reader.sint("base", lo, hi)
        window = reader.uint("window", 1, min(ANS_MAX_WINDOW, hi - base + 1))
        freqs = _read_frequencies(reader, window + 1, cls.name)
        chunk, starts, chunk_bits, declared = read_chunk_bits(reader, out.size, payload_bits_,
                                                              cls.name)
        n_chunks = starts.size
        escape_starts = np.zeros(n_chunks + 1, dtype=np.int64)
        if freqs[window]:
            counts = reader.uints("escaped levels", n_chunks, 0, chunk)
            np.cumsum(counts, out=escape_starts[1:])
        reader.done()
        n_escapes = int(escape_starts[-1])
        vbits = value_bits(out.dtype)
        escape_bit = _padded(declared) if n_escapes else declared
        if escape_bit + vbits * n_escapes != payload_bits_:
            raise DecodeError(f"{cls.name}: chunks and escapes add up to "
                              f"{escape_bit + vbits * n_escapes} bits, the header declares "
                              f"{payload_bits_}")
        escapes = np.empty(n_escapes, dtype=np.int64)
        if n_escapes:
            host_words = words if stream is None else copy_to_host(words, stream)
            check_status(read_escapes(host_words, escape_bit, n_escapes, vbits, lo, hi,
                                      escapes), cls.name)
        table = decode_table(freqs, base, window)
        if stream is not None:
            gpu.decode_ans(words, starts, chunk_bits, chunk, table, escapes, escape_starts, out,
                           cls.name, stream)
            return
        check_status(decode_chunks(words, starts, chunk_bits, chunk, table, out, escapes,
                                   escape_starts), cls.name)


def _read_frequencies(reader, n_symbols, name):
    """Normalized frequencies over ``n_symbols`` ids, fully validated: at least one coded
    symbol, ids in range and increasing, every frequency >= 1, the sum exactly the scale."""
    n_coded = reader.uint("coded symbols", 1, min(ANS_PROB_SCALE, n_symbols))
    freqs = np.zeros(n_symbols, dtype=np.int64)
    s = -1
    for _ in range(n_coded):
        s += reader.uint("symbol gap", 0, n_symbols - 1) + 1
        if s >= n_symbols:
            raise DecodeError(f"{name}: frequency table names symbol {s} of {n_symbols}")
        freqs[s] = reader.uint("frequency", 0, ANS_PROB_SCALE - 1) + 1
    if int(freqs.sum()) != ANS_PROB_SCALE:
        raise DecodeError(f"{name}: frequencies add up to {int(freqs.sum())}, not "
                          f"{ANS_PROB_SCALE}")
    return freqs
