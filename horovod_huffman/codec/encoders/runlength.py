"""``rlh`` and ``shs``: Huffman codes over run-length tokens.

``rlh`` (run-length Huffman): the tensor becomes maximal runs (level, run length); each token is
one joint symbol (run bucket, level) from the full token histogram, then the bucket's extra
bits (kernels/runs.py). Parameters: base, window, codebook over RUN_BUCKETS * window + 1
symbols (symbol b * window + v; the last is the escape: raw level, Elias-gamma run).

``shs`` (sample Huffman with sparsity): non-zero levels are coded one by one with probabilities
sampled as in ``sh``; zeros travel as runs of 1..k under a geometric model: with sampled zero
probability p0, a run of r < k zeros (then a non-zero) has probability p0**r * (1 - p0) and a
chunk of k zeros p0**k, so the code lengths follow the model and the stream follows the code
lengths. Parameters: base, window, k, codebook over window + k + 1 symbols.
"""
from collections import namedtuple

import numpy as np

from horovod_huffman.kernels.ans_tokens import anchor_contexts, token_contexts
from horovod_huffman.kernels.chunks import CHUNK_LEVELS, payload_bits
from horovod_huffman.kernels.maxima import (MAX_CODE_BITS, MAX_CODED_SYMBOLS, RLH_ESCAPE_RUN_BITS,
                                            RLH_MAX_WINDOW, SHS_MAX_K)
from horovod_huffman.kernels.lanes import decode_tokens
from horovod_huffman.kernels import vector_runs
from horovod_huffman.kernels.runs import (RUN_BUCKETS, BUCKET_EXTRA, run_ends, rlh_histogram,
                                          count_symbols, encode_rlh, encode_shs,
                                          token_payload_bits)
from horovod_huffman.kernels.tokens import rlh_token_table, token_table, lookup_tables
from horovod_huffman.kernels.stats import level_range
from horovod_huffman.kernels.symbols import level_histogram

from .. import wire
from ..errors import DecodeError
from ..params import ParamWriter, dtype_range, value_bits
from . import gpu
from .base import Batched, Chunked, Sampled, out_words, check_status
from .codes import (Code, weights_from_probabilities, read_lengths, chunk_count, write_chunks,
                    read_chunks)



class RLH(Batched, Chunked):
    """Run-length Huffman: joint (level, run-length bucket) tokens, Huffman-coded.

    >>> import numpy as np, horovod_huffman as hh
    >>> x = np.zeros(1000, dtype=np.int8); x[::100] = 3
    >>> bool((hh.decode(hh.get_encoder("rlh").encode(x)) == x).all())
    True
    """
    name = "rlh"
    encoder_id = wire.ENCODER_IDS[name]
    on_device = True

    def _encode(self, levels):
        base, window, counts, ends, symbols, chunk_runs, *_ = token_counts(levels,
                                                                          self.chunk_levels)
        escape = window * RUN_BUCKETS
        code = Code.from_counts(counts, escape)
        vbits = value_bits(levels.dtype)
        chunk_bits = np.zeros(chunk_runs.size, dtype=np.int64)
        # Escaped tokens: the escape's own and those of the symbols Code.from_counts folded
        # into it (no code of their own), all tokens but the coded symbols'.
        escaped = int(counts.sum()) - int(counts[code.symbols[code.symbols != escape]].sum())
        worst = rlh_payload_bits(counts, code, window) + 32 * chunk_bits.size + \
            escaped * (vbits + RLH_ESCAPE_RUN_BITS + MAX_CODE_BITS)
        out32 = out_words(worst)
        n_words = encode_rlh(levels, ends, symbols, chunk_runs, self.chunk_levels, base, window,
                             code.symbols, code.entries(), vbits, BUCKET_EXTRA, out32,
                             chunk_bits)
        return _params(base, window, None, self.chunk_levels, chunk_bits, code), out32, \
            n_words, \
            payload_bits(chunk_bits)

    def _encode_device_parts(self, levels, sizes, stream, rider=None):
        batch = gpu.Batch(levels, sizes, stream, self.chunk_levels, rider, self)
        tokens = gpu.Tokens(batch, gpu.RUNS)
        _, windows, counts, _ = gpu.window_counts(
            tokens, lambda lo, hi: (lo, min(hi - lo + 1, RLH_MAX_WINDOW)))
        codes = [Code.from_counts(c, window * RUN_BUCKETS) if n else None
                 for c, (_, window), n in zip(counts, windows, batch.sizes)]
        payloads = gpu.token_payload(
            tokens, [None if code is None else
                     gpu.TokenCode(base, window, code.entries(), window * RUN_BUCKETS)
                     for code, (base, window) in zip(codes, windows)],
            value_bits(levels.dtype), counts=counts)
        results = []
        for code, (base, window), payload in zip(codes, windows, payloads):
            if code is not None:
                out32, n_words, chunk_bits = payload
                results.append((_params(base, window, None, self.chunk_levels, chunk_bits, code),
                                out32, n_words, payload_bits(chunk_bits)))
        return results

    @classmethod
    def _decode(cls, reader, words, payload_bits, out, stream=None):
        lo, hi = dtype_range(out.dtype)
        base = reader.sint("base", lo, hi)
        window = reader.uint("window", 1, min(RLH_MAX_WINDOW, hi - base + 1))
        chunk, starts, chunk_bits = read_chunks(reader, out.size, payload_bits, cls.name)
        n_symbols = window * RUN_BUCKETS + 1
        lengths, codes = read_lengths(reader, n_symbols, cls.name)
        table = rlh_token_table(lengths, codes, window)
        _decode_tokens(cls.name, words, starts, chunk_bits, chunk, table, base, out, True, stream)


