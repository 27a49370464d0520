"""``huffman`` and ``sh``: one canonical Huffman code per element.

Both write the same stream layout, so one decoder serves both; they differ only in where the
code lengths come from: the full histogram (``huffman``) or a uniform random sample of
positions with add-one smoothing over every level in [min, max] (``sh``, the paper's sample
Huffman, which skips the full histogram pass).

Parameters: mode (0 coded, 1 constant); constant: the level; coded: base, window, chunk size,
bits of every chunk, codebook over window + 1 symbols (symbol window = escape).
"""
import numpy as np

from horovod_huffman.kernels.chunks import CHUNK_LEVELS, payload_bits
from horovod_huffman.kernels.huffman import MAX_CODE_BITS, canonical_codes, decode_table
from horovod_huffman.kernels.symbols import level_histogram, pack_entries, encode_levels, \
    decode_levels, multi_symbol_table

from ..errors import DecodeError
from ..params import ParamWriter, dtype_range, value_bits
from .base import Encoder, out_words, check_status
from .codes import (lengths_for, write_lengths, read_lengths, code_cost_bits, chunk_count,
                    write_chunks, read_chunks)

# Levels coded directly span at most this many values; others take the escape.
MAX_WINDOW = 1 << 16
MODE_CODED = 0
MODE_CONSTANT = 1


class LevelPlan:
    """A code for one tensor: window [base, base + window) and lengths over window + 1 symbols."""
    __slots__ = ("base", "window", "lengths")

    def __init__(self, base, window, lengths):
        self.base, self.window, self.lengths = base, window, lengths

    @property
    def constant(self):
        """True when a single level is coded and nothing escapes: the payload is empty."""
        return np.count_nonzero(self.lengths) == 1 and self.lengths[self.window] == 0


def level_window(lo, hi):
    """(base, window) covering [lo, hi], capped at MAX_WINDOW levels."""
    return lo, min(hi - lo + 1, MAX_WINDOW)


class Huffman(Encoder):
    """Canonical Huffman over the levels, code from the full histogram.

    >>> import numpy as np, horovod_huffman as hh
    >>> x = np.array([0, 0, 0, 1, -1, 0, 2], dtype=np.int8)
    >>> (hh.decode(hh.get_encoder("huffman").encode(x)) == x).all()
    True
    """
    name = "huffman"
    encoder_id = 1

    def plan(self, levels):
        """The code this encoder would use for ``levels``."""
        lo, hi = int(levels.min()), int(levels.max())
        base, window = level_window(lo, hi)
        counts = np.zeros(window + 1, dtype=np.int64)
        level_histogram(levels, base, window, counts)
        return LevelPlan(base, window, lengths_for(counts, window))

    def _encode(self, levels):
        return emit(levels, self.plan(levels))

    @classmethod
    def _decode(cls, reader, words, payload_bits, out):
        lo, hi = dtype_range(out.dtype)
        mode = reader.uint("mode", MODE_CODED, MODE_CONSTANT)
        if mode == MODE_CONSTANT:
            level = reader.sint("level", lo, hi)
            reader.done()
            if payload_bits != 0:
                raise DecodeError(f"{cls.name}: constant stream with a non-empty payload")
            out.fill(level)
            return
        base = reader.sint("base", lo, hi)
        window = reader.uint("window", 1, min(MAX_WINDOW, hi - base + 1))
        chunk, starts, chunk_bits = read_chunks(reader, out.size, payload_bits, cls.name)
        lengths, codes = read_lengths(reader, window + 1, cls.name)
        table = decode_table(lengths, codes)
        status = decode_levels(words, starts, chunk_bits, chunk, table,
                               multi_symbol_table(table, window), base, window,
                               value_bits(out.dtype), lo, hi, out)
        check_status(status, cls.name)


def emit(levels, plan):
    """Encode ``levels`` with ``plan``: (params, words, n_words, n_bits)."""
    writer = ParamWriter()
    if plan.constant:
        level = plan.base + int(np.flatnonzero(plan.lengths)[0])
        return writer.uint(MODE_CONSTANT).sint(level).getvalue(), out_words(0), 0, 0
    entries = pack_entries(canonical_codes(plan.lengths), plan.lengths)
    vbits = value_bits(levels.dtype)
    chunk_bits = np.zeros(chunk_count(levels.size), dtype=np.int64)
    # Every element costs at most the longest code plus, if escaped, a raw value.
    out32 = out_words(levels.size * (MAX_CODE_BITS + vbits) + 32 * chunk_bits.size)
    n_words = encode_levels(levels, plan.base, plan.window, entries, vbits, CHUNK_LEVELS, out32,
                            chunk_bits)
    writer.uint(MODE_CODED).sint(plan.base).uint(plan.window)
    write_chunks(writer, CHUNK_LEVELS, chunk_bits)
    write_lengths(writer, plan.lengths)
    return writer.getvalue(), out32, n_words, payload_bits(chunk_bits)


def plan_bits(plan, counts, vbits):
    """Payload bits of ``plan`` applied to a full histogram ``counts`` (window + 1 slots)."""
    if plan.constant:
        return 0
    return code_cost_bits(counts, plan.lengths) + int(counts[plan.window]) * vbits


class SampleHuffman(Huffman):
    """Sample Huffman (paper: SH): code from ``sample_size`` uniformly sampled positions with
    add-one smoothing over every level in [min, max]; then every element is coded.

    ``seed`` fixes the sampling sequence (None: fresh entropy).
    """
    name = "sh"
    encoder_id = 3

    def __init__(self, sample_size=1000, seed=None):
        if not isinstance(sample_size, (int, np.integer)) or sample_size < 1:
            raise ValueError(f"sample_size must be a positive integer, got {sample_size!r}")
        self.sample_size = int(sample_size)
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def _config(self):
        return {"sample_size": self.sample_size, "seed": self.seed}

    def plan(self, levels):
        lo, hi = int(levels.min()), int(levels.max())
        base, window = level_window(lo, hi)
        sample = levels[self._rng.integers(0, levels.size, size=self.sample_size)]
        counts = np.zeros(window + 1, dtype=np.int64)
        level_histogram(sample, base, window, counts)
        counts[:window] += 1                        # add-one smoothing over [min, max]
        if hi - lo + 1 > window:                    # levels beyond the window need the escape
            counts[window] += 1
        return LevelPlan(base, window, lengths_for(counts, window))
