"""``ans``: every level coded with rANS under its normalized frequency (kernels/ans.py), so a
level costs log2(M / f) bits, fractions of a bit included, where Huffman spends at least one;
with contexts, blocks of levels are sorted into classes by their largest |level| and every
class has its own frequencies; with a layout, the row model (encoders/rows.py) subtracts each
matrix's rank-one prediction and codes the residuals as it codes levels.

Parameters: mode (0 coded, 1 constant, 2 coded with contexts, 3 row model); constant: the level;
coded:
base, window, [contexts: classes K, log2 of the block size], K frequency tables (each: the
coded-symbol count, then per coded symbol the gap to its id from the previous one's + 1 and its
frequency - 1; symbol ``window`` is the escape), the chunk size and the bits of every chunk,
[contexts: every block's class in ceil(log2 K) bits, MSB-first, as bytes], and when an escape
has a frequency, the escaped levels of every chunk. Payload: the chunks' rANS streams (each on
a 32-bit word), then, from the next word, the escaped levels as zigzag fields of the dtype's
value bits. Row model: the model (encoders/rows.py), then the parameters of the residuals'
stream (mode 0, 1 or 2, as above); its payload is the residuals'.
"""
from collections import namedtuple

import numpy as np

from horovod_huffman.kernels.ans import (coder_tables, decode_chunks, decode_tables,
                                         encode_chunks, escaped_levels, frequency_fields,
                                         normalize, pack_classes, read_escapes,
                                         read_frequency_tables, unpack_classes, write_escapes,
                                         GROUP_LANES, HEADER_UNITS, NAMES_PAST,
                                         UNIT_BITS)
from horovod_huffman.kernels.ans_plans import (best_classes, block_maxima, chunks_bytes,
                                               class_bits, class_counts, sampled_maxima,
                                               stream_bytes)
from horovod_huffman.kernels.bits import WORD_BITS
from horovod_huffman.kernels.chunks import ANS_CHUNK_PAYLOAD_BITS, CHUNK_LEVELS, payload_bits
from horovod_huffman.kernels.errors import OK, VALUE_OVERFLOW
from horovod_huffman.kernels.maxima import (ANS_MAX_BLOCK_BITS, ANS_MAX_CLASSES, ANS_MAX_WINDOW,
                                            ANS_PROB_SCALE)
from horovod_huffman.kernels.rows import PREDICTION_MAX
from horovod_huffman.kernels.stats import level_range
from horovod_huffman.kernels.symbols import level_histogram
from horovod_huffman.kernels.varints import OUT_OF_RANGE, READ_OK, TOO_LONG, TRUNCATED

from .. import wire
from .. import scratch
from ..device import copy_to_host
from ..errors import DecodeError
from ..params import ParamWriter, dtype_range, value_bits
from . import gpu
from .base import Batched, GrowingChunks, out_words, check_status
from .codes import chunk_count, read_chunk_bits, write_chunks
from .huffman import fill
from .rows import RowModel, check_layout, fit

MODE_CODED = 0
MODE_CONSTANT = 1
MODE_CONTEXTS = 2
MODE_ROWS = 3
# The row model takes levels up to this magnitude (their residuals stay within int32).
ROWS_MAX_LEVEL = 1 << 30
# Without contexts: one class, one block of 2**NO_BLOCKS levels (more than any stream holds).
NO_BLOCKS = 63
# Class counts a plan with contexts tries (it keeps the cheapest, one class included).
CLASS_CHOICES = np.array([2, 4, 8], dtype=np.int64)
CLASS_CHOICES.setflags(write=False)
# Most parameter bytes the block classes may take; a larger tensor takes larger blocks.
MAX_CLASS_BYTES = 1 << 18
# Most entries of the context statistics (a row of symbol counts per largest |level| of a
# block); levels wider than that are coded without contexts.
MAX_STATISTICS = 1 << 20
# Levels whose symbols a plan with contexts counts, at least: of a larger tensor one block in
# every (levels // SAMPLED_LEVELS) only, at a hashed offset (kernels/ans_plans.py sampled_block;
# every block's largest |level| is taken).
SAMPLED_LEVELS = 1 << 18
# Levels the plan of the levels themselves counts where it only prices them against the row
# model's (``sized_plan``): a sparser sample than SAMPLED_LEVELS, whose estimate came within
# 1.7% of the full plan's where the benchmark tensors fit a model. Where the model's estimate
# wins by MODEL_GAIN * ESTIMATE_SLACK or more against it, the full plan of the levels is not
# made.
ESTIMATED_LEVELS = 1 << 16
ESTIMATE_SLACK = 1.02
# Where one-bit class ids would take more than 1/CLASS_ID_SHARE of a plan's estimated bytes,
# blocks 2**LARGER_BLOCK_BITS times larger are tried too (low-entropy levels: s = 1, TernGrad).
CLASS_ID_SHARE = 32
LARGER_BLOCK_BITS = 2
# The row model is coded where its estimated stream is at least MODEL_GAIN times smaller than
# the level plan's: a smaller gain pays for neither its fit nor its decode, and the estimates
# (from sampled blocks) are off by up to a few percent.
MODEL_GAIN = 1.03
# Streams of at least this many payload bits per level decode with selects, not branches, where
# a state renormalizes (kernels/ans.py ``_renorm``): near 1 bit per level the two were as fast
# on the benchmark traces, above it the selects faster, below it the branches.
SELECT_BITS_PER_LEVEL = 1