class Tokens(namedtuple("Tokens", "base window counts ends symbols chunk_runs contexts "
                                  "marked")):
    """A tensor's run-length tokens (kernels/runs.py, note 1): the window [base, base +
    window), the joint token ``counts``, the run ends, the token symbols, the runs up to each
    chunk's end, and where asked for and the window holds level 0, the counts per context
    (rows; kernels/ans_tokens.py, note 5), else None; ``marked``: a row per token with
    extras (its index, then its run and symbol: ``marked_run``) where the context pass wrote
    them (``token_contexts``), else None."""
    __slots__ = ()


def token_counts(levels, chunk_levels, contexts=False):
    """The ``Tokens`` of ``levels``, runs cut at chunks of ``chunk_levels``; with
    ``contexts``, their counts per context too (``rla``'s: ``auto`` shares them)."""
    lo, hi = level_range(levels)
    base, window = lo, min(hi - lo + 1, RLH_MAX_WINDOW)
    ends, symbols = token_buffers(levels.size)
    chunk_runs = np.empty(chunk_count(levels.size, chunk_levels), dtype=np.int64)
    n_symbols = window * RUN_BUCKETS + 1
    after_anchor = anchor_contexts(base, window) if contexts else None
    rows = None
    if after_anchor is not None and after_anchor.any():
        rows = np.zeros((2, n_symbols), dtype=np.int64)   # two contexts
    counts = np.zeros(n_symbols, dtype=np.int64)
    if vector_runs.AVAILABLE and levels.dtype == np.int8 and ends.dtype == np.int32:
        # (int8 levels: a window of 256 covers them all)
        n_runs = vector_runs.runs_and_symbols(levels, chunk_levels, base, window, ends,
                                              symbols, chunk_runs)
        symbols = symbols[:n_runs]
        if rows is not None:
            # one pass gives the placeholders their symbols and counts them per context
            marked = context_counts(levels, ends, symbols, chunk_runs, base, window,
                                    after_anchor, rows)
            return Tokens(base, window, rows.sum(axis=0), ends, symbols, chunk_runs, rows,
                          marked)
        count_symbols(levels, ends, symbols, n_runs, base, window, counts)
    else:
        n_runs = run_ends(levels, chunk_levels, ends, chunk_runs)
        symbols = symbols[:n_runs]
        rlh_histogram(levels, ends, n_runs, base, window, counts, symbols, hi - lo < window)
    marked = None
    if rows is not None:
        marked = context_counts(levels, ends, symbols, chunk_runs, base, window, after_anchor,
                                rows)
    return Tokens(base, window, counts, ends, symbols, chunk_runs, rows, marked)


def context_counts(levels, ends, symbols, chunk_runs, base, window, after_anchor, rows):
    """Count the tokens per context into ``rows`` (``token_contexts``); returns the rows of
    the tokens with extras (index, ``marked_run``) where the pass marks them, else None."""
    marked = np.empty((symbols.size, 2), dtype=np.uint64)
    n_marked = token_contexts(levels, ends, symbols, chunk_runs, base, window, after_anchor,
                              rows, marked)
    return marked[:n_marked] if n_marked >= 0 else None


# Page offset between the run ends and the token symbols (bytes; see token_buffers).
_SYMBOLS_PAGE_OFFSET = 2048


