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
from horovod_huffman.kernels.huffman import decode_table
from horovod_huffman.kernels.maxima import HUFFMAN_MAX_WINDOW, MAX_CODE_BITS
from horovod_huffman.kernels.stats import level_range
from horovod_huffman.kernels.lanes import decode_levels
from horovod_huffman.kernels.symbols import level_histogram, encode_levels, multi_symbol_tables

from .. import wire
from ..errors import DecodeError
from ..params import ParamWriter, dtype_range, value_bits
from . import gpu
from .base import Batched, Chunked, Sampled, out_words, check_status
from .codes import (Code, read_lengths, code_cost_bits, chunk_count,
                    write_chunks, read_chunks)

MODE_CODED = 0
MODE_CONSTANT = 1


class LevelPlan:
    """A code for one tensor: window [base, base + window), lengths over window + 1 symbols, and
    levels per chunk."""
    __slots__ = ("base", "window", "lengths", "chunk", "_code")

    def __init__(self, base, window, lengths, chunk=CHUNK_LEVELS, code=None):
        self.base, self.window, self.lengths, self.chunk = base, window, lengths, chunk
        self._code = code

    @classmethod
    def from_counts(cls, base, window, counts, chunk=CHUNK_LEVELS):
        """The plan of the optimal code for ``counts`` over window + 1 symbols."""
        code = Code.from_counts(counts, window)
        return cls(base, window, code.full_lengths(), chunk, code)

    @property
    def code(self):
        """The plan's codes.Code (built on first use)."""
        if self._code is None:
            self._code = Code.from_lengths(self.lengths)
        return self._code

    @property
    def constant(self):
        """True when a single level is coded and nothing escapes: the payload is empty."""
        return np.count_nonzero(self.lengths) == 1 and self.lengths[self.window] == 0


def level_window(lo, hi):
    """(base, window) covering [lo, hi], capped at HUFFMAN_MAX_WINDOW levels."""
    return lo, min(hi - lo + 1, HUFFMAN_MAX_WINDOW)


class Huffman(Batched, Chunked):
    """Canonical Huffman over the levels, code from the full histogram.

    >>> import numpy as np, horovod_huffman as hh
    >>> x = np.array([0, 0, 0, 1, -1, 0, 2], dtype=np.int8)
    >>> bool((hh.decode(hh.get_encoder("huffman").encode(x)) == x).all())
    True
    """
    name = "huffman"
    encoder_id = wire.ENCODER_IDS[name]
    on_device = True

    def plan(self, levels):
        """The code this encoder would use for ``levels``."""
        base, window = level_window(*level_range(levels))
        counts = np.zeros(window + 1, dtype=np.int64)
        level_histogram(levels, base, window, counts)
        return LevelPlan.from_counts(base, window, counts, self.chunk_levels)

    def device_plans(self, batch):
        """(``plan`` of every part of a gpu.Batch, None for an empty part; the full
        histograms they were planned from, which bound the payload: gpu.token_payload): the
        histograms are counted on the GPU, in one launch for the whole batch."""
        found = gpu.window_counts(gpu.Tokens(batch, gpu.LEVELS), level_window)
        return [LevelPlan.from_counts(base, window, c, self.chunk_levels) if n else None
                for (base, window), c, n in zip(found.windows, found.counts, batch.sizes)], \
            found.counts

    def _encode(self, levels):
        return emit(levels, self.plan(levels))

    def _encode_device_parts(self, levels, sizes, stream, rider=None):
        batch = gpu.Batch(levels, sizes, stream, self.chunk_levels, rider, self)
        return emit_device_parts(batch, *self.device_plans(batch))

    @classmethod
    def _decode(cls, reader, words, payload_bits, out, stream=None):
        lo, hi = dtype_range(out.dtype)
        mode = reader.uint("mode", MODE_CODED, MODE_CONSTANT)
        if mode == MODE_CONSTANT:
            level = reader.sint("level", lo, hi)
            reader.done()
            if payload_bits != 0:
                raise DecodeError(f"{cls.name}: constant stream with a non-empty payload")
            fill(out, level, stream)
            return
        base = reader.sint("base", lo, hi)
        window = reader.uint("window", 1, min(HUFFMAN_MAX_WINDOW, hi - base + 1))
        chunk, starts, chunk_bits = read_chunks(reader, out.size, payload_bits, cls.name)
        lengths, codes = read_lengths(reader, window + 1, cls.name)
        table = decode_table(lengths, codes)
        vbits = value_bits(out.dtype)
        if stream is not None:
            gpu.decode_levels(words, starts, chunk_bits, chunk, table, base, window, vbits, lo,
                              hi, out, cls.name)
            return
        tables = multi_symbol_tables(table, window, base, out.itemsize)
        status = decode_levels(words, starts, chunk_bits, chunk,
                               (table, base, window, vbits, lo, hi), tables, out)
        check_status(status, cls.name)


