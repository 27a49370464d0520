"""``rla`` (run-length ANS): ``rlh``'s (level, run length) tokens, their joint symbols coded
with rANS under normalized frequencies (kernels/ans_tokens.py), so that a token costs
log2(M / f) bits, fractions of a bit included, where ``rlh``'s Huffman code spends whole bits.

Parameters: base, window, the number of contexts (1, or 2 with level 0 in the window:
kernels/ans_tokens.py, note 5), per context a frequency table over RUN_BUCKETS * window + 1
token symbols (as ``ans``'s: the coded-symbol count, then per coded symbol the gap to its id
from the previous one's + 1 and its frequency - 1; the last symbol is the escape), the chunk
size and the bits of every chunk's rANS stream, then the bits of every chunk's extras.
Payload: the chunks' rANS streams (each on a 32-bit word), then, from the next word, the
extras: per token its run bucket's extra bits, or for an escape the level as a zigzag field of
the dtype's value bits and the run as an Elias-gamma code.

Device levels are counted and coded on the GPU in batches (kernels/cuda_rla.py) where no token
takes the escape, and give the host's bytes; device outputs decode through a gpu.StreamGroup.
"""
from collections import namedtuple

import numpy as np

from horovod_huffman.kernels.ans import UNIT_BITS, coder_tables, decode_table, normalize
from horovod_huffman.kernels.ans_plans import (TABLE_BYTES_PER_SYMBOL, chunk_overhead_bits, coded_bits,
                                               empirical_information)
from horovod_huffman.kernels.ans_tokens import (HEADER_UNITS, STATES, anchor_contexts,
                                                decode_token_chunks, encode_token_chunks,
                                                write_extras)
from horovod_huffman.kernels.bits import WORD_BITS
from horovod_huffman.kernels.chunks import payload_bits
from horovod_huffman.kernels.maxima import (ANS_LEVEL_SHIFT, ANS_MAX_TOKENS, ANS_TOKEN_ANCHOR,
                                            ANS_TOKEN_BUCKET_SHIFT, MAX_ELIAS_VALUE_BITS,
                                            RLH_MAX_WINDOW, RUN_BUCKETS)
from horovod_huffman.kernels.runs import BUCKET_EXTRA

from .. import wire
from ..device import arena, copy_to_host
from ..errors import DecodeError
from ..params import ParamWriter, dtype_range, value_bits
from . import gpu
from .ans import read_frequencies, write_frequencies
from .base import Batched, GrowingChunks, out_words, check_status
from .codes import read_chunk_bits, write_chunks
from .runlength import context_counts, token_counts

# Estimated bits of an escape's gamma-coded run (a guess: escapes are rare).
ESCAPE_RUN_BITS = 32
# Contexts (kernels/ans_tokens.py, note 5): one table, or two where the window holds level 0.
ONE_TABLE, TWO_TABLES = 1, 2