def token_buffers(n):
    """(run ends, token symbols) for ``n`` levels: int32 (int64 from 2**31 levels) and uint32
    arrays of ``n``. Both are walked together at 4 bytes per token; at equal offsets within a
    4 KiB page (as two fresh large allocations are) every load from one waits on the stores to
    the other (4K aliasing), so the symbols start _SYMBOLS_PAGE_OFFSET bytes further into the
    page."""
    if n >= 2**31:
        return np.empty(n, dtype=np.int64), np.empty(n, dtype=np.uint32)
    pad = (_SYMBOLS_PAGE_OFFSET - 4 * n) % 4096 // 4
    work = np.empty(2 * n + pad, dtype=np.uint32)
    return work[:n].view(np.int32), work[n + pad:]


def _params(base, window, k, chunk, chunk_bits, code):
    """rlh (k None) or shs parameters (``code``: a codes.Code)."""
    writer = ParamWriter().sint(base).uint(window)
    if k is not None:
        writer.uint(k)
    write_chunks(writer, chunk, chunk_bits)
    code.write(writer)
    return writer.getvalue()


def _decode_tokens(name, words, starts, chunk_bits, chunk, table, base, out, esc_has_run, stream):
    """Decode a token payload on the host or, with ``stream``, on the device."""
    lo, hi = dtype_range(out.dtype)
    vbits = value_bits(out.dtype)
    if stream is not None:
        gpu.decode_tokens(words, starts, chunk_bits, chunk, table, base, vbits, esc_has_run, lo,
                          hi, out, name)
        return
    status = decode_tokens(words, starts, chunk_bits, chunk,
                           (table, base, vbits, esc_has_run, lo, hi),
                           lookup_tables(table, base, out.itemsize), out)
    check_status(status, name)


def rlh_payload_bits(counts, code, window):
    """Payload bits of the non-escaped rlh tokens: codes plus bucket extra bits (``code``: a
    codes.Code)."""
    return int(token_payload_bits(counts, code.symbols, code.lengths, window, BUCKET_EXTRA))


class SHSPlan:
    """base, window, k, the code over window + k + 1 symbols (a codes.Code, and its lengths
    per symbol id), and levels per chunk."""
    __slots__ = ("base", "window", "k", "code", "lengths", "chunk")

    def __init__(self, base, window, k, code, chunk=CHUNK_LEVELS):
        self.base, self.window, self.k, self.code = base, window, k, code
        self.lengths, self.chunk = code.full_lengths(), chunk