def _padded(bits):
    """``bits`` rounded up to a whole 32-bit word."""
    return -(-bits // WORD_BITS) * WORD_BITS


class AnsPlan(namedtuple("AnsPlan", "base window freqs classes block_bits chunk")):
    """An ``ans`` code for one tensor: levels base .. base + window - 1 are symbols 0 ..
    window - 1, symbol ``window`` the escape; ``freqs`` (classes x (window + 1), int64 slots of
    1 / ANS_PROB_SCALE) their normalized frequencies per class; ``classes`` (uint8) the class
    of every block of 2**``block_bits`` levels (one class and NO_BLOCKS: no contexts);
    ``chunk`` the levels per chunk (with contexts, a multiple of the block size)."""
    __slots__ = ()

    @classmethod
    def from_counts(cls, base, window, counts, chunk, classes=None, block_bits=NO_BLOCKS):
        """The plan for symbol ``counts`` (a row of window + 1 per class, the escapes last)."""
        counts = np.atleast_2d(counts)
        freqs = np.stack([normalize(row) for row in counts])
        if classes is None:
            classes = np.zeros(1, dtype=np.uint8)
        return cls(base, window, freqs, classes, block_bits, chunk)

    @property
    def contexts(self):
        return self.freqs.shape[0] > 1

    def escapes(self):
        """Whether any class codes the escape."""
        return bool(self.freqs[:, self.window].any())

    def size_bytes(self, counts, chunks):
        """Estimated stream bytes (without the fixed header) for ``counts`` per class in
        ``chunks`` chunks (kernels/ans_plans.py ``stream_bytes``)."""
        return stream_bytes(np.atleast_2d(counts), self.freqs, chunks, self.classes.size)


class RowsPlan(namedtuple("RowsPlan", "code model resid head")):
    """An ``ans`` code with the row model (encoders/rows.py): ``model`` (a RowModel), ``head``
    (the parameters' first bytes: MODE_ROWS and the model), ``resid`` (level - prediction, of
    ``_residual_dtype``, in a buffer borrowed from scratch.py) and ``code`` (the AnsPlan of
    the residuals)."""
    __slots__ = ()


def release(plan):
    """Give back the residuals' buffer of a RowsPlan that its maker has emitted or dropped
    (scratch.py; the plan must not be used after); nothing for an AnsPlan."""
    if isinstance(plan, RowsPlan):
        scratch.give(plan.resid)


class Ans(Batched, GrowingChunks):
    """rANS over the levels with frequencies from their histogram; with ``contexts``, per
    class of blocks of 2**``block_bits`` levels sorted by their largest |level| (1, 2, 4 or 8
    classes, whichever the size estimate finds smallest; above SAMPLED_LEVELS levels the
    symbols of every few blocks are counted).

    >>> import numpy as np, horovod_huffman as hh
    >>> x = np.array([0, 0, 0, 1, -1, 0, 2], dtype=np.int8)
    >>> bool((hh.decode(hh.get_encoder("ans").encode(x)) == x).all())
    True
    """
    name = "ans"
    encoder_id = wire.ENCODER_IDS[name]
    on_device = True
    chunk_payload_bits = ANS_CHUNK_PAYLOAD_BITS

    def __init__(self, chunk_levels=CHUNK_LEVELS, contexts=True, block_bits=6,
                 max_chunk_levels=None):
        """``chunk_levels``: levels per independently decodable chunk (kernels/chunks.py),
        up to ``max_chunk_levels`` in sparse streams (base.py ``GrowingChunks``).
        ``contexts``: try classes of blocks of 2**``block_bits`` levels (2..16; a block must
        divide the chunk size, else no contexts; a tensor whose class ids would pass
        MAX_CLASS_BYTES takes larger blocks), for the levels and for the row model's
        residuals alike."""
        super().__init__(chunk_levels, max_chunk_levels)
        if not isinstance(block_bits, (int, np.integer)) or not 2 <= block_bits <= 16:
            raise ValueError(f"block_bits must be an integer in [2, 16], got {block_bits!r}")
        self.contexts, self.block_bits = bool(contexts), int(block_bits)

    def _config(self):
        return {"contexts": self.contexts, "block_bits": self.block_bits}

    def plan(self, levels, layout=None):
        """The cheapest ``AnsPlan`` of ``levels``: window from their range, frequencies from
        their full histogram, per class where contexts pay; with a ``layout`` (encoders/rows.py)
        the ``RowsPlan`` of its matrices' row model where that is smaller."""
        plan, _ = self.sized_plan(levels, layout)
        return plan

    def sized_plan(self, levels, layout=None):
        """(``plan(levels, layout)``, its estimated stream bytes without the fixed header)."""
        return self._sized_plan(levels, None if layout is None else
                                check_layout(layout, levels.size))

    def _sized_plan(self, levels, pairs):
        """``sized_plan`` for a layout already checked (``pairs``: check_layout's, or None)."""
        bounds = level_range(levels)
        rows = None
        if pairs is not None and len(pairs):
            rows = self._rows_plan(levels, pairs, bounds)
        if rows is None:
            return self._level_plan(levels, bounds)
        if _stride(levels.size, ESTIMATED_LEVELS) > _stride(levels.size) and \
                rows[1] * MODEL_GAIN * ESTIMATE_SLACK <= self._level_estimate(levels, bounds):
            return rows
        plan, cost = self._level_plan(levels, bounds)
        if rows[1] * MODEL_GAIN > cost:
            release(rows[0])
            return plan, cost
        return rows

    def _level_plan(self, levels, bounds, maxima=None):
        """(plan, estimated bytes) coding the levels themselves (``bounds``: their least and
        largest; ``maxima``: their block maxima, ``block_maxima``'s for blocks of
        2**``_block_bits``, where the caller has them)."""
        lo, hi = bounds
        base, window = lo, min(hi - lo + 1, ANS_MAX_WINDOW)
        block_bits = self._block_bits(levels.size)
        if not self._tries_contexts(levels.size, lo, hi, block_bits):
            counts = np.zeros((1, window + 1), dtype=np.int64)
            level_histogram(levels, base, window, counts[0])
            return self.plan_from(levels.size, base, window, None, counts)
        stride = _stride(levels.size)

        def statistics(bits):
            of_blocks = maxima
            if of_blocks is None or bits != block_bits:
                of_blocks = np.empty(-(-levels.size >> bits), dtype=np.int64)
                block_maxima(levels, bits, of_blocks)
            counts = np.zeros((_largest_magnitude(lo, hi) + 1, window + 1), dtype=np.int64)
            class_counts(levels, base, bits, stride, of_blocks, counts)
            return of_blocks, counts
        return self._context_plan(levels.size, lo, hi, block_bits, stride, statistics)

    def _level_estimate(self, levels, bounds):
        """``_level_plan``'s estimated bytes from a sample of about ESTIMATED_LEVELS levels:
        the maxima of the counted blocks only stand for every block's (kernels/ans_plans.py
        ``sampled_maxima``), so only the estimate is of use, not the plan."""
        lo, hi = bounds
        block_bits = self._block_bits(levels.size)
        if not self._tries_contexts(levels.size, lo, hi, block_bits):
            return self._level_plan(levels, bounds)[1]
        window, stride = hi - lo + 1, _stride(levels.size, ESTIMATED_LEVELS)

        def statistics(block_bits):
            n_blocks = -(-levels.size >> block_bits)
            maxima = np.empty(n_blocks, dtype=np.int64)
            sampled = np.empty(-(-n_blocks // stride), dtype=np.int64)
            counts = np.zeros((_largest_magnitude(lo, hi) + 1, window + 1), dtype=np.int64)
            n_sampled = sampled_maxima(levels, block_bits, stride, maxima, sampled)
            class_counts(levels, lo, block_bits, stride, maxima, counts)
            return sampled[:n_sampled], counts
        _, cost = self._context_plan(levels.size, lo, hi, block_bits, stride, statistics)
        return cost

    def counted_bytes(self, levels, plan):
        """The stream bytes (without the fixed header) of ``levels`` under ``plan``, up to its
        final states, from every block's symbol counts: ``sized_plan`` counts a sample of
        blocks above SAMPLED_LEVELS levels, which its estimate extrapolates."""
        if isinstance(plan, RowsPlan):
            return self.counted_bytes(plan.resid, plan.code) + len(plan.head)
        chunks = chunk_count(levels.size, plan.chunk)
        counts = np.zeros((plan.freqs.shape[0], plan.window + 1), dtype=np.int64)
        if plan.contexts:
            class_counts(levels, plan.base, plan.block_bits, 1, plan.classes, counts)
        else:
            level_histogram(levels, plan.base, plan.window, counts[0])
        return plan.size_bytes(counts, chunks)

    def _block_bits(self, n):
        """log2 of the block size a plan with contexts takes for ``n`` levels: ``block_bits``,
        or the smallest larger one whose class ids fit in MAX_CLASS_BYTES."""
        block_bits = self.block_bits
        while block_bits < ANS_MAX_BLOCK_BITS and \
                _class_bytes(n, block_bits) > MAX_CLASS_BYTES:
            block_bits += 1
        return block_bits

    def _tries_contexts(self, n, lo, hi, block_bits):
        """Whether a plan tries classes of blocks of 2**block_bits levels for ``n`` levels in
        [lo, hi]: contexts on, blocks that divide the chunks, at least four of them, class ids
        within MAX_CLASS_BYTES, no escapes, and statistics within MAX_STATISTICS entries."""
        size = 1 << block_bits
        window = hi - lo + 1
        return self.contexts and self.chunk_levels % size == 0 and -(-n // size) >= 4 and \
            _class_bytes(n, block_bits) <= MAX_CLASS_BYTES and \
            window <= ANS_MAX_WINDOW and \
            (_largest_magnitude(lo, hi) + 1) * (window + 1) <= MAX_STATISTICS

    def _context_plan(self, n, lo, hi, block_bits, stride, statistics):
        """(plan, estimated bytes) over blocks of 2**block_bits levels, and over blocks
        2**LARGER_BLOCK_BITS times larger where one-bit class ids would take more than
        1/CLASS_ID_SHARE of the estimate; ``statistics(block_bits)`` gives (maxima, counts)
        for ``plan_from``, counted on every ``stride``-th block."""
        base, window = lo, hi - lo + 1
        plan, cost = self.plan_from(n, base, window, *statistics(block_bits),
                                    block_bits=block_bits, stride=stride)
        larger = block_bits + LARGER_BLOCK_BITS
        one_bit_ids = -(-n >> block_bits) // 8 + 1
        if one_bit_ids * CLASS_ID_SHARE > cost and self._tries_contexts(n, lo, hi, larger):
            other, other_cost = self.plan_from(n, base, window, *statistics(larger),
                                               block_bits=larger, stride=stride)
            if other_cost < cost:
                return other, other_cost
        return plan, cost

    def _rows_plan(self, levels, pairs, bounds):
        """(RowsPlan, estimated bytes) of the row model of ``levels`` (``bounds``: their least
        and largest) for the checked layout ``pairs``: the residuals planned as levels are
        (``_level_plan``, with the block maxima that ``add_predictions`` takes as it writes
        them), plus the model's parameters; None where a |level| exceeds ROWS_MAX_LEVEL or no
        matrix fits (encoders/rows.py)."""
        if _largest_magnitude(*bounds) > ROWS_MAX_LEVEL:
            return None
        model = fit(levels, pairs, bounds)
        if model is None:
            return None
        resid = scratch.take(levels.size, _residual_dtype(levels.dtype))
        block_bits = self._block_bits(levels.size)
        maxima = np.empty(-(-levels.size >> block_bits), dtype=np.int64) if self.contexts \
            else None                   # (without contexts no plan looks at block maxima)
        bounds = model.add_to(levels, -1, resid, maxima, block_bits)
        code, cost = self._level_plan(resid, bounds, maxima)
        writer = ParamWriter().uint(MODE_ROWS)
        model.write(writer)
        head = writer.getvalue()
        return RowsPlan(code, model, resid, head), cost + len(head)

    def plan_from(self, n, base, window, maxima, counts, block_bits=None, stride=1):
        """(the cheapest plan, its estimated bytes) from the statistics of ``n`` levels:
        ``maxima`` (the largest |level| of every block of 2**block_bits levels) and ``counts``
        (row m: the symbol counts of every ``stride``-th block whose largest |level| is m),
        or None and one row of counts (all levels). Classes are ranges of the blocks' maxima
        (kernels/ans_plans.py ``best_classes``); counted over a sample of blocks, every level a
        class may hold keeps a frequency. The chunks grow where the estimate is sparse
        (``GrowingChunks.chunk_for``); the classes do not depend on the chunk count, which
        costs every candidate the same."""
        chunks = chunk_count(n, self.chunk_levels)
        if maxima is None:
            total = counts.sum(axis=0)
            plan = AnsPlan.from_counts(base, window, total, self.chunk_levels)
            cost = plan.size_bytes(total, chunks)
        else:
            classes = np.empty(maxima.size, dtype=np.uint8)
            freqs, cost = best_classes(counts, maxima, -(-n >> block_bits), CLASS_CHOICES, base,
                                       stride > 1, n, chunks, classes)
            if freqs.shape[0] == 1:
                plan = AnsPlan(base, window, freqs, np.zeros(1, dtype=np.uint8), NO_BLOCKS,
                               self.chunk_levels)
            else:
                plan = AnsPlan(base, window, freqs, classes, block_bits, self.chunk_levels)
        chunk = self.chunk_for(n, cost)
        return plan._replace(chunk=chunk), cost - chunks_bytes(chunks - chunk_count(n, chunk))

    def _encode(self, levels):
        return self._encode_with(levels, None)

    def _encode_with(self, levels, layout):
        plan, _ = self._sized_plan(levels, layout)          # (layout checked by encoded())
        emitted = self.emit(levels, plan)
        release(plan)
        return emitted

    def _encode_device_parts(self, levels, sizes, stream, rider=None):
        """``_encode`` of every non-empty part of device ``levels``, as one batch: the parts'
        ranges and statistics, counted on the device for all of them at once and brought
        back together where the levels lie near 0 (gpu.ans_range_statistics), planned on the
        host as ``plan`` plans them, then coded in one batch (gpu.ans_payload). A part whose
        window needs escapes (or whose plan gives the escape a frequency) is copied to the
        host, planned and written there: the same bytes."""
        batch = gpu.Batch(levels, sizes, stream, gpu.STATISTICS_CHUNK, seen=self)
        ranges, counted, statistics = gpu.ans_range_statistics(batch, self._counted)
        plans, emitted, coded = [], [], []          # per part
        for n, at, (lo, hi), want, found in zip(batch.sizes, batch.offsets, ranges, counted,
                                               statistics):
            n, at = int(n), int(at)
            plan, estimate = (None, 0) if not n or want is None else \
                self._counted_plan(n, int(lo), int(hi), want, found)
            done = part = None
            if n and (plan is None or plan.escapes()):
                host = copy_to_host(levels[at:at + n], stream)
                done = self.emit(host, plan or self.plan(host))
            elif n and np.count_nonzero(plan.freqs) == 1:
                done = _constant(plan)
            elif n:
                entries, rcps = coder_tables(plan.freqs)
                part = gpu.AnsPart(at, n, plan.base, plan.chunk, entries, rcps, plan.classes,
                                   plan.block_bits,
                                   gpu.units_bound(estimate, chunk_count(n, plan.chunk)))
            plans.append(plan)
            emitted.append(done)
            coded.append(part)
        payloads = gpu.ans_payload(levels, coded, stream, rider)
        for p, payload in enumerate(payloads):
            if payload is not None:
                out32, n_words, chunk_bits = payload
                emitted[p] = (self._params(plans[p], chunk_bits,
                                           np.zeros(chunk_bits.size, np.int64)),
                              out32, n_words, payload_bits(chunk_bits))
        return [done for n, done in zip(batch.sizes, emitted) if n]

    def _counted(self, n, lo, hi):
        """The gpu.AnsCount of ``n`` levels in [lo, hi] for ``_level_plan`` (None: a window
        that needs escapes, planned on the host)."""
        window = hi - lo + 1
        if window > ANS_MAX_WINDOW:
            return None
        block_bits = self._block_bits(n)
        if not self._tries_contexts(n, lo, hi, block_bits):
            return gpu.AnsCount(lo, window, 1, None, None, 1)
        larger = block_bits + LARGER_BLOCK_BITS
        return gpu.AnsCount(lo, window, _largest_magnitude(lo, hi) + 1, block_bits,
                            larger if self._tries_contexts(n, lo, hi, larger) else None,
                            _stride(n))

    def _counted_plan(self, n, lo, hi, want, found):
        """(``_level_plan`` of ``n`` levels in [lo, hi] from their statistics ``found`` (a
        gpu.AnsStatistics of what ``want``, ``_counted``'s, names), its estimated bytes)."""
        if want.bits is None:
            return self.plan_from(n, lo, want.window, None, found.counts)

        def statistics(block_bits):
            if block_bits == want.bits:
                return found.maxima, found.counts
            return found.larger_maxima, found.larger_counts
        return self._context_plan(n, lo, hi, want.bits, want.stride, statistics)

    def emit(self, levels, plan):
        """Encode ``levels`` with ``plan`` (an AnsPlan or a RowsPlan): (params, words, n_words,
        n_bits)."""
        if isinstance(plan, RowsPlan):
            return self._emit_rows(plan)
        base, window, freqs = plan.base, plan.window, plan.freqs
        n_chunks = chunk_count(levels.size, plan.chunk)
        if np.count_nonzero(freqs) == 1 and not plan.escapes():
            return _constant(plan)
        escapes = np.zeros(0, dtype=np.int64)
        escape_counts = np.zeros(n_chunks, dtype=np.int64)
        if plan.escapes():
            escapes = escaped_levels(levels, base, window, plan.chunk, escape_counts)
        vbits = value_bits(levels.dtype)
        chunk_bits = np.zeros(n_chunks, dtype=np.int64)
        # A chunk: LANES 32-bit states and at most one unit per level, on a word boundary;
        # the encoder writes GROUP_LANES units past the last chunk.
        out32 = out_words(WORD_BITS * n_chunks * (HEADER_UNITS // 2 + 1) +
                          UNIT_BITS * (levels.size + GROUP_LANES) + vbits * escapes.size +
                          WORD_BITS)
        entries, _ = coder_tables(freqs)
        n_words = encode_chunks(levels, base, window, entries, plan.classes, plan.block_bits,
                                plan.chunk, plan.escapes(), out32, chunk_bits)
        bits = payload_bits(chunk_bits)
        if escapes.size:
            n_words = write_escapes(escapes, vbits, out32, n_words)
            bits = _padded(bits) + vbits * escapes.size
        return self._params(plan, chunk_bits, escape_counts), out32, n_words, bits

    def _emit_rows(self, plan):
        """Encode a RowsPlan: the mode and the model, then the residuals' stream."""
        params, out32, n_words, n_bits = self.emit(plan.resid, plan.code)
        return plan.head + params, out32, n_words, n_bits

    def _params(self, plan, chunk_bits, escape_counts):
        mode = MODE_CONTEXTS if plan.contexts else MODE_CODED
        writer = ParamWriter().uint(mode).sint(plan.base).uint(plan.window)
        if plan.contexts:
            writer.uint(plan.freqs.shape[0]).uint(plan.block_bits)
        write_frequencies(writer, plan.freqs)
        write_chunks(writer, plan.chunk, chunk_bits)
        if plan.contexts:
            writer.raw(_pack_classes(plan.classes, class_bits(plan.freqs.shape[0])))
        if plan.escapes():
            for count in escape_counts:
                writer.uint(int(count))
        return writer.getvalue()

    @classmethod
    def _decode(cls, reader, words, payload_bits_, out, stream=None):
        mode = reader.uint("mode", MODE_CODED, MODE_ROWS)
        if mode == MODE_ROWS:
            cls._decode_rows(reader, words, payload_bits_, out, stream)
            return
        cls._decode_levels(reader, mode, words, payload_bits_, out, stream)

    @classmethod
    def _decode_levels(cls, reader, mode, words, payload_bits_, out, stream):
        """Decode the rest of a mode 0, 1 or 2 stream into ``out``."""
        lo, hi = dtype_range(out.dtype)
        if mode == MODE_CONSTANT:
            level = reader.sint("level", lo, hi)
            reader.done()
            if payload_bits_ != 0:
                raise DecodeError(f"{cls.name}: constant stream with a non-empty payload")
            fill(out, level, stream)
            return
        base = reader.sint("base", lo, hi)
        window = reader.uint("window", 1, min(ANS_MAX_WINDOW, hi - base + 1))
        n_classes, block_bits = 1, NO_BLOCKS
        if mode == MODE_CONTEXTS:
            n_classes = reader.uint("classes", 2, ANS_MAX_CLASSES)
            block_bits = reader.uint("block bits", 2, ANS_MAX_BLOCK_BITS)
        freqs = read_frequencies(reader, n_classes, window + 1, cls.name)
        chunk, starts, chunk_bits, declared = read_chunk_bits(reader, out.size, payload_bits_,
                                                              cls.name)
        classes = np.zeros(1, dtype=np.uint8)
        if mode == MODE_CONTEXTS:
            if chunk % (1 << block_bits):
                raise DecodeError(f"{cls.name}: blocks of 2**{block_bits} levels do not divide "
                                  f"chunks of {chunk}")
            classes = _read_classes(reader, -(-out.size >> block_bits), n_classes, cls.name)
        n_chunks = starts.size
        escape_starts = np.zeros(n_chunks + 1, dtype=np.int64)
        if freqs[:, window].any():
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
            check_status(read_escapes(words, escape_bit, n_escapes, vbits, lo, hi, escapes),
                         cls.name)
        tables = decode_tables(freqs, base, window)
        selects = declared >= SELECT_BITS_PER_LEVEL * out.size
        if stream is not None:
            gpu.decode_ans(words, starts, chunk_bits, chunk, tables, classes, block_bits,
                           escapes, escape_starts, out, cls.name)
            return
        check_status(decode_chunks(words, starts, chunk_bits, chunk,
                                   (tables, classes, block_bits), out, escapes, escape_starts,
                                   selects), cls.name)

    @classmethod
    def _decode_rows(cls, reader, words, payload_bits_, out, stream):
        """Decode a stream with the row model: the model, the residuals' stream (mode 0, 1 or
        2) into ``_residual_dtype``'s, then the predictions added, every level checked against
        the dtype.
        Runs on the host; device arrays are copied."""
        model = RowModel.read(reader, out.size, PREDICTION_MAX, cls.name)
        mode = reader.uint("residual mode", MODE_CODED, MODE_CONTEXTS)
        resid = scratch.take(out.size, _residual_dtype(out.dtype))
        cls._decode_levels(reader, mode, words, payload_bits_, resid, None)
        lo, hi = dtype_range(out.dtype)
        host_out = out if stream is None else np.empty(out.size, dtype=out.dtype)
        least, largest = model.add_to(resid, 1, host_out)
        scratch.give(resid)
        check_status(OK if lo <= least and largest <= hi else VALUE_OVERFLOW, cls.name)
        if stream is not None:
            out.put(host_out)


def _constant(plan):
    """The ``emit`` result of a plan whose one symbol is a level (no escape): a constant."""
    level = plan.base + int(np.flatnonzero(plan.freqs.sum(axis=0))[0])
    return ParamWriter().uint(MODE_CONSTANT).sint(level).getvalue(), out_words(0), 0, 0


def _residual_dtype(dtype):
    """The dtype of the row model's residuals of levels of ``dtype``: residuals of levels of n
    bits lie within n + 1 bits, so int16 for int8 levels (half the memory the planning, coding
    and decoding passes touch, and 32-bit arithmetic where the predictions are added:
    kernels/rows.py note 4; no escapes either way: their window, at most 4 * 127 + 1 wide,
    stays below ANS_MAX_WINDOW), else int32. The decoder takes the encoder's, so a stream
    whose residuals leave it is corrupt."""
    return np.dtype(np.int16 if np.dtype(dtype).itemsize == 1 else np.int32)


def _class_bytes(n, block_bits):
    """Most bytes the class ids of ``n`` levels in blocks of 2**block_bits levels take."""
    blocks = -(-n >> block_bits)
    return -(-blocks * class_bits(ANS_MAX_CLASSES) // 8)


def _stride(n, sampled=SAMPLED_LEVELS):
    """Every how many blocks a plan with contexts counts the symbols of, for ``n`` levels of
    which it samples about ``sampled``."""
    return max(1, n // sampled)


def _largest_magnitude(lo, hi):
    """The largest |level| of levels in [lo, hi]."""
    return max(abs(int(lo)), abs(int(hi)))


def _pack_classes(classes, bits):
    """Block classes as ``bits``-bit fields, MSB-first, in bytes."""
    out = np.empty(-(-classes.size * bits // 8), dtype=np.uint8)
    pack_classes(classes, bits, out)
    return out.tobytes()


def _read_classes(reader, n_blocks, n_classes, name):
    """Every block's class (uint8), each checked below ``n_classes``."""
    bits = class_bits(n_classes)
    n_bytes = -(-n_blocks * bits // 8)
    if n_bytes > reader.remaining():
        raise DecodeError(f"{name}: {n_blocks} block classes declared, the parameters cannot "
                          "hold them")
    data = np.frombuffer(reader.raw("block classes", n_bytes), dtype=np.uint8)
    classes = np.empty(n_blocks, dtype=np.uint8)
    largest = unpack_classes(data, bits, classes)
    if largest >= n_classes:
        raise DecodeError(f"{name}: a block names class {largest} of {n_classes}")
    return classes


def write_frequencies(writer, freqs):
    """Append frequency tables, one per row of ``freqs`` (int64), to a ParamWriter: each the
    coded-symbol count, then per coded symbol the gap to its id from the previous one's + 1 and
    its frequency - 1 (kernels/ans.py ``frequency_fields``, every table's fields in one
    call)."""
    freqs = np.atleast_2d(freqs)
    fields = np.empty(freqs.shape[0] * (2 * freqs.shape[1] + 1), dtype=np.int64)
    writer.uints(fields[:frequency_fields(freqs, fields)])


def read_frequencies(reader, n_tables, n_symbols, name):
    """``n_tables`` normalized frequency tables over ``n_symbols`` ids (rows, int64), fully
    validated in one kernel call (kernels/ans.py ``read_frequency_tables``): at least one coded
    symbol, ids in range and increasing, every frequency >= 1, the sum exactly the scale."""
    freqs = np.zeros((n_tables, n_symbols), dtype=np.int64)
    reason, table, field, value = reader.read_with(read_frequency_tables, freqs)
    if reason == READ_OK:
        return freqs
    what = f"frequency table {table}" + (" coded-symbol count" if field == 0 else
                                         f" field {field - 1}")
    if reason == TRUNCATED:
        raise DecodeError(f"parameters truncated while reading {what}")
    if reason == TOO_LONG:
        raise DecodeError(f"parameter {what}: varint too long")
    if reason == OUT_OF_RANGE:
        hi = min(ANS_PROB_SCALE, n_symbols) if field == 0 else max(n_symbols, ANS_PROB_SCALE)
        raise DecodeError(f"parameter {what} out of range [{int(field == 0)}, {hi}]")
    if reason == NAMES_PAST:
        raise DecodeError(f"{name}: frequency table names symbol {value} of {n_symbols}")
    raise DecodeError(f"{name}: frequencies add up to {value}, not {ANS_PROB_SCALE}")  # WRONG_SUM