def fill(out, level, stream):
    """Every level of ``out`` (a host array, or with ``stream`` a gpu.Output) ``level``."""
    out.fill(level)


def _constant_params(plan):
    level = plan.base + int(np.flatnonzero(plan.lengths)[0])
    return ParamWriter().uint(MODE_CONSTANT).sint(level).getvalue(), out_words(0), 0, 0


def _coded_params(plan, chunk_bits):
    writer = ParamWriter().uint(MODE_CODED).sint(plan.base).uint(plan.window)
    write_chunks(writer, plan.chunk, chunk_bits)
    plan.code.write(writer)
    return writer.getvalue()


def emit(levels, plan):
    """Encode ``levels`` with ``plan``: (params, words, n_words, n_bits)."""
    if plan.constant:
        return _constant_params(plan)
    entries = plan.code.entries()
    vbits = value_bits(levels.dtype)
    chunk_bits = np.zeros(chunk_count(levels.size, plan.chunk), dtype=np.int64)
    # Every element costs at most the longest code plus, if escaped, a raw value.
    out32 = out_words(levels.size * (MAX_CODE_BITS + vbits) + 32 * chunk_bits.size)
    n_words = encode_levels(levels, plan.base, plan.window, entries, vbits, plan.chunk, out32,
                            chunk_bits)
    return _coded_params(plan, chunk_bits), out32, n_words, payload_bits(chunk_bits)


def emit_device_parts(batch, plans, counts=None):
    """``emit`` of every non-empty part of a gpu.Batch with its plan (``plans``: one per part,
    None for an empty one), as one batch on the device; the same results, in part order.
    ``counts``: None, or every part's full histogram (gpu.token_payload)."""
    codes = [None if plan is None or plan.constant else
             gpu.TokenCode(plan.base, plan.window, plan.code.entries(), plan.window)
             for plan in plans]
    payloads = gpu.token_payload(gpu.Tokens(batch, gpu.LEVELS), codes,
                                 value_bits(batch.levels.dtype), counts=counts)
    results = []
    for plan, payload in zip(plans, payloads):
        if plan is None:
            continue
        if plan.constant:
            results.append(_constant_params(plan))
            continue
        out32, n_words, chunk_bits = payload
        results.append((_coded_params(plan, chunk_bits), out32, n_words,
                        payload_bits(chunk_bits)))
    return results


def plan_bits(plan, counts, vbits):
    """Payload bits of ``plan`` applied to a full histogram ``counts`` (window + 1 slots)."""
    if plan.constant:
        return 0
    return code_cost_bits(counts, plan.lengths) + int(counts[plan.window]) * vbits


class SampleHuffman(Sampled, Huffman):
    """Sample Huffman (paper: SH): code from ``sample_size`` uniformly sampled positions with
    add-one smoothing over every level in [min, max]; then every element is coded.

    ``seed`` fixes the sampling sequence (None: fresh entropy).
    """
    name = "sh"
    encoder_id = wire.ENCODER_IDS[name]

    def __init__(self, sample_size=1000, seed=None, chunk_levels=CHUNK_LEVELS):
        if not isinstance(sample_size, (int, np.integer)) or sample_size < 1:
            raise ValueError(f"sample_size must be a positive integer, got {sample_size!r}")
        super().__init__(chunk_levels)
        self.sample_size = int(sample_size)
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def _config(self):
        return {"sample_size": self.sample_size, "seed": self.seed}

    def device_plans(self, batch):
        """(the sampled plan of every part of a gpu.Batch, None for an empty part; the full
        histograms in the plans' windows, which bound the payload: gpu.token_payload): the
        ranges, the samples and the histograms are found on the GPU and come back in one
        copy where the levels lie near 0 (gpu.window_counts)."""
        found = gpu.window_counts(gpu.Tokens(batch, gpu.LEVELS), level_window,
                                  self.batch_positions(batch))
        return self.batch_plans(batch, found.ranges, found.sample), found.counts

    def sampled_plan(self, lo, hi, sample):
        """The code for levels in [lo, hi] from a host ``sample`` of them."""
        base, window = level_window(lo, hi)
        counts = np.zeros(window + 1, dtype=np.int64)
        level_histogram(sample, base, window, counts)
        counts[:window] += 1                        # add-one smoothing over [min, max]
        if hi - lo + 1 > window:                    # levels beyond the window need the escape
            counts[window] += 1
        return LevelPlan.from_counts(base, window, counts, self.chunk_levels)