class RlaPlan(namedtuple("RlaPlan", "base window counts freqs anchor after_anchor chunk ends "
                                    "symbols chunk_runs marked")):
    """An ``rla`` code and the tokens it codes: their symbol ``counts`` and ``freqs`` (int64
    slots) per context (rows); ``anchor`` the anchor's level index (-1: one table);
    ``after_anchor`` (uint8 per symbol) the context a token gives the next; ``chunk`` the
    levels per chunk; the run ends, token symbols (uint32) and runs up to each chunk's end of
    ``token_counts`` (None where the tokens are on the GPU), and the rows of the tokens with
    extras where the context pass marked them (``Tokens.marked``), else None."""
    __slots__ = ()

    def information_bits(self, vbits):
        """What the payload codes, in bits: the tokens' empirical information under each
        context's own frequencies, plus the extras exactly (``vbits``: an escaped level's
        bits)."""
        info = sum(float(row[row > 0] @ np.log2(row.sum() / row[row > 0]))
                   for row in self.counts)
        escape = self.window * RUN_BUCKETS
        symbols = self.symbols.astype(np.int64)
        runs = np.diff(self.ends[:symbols.size].astype(np.int64), prepend=-1)
        escaped = symbols == escape
        extras = int(BUCKET_EXTRA[symbols[~escaped] // self.window].sum())
        extras += int(escaped.sum()) * vbits + int((2 * np.floor(np.log2(runs[escaped])) + 1)
                                                   .sum())
        return info + extras


class RLA(Batched, GrowingChunks):
    """Run-length ANS: joint (level, run-length bucket) tokens, rANS-coded with a table per
    context (whether the previous token has level 0) where that pays; at most ANS_MAX_TOKENS
    distinct token symbols keep a frequency, the rarer ones take the escape.

    >>> import numpy as np, horovod_huffman as hh
    >>> x = np.zeros(1000, dtype=np.int8); x[::100] = 3
    >>> bool((hh.decode(hh.get_encoder("rla").encode(x)) == x).all())
    True
    """
    name = "rla"
    encoder_id = wire.ENCODER_IDS[name]
    on_device = True

    def sized_plan(self, levels, tokens=None):
        """(the ``RlaPlan`` of ``levels``, its estimated stream bytes without the fixed
        header): one table or two, whichever the estimate finds smaller, and chunks grown
        where the stream is sparse (``GrowingChunks``: the runs are cut anew). ``tokens``:
        what ``token_counts(levels, self.chunk_levels, contexts=True)`` returns, where the
        caller has it."""
        if tokens is None:
            tokens = token_counts(levels, self.chunk_levels, contexts=True)
        plan, cost = self._tokens_plan(levels, tokens, self.chunk_levels)
        chunk = self.chunk_for(levels.size, cost)
        if chunk == self.chunk_levels:
            return plan, cost
        return self._tokens_plan(levels, token_counts(levels, chunk, contexts=True), chunk)

    def _tokens_plan(self, levels, tokens, chunk):
        """(plan, estimated bytes) of ``levels``'s ``tokens``, their runs cut at ``chunk``."""
        base, window, counts, ends, symbols, chunk_runs, contexts, marked = tokens
        escape = window * RUN_BUCKETS
        limited, counts = _limit_tokens(symbols, counts, escape)
        if limited is not symbols:
            symbols = limited
            if contexts is not None:                   # the new escapes change contexts
                contexts = np.zeros_like(contexts)
                marked = context_counts(levels, ends, symbols, chunk_runs, base, window,
                                        anchor_contexts(base, window), contexts)
        plan = _plan(base, window, counts, contexts, chunk, ends, symbols, chunk_runs,
                     marked)
        return plan, _stream_bytes(plan, value_bits(levels.dtype), chunk_runs.size)

    def _encode(self, levels):
        plan, _ = self.sized_plan(levels)
        return self.emit(levels, plan)

    def emit(self, levels, plan):
        """Encode ``levels`` with ``plan`` (its tokens are theirs): (params, words, n_words,
        n_bits)."""
        window, freqs, symbols, chunk_runs = plan.window, plan.freqs, plan.symbols, \
            plan.chunk_runs
        vbits = value_bits(levels.dtype)
        n_chunks = chunk_runs.size
        chunk_bits = np.zeros(n_chunks, dtype=np.int64)
        extra_bits = np.zeros(n_chunks, dtype=np.int64)
        # A chunk: four 32-bit states and at most one unit per token, on a word boundary.
        ans_bound = WORD_BITS * n_chunks * (HEADER_UNITS // 2 + 1) + UNIT_BITS * symbols.size
        counts = plan.counts.sum(axis=0)                # every context's tokens
        out32 = out_words(ans_bound + extras_bound(counts, window, vbits) + WORD_BITS)
        entries, _ = coder_tables(freqs)
        n_words = encode_token_chunks(symbols, chunk_runs, entries, plan.after_anchor, out32,
                                      chunk_bits)
        write_extras(levels, plan.ends, symbols, chunk_runs, plan.chunk, window, vbits,
                     out32[n_words:], extra_bits, plan.marked)
        return self._result_parts(plan, out32, n_words, chunk_bits, extra_bits)

    def _encode_device_parts(self, levels, sizes, stream, rider=None):
        """``_encode`` of every non-empty part of device ``levels``, as one batch: the parts'
        ranges and their tokens counted on the device, brought back together where the
        levels lie near 0 (gpu.rla_range_statistics), planned on the host as ``sized_plan``
        plans them, those whose chunks grow from the counts of their chunks as they were
        (gpu.rla_grown); then coded in one batch (gpu.rla_payload). A part that needs
        escapes (a window wider than RLH_MAX_WINDOW, or more than ANS_MAX_TOKENS token
        symbols) is copied to the host and coded there: the same bytes."""
        batch = gpu.Batch(levels, sizes, stream, gpu.STATISTICS_CHUNK, seen=self)

        def count_of(at, n, lo, hi):
            return gpu.RlaCount(at, n, lo, hi - lo + 1, self.chunk_levels) \
                if hi - lo + 1 <= RLH_MAX_WINDOW else None
        with arena(stream):
            ends = arena(stream).take(max(1, levels.size), np.uint32)
            _, counts, found = gpu.rla_range_statistics(batch, ends, count_of)
            planned = _device_plans(counts, found)
            grown = [None] * batch.n_parts
            for p, d in enumerate(planned):
                chunk = None if d is None else self._chunk_of(d, levels.dtype)
                if chunk is not None and chunk != d.count.chunk:
                    grown[p] = d.count._replace(chunk=chunk)
                    # (None: merged runs' tokens would escape)
                    planned[p], = _device_plans([grown[p]],
                                                [gpu.rla_grown(d.found, d.count, chunk)])
            gpu.rla_ends(levels, grown, ends, stream)
            coded = [None if d is None else
                     gpu.RlaCoded(d.count, *coder_tables(d.plan.freqs), d.found.tokens,
                                  d.found.extra_bits,
                                  gpu.units_bound(_stream_bytes(d.plan, value_bits(levels.dtype),
                                                                d.found.tokens.size),
                                                  d.found.tokens.size))
                     for d in planned]
            payloads = gpu.rla_payload(levels, coded, ends, stream, rider)
        emitted = []
        for n, at, d, payload in zip(batch.sizes, batch.offsets, planned, payloads):
            if not n:
                continue
            if payload is None:
                emitted.append(self._encode(copy_to_host(levels[int(at):int(at + n)], stream)))
            else:
                emitted.append(self._result_parts(d.plan, *payload, d.found.extra_bits))
        return emitted

    def _chunk_of(self, planned, dtype):
        """The chunk size ``chunk_for`` gives a part's ``DevicePlan``, for levels of
        ``dtype``."""
        return self.chunk_for(planned.count.size, _stream_bytes(
            planned.plan, value_bits(dtype), planned.found.tokens.size))

    def _result_parts(self, plan, out32, n_words, chunk_bits, extra_bits):
        """(params, words, n_words, n_bits) of chunks of ``chunk_bits`` rANS bits in the first
        ``n_words`` of ``out32``, the extras (``extra_bits`` per chunk) after them."""
        bits = payload_bits(chunk_bits)
        total = int(extra_bits.sum())
        if total:
            bits = n_words * WORD_BITS + total
            n_words += -(-total // WORD_BITS)
        writer = ParamWriter().sint(plan.base).uint(plan.window).uint(plan.freqs.shape[0])
        write_frequencies(writer, plan.freqs)
        write_chunks(writer, plan.chunk, chunk_bits)
        writer.uints(extra_bits)
        return writer.getvalue(), out32, n_words, bits

    @classmethod
    def _decode(cls, reader, words, payload_bits_, out, stream=None):
        lo, hi = dtype_range(out.dtype)
        base = reader.sint("base", lo, hi)
        window = reader.uint("window", 1, min(RLH_MAX_WINDOW, hi - base + 1))
        n_tables = reader.uint("contexts", ONE_TABLE, TWO_TABLES)
        anchor = -1
        if n_tables == TWO_TABLES:
            if not base <= 0 < base + window:
                raise DecodeError(f"{cls.name}: two contexts declared without level 0 in the "
                                  "window")
            anchor = -base
        tables = np.stack([token_table(row, window, anchor) for row in
                           read_frequencies(reader, n_tables, window * RUN_BUCKETS + 1,
                                            cls.name)])
        chunk, starts, chunk_bits, declared = read_chunk_bits(reader, out.size, payload_bits_,
                                                              cls.name)
        extra_bits = reader.uints("extra bits", starts.size, 0, payload_bits_)
        reader.done()
        total = int(extra_bits.sum())
        first = -(-declared // WORD_BITS) * WORD_BITS if total else declared
        if first + total != payload_bits_:
            raise DecodeError(f"{cls.name}: chunks and extras add up to {first + total} bits, "
                              f"the header declares {payload_bits_}")
        extra_starts = first + np.concatenate(([0], np.cumsum(extra_bits)))
        vbits = value_bits(out.dtype)
        if stream is not None:
            gpu.decode_rla(words, starts, chunk_bits, extra_starts, chunk, tables, base, lo, hi,
                           vbits, out, cls.name)
            return
        check_status(decode_token_chunks(words, starts, chunk_bits, extra_starts, chunk,
                                         tables, base, out, lo, hi, vbits), cls.name)


DevicePlan = namedtuple("DevicePlan", "count plan found")
DevicePlan.__doc__ = """A device part's gpu.RlaCount, its RlaPlan and the gpu.RlaFound it was
planned from."""


def _device_plans(counts, found):
    """Per part, its ``DevicePlan`` from the device's statistics ``found`` of what ``counts``
    names, or None: not counted, or its tokens take the escape."""
    plans = []
    for count, got in zip(counts, found):
        plan = None
        symbols = None if count is None else got.contexts.sum(axis=0)
        if symbols is not None and np.count_nonzero(symbols) <= ANS_MAX_TOKENS:
            two = count.base <= 0 < count.base + count.window
            plan = DevicePlan(count, _plan(count.base, count.window, symbols,
                                           got.contexts if two else None, count.chunk), got)
        plans.append(plan)
    return plans


def _plan(base, window, counts, contexts, chunk, ends=None, symbols=None, chunk_runs=None,
          marked=None):
    """The ``RlaPlan`` of tokens with symbol ``counts`` (and, where the window holds level 0,
    their ``contexts`` counts), their runs cut at ``chunk``: two tables where both contexts
    occur and the estimate finds them smaller, else one."""
    rows, anchor = counts[None, :], -1
    after_anchor = anchor_contexts(base, window)
    if contexts is not None and contexts.any(axis=1).all() and \
            _table_bits(contexts) < _table_bits(rows):
        rows, anchor = contexts, -base
    else:
        after_anchor[:] = 0
    freqs = np.stack([normalize(row) for row in rows])
    return RlaPlan(base, window, rows, freqs, anchor, after_anchor, chunk, ends, symbols,
                   chunk_runs, marked)


def _stream_bytes(plan, vbits, n_chunks):
    """Estimated stream bytes without the fixed header: ``plan``'s tokens under its normalized
    frequencies (not their own: with many rare symbols the slots' rounding costs ~1%), the
    chunks' final states, its tables, the extras (``vbits``: an escaped level's bits) and the
    parameters."""
    window, counts = plan.window, plan.counts.sum(axis=0)
    escape = window * RUN_BUCKETS
    per_bucket = counts[:escape].reshape(RUN_BUCKETS, window).sum(axis=1)
    extras = int(per_bucket @ BUCKET_EXTRA) + int(counts[escape]) * (vbits + ESCAPE_RUN_BITS)
    tables = 8 * TABLE_BYTES_PER_SYMBOL * int(np.count_nonzero(plan.counts))
    bits = coded_bits(plan.counts, plan.freqs, n_chunks, chunk_overhead_bits(STATES)) + \
        tables + extras
    return (bits + 7) // 8 + 12 + 6 * n_chunks


def _limit_tokens(symbols, counts, escape):
    """(symbols, counts) with at most ANS_MAX_TOKENS coded symbols besides the escape: the
    rarest others become escapes."""
    used = np.flatnonzero(counts[:escape])
    if used.size <= ANS_MAX_TOKENS:
        return symbols, counts
    dropped = used[np.argsort(counts[used], kind="stable")[:used.size - ANS_MAX_TOKENS]]
    remap = np.arange(counts.size, dtype=np.uint32)
    remap[dropped] = escape
    counts = counts.copy()
    counts[escape] += counts[dropped].sum()
    counts[dropped] = 0
    return remap[symbols], counts


def extras_bound(counts, window, vbits):
    """Most extras bits of tokens with symbol ``counts``: each bucket's extra bits, and per
    escape its level and the longest gamma code of a run."""
    per_bucket = counts[:window * RUN_BUCKETS].reshape(RUN_BUCKETS, window).sum(axis=1)
    return int(per_bucket @ BUCKET_EXTRA) + \
        int(counts[window * RUN_BUCKETS]) * (vbits + 2 * MAX_ELIAS_VALUE_BITS)


def _table_bits(rows):
    """Estimated bits of token symbols with counts ``rows`` (one per context), each coded with
    its own row's frequencies, and of their frequency tables."""
    info, used = empirical_information(rows)
    return int(np.ceil(info + 8 * TABLE_BYTES_PER_SYMBOL * used))


def token_table(freqs, window, anchor):
    """The decode table of token ``freqs`` (kernels/ans_tokens.py): ``decode_table``'s, its
    level field holding each symbol's run bucket and level index; the escape flagged, and
    the tokens of level index ``anchor`` (-1: none) flagged ANS_TOKEN_ANCHOR."""
    escape = window * RUN_BUCKETS
    table = decode_table(freqs, 0, escape)
    symbol = table >> np.uint64(ANS_LEVEL_SHIFT)
    index = symbol % np.uint64(window)
    field = ((symbol // np.uint64(window)) << np.uint64(ANS_TOKEN_BUCKET_SHIFT)) | index
    low = table & np.uint64((1 << ANS_LEVEL_SHIFT) - 1)
    if anchor >= 0:
        low[(index == np.uint64(anchor)) & (symbol != np.uint64(escape))] |= \
            np.uint64(ANS_TOKEN_ANCHOR)
    return low | (field << np.uint64(ANS_LEVEL_SHIFT))