def window_with_zero(lo, hi, max_window):
    """(base, window) of at most ``max_window`` levels covering [lo, hi], keeping 0 inside when
    lo <= 0 <= hi (zeros must be codable as runs)."""
    if hi - lo + 1 <= max_window or not lo <= 0 <= hi:
        return lo, min(hi - lo + 1, max_window)
    base = max(lo, -(max_window // 2))
    return base, min(max_window, hi - base + 1)


class SHS(Sampled, Batched, Chunked):
    """Sample Huffman with sparsity (paper: SHS), sparsity factor ``k`` (paper: 200)."""
    name = "shs"
    encoder_id = wire.ENCODER_IDS[name]
    on_device = True

    def __init__(self, sample_size=1000, k=200, seed=None, chunk_levels=CHUNK_LEVELS):
        if not isinstance(sample_size, (int, np.integer)) or sample_size < 1:
            raise ValueError(f"sample_size must be a positive integer, got {sample_size!r}")
        if not isinstance(k, (int, np.integer)) or not 1 <= k <= SHS_MAX_K:
            raise ValueError(f"k must be an integer in [1, {SHS_MAX_K}], got {k!r}")
        super().__init__(chunk_levels)
        self.sample_size, self.k, self.seed = int(sample_size), int(k), seed
        self._rng = np.random.default_rng(seed)

    def _config(self):
        return {"sample_size": self.sample_size, "k": self.k, "seed": self.seed}

    def sampled_plan(self, lo, hi, sample):
        """The plan for levels in [lo, hi] from a host ``sample`` of them."""
        k = self.k
        base, window = window_with_zero(lo, hi, MAX_CODED_SYMBOLS - k - 1)
        counts = np.zeros(window + 1, dtype=np.int64)
        level_histogram(sample, base, window, counts)
        counts[:window] += 1                          # add-one smoothing over the window
        counts[window] += 1 if hi - lo + 1 > window else 0
        p = counts / counts.sum()
        weights = np.zeros(window + k + 1, dtype=np.float64)
        possible = np.zeros(window + k + 1, dtype=bool)
        weights[:window] = p[:window]
        possible[:window] = True
        weights[window + k] = p[window]
        possible[window + k] = counts[window] > 0
        zero = -base
        if 0 <= zero < window:
            p0 = p[zero]
            weights[zero] = 0.0                       # zeros only travel as runs
            possible[zero] = False
            runs = np.arange(1, k + 1)
            weights[window:window + k] = p0 ** runs * (1.0 - p0)
            weights[window + k - 1] = p0 ** k         # a full chunk may be followed by anything
            possible[window:window + k] = True
        code = Code.from_counts(weights_from_probabilities(weights, possible), window + k)
        return SHSPlan(base, window, k, code, self.chunk_levels)

    def _encode(self, levels):
        return emit_shs(levels, self.plan(levels))

    def _encode_device_parts(self, levels, sizes, stream, rider=None):
        """Every part's ranges, sample and symbol histogram found on the device, brought back
        in one copy where the levels lie near 0 (gpu.window_counts); the histogram bounds
        the sampled code's payload, which comes back with its chunks' bits."""
        batch = gpu.Batch(levels, sizes, stream, self.chunk_levels, rider, self)
        tokens = gpu.Tokens(batch, gpu.ZERO_RUNS, self.k)
        found = gpu.window_counts(
            tokens, lambda lo, hi: window_with_zero(lo, hi, MAX_CODED_SYMBOLS - self.k - 1),
            self.batch_positions(batch))
        return emit_shs_device_parts(tokens, self.batch_plans(batch, found.ranges,
                                                              found.sample), found.counts)

    @classmethod
    def _decode(cls, reader, words, payload_bits, out, stream=None):
        lo, hi = dtype_range(out.dtype)
        base = reader.sint("base", lo, hi)
        window = reader.uint("window", 1, min(MAX_CODED_SYMBOLS, hi - base + 1))
        k = reader.uint("k", 1, SHS_MAX_K)
        chunk, starts, chunk_bits = read_chunks(reader, out.size, payload_bits, cls.name)
        n_symbols = window + k + 1
        lengths, codes = read_lengths(reader, n_symbols, cls.name)
        zero = -base
        if np.any(lengths[window:window + k]) and not 0 <= zero < window:
            raise DecodeError(f"{cls.name}: codebook codes zero runs but 0 is outside the window")
        level_index = np.concatenate([np.arange(window), np.full(k, max(zero, 0))])
        run_base = np.concatenate([np.ones(window, np.int64), np.arange(1, k + 1)])
        table = token_table(lengths, codes, level_index, run_base,
                            np.zeros(window + k, np.int64), n_symbols - 1)
        _decode_tokens(cls.name, words, starts, chunk_bits, chunk, table, base, out, False,
                       stream)


def emit_shs(levels, plan):
    """Encode ``levels`` with an SHS plan: (params, words, n_words, n_bits)."""
    code = plan.code
    entries = code.entries()
    vbits = value_bits(levels.dtype)
    chunk_bits = np.zeros(chunk_count(levels.size, plan.chunk), dtype=np.int64)
    out32 = out_words(levels.size * (MAX_CODE_BITS + vbits) + 32 * chunk_bits.size)
    n_words = encode_shs(levels, plan.base, plan.window, plan.k, entries, vbits, plan.chunk,
                         out32, chunk_bits)
    return _params(plan.base, plan.window, plan.k, plan.chunk, chunk_bits, code), out32, \
        n_words, payload_bits(chunk_bits)


def emit_shs_device_parts(tokens, plans, counts):
    """``emit_shs`` of every non-empty part of the gpu.Batch of ``tokens`` (its gpu.Tokens of
    ZERO_RUNS, with the plans' k) with its SHS plan (``plans``: one per part, None for an
    empty one), as one batch on the device; the same results, in part order. ``counts``:
    every part's symbol histogram (gpu.token_payload)."""
    payloads = gpu.token_payload(
        tokens,
        [None if plan is None else
         gpu.TokenCode(plan.base, plan.window, plan.code.entries(), plan.window + plan.k)
         for plan in plans],
        value_bits(tokens.batch.levels.dtype), k=tokens.k, counts=counts)
    results = []
    for plan, payload in zip(plans, payloads):
        if plan is not None:
            out32, n_words, chunk_bits = payload
            results.append((_params(plan.base, plan.window, plan.k, plan.chunk, chunk_bits,
                                    plan.code), out32, n_words, payload_bits(chunk_bits)))
    return results
