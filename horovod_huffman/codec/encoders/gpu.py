"""Host side of the GPU paths: launch the CUDA kernels (kernels/cuda_*.py) on one stream and
bring back only what the host needs (a histogram, chunk bit counts, the payload words).

Every function mirrors a CPU step and produces the very same numbers, so an encoder's device
path writes the bytes its CPU path writes. Copies to the host wait on the stream, never on the
whole device; a decoder's host arrays (chunk offsets, tables...) go over in one copy
(``upload``).

Device decoders put their levels into an ``Output``: a levels array, or a float total that
the levels are dequantized into and summed with, in the decoding kernel itself
(kernels/cuda_quantize.py, note 4). huffman, sh, rlh, shs, raw, ans and rla decode that way;
the encoders that decode on the host put their levels through one more kernel.
"""
from collections import namedtuple

import numpy as np
from numba import cuda

from horovod_huffman.kernels import cuda_ans, cuda_decode, cuda_quantize, cuda_rla, cuda_tokens
from horovod_huffman.kernels.ans import HEADER_UNITS, LANES
from horovod_huffman.kernels.bits import WORD_BITS, bytes_to_words
from horovod_huffman.kernels.chunks import CHUNK_LEVELS, chunk_starts
from horovod_huffman.kernels.cuda_bits import BLOCK
from horovod_huffman.kernels.cuda_tokens import LEVELS, RUNS, ZERO_RUNS  # noqa: F401 (modes)
from horovod_huffman.kernels.maxima import LENGTH_MASK, RUN_BUCKETS
from horovod_huffman.kernels.runs import BUCKET_BASE, BUCKET_EXTRA

from ..device import SIMULATED, arena, copy_to_host, grid_for
from ..errors import DecodeError, check_status
from ..pending import Queued

# Threads per block of the grid-stride kernels (range, gather, fill, raw).
STRIDE_BLOCK = 256
_BUCKET_TABLES = {}
_PLACEHOLDERS = {}


BucketTables = namedtuple("BucketTables", "base extra")


def _bucket_tables():
    """``BucketTables``: runs.BUCKET_BASE and runs.BUCKET_EXTRA on the current device
    (uploaded once per context)."""
    key = _context_key()
    if key not in _BUCKET_TABLES:
        _BUCKET_TABLES[key] = BucketTables(*(cuda.to_device(np.ascontiguousarray(t))
                                             for t in (BUCKET_BASE, BUCKET_EXTRA)))
    return _BUCKET_TABLES[key]


def _context_key():
    return 0 if SIMULATED else id(cuda.current_context())


def _placeholder(dtype):
    """A one-element device array of ``dtype`` that stands for an array a kernel is passed but
    does not touch (uploaded once per context and dtype)."""
    key = (_context_key(), np.dtype(dtype).str)
    if key not in _PLACEHOLDERS:
        _PLACEHOLDERS[key] = cuda.to_device(np.zeros(1, dtype=dtype))
    return _PLACEHOLDERS[key]


class Output:
    """Where a device decoder puts the ``size`` levels of ``dtype`` a stream holds (the frame's
    dtype, which bounds the levels as a host output array's does).

    Without ``total``: into ``levels``, a new device array. With ``total``, a float32 or
    float64 device array of ``size`` elements: total[j] = scales[j // bucket] * level j, or
    += with ``add`` (``scales``: of the total's dtype, a host array or a device array);
    ``levels`` is None and no levels array exists unless the decoder needs one (``staging``).

    The Huffman family's and ``ans``'s decoders add their stream to ``group`` (a
    ``StreamGroup``; None: one of the output's own, flushed before the decode returns). A
    shared group decodes the streams of several outputs into one total in one launch; every
    other write into the output flushes the group first, so that the writes keep their
    order. ``label`` names the
    stream in a DecodeError the group raises. ``within``: (an array, an offset) where
    ``total`` is array[offset:offset + size], so that a group decodes the outputs of several
    slices of that array (a two-phase gather's shards) in one launch; None: (total, 0)."""

    def __init__(self, size, dtype, stream, total=None, scales=None, bucket=1, add=False,
                 group=None, label="", within=None):
        self.size, self.dtype, self.stream = int(size), np.dtype(dtype), stream
        self.total, self.scales, self.bucket, self.add = total, scales, int(bucket), add
        self.own_group = group is None
        self.group = StreamGroup(stream) if group is None else group
        self.label = label
        if within is not None and (total is None or within[0][within[1]:][:self.size].size
                                   != self.size):
            raise ValueError(f"a total of {self.size} elements at {within[1]} of an array of "
                             f"{within[0].size}")
        self.within = (total, 0) if within is None else (within[0], int(within[1]))
        if total is None:
            self.levels = cuda.device_array(self.size, dtype=self.dtype, stream=stream)
            self.mode = cuda_quantize.PUT_LEVEL
        else:
            if total.size != self.size:
                raise ValueError(f"a total of {total.size} elements for {self.size} levels")
            self.mode = cuda_quantize.PUT_DEQUANTIZED | \
                (cuda_quantize.PUT_ADD if add else 0) | \
                (cuda_quantize.PUT_WIDE if total.dtype == np.float64 else 0)
            self.levels = None

    @property
    def args(self):
        """put_level's (out, total, scales, bucket, mode) for a kernel that writes the output
        now: the group is flushed first, and host scales go to the device."""
        self.group.flush()
        if self.total is None:
            return (self.levels, _placeholder(np.float32), _placeholder(np.float32), 1,
                    self.mode)
        scales = self.scales
        if isinstance(scales, np.ndarray):
            scales = self.scales = cuda.to_device(scales, stream=self.stream)
        return (_placeholder(self.dtype), self.total, scales, self.bucket, self.mode)

    def staging(self):
        """A device array for a decoder that writes levels itself, to ``put`` afterwards."""
        if self.levels is not None:
            return self.levels
        return cuda.device_array(self.size, dtype=self.dtype, stream=self.stream)

    def put(self, levels):
        """Put ``levels`` (``staging``'s array, or a host array of ``size`` levels) into the
        output."""
        if isinstance(levels, np.ndarray):
            host, levels = levels, self.staging()
            levels.copy_to_device(host, stream=self.stream)
        if levels is not self.levels and self.size:
            cuda_decode.put_levels[grid_for(self.size, STRIDE_BLOCK), STRIDE_BLOCK,
                                   self.stream](levels, *self.args)

    def fill(self, level):
        """Every level ``level`` (a constant stream)."""
        if self.size:
            cuda_decode.put_constant[grid_for(self.size, STRIDE_BLOCK), STRIDE_BLOCK,
                                     self.stream](int(level), self.size, *self.args)


HuffmanStream = namedtuple("HuffmanStream", "words starts chunk_bits chunk table tokens base "
                           "window vbits esc_has_run lo hi name")
HuffmanStream.__doc__ = """A Huffman-family stream for a StreamGroup: host uint64 ``words``
(bits.bytes_to_words of its payload), its chunks' first bits and bits, its chunk size, its
4096-entry lookup table, whether it codes tokens (rlh, shs), its window, the escapes' value
bits, whether an escape carries a run, the levels' bounds and the encoder's name."""

AnsStream = namedtuple("AnsStream", "words starts chunk_bits chunk tables classes block_bits "
                       "escapes escape_starts name")
AnsStream.__doc__ = """An ``ans`` stream for a StreamGroup: host uint64 ``words``, its chunks'
first bits and bits, its chunk size, a decode table per class (kernels/ans.py
``decode_tables``), its blocks' classes and log2 of its block size, its escaped levels and
where every chunk's start (n_chunks + 1 entries), and the encoder's name."""

RlaStream = namedtuple("RlaStream", "words starts chunk_bits extra_starts chunk tables base lo hi "
                       "vbits name")
RlaStream.__doc__ = """An ``rla`` stream for a StreamGroup: host uint64 ``words``, its chunks'
first bits and bits, where every chunk's extras start (n_chunks + 1 entries, the last their
end), its chunk size, a token decode table per context (rla.token_table), its base, the bounds
of its escaped levels and their value bits, and the encoder's name."""
# The streams whose chunks may differ in size from rank to rank (GrowingChunks): their sets
# nest (kernels/cuda_ans.py note 8).
GROWN = (AnsStream, RlaStream)


class StreamGroup:
    """Streams of one code (HuffmanStream, AnsStream or RlaStream), chunk size and level
    dtype, decoded into one destination array in one launch when flushed
    (kernels/cuda_decode.py ``decode_streams``, note 5; kernels/cuda_ans.py note 8;
    kernels/cuda_rla.py note 5): the N ranks' streams of a
    bucket, summed into its total in their order; the summed shards of a two-phase gather,
    each into its slice of the bucket (``Output.within``); the streams of many buckets whose
    totals are slices of one array. Consecutive streams into the same slice form a set,
    decoded in order; sets decode in parallel. The host arrays of all of them (words, chunk
    offsets and bits, tables, scales) go to the device in one copy, and their statuses come
    back in one. A stream that does not fit with those before (another code, chunk size,
    dtype, destination array, bucket size or kind of output) flushes them first.

    ``checks``: None reads the statuses back at each flush and raises there. A
    ``StatusChecks`` instead keeps them on the device with other groups', to be read in one
    copy for all; ``checked()`` is then the Pending of this group's verdict, to wait for
    before anything that depends on the decoded values leaves the device or settles.
    ``shared``: a list of waiting streams shared with other groups of the same checks, so
    that a flush of any of them decodes the streams of all in one launch, each stream
    judged for the verdict of the group it was added to."""

    def __init__(self, stream, checks=None, shared=None):
        self.stream, self.checks = stream, checks
        self.items = [] if shared is None else shared
        self.verdict = Verdict(checks)

    def checked(self):
        """A Pending (exchange/allreduce.py) whose ``wait`` raises the DecodeError of the first
        stream flushed so far that was rejected, or gives None."""
        return self.verdict

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.flush()

    def add(self, out, coded):
        """Add a stream ``coded`` (a HuffmanStream, AnsStream or RlaStream) that decodes into
        the Output ``out``."""
        dest = out.levels if out.total is None else out.within[0]
        # One chunk size for the Huffman family; ans's and rla's chunks nest (cuda_ans.py
        # note 8).
        key = (type(coded), int(coded.chunk) if isinstance(coded, HuffmanStream) else 0,
               out.dtype, out.total is None, id(dest), out.bucket)
        if self.items and (self.items[0][0] != key or
                           isinstance(coded, GROWN) and not _nests(self.items, out, coded)):
            self.flush()
        self.items.append((key, out, coded, self.verdict))
        if out.own_group:
            self.flush()

    def flush(self):
        """Decode every stream added since the last flush; DecodeError (with its stream's
        label) for the first stream, in order, that a chunk of rejects. Its temporaries are
        regions of the stream's arena (device.Arena)."""
        items = self.items[:]
        self.items.clear()
        if items:
            with arena(self.stream):
                self._decode(items)

    def _decode(self, items):
        stream = self.stream
        (kind, chunk, _, _, _, bucket), first = items[0][0], items[0][1]
        fields = {HuffmanStream: cuda_decode.STREAM_FIELDS, AnsStream: cuda_ans.STREAM_FIELDS,
                  RlaStream: cuda_rla.STREAM_FIELDS}[kind]
        table = np.zeros((len(items), fields), dtype=np.int64)
        words, scales, streams, at_word, at_chunk, at_scale = [], [], [], 0, 0, 0
        for s, (_, out, coded, verdict) in enumerate(items):
            n_chunks = len(coded.starts)
            table[s, :cuda_decode.STREAM_COMMON] = (at_word, at_chunk, out.size, out.within[1],
                                                    at_scale, out.mode)
            streams.append((verdict, out.label, coded.name, at_chunk, n_chunks))
            words.append(coded.words)
            at_word += coded.words.size
            at_chunk += n_chunks
            if out.total is not None:
                host = out.scales if isinstance(out.scales, np.ndarray) else \
                    copy_to_host(out.scales, stream)
                scales.append(np.asarray(host, dtype=out.total.dtype))
                at_scale += scales[-1].size
        codes = [coded for _, _, coded, _ in items]
        dtype = first.total.dtype if first.total is not None else np.float32
        scales = np.concatenate(scales) if scales else np.zeros(1, dtype)
        if kind is HuffmanStream:
            table[:, cuda_decode.STREAM_COMMON:] = [
                (c.tokens, c.base, c.window, c.vbits, c.esc_has_run) for c in codes]
            own = (np.stack([np.asarray(c.table, dtype=np.uint64) for c in codes]),)
        elif kind is AnsStream:
            own = _ans_arrays(table, codes)         # (and the table's ans columns)
        else:
            own = _rla_arrays(table, codes)         # (and the table's rla columns)
        blocks = _block_table(items)
        arrays = upload(stream, np.concatenate(words), table, blocks,
                        np.concatenate([np.asarray(c.starts, np.int64) for c in codes]),
                        np.concatenate([np.asarray(c.chunk_bits, np.int64) for c in codes]),
                        *own, scales)
        if self.checks is None:
            status = arena(stream).take(at_chunk, np.int64)
        else:
            status = self.checks.slot(at_chunk, streams)
        if first.total is None:
            dest = (first.levels, _placeholder(np.float32), _placeholder(np.float32), 1)
        else:
            dest = (_placeholder(first.dtype), first.within[0], arrays[-1], bucket)
        if len(blocks) and kind is HuffmanStream:
            lo, hi = codes[0].lo, codes[0].hi
            cuda_decode.decode_streams[len(blocks), BLOCK, stream](
                *arrays[:-1], chunk, lo, hi, *dest, status)
        elif len(blocks) and kind is AnsStream:
            cuda_ans.decode_streams[len(blocks), LANES, stream](*arrays[:-1], *dest, status)
        elif len(blocks):
            cuda_rla.decode_streams[len(blocks), LANES, stream](*arrays[:-1],
                                                                *_bucket_tables(), *dest,
                                                                status)
        if self.checks is None:
            judge(copy_to_host(status, stream), streams)
            for verdict in {id(v): v for v, *_ in streams}.values():
                verdict.wait()


def _nests(items, out, coded):
    """Whether ``coded``'s chunk size divides, or is a multiple of, that of every stream of the
    set it would join (the last streams of ``items`` into ``out``'s first element): so that a
    block of the set's largest chunk holds whole chunks of each (kernels/cuda_ans.py note 8;
    always so for chunks that grow by doubling)."""
    for _, other, earlier, _ in reversed(items):
        if other.within[1] != out.within[1]:
            break
        small, large = sorted((int(earlier.chunk), int(coded.chunk)))
        if large % small:
            return False
    return True


def _ans_arrays(table, codes):
    """The ``ans`` columns of a group's stream ``table`` (filled in), and its host arrays for
    kernels/cuda_ans.py ``decode_streams``: every class's table, every block's class, every
    escape, every chunk's escape bounds."""
    tables, classes, escapes, bounds = [], [], [], []
    at_table = at_class = at_escape = 0
    for s, c in enumerate(codes):
        table[s, cuda_decode.STREAM_COMMON:] = (at_table, at_class, c.block_bits, c.chunk)
        tables.append(c.tables)
        classes.append(c.classes)
        escapes.append(np.asarray(c.escapes, np.int64))
        starts = at_escape + np.asarray(c.escape_starts, np.int64)
        bounds.append(np.stack([starts[:-1], starts[1:]], axis=1))
        at_table += c.tables.shape[0]
        at_class += c.classes.size
        at_escape += escapes[-1].size
    return (np.concatenate(tables), np.concatenate(classes),
            np.concatenate(escapes + [np.zeros(1, np.int64)]), np.concatenate(bounds))


def _rla_arrays(table, codes):
    """The ``rla`` columns of a group's stream ``table`` (filled in), and its host arrays for
    kernels/cuda_rla.py ``decode_streams``: every chunk's extras' bounds, every stream's
    tables."""
    tables, bounds = [], []
    at_table = 0
    for s, c in enumerate(codes):
        table[s, cuda_decode.STREAM_COMMON:] = (at_table, c.tables.shape[0], c.base, c.lo, c.hi,
                                                c.vbits, c.chunk)
        tables.append(c.tables)
        extra = np.asarray(c.extra_starts, np.int64)
        bounds.append(np.stack([extra[:-1], extra[1:]], axis=1))
        at_table += c.tables.shape[0]
    return np.concatenate(bounds), np.concatenate(tables)


def _block_table(items):
    """The block table (kernels/cuda_decode.py BLOCK_*) of a group's ``items``: a set per
    run of consecutive streams into the same first element, a block per chunk of the set's
    largest chunk size, as many as its longest stream needs."""
    rows, first = [], 0
    for s in range(1, len(items) + 1):
        if s == len(items) or items[s][1].within[1] != items[first][1].within[1]:
            largest = max(int(item[2].chunk) for item in items[first:s])
            n_chunks = max(-(-item[1].size // largest) for item in items[first:s])
            rows += [(c, first, s) for c in range(n_chunks)]
            first = s
    return np.array(rows, dtype=np.int64).reshape(-1, cuda_decode.BLOCK_FIELDS)


def judge(status, streams):
    """Give each stream's verdict its statuses: ``streams`` are (Verdict, label, encoder name,
    first status, statuses) of host ``status``; a verdict keeps its first error."""
    for verdict, label, name, at, n in streams:
        verdict.judge(status[at:at + n], label, name)


class Verdict(Queued):
    """Whether streams decoded: a Pending (exchange/allreduce.py) of None, or of the
    DecodeError of the first stream rejected, raised by ``wait``; ``flush`` reads every
    status its ``StatusChecks`` holds."""

    def __init__(self, checks):
        self.runner, self.error = checks, None

    def done(self):
        return self.runner is None or self.runner.judged(self)

    def result(self):
        return None

    def judge(self, status, label, name):
        """Take one stream's host statuses; the first rejected stream's error is kept."""
        bad = status[status != 0]
        if self.error is None and bad.size:
            try:
                check_status(int(bad[0]), name)
            except DecodeError as e:
                self.error = DecodeError(f"{label}: {e}" if label else str(e))
                self.error.__cause__ = e


class StatusChecks:
    """The statuses of decode launches, kept in one device buffer of ``capacity`` int64
    entries and read back in one copy (``run``) when a driver flushes a ``Verdict``, or when
    the buffer is full."""

    def __init__(self, stream, capacity=1 << 16):
        self.stream, self.capacity = stream, int(capacity)
        self._buffer = None
        self._used = 0
        self._pending = []          # (first entry or a device array, streams)
        self._unjudged = set()      # id() of the verdicts of _pending's streams

    def slot(self, n, streams):
        """A device int64 array of ``n`` entries for the statuses of one launch that decodes
        ``streams`` (as ``judge`` takes them)."""
        if self._used + n > self.capacity:
            self.run()
        if n > self.capacity:
            out = cuda.device_array(n, dtype=np.int64, stream=self.stream)
            self._pending.append((out, streams))
        else:
            if self._buffer is None:
                self._buffer = cuda.device_array(self.capacity, dtype=np.int64,
                                                 stream=self.stream)
            out = self._buffer[self._used:self._used + n]
            self._pending.append((self._used, streams))
            self._used += n
        self._unjudged.update(id(verdict) for verdict, *_ in streams)
        return out

    def judged(self, verdict):
        """Whether every launch of ``verdict`` has been read back."""
        return id(verdict) not in self._unjudged

    def run(self):
        """Read every status back (one copy of the buffer) and judge each launch's streams."""
        pending, self._pending, self._unjudged = self._pending, [], set()
        used, self._used = self._used, 0
        host = copy_to_host(self._buffer[:used], self.stream) if used else None
        for at, streams in pending:
            status = host[at:] if isinstance(at, int) else copy_to_host(at, self.stream)
            judge(status, streams)


def level_range(levels, stream):
    """(min, max) of non-empty device levels, as Python ints."""
    lo_hi = arena(stream).upload(np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min]))
    cuda_tokens.level_range[grid_for(levels.size, BLOCK), BLOCK, stream](levels, lo_hi)
    lo, hi = copy_to_host(lo_hi, stream)
    return int(lo), int(hi)


class Rider:
    """A device array of 4-byte elements (a batch's scales) that ``token_payload`` brings to
    the host in its payload's copy: ``host``, its host copy, once that copy has run (None
    until then)."""

    def __init__(self, array):
        self.array, self.host = array, None


class Batch:
    """Device levels of several parts (tensors) laid end to end in one flat array, ``sizes``
    levels each, cut into chunks of ``chunk`` levels part by part, so that a part's chunks are
    the ones the tensor alone has; the chunk table goes to the device in one copy
    (kernels/cuda_tokens.py, note 2). An empty part has no chunk. ``rider``: None, or a
    Rider to bring to the host with the payload. ``seen``: None, or the encoder coding the
    batch, whose ``near`` (Batched.near) the batch counts its first statistics around
    (``near_window``) and raises to the largest |level| of its ranges once they are read."""

    def __init__(self, levels, sizes, stream, chunk=CHUNK_LEVELS, rider=None, seen=None):
        self.levels, self.stream, self.chunk, self.rider = levels, stream, int(chunk), rider
        self.seen = seen
        self.sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        if self.sizes.sum() != levels.size:
            raise ValueError(f"parts of {int(self.sizes.sum())} levels in all, for "
                             f"{levels.size} levels")
        # Where each part's levels start in the flat array.
        self.offsets = np.cumsum(self.sizes) - self.sizes
        rows = []
        for part, (at, n) in enumerate(zip(self.offsets, self.sizes)):
            lo = at + np.arange(0, n, self.chunk, dtype=np.int64)
            rows.append(np.stack([lo, np.minimum(lo + self.chunk, at + n),
                                  np.full(lo.size, part, dtype=np.int64)], axis=1))
        table = np.concatenate(rows) if rows else np.zeros((0, cuda_tokens.CHUNK_FIELDS),
                                                             np.int64)
        # Each part's chunks are the rows [first[part], first[part + 1]) of the table.
        self.first = np.concatenate(([0], np.cumsum([r.shape[0] for r in rows])))
        self.n_chunks = table.shape[0]
        self.chunks = arena(stream).upload(table)

    @property
    def n_parts(self):
        return self.sizes.size

    @property
    def near(self):
        """The largest |level| the batch's encoder has coded (None: none yet, or no encoder
        given)."""
        return None if self.seen is None else self.seen.near

    def ranges(self):
        """Host int64 (parts, 2): every part's least and greatest level (an empty part's:
        0 and 0). One launch, one copy to the host."""
        lo_hi = arena(self.stream).upload(self.range_start())
        self.count_ranges(lo_hi)
        return self.read_ranges(copy_to_host(lo_hi, self.stream))

    def range_start(self):
        """Host int64, two per part: the extremes that ``count_ranges`` starts from, the head
        of a device buffer whose other regions a statistics pass fills, so that one copy
        brings both back."""
        extremes = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min], dtype=np.int64)
        return np.tile(extremes, self.n_parts)

    def count_ranges(self, found):
        """Merge every part's least and greatest level into the head of device ``found``
        (int64, starting as ``range_start``): one launch."""
        if self.n_chunks:
            cuda_tokens.chunk_ranges[self.n_chunks, BLOCK, self.stream](
                self.levels, self.chunks, found[:2 * self.n_parts].reshape(self.n_parts, 2))

    def read_ranges(self, host):
        """``ranges`` from the head of a host copy of what ``count_ranges`` merged."""
        ranges = host[:2 * self.n_parts].reshape(self.n_parts, 2).copy()
        ranges[self.sizes == 0] = 0
        if self.seen is not None and self.sizes.any():
            self.seen.near = max(self.near or 0, int(np.abs(ranges[self.sizes > 0]).max()))
        return ranges


class Tokens:
    """A batch's levels cut into tokens of one mode, chunk by chunk: the segment layout every
    token kernel shares (kernels/cuda_tokens.py), computed once per batch in one launch.
    ``k``: ZERO_RUNS's sparsity factor (shs's), which its symbols depend on."""

    def __init__(self, batch, mode, k=1):
        self.batch, self.mode, self.k = batch, mode, k
        stream, n_chunks = batch.stream, batch.n_chunks
        # Where every segment's first run starts; LEVELS tokens are single levels, so unused.
        self.seg_prev = arena(stream).take(max(n_chunks, 1) * BLOCK, np.int64)
        if mode != LEVELS and n_chunks:
            cuda_tokens.segment_prev[n_chunks, BLOCK, stream](batch.levels, batch.chunk,
                                                              batch.chunks, mode, self.seg_prev)

    def n_bins(self, window):
        """Histogram bins of a part with ``window`` levels: a symbol each (RUNS: a row of the
        window per run bucket; ZERO_RUNS: the window's, then one per run of 1..k zeros), and
        the escape."""
        return (window * RUN_BUCKETS if self.mode == RUNS else window) + \
            (self.k if self.mode == ZERO_RUNS else 0) + 1

    def count(self, parts, counts):
        """``count_tokens`` of the batch into ``counts`` (device int64), every part's
        histogram where the uploaded ``parts`` table says."""
        batch = self.batch
        if batch.n_chunks:
            cuda_tokens.count_tokens[batch.n_chunks, BLOCK, batch.stream](
                batch.levels, batch.chunk, batch.chunks, self.mode, self.seg_prev, parts,
                self.k, counts)

    def _parts(self, columns):
        """The parts table (int64, kernels/cuda_tokens.py note 2) with ``columns``: a dict of
        PART_* -> a value per part."""
        parts = np.zeros((self.batch.n_parts, cuda_tokens.PART_FIELDS), dtype=np.int64)
        for column, values in columns.items():
            parts[:, column] = values
        return parts


def token_counts(tokens, windows):
    """Host int64 histograms of token symbols, one per part (LEVELS, RUNS: as
    level_histogram/rlh_histogram; ZERO_RUNS: shs's symbols, as count_tokens counts them):
    ``windows`` gives each part's (base, window). One launch, one copy to the host."""
    batch = tokens.batch
    bins = np.array([tokens.n_bins(w) for _, w in windows], dtype=np.int64)
    first = np.concatenate(([0], np.cumsum(bins)))
    parts = tokens._parts({cuda_tokens.PART_BASE: [b for b, _ in windows],
                           cuda_tokens.PART_WINDOW: [w for _, w in windows],
                           cuda_tokens.PART_COUNTS: first[:-1]})
    counts, parts = upload(batch.stream, np.zeros(max(int(first[-1]), 1), dtype=np.int64),
                           parts)
    tokens.count(parts, counts)
    counts = copy_to_host(counts, batch.stream)
    return [counts[first[p]:first[p + 1]] for p in range(batch.n_parts)]


# Most histogram bins ``window_counts`` counts in its first window for a batch (int64: 512 KiB
# each way), 16 parts of 4097 bins; a batch of more parts counts its ranges first.
MAX_GUESSED_BINS = 1 << 16


def near_window(near, widest):
    """(base, window) of the levels -near..near, where a batch counts its statistics before
    its ranges are known: the encoder's largest |level| so far (``Batched.near``), which
    steps of one quantizer's levels stay within; ``widest`` (base, window), the most the
    counts allow, where ``near`` is None or passes it."""
    if near is None or 2 * near + 1 > widest[1]:
        return widest
    return -near, 2 * near + 1


WindowCounts = namedtuple("WindowCounts", "ranges windows counts sample")
WindowCounts.__doc__ = """What ``window_counts`` finds of a batch: host int64 (parts, 2), every
part's least and greatest level (as Batch.ranges); every part's (base, window); the host int64
histogram of each part's tokens in its window (as ``token_counts``); and the host levels at
the positions asked for (their dtype; None where none were asked for)."""


def window_counts(tokens, window_of, positions=None):
    """A WindowCounts of the batch of ``tokens``: its parts' windows are ``window_of(lo,
    hi)`` of their ranges; with ``positions`` (of the batch's flat array: ``sh``'s sample),
    the levels there too. One copy to the host where it can.

    The ranges, the histograms and the sample are found in one launch each and come back
    together, the histograms in a first window for every part: -near..near (``near_window`` of
    the batch's ``near``), within the widest whose histogram fits the kernel's shared-memory
    bins (cuda_tokens.SHARED_BINS), centred on level 0 (levels -32..32 for RUNS tokens,
    -2048..2047 for LEVELS, -1948..1947 for ZERO_RUNS of k = 200: every QSGD up to s = 32 and
    TernGrad). A part whose levels all lie there, with ``window_of`` covering them whole, takes
    its own window's bins from that histogram: the same counts, for it has no escape in either
    window. Otherwise the parts are counted again in their own windows: a second launch and
    copy. A batch of more parts than MAX_GUESSED_BINS allows counts its ranges (and gathers its
    sample), then its own windows."""
    batch = tokens.batch
    width = (cuda_tokens.SHARED_BINS - 1 - (tokens.k if tokens.mode == ZERO_RUNS else 0)) // \
        (RUN_BUCKETS if tokens.mode == RUNS else 1)
    guess = near_window(batch.near, (-(width // 2), width))
    n_parts = batch.n_parts
    bins = tokens.n_bins(guess[1])
    positions = np.zeros(0, np.int64) if positions is None else \
        np.asarray(positions, dtype=np.int64)
    if n_parts * bins > MAX_GUESSED_BINS:       # many parts: their own windows are smaller
        ranges, sample = ranges_and_sample(batch, positions)
        windows = [window_of(int(lo), int(hi)) for lo, hi in ranges]
        return WindowCounts(ranges, windows, token_counts(tokens, windows), sample)
    head = 2 * n_parts + n_parts * bins
    start = np.concatenate([batch.range_start(), np.zeros(n_parts * bins, np.int64),
                            positions])
    parts = tokens._parts({cuda_tokens.PART_BASE: guess[0], cuda_tokens.PART_WINDOW: guess[1],
                           cuda_tokens.PART_COUNTS: 2 * n_parts + bins * np.arange(n_parts)})
    found, parts = upload(batch.stream, start, parts)
    batch.count_ranges(found)
    tokens.count(parts, found)
    _gather(batch, found[head:])
    found = copy_to_host(found, batch.stream)
    ranges = batch.read_ranges(found)
    sample = found[head:].astype(batch.levels.dtype)
    windows = [window_of(int(lo), int(hi)) for lo, hi in ranges]
    counts = []
    for p, ((lo, hi), (base, window)) in enumerate(zip(ranges, windows)):
        if batch.sizes[p] and not (guess[0] <= lo and hi < guess[0] + guess[1] and
                                   (base, window) == (lo, hi - lo + 1)):
            return WindowCounts(ranges, windows, token_counts(tokens, windows), sample)
        counts.append(_narrowed_bins(tokens, found[2 * n_parts + p * bins:][:bins], guess,
                                     base, window))
    return WindowCounts(ranges, windows, counts, sample)


def _narrowed_bins(tokens, bins, guess, base, window):
    """The histogram of a part's tokens in its window (base, window) from ``bins``, their
    histogram in the window ``guess`` (cuda_tokens.count_tokens), which holds its levels:
    a symbol is run bucket * window + (level - base) (RUNS: a row of the window's levels per
    run bucket; LEVELS: one row), or for ZERO_RUNS the window's levels, then the runs of 1..k
    zeros; then the escape, empty."""
    at = base - guess[0]
    if tokens.mode == ZERO_RUNS:
        return np.concatenate([bins[at:at + window], bins[guess[1]:guess[1] + tokens.k], [0]])
    rows = bins[:-1].reshape(-1, guess[1])
    return np.append(rows[:, at:at + window].reshape(-1), 0)


def ranges_and_sample(batch, positions):
    """(host int64 (parts, 2): every part's least and greatest level, as Batch.ranges; the
    host levels at ``positions`` of the batch's flat array, in its dtype: the sh and shs
    sample). Two launches and one copy to the host: the positions go up after the ranges'
    starting extremes, and the gather writes each level over its position."""
    stream, head = batch.stream, 2 * batch.n_parts
    found, = upload(stream, np.concatenate([batch.range_start(),
                                            np.asarray(positions, dtype=np.int64)]))
    batch.count_ranges(found)
    _gather(batch, found[head:])
    host = copy_to_host(found, stream)
    return batch.read_ranges(host), host[head:].astype(batch.levels.dtype)


def _gather(batch, positions):
    """Write the batch's level at each of device ``positions`` (int64) over it."""
    if positions.size:
        cuda_tokens.gather[grid_for(positions.size, STRIDE_BLOCK), STRIDE_BLOCK, batch.stream](
            batch.levels, positions, positions)


TokenCode = namedtuple("TokenCode", "base window entries escape")
TokenCode.__doc__ = """A part's code for ``token_payload``: its window, the code's host encoder
entries (codes.Code.entries) and the escape symbol."""


def token_payload(tokens, codes, vbits, k=1, counts=None):
    """Encode every part whose ``codes`` entry is a ``TokenCode`` (None: a part not coded
    here, an empty or constant one) as a chunked stream: a list, per part, of (host uint32
    words, words used, host chunk bits), laid out exactly as the CPU encoders lay them out, or
    None. Two launches and two copies to the host for the whole batch: every chunk's bits,
    then every part's words, each part from a word of its own, and after them the batch's
    rider (Batch.rider) if it has one.

    ``counts``: None, or per coded part the full histogram its code was built from (as
    ``window_counts`` gives it), which bounds the part's bits (``bits_bound``). Then the
    chunks' bits come back with the payload, in one copy: every part is given a region of
    words that its bound fills, the device lays its chunks out there (``chunk_layout``), and
    a part whose chunks would pass its region is coded again as above, two copies more."""
    if counts is not None:
        return _bounded_payload(tokens, codes, vbits, k, counts)
    return _token_payload(tokens, codes, vbits, k, tokens.batch.rider)


def _token_launch(tokens, codes, vbits, k):
    """The parts table and entries of ``codes`` on the device, and the arguments that
    ``segment_bits`` and ``write_tokens`` share (segment offsets in a region of the arena)."""
    batch = tokens.batch
    stream = batch.stream
    coded = [c for c in codes if c is not None]
    entries = np.concatenate([c.entries for c in coded]) if coded else np.zeros(1, np.uint32)
    first_entry = np.concatenate(([0], np.cumsum([c.entries.size for c in coded])))
    at = iter(first_entry)
    parts = tokens._parts({
        cuda_tokens.PART_BASE: [0 if c is None else c.base for c in codes],
        cuda_tokens.PART_WINDOW: [0 if c is None else c.window for c in codes],
        cuda_tokens.PART_ESC: [-1 if c is None else c.escape for c in codes],
        cuda_tokens.PART_ENTRIES: [0 if c is None else next(at) for c in codes]})
    parts, entries = upload(stream, parts, entries)
    seg_offset = arena(stream).take(max(batch.n_chunks, 1) * BLOCK, np.int64)
    return parts, (batch.levels, batch.chunk, batch.chunks, tokens.mode, tokens.seg_prev,
                   parts, entries, vbits, _bucket_tables().extra, k, seg_offset)


def _token_payload(tokens, codes, vbits, k, rider):
    """``token_payload`` with two copies: the chunks' bits, then the payload (and ``rider``,
    a Rider or None)."""
    batch = tokens.batch
    stream, n_chunks, n_parts = batch.stream, batch.n_chunks, batch.n_parts
    if all(c is None for c in codes):           # nothing to code (the rider stays behind)
        return [None] * n_parts
    _, args = _token_launch(tokens, codes, vbits, k)
    bits = arena(stream).take(max(n_chunks, 1), np.int64)
    if n_chunks:
        cuda_tokens.segment_bits[n_chunks, BLOCK, stream](*args, bits)
    chunk_bits = copy_to_host(bits, stream)[:n_chunks]
    starts = np.zeros(max(n_chunks, 1), dtype=np.int64)
    # Per part: (first word, words, its chunk bits, its region), or None.
    layout, at_word = [None] * n_parts, 0
    for p, rows in _coded_rows(batch, codes):
        part_starts, n_words = _laid_out(chunk_bits[rows])
        starts[rows] = at_word * WORD_BITS + part_starts
        layout[p] = (at_word, n_words, chunk_bits[rows].copy(), n_words + 1)
        at_word += n_words + 1                 # + 1: a flush may OR into the next word
    riding = 0 if rider is None else rider.array.size
    out = _zeroed_words(max(at_word + riding, 1), stream)
    if n_chunks:
        cuda_tokens.write_tokens[n_chunks, BLOCK, stream](
            *args, arena(stream).upload(starts), out)
    return _with_rider(out, at_word, layout, rider, stream)


def _coded_rows(batch, codes):
    """(part, its rows of the batch's chunk table) of every part that ``codes`` codes (an
    entry not None)."""
    return [(p, slice(batch.first[p], batch.first[p + 1]))
            for p, code in enumerate(codes) if code is not None]


def _laid_out(chunk_bits):
    """(every chunk's first bit from its part's first, each chunk from a word as
    kernels/chunks.py ``chunk_starts`` lays them out; the words the part's chunks take), for
    a part's chunks of ``chunk_bits`` (host int64, one or more)."""
    starts = chunk_starts(chunk_bits)
    return starts, -(-int(starts[-1] + chunk_bits[-1]) // WORD_BITS)


def _bounded_payload(tokens, codes, vbits, k, counts):
    """``token_payload`` with ``counts``: one copy, where every part's bound holds."""
    batch = tokens.batch
    stream, n_chunks, n_parts = batch.stream, batch.n_chunks, batch.n_parts
    if not n_chunks or all(c is None for c in codes):
        return _token_payload(tokens, codes, vbits, k, batch.rider)
    # Every part's region: its bound, a word of padding per chunk, and a flush word.
    regions, at_word = np.zeros((n_parts, 2), dtype=np.int64), 0
    for p, (code, c) in enumerate(zip(codes, counts)):
        if code is not None:
            n_rows = int(batch.first[p + 1] - batch.first[p])
            words = -(-bits_bound(c, code, tokens.mode, vbits, batch.chunk) // WORD_BITS) + \
                n_rows + 1
            regions[p] = (at_word * WORD_BITS, (at_word + words) * WORD_BITS)
            at_word += words
    rider = batch.rider
    riding = 0 if rider is None else rider.array.size
    parts, args = _token_launch(tokens, codes, vbits, k)
    # One buffer, one copy: every chunk's bits (int64), then the payload's words.
    head = 2 * n_chunks
    buffer = _zeroed_words(head + at_word + riding, stream)
    bits, out = buffer[:head].view(np.int64), buffer[head:]
    first, regions_on_device = upload(stream, batch.first, regions)
    starts = arena(stream).take(n_chunks, np.int64)
    cuda_tokens.segment_bits[n_chunks, BLOCK, stream](*args, bits)
    cuda_tokens.chunk_layout[n_parts, BLOCK, stream](
        bits, first, regions_on_device, parts, starts)
    cuda_tokens.write_tokens[n_chunks, BLOCK, stream](*args, starts, out)
    host = _copied(buffer, head + at_word, rider, stream)
    chunk_bits, words = host[:head].view(np.int64), host[head:]
    results, again = [None] * n_parts, [None] * n_parts
    for p, rows in _coded_rows(batch, codes):
        _, n_words = _laid_out(chunk_bits[rows])
        first_word, end_word = regions[p] // WORD_BITS
        if first_word + n_words + 1 > end_word:     # not written (chunk_layout)
            again[p] = codes[p]
        else:
            results[p] = (words[first_word:end_word], n_words, chunk_bits[rows].copy())
    if any(code is not None for code in again):
        for p, payload in enumerate(_token_payload(tokens, again, vbits, k, None)):
            if payload is not None:
                results[p] = payload
    return results


def bits_bound(counts, code, mode, vbits, chunk):
    """The most payload bits that a part of tokens with the histogram ``counts`` (its
    window's symbols, then the escape: ``token_counts``'s) takes under ``code`` (a
    TokenCode), its chunks' padding aside: every coded symbol its code's length and, for
    RUNS, its run's extra bits; every other token (an escape, or a symbol the code leaves
    out) the escape's length, the level's ``vbits`` and, for RUNS, an Elias-gamma run of at
    most ``chunk`` levels."""
    lengths = (code.entries & LENGTH_MASK).astype(np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    symbols = np.arange(counts.size - 1)
    extra = BUCKET_EXTRA[symbols // code.window] if mode == RUNS else 0
    escaped = int(lengths[code.escape]) + vbits + \
        (2 * int(chunk).bit_length() - 1 if mode == RUNS else 0)
    per_token = np.where(lengths[:-1] > 0, lengths[:-1] + extra, escaped)
    return int(np.dot(counts[:-1], per_token)) + int(counts[-1]) * escaped


def fixed_payload(levels, base, width, stream):
    """``raw`` payload of device levels: (host uint32 words, words used, bits)."""
    n_bits = levels.size * width
    n_words = -(-n_bits // WORD_BITS)
    if n_words == 0:
        return np.zeros(1, np.uint32), 0, 0
    out = cuda.device_array(n_words, dtype=np.uint32, stream=stream)
    cuda_tokens.encode_fixed[grid_for(n_words, STRIDE_BLOCK), STRIDE_BLOCK, stream](
        levels, base, width, out)
    return copy_to_host(out, stream), n_words, n_bits


def _zeroed_words(n, stream):
    out = arena(stream).take(n, np.uint32)
    fill(out, 0, stream)
    return out


def fill(out, value, stream):
    """out[:] = value (device; a value of out's dtype)."""
    cuda_tokens.fill[grid_for(out.size, STRIDE_BLOCK), STRIDE_BLOCK, stream](
        out, out.dtype.type(value))


def upload(stream, *arrays):
    """Host arrays onto the device in one copy: packed into one byte buffer, each from an
    8-byte boundary; returns a device view of each, of its dtype and shape."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    offsets, end = [], 0
    for a in arrays:
        offsets.append(end)
        end += -(-a.nbytes // 8) * 8
    host = np.zeros(max(end, 8), dtype=np.uint8)
    for a, at in zip(arrays, offsets):
        host[at:at + a.nbytes] = a.reshape(-1).view(np.uint8)
    device = arena(stream).upload(host)
    return [device[at:at + a.nbytes].view(a.dtype).reshape(a.shape)
            for a, at in zip(arrays, offsets)]


def to_device_words(payload, stream):
    """The payload as padded uint64 words on the device (bits.bytes_to_words)."""
    return cuda.to_device(bytes_to_words(payload), stream=stream)


def _judged(output, n, name, launch):
    """Run ``launch(status)``, a decode into the ``Output`` ``output`` that writes ``n`` int64
    statuses, and judge them: read back now (DecodeError here), or where the output's group
    keeps its statuses on the device (``StatusChecks``), with the group's, for its verdict."""
    group = output.group
    group.flush()                       # the streams before this one keep their order
    if group.checks is None:
        status = cuda.device_array(n, dtype=np.int64, stream=output.stream)
        launch(status)
        status = copy_to_host(status, output.stream)
        bad = status[status != 0]
        if bad.size:
            check_status(int(bad[0]), name)
    else:
        launch(group.checks.slot(n, [(group.verdict, output.label, name, 0, n)]))


def _decode_chunks(words, starts, chunk_bits, chunk, table, tokens, base, window, vbits,
                   esc_has_run, lo, hi, out, name):
    """A chunked huffman/sh/rlh/shs payload (host uint64 ``words``) into the ``Output``
    ``out``, through its group (one block per chunk, kernels/cuda_decode.py
    ``decode_streams``); raises DecodeError like the CPU decoder when the group is flushed."""
    if len(starts):
        out.group.add(out, HuffmanStream(words, starts, chunk_bits, chunk, table, tokens, base,
                                         window, vbits, esc_has_run, lo, hi, name))


def decode_levels(words, starts, chunk_bits, chunk, table, base, window, vbits, lo, hi, out,
                  name):
    """huffman/sh payload (host uint64 words) -> the ``Output`` ``out``."""
    _decode_chunks(words, starts, chunk_bits, chunk, table, False, base, window, vbits, False,
                   lo, hi, out, name)


def decode_tokens(words, starts, chunk_bits, chunk, table, base, vbits, esc_has_run, lo, hi,
                  out, name):
    """rlh/shs payload (host uint64 words) -> the ``Output`` ``out``."""
    _decode_chunks(words, starts, chunk_bits, chunk, table, True, base, -1, vbits, esc_has_run,
                   lo, hi, out, name)


def decode_fixed(words, base, width, hi, out, name, stream):
    """raw payload -> the ``Output`` ``out``."""
    def launch(status):
        fill(status, 0, stream)
        cuda_decode.decode_fixed[grid_for(out.size, STRIDE_BLOCK), STRIDE_BLOCK, stream](
            words, base, width, hi, out.size, *out.args, status)
    _judged(out, 1, name, launch)


AnsPart = namedtuple("AnsPart", "offset size base chunk entries rcps classes block_bits bound")
AnsPart.__doc__ = """A part that ``ans_payload`` codes: where its levels start in the flat array
and how many, its base, its chunk size (levels), its classes' encode entries and reciprocals
(kernels/ans.py ``coder_tables``: a row per class), its blocks' classes (uint8; one 0 without
contexts), log2 of its block size (NO_BLOCKS without contexts), and the bits its chunks' units
should take at most (its plan's estimate with a margin: ``_packed``)."""


def _stacked_tables(tables):
    """The coder tables of every part, (entries, rcps) pairs (ans.coder_tables: a row per class
    or context), as the rows of one entries and one rcps array, in order, each row as wide as
    the widest (zeros past a part's symbols)."""
    n_tables = sum(e.shape[0] for e, _ in tables)
    width = max(e.shape[1] for e, _ in tables)
    entries = np.zeros((n_tables, width), dtype=np.uint64)
    rcps = np.zeros((n_tables, width), dtype=np.uint64)
    at = 0
    for e, r in tables:
        entries[at:at + e.shape[0], :e.shape[1]] = e
        rcps[at:at + r.shape[0], :r.shape[1]] = r
        at += e.shape[0]
    return entries, rcps


def ans_payload(levels, coded, stream, rider=None):
    """``ans`` payloads of the parts of device ``levels`` that ``coded`` names (an AnsPart, or
    None: a part not coded here), whose levels all lie in their windows: a list, per part, of
    (host uint32 words, words used, host chunk bits), laid out exactly as the CPU encoder lays
    them out, or None. One upload, three launches and one copy to the host for the whole
    batch where every part's bound holds (kernels/cuda_ans.py notes 2 and 6; ``_packed``):
    every chunk's units and every part's words, each part from a word of its own, and after
    them ``rider`` (a Rider) if there is one."""
    rows, part_rows, tables, classes, bounds = [], [], [], [], [None] * len(coded)
    first = np.zeros(len(coded) + 1, dtype=np.int64)
    n_tables = n_classes = slot_end = 0
    for p, part in enumerate(coded):
        first[p + 1] = first[p]
        if part is None:
            continue
        lo = part.offset + np.arange(0, part.size, part.chunk, dtype=np.int64)
        hi = np.minimum(lo + part.chunk, part.offset + part.size)
        # A slot holds at most one unit per level, and the final states.
        ends = slot_end + np.cumsum(hi - lo + HEADER_UNITS + 1)
        slot_end = int(ends[-1])
        rows.append(np.stack([lo, hi, np.full(lo.size, p, dtype=np.int64), ends], axis=1))
        part_rows.append((p, part.offset, part.base, n_tables, n_classes, part.block_bits))
        tables.append((part.entries, part.rcps))
        n_tables += part.entries.shape[0]
        n_classes += part.classes.size
        classes.append(part.classes)
        first[p + 1] += lo.size
        bounds[p] = part.bound
    if not rows:
        return [None] * len(coded)
    chunks = np.concatenate(rows)
    parts = np.zeros((len(coded), cuda_ans.PART_FIELDS), dtype=np.int64)
    for p, *columns in part_rows:
        parts[p] = columns
    entries, rcps = _stacked_tables(tables)
    n_chunks = chunks.shape[0]
    device = upload(stream, chunks, parts, entries, rcps, np.concatenate(classes),
                    chunks[:, cuda_ans.ENCODE_SLOT_END].copy())
    scratch = arena(stream).take(slot_end, np.uint32)

    def code(counts):
        cuda_ans.encode_chunks[n_chunks, LANES, stream](levels, *device[:5], scratch, counts)

    def pack(counts, word_starts, extra_starts, out):
        cuda_ans.pack_chunks[n_chunks, cuda_ans.PACK_BLOCK, stream](
            scratch, device[5], counts, word_starts, out)
    return _packed(stream, first, bounds, np.zeros(len(coded), np.int64), code, pack, rider,
                   zeroed=False)


# The margin a rANS part's region takes beyond its plan's estimate (``units_bound``).
ESTIMATE_MARGIN = 1.05


def units_bound(estimated_bytes, n_chunks):
    """The bits a rANS part's chunks are given room for in ``_packed``: its plan's estimated
    stream bytes (tables and parameters included, which the payload does not take) with
    ESTIMATE_MARGIN, and every chunk's final states once more."""
    return int(8 * ESTIMATE_MARGIN * estimated_bytes) + n_chunks * HEADER_UNITS * 16


def _packed(stream, first, bounds, extras, code, pack, rider, zeroed):
    """The payloads of a batch of rANS parts (``ans``, ``rla``), coded and packed in one copy
    to the host where their bounds hold: a list, per part, of (host words, words of its
    chunks' rANS streams, host chunk bits), or None for a part not coded (``bounds`` None).

    Part p's chunks are rows first[p]..first[p + 1]; ``bounds[p]``, the most bits its chunks'
    units should take (an estimate: a part past it is packed again); ``extras[p]``, the bits
    of its extras (rla's, after its chunks' words). ``code(counts)`` codes every chunk into
    its scratch slot and writes its unit count into counts (device int64), and ``pack(counts,
    word_starts, extra_starts, out)`` lays the chunks out in ``out`` (uint32; zeroed where
    ``zeroed``) from their word_starts, the extras from their extra_starts, skipping a chunk
    whose start is -1.

    Every part is given a region of words before the launch: its bound, a word of padding
    per chunk, its extras and a spare word. ``cuda_ans.unit_layout`` lays every part's
    chunks out in its region on the device, as the host would, so that the unit counts come
    back with the payload in one copy. A part whose chunks would pass its region is left
    unwritten and packed again from the copied counts: one copy more."""
    n_parts, n_chunks = first.size - 1, int(first[-1])
    regions, at_word = np.zeros((n_parts, 2), dtype=np.int64), 0
    for p, bound in enumerate(bounds):
        if bound is not None:
            words = -(-int(bound) // WORD_BITS) + int(first[p + 1] - first[p]) + \
                -(-int(extras[p]) // WORD_BITS) + 1
            regions[p] = (at_word, at_word + words)
            at_word += words
    riding = 0 if rider is None else rider.array.size
    # One buffer, one copy: every chunk's unit count (int64), then the payload's words.
    head = 2 * n_chunks
    buffer = arena(stream).take(head + at_word + riding, np.uint32)
    if zeroed:
        fill(buffer, 0, stream)
    counts, out = buffer[:head].view(np.int64), buffer[head:]
    code(counts)
    first_d, regions_d, extras_d = upload(stream, first, regions, extras)
    word_starts = arena(stream).take(n_chunks, np.int64)
    extra_starts = arena(stream).take(n_chunks, np.int64)
    cuda_ans.unit_layout[n_parts, BLOCK, stream](
        counts, first_d, regions_d, extras_d, word_starts, extra_starts)
    pack(counts, word_starts, extra_starts, out)
    host = _copied(buffer, head + at_word, rider, stream)
    chunk_bits, words = host[:head].view(np.int64) * 16, host[head:]
    results, layout = [None] * n_parts, []
    for p, bound in enumerate(bounds):
        if bound is None:
            continue
        rows = slice(first[p], first[p + 1])
        starts, n_words = _laid_out(chunk_bits[rows])
        span = n_words + -(-int(extras[p]) // WORD_BITS) + 1
        if regions[p, 0] + span <= regions[p, 1]:
            results[p] = (words[regions[p, 0]:regions[p, 1]], n_words,
                          chunk_bits[rows].copy())
        else:                                           # not written (unit_layout)
            layout.append((p, rows, starts, n_words, span))
    if layout:
        # The parts past their regions, laid out on the host as ``unit_layout`` would.
        word_starts, extra_starts = np.full((2, n_chunks), -1, dtype=np.int64)
        at_word = 0
        for p, rows, starts, n_words, span in layout:
            word_starts[rows] = at_word + starts // WORD_BITS
            extra_starts[rows] = (at_word + n_words) * WORD_BITS
            at_word += span
        out = arena(stream).take(at_word, np.uint32)
        fill(out, 0, stream)
        pack(counts, *upload(stream, word_starts, extra_starts), out)
        again = copy_to_host(out, stream)
        for p, rows, starts, n_words, span in layout:
            at = int(word_starts[rows][0])
            results[p] = (again[at:at + span], n_words, chunk_bits[rows].copy())
    return results


def _with_rider(out, at_word, layout, rider, stream):
    """(host words, words of its chunks, chunk bits) of ``out`` per part of ``layout`` (None,
    or (first word, words of its chunks, chunk bits, words of its region)), ``rider``'s array
    copied in after word ``at_word`` first, to come back in the same copy (``rider.host``)."""
    host = _copied(out, at_word, rider, stream)
    return [None if part is None else (host[part[0]:part[0] + part[3]], part[1], part[2])
            for part in layout]


def _copied(buffer, at_word, rider, stream):
    """The host copy of device ``buffer`` (uint32), ``rider``'s array (None: none) copied into
    it from word ``at_word`` first, so that it comes back in the same copy (``rider.host``)."""
    riding = 0 if rider is None else rider.array.size
    if riding:
        buffer[at_word:at_word + riding].copy_to_device(rider.array.view(np.uint32),
                                                        stream=stream)
    host = copy_to_host(buffer, stream)
    if rider is not None:
        rider.host = host[at_word:at_word + riding].view(rider.array.dtype)
    return host


RlaCount = namedtuple("RlaCount", "offset size base window chunk")
RlaCount.__doc__ = """A part whose ``rla`` tokens ``rla_statistics`` counts: ``size`` levels
from ``offset`` of the batch's flat array, runs cut at chunks of ``chunk`` levels, their
levels in [base, base + window) (a token whose level lies outside is counted as the escape:
its statistics are not the part's)."""

RlaFound = namedtuple("RlaFound", "contexts tokens extra_bits edges")
RlaFound.__doc__ = """What ``rla_statistics`` counts of a part: ``contexts`` (int64, 2 x
(RUN_BUCKETS * window + 1): every token's symbol, in the row of its context), per chunk its
tokens and extra bits (int64), and ``edges`` (int64, a row per chunk: columns
cuda_rla.FOUND_FIRST_RUN ... FOUND_LAST_CONTEXT of ``token_statistics``'s rows, less
FOUND_FIRST_RUN), its first and last tokens, which ``rla_grown`` merges."""

RlaCoded = namedtuple("RlaCoded", "count entries rcps tokens extra_bits bound")
RlaCoded.__doc__ = """A part that ``rla_payload`` codes: its RlaCount (the chunks whose tokens
were counted last), its tables (ans.coder_tables: a row per context, one or two), per chunk its
tokens and extra bits (RlaFound's), and the bits its chunks' units should take at most (its
plan's estimate with a margin: ``_packed``)."""


def _rla_chunks(counts, columns):
    """The chunk table (kernels/cuda_rla.py note 6) of the parts ``counts`` (RlaCount, or
    None: no chunks), its first three columns filled and those that ``columns`` (a function
    of (part, RlaCount) -> {column: a value per chunk}) gives; and each part's rows."""
    rows, spans = [], []
    for p, count in enumerate(counts):
        if count is None:
            spans.append(None)
            continue
        lo = count.offset + np.arange(0, count.size, count.chunk, dtype=np.int64)
        table = np.zeros((lo.size, cuda_rla.RLA_CHUNK_FIELDS), dtype=np.int64)
        table[:, cuda_rla.RLA_LO] = lo
        table[:, cuda_rla.RLA_HI] = np.minimum(lo + count.chunk, count.offset + count.size)
        table[:, cuda_rla.RLA_PART] = p
        for column, values in columns(p, count).items():
            table[:, column] = values
        first = sum(r.shape[0] for r in rows)
        spans.append(slice(first, first + lo.size))
        rows.append(table)
    return np.concatenate(rows), spans


def rla_statistics(levels, counts, ends, stream):
    """``rla``'s statistics of the parts of device ``levels`` that ``counts`` names (an
    RlaCount, or None: not counted), their levels all in their windows: a list of RlaFound or
    None. Every token's run end goes into ``ends`` (device uint32, as many as the levels) at
    its chunk's levels' places, for ``rla_payload``. One upload, one launch and one copy to
    the host (kernels/cuda_rla.py note 1)."""
    counted = rla_ends(levels, counts, ends, stream)
    if counted is None:
        return [None] * len(counts)
    found, parts, n_counts, spans = counted
    return _rla_read(copy_to_host(found, stream), counts, parts, n_counts, spans)


def rla_ends(levels, counts, ends, stream):
    """Count the parts that ``counts`` names (RlaCount, or None) on the device as
    ``rla_statistics`` does, their token ends into ``ends`` at their chunk sizes, with
    nothing copied to the host (a part whose chunks grew takes its statistics from
    ``rla_grown``): None where no part is named, else (the device counts, the parts table,
    the counts it names, each part's rows of the chunk table), for ``_rla_read``. One upload
    and one launch."""
    if all(count is None for count in counts):
        return None
    parts, n_counts, chunks, spans = _rla_tables(counts)
    found = arena(stream).take(n_counts + cuda_rla.FOUND_FIELDS * chunks.shape[0], np.int64)
    fill(found, 0, stream)
    _rla_count(levels, upload(stream, chunks, parts), ends, found, n_counts, stream)
    return found, parts, n_counts, spans


def rla_grown(found, count, chunk):
    """The RlaFound that ``rla_statistics`` would count of the part ``count`` names with its
    runs cut at chunks of ``chunk`` levels (a multiple of ``count.chunk``), from ``found``,
    what it counted at ``count.chunk`` (kernels/cuda_rla.py note 1), in array operations
    over the chunks.

    Where two chunks of a grown one meet, a run of one level on both sides joins them: the
    last token of the first, every chunk between that is one token of that level, and the
    first token of the last become one token (a chain), in the context of the chain's first
    token. Where the levels differ, the token after the end takes the context that the token
    before it gives (1 after level 0) where it had a chunk's first token's (0)."""
    window, base = count.window, count.base
    per, n = chunk // count.chunk, found.tokens.size
    first_run, first_level, last_run, last_level, last_context = found.edges.T
    c = np.arange(n)
    alone = found.tokens == 1
    inner = c % per != 0                        # chunk c meets chunk c - 1 in a grown chunk
    joins = inner.copy()
    joins[1:] &= first_level[1:] == last_level[:-1]
    after_zero = np.zeros(n, dtype=np.int64)     # the context a token after chunk c - 1 gets
    after_zero[1:] = last_level[:-1] == 0
    # A chain of joins starts at chunk a (its last token) and takes in every chunk c > a whose
    # meeting with c - 1 joins, while c - 1 is one token; chain_of[c]: its chain, -1: none.
    starts = joins.copy()
    starts[1:] &= ~(joins[:-1] & alone[:-1])
    chain_of = np.where(joins, np.cumsum(starts) - 1, -1)
    head = np.flatnonzero(starts) - 1            # every chain's first chunk, a
    member = chain_of >= 0
    runs = last_run[head] + np.bincount(chain_of[member], weights=first_run[member],
                                        minlength=head.size).astype(np.int64)
    context = np.where(~alone[head], last_context[head],
                       np.where(inner[head], after_zero[head], 0))

    def bucket(run):                            # runs.run_bucket of every run
        return np.searchsorted(BUCKET_BASE, run, side="right") - 1

    def symbol(run, level):
        return bucket(run) * window + level - base

    def extra(run):
        return BUCKET_EXTRA[bucket(run)]
    bins = found.contexts.shape[1]
    changes = [  # (context, symbol, +1/-1) of every token a chain or a new context changes
        (last_context[head], symbol(last_run[head], last_level[head]), -1),
        (0, symbol(first_run[member], first_level[member]), -1),
        (context, symbol(runs, last_level[head]), 1)]
    # A first token not at a join, not a chain's first, after a token of level 0.
    moved = inner & ~joins & (after_zero == 1)
    moved[:-1] &= ~(alone[:-1] & starts[1:])
    changes += [(0, symbol(first_run[moved], first_level[moved]), -1),
                (1, symbol(first_run[moved], first_level[moved]), 1)]
    contexts = found.contexts.copy().reshape(-1)
    for ctx, sym, sign in changes:
        np.add.at(contexts, np.asarray(ctx, dtype=np.int64) * bins + sym, sign)
    group = c // per
    tokens = np.bincount(group, weights=found.tokens - joins).astype(np.int64)
    extra_bits = np.bincount(group, weights=found.extra_bits).astype(np.int64)
    extra_bits += np.bincount(head // per, weights=extra(runs) - extra(last_run[head]),
                              minlength=tokens.size).astype(np.int64)
    extra_bits -= np.bincount(group[member], weights=extra(first_run[member]),
                              minlength=tokens.size).astype(np.int64)
    # Every grown chunk's first and last tokens.
    edges = found.edges[::per].copy()
    chained = alone[::per] & starts[np.minimum(c[::per] + 1, n - 1)] & (c[::per] + 1 < n)
    edges[chained, 0] = runs[chain_of[c[::per][chained] + 1]]
    end = np.minimum(c[::per] + per, n) - 1
    edges[:, 2:] = found.edges[end, 2:]
    ended = joins[end] & alone[end]              # its last token ends a chain
    edges[ended, 2] = runs[chain_of[end[ended]]]
    edges[ended, 4] = context[chain_of[end[ended]]]
    lone = alone[end] & inner[end] & ~joins[end]
    edges[lone, 4] = after_zero[end[lone]]
    return RlaFound(contexts.reshape(found.contexts.shape), tokens, extra_bits, edges)


# The levels -RLA_NEAR..RLA_NEAR that ``rla_range_statistics`` counts in first: the widest
# window whose two contexts' bins fit the kernel's shared memory (cuda_tokens.SHARED_BINS).
RLA_NEAR = ((cuda_tokens.SHARED_BINS // 2 - 1) // RUN_BUCKETS - 1) // 2


def rla_range_statistics(batch, ends, count_of):
    """(host int64 (parts, 2): every part's least and greatest level, as Batch.ranges; every
    part's RlaCount, ``count_of(offset, n, lo, hi)`` of its levels and range, or None (an
    empty part among them); its RlaFound, as ``rla_statistics`` gives them), with one copy to
    the host where it can.

    The ranges and the statistics are counted in one launch each and come back together, the
    statistics in the window -near..near for every part (``near_window`` of the batch's
    ``near``: at most -RLA_NEAR..RLA_NEAR; ``count_of(offset, n, -near, near)``). A part whose
    levels all lie there takes its own window's bins from them: its tokens, their contexts and
    extra bits are the window's, and the bins outside its range are empty. The other parts are
    counted again in their own windows, a second launch and copy. A batch whose first counts
    would pass MAX_NEAR_BINS counts its ranges, then its statistics."""
    stream, n_parts, levels = batch.stream, batch.n_parts, batch.levels
    first, window = near_window(batch.near, (-RLA_NEAR, 2 * RLA_NEAR + 1))
    near = [count_of(int(at), int(n), first, first + window - 1) if n else None
            for n, at in zip(batch.sizes, batch.offsets)]
    if all(count is None for count in near) or \
            sum(_rla_bins(count.window) for count in near if count is not None) > MAX_NEAR_BINS:
        ranges = batch.ranges()
        counts = [count_of(int(at), int(n), int(lo), int(hi)) if n else None
                  for n, at, (lo, hi) in zip(batch.sizes, batch.offsets, ranges)]
        return ranges, counts, rla_statistics(levels, counts, ends, stream)
    parts, n_counts, chunks, spans = _rla_tables(near)
    start = np.concatenate([batch.range_start(),
                            np.zeros(n_counts + cuda_rla.FOUND_FIELDS * chunks.shape[0],
                                     np.int64)])
    found, *device = upload(stream, start, chunks, parts)
    batch.count_ranges(found)
    _rla_count(levels, device, ends, found[2 * n_parts:], n_counts, stream)
    host = copy_to_host(found, stream)
    ranges = batch.read_ranges(host)
    counts = [count_of(int(at), int(n), int(lo), int(hi)) if n else None
              for n, at, (lo, hi) in zip(batch.sizes, batch.offsets, ranges)]
    found = [None if count is None else _rla_narrowed(guess, got, count)
             for count, guess, got in
             zip(counts, near, _rla_read(host[2 * n_parts:], near, parts, n_counts, spans))]
    return ranges, counts, _filled(counts, found,
                                   lambda again: rla_statistics(levels, again, ends, stream))


def _filled(wanted, found, count):
    """``found`` (per part: statistics, or None) with every part that ``wanted`` names (not
    None) but ``found`` lacks counted again, all of them in one ``count(again)`` (per part:
    what to count, or None)."""
    again = [want if want is not None and got is None else None
             for want, got in zip(wanted, found)]
    if any(want is not None for want in again):
        for p, got in enumerate(count(again)):
            if got is not None:
                found[p] = got
    return found


def _rla_bins(window):
    """A part's counts for a ``window`` of levels: RUN_BUCKETS rows of the window's symbols
    and the escape, for each of the two contexts."""
    return 2 * (RUN_BUCKETS * window + 1)


def _rla_narrowed(guess, found, count):
    """The RlaFound of ``count``, cut from ``found``, those of ``guess`` (RlaCounts of the same
    levels and chunks), or None where ``guess`` did not count them."""
    if found is None or count.base < guess.base or \
            count.base + count.window > guess.base + guess.window:
        return None
    at = count.base - guess.base
    rows = found.contexts[:, :RUN_BUCKETS * guess.window].reshape(2, RUN_BUCKETS, guess.window)
    contexts = np.zeros((2, RUN_BUCKETS * count.window + 1), dtype=np.int64)
    contexts[:, :-1] = rows[:, :, at:at + count.window].reshape(2, -1)
    return found._replace(contexts=contexts)


def _rla_tables(counts):
    """(the parts table of kernels/cuda_rla.py note 6 for ``counts``, the int64 counts it
    names, the chunk table, each part's rows of it)."""
    at, parts = 0, np.zeros((len(counts), cuda_rla.RLA_PART_FIELDS), dtype=np.int64)
    for p, count in enumerate(counts):
        if count is not None:
            parts[p, [cuda_rla.RLA_BASE, cuda_rla.RLA_WINDOW, cuda_rla.RLA_COUNTS]] = \
                (count.base, count.window, at)
            at += _rla_bins(count.window)
    chunks, spans = _rla_chunks(counts, lambda p, count: {})
    return parts, at, chunks, spans


def _rla_count(levels, device, ends, found, n_counts, stream):
    """``token_statistics`` of the uploaded chunk and parts tables ``device`` into ``found``
    (zeroed: the counts, then FOUND_FIELDS per chunk)."""
    n_chunks = device[0].shape[0]
    cuda_rla.token_statistics[n_chunks, LANES, stream](
        levels, *device, _bucket_tables().extra, ends, found[:n_counts],
        found[n_counts:].reshape(n_chunks, cuda_rla.FOUND_FIELDS))


def _rla_read(host, counts, parts, n_counts, spans):
    """The RlaFound of every part ``counts`` names (else None) from ``host``, the host copy
    of what ``_rla_count`` wrote."""
    per_chunk = host[n_counts:].reshape(-1, cuda_rla.FOUND_FIELDS)
    return [None if count is None else
            RlaFound(host[parts[p, cuda_rla.RLA_COUNTS]:][:_rla_bins(count.window)]
                     .reshape(2, -1), per_chunk[spans[p], cuda_rla.FOUND_TOKENS].copy(),
                     per_chunk[spans[p], cuda_rla.FOUND_BITS].copy(),
                     per_chunk[spans[p], cuda_rla.FOUND_FIRST_RUN:].copy())
            for p, count in enumerate(counts)]


def rla_payload(levels, coded, ends, stream, rider=None):
    """``rla`` payloads of the parts of device ``levels`` that ``coded`` names (an RlaCoded, or
    None: a part not coded here) from their token ``ends`` (``rla_statistics``'s last count of
    them): a list, per part, of (host uint32 words, words of its chunks' rANS streams, host
    chunk bits), its extras after those words as the CPU encoder writes them, or None. One
    upload, five launches and one copy to the host for the whole batch where every part's
    bound holds (``_packed``): every chunk's units and every part's words, each part from a
    word of its own, and after them ``rider`` (a Rider) if there is one."""
    if all(part is None for part in coded):
        return [None] * len(coded)
    parts = np.zeros((len(coded), cuda_rla.RLA_PART_FIELDS), dtype=np.int64)
    tables, n_tables = [], 0
    for p, part in enumerate(coded):
        if part is not None:
            parts[p] = (part.count.base, part.count.window, 0, n_tables,
                        part.entries.shape[0])
            tables.append((part.entries, part.rcps))
            n_tables += part.entries.shape[0]
    # Every chunk's extras from the bit after the extras of the chunks before it in its part.
    chunks, spans = _rla_chunks(
        [None if part is None else part.count for part in coded],
        lambda p, count: {cuda_rla.RLA_TOKENS: coded[p].tokens,
                          cuda_rla.RLA_BITS: np.cumsum(coded[p].extra_bits) -
                          coded[p].extra_bits})
    # A slot holds at most one unit per token, and the final states.
    chunks[:, cuda_rla.RLA_SLOT_END] = np.cumsum(chunks[:, cuda_rla.RLA_TOKENS] +
                                                 HEADER_UNITS + 1)
    entries, rcps = _stacked_tables(tables)
    n_chunks = chunks.shape[0]
    first = np.zeros(len(coded) + 1, dtype=np.int64)
    for p, span in enumerate(spans):
        first[p + 1] = first[p] if span is None else span.stop
    extras = np.array([0 if part is None else int(part.extra_bits.sum()) for part in coded],
                      dtype=np.int64)
    device = upload(stream, chunks, parts, entries, rcps,
                    chunks[:, cuda_rla.RLA_SLOT_END].copy())
    scratch = arena(stream).take(int(chunks[-1, cuda_rla.RLA_SLOT_END]), np.uint32)

    def code(counts):
        cuda_rla.encode_chunks[n_chunks, LANES, stream](levels, *device[:4], ends, scratch,
                                                        counts)

    def pack(counts, word_starts, extra_starts, out):
        cuda_ans.pack_chunks[n_chunks, cuda_ans.PACK_BLOCK, stream](
            scratch, device[4], counts, word_starts, out)
        cuda_rla.write_extras[n_chunks, LANES, stream](device[0], _bucket_tables().extra,
                                                       ends, extra_starts, out)
    return _packed(stream, first, [None if part is None else part.bound for part in coded],
                   extras, code, pack, rider, zeroed=True)


def decode_ans(words, starts, chunk_bits, chunk, tables, classes, block_bits, escapes,
               escape_starts, out, name):
    """``ans`` payload (host uint64 ``words``) -> the ``Output`` ``out`` through its group, a
    warp per chunk (kernels/cuda_ans.py ``decode_streams``: levels dequantized and summed
    where they are decoded); raises DecodeError like the CPU decoder when the group is
    flushed."""
    if len(starts):
        out.group.add(out, AnsStream(words, starts, chunk_bits, chunk, tables, classes,
                                     block_bits, escapes, escape_starts, name))


def decode_rla(words, starts, chunk_bits, extra_starts, chunk, tables, base, lo, hi, vbits,
               out, name):
    """``rla`` payload (host uint64 ``words``) -> the ``Output`` ``out`` through its group, a
    warp per chunk (kernels/cuda_rla.py ``decode_streams``: levels dequantized and summed where
    they are decoded); raises DecodeError like the CPU decoder when the group is flushed."""
    if len(starts):
        out.group.add(out, RlaStream(words, starts, chunk_bits, extra_starts, chunk, tables,
                                     base, lo, hi, vbits, name))


# Levels per chunk of the batches whose ``ans`` statistics are counted (a block each:
# kernels/cuda_ans.py note 7).
STATISTICS_CHUNK = 1 << 14

AnsCount = namedtuple("AnsCount", "base window rows bits larger_bits stride")
AnsCount.__doc__ = """What ``ans_statistics`` counts of a part: symbols level - ``base`` of
``window`` levels in ``rows`` rows (the largest |level| + 1 with contexts, else 1): a level
outside the window, or in a block whose largest |level| passes the rows, is not counted, and
the statistics are then not the part's; ``bits``: log2 of the block size of its contexts (None:
none, every level counted in row 0); ``larger_bits``: that of the larger blocks counted too
(None: none); ``stride``: with contexts, one block in every ``stride`` is counted
(kernels/ans_plans.py ``sampled_block``)."""

AnsStatistics = namedtuple("AnsStatistics", "maxima counts larger_maxima larger_counts")
AnsStatistics.__doc__ = """A part's statistics from ``ans_statistics``, host int64 arrays: every
block's largest |level| (None without contexts), the symbol counts (rows x (window + 1): row m
those of the counted blocks whose largest |level| is m), and the same for the larger blocks
(None where not counted)."""


def ans_statistics(batch, counted):
    """The statistics of every part of a gpu.Batch that ``counted`` names (an AnsCount, or
    None for a part not counted, an empty one among them): a list of AnsStatistics, or None.
    Three launches (the zeroing of one buffer, the blocks' maxima, the counts), one upload and
    one copy to the host for the whole batch (kernels/cuda_ans.py note 7)."""
    stream = batch.stream
    table, n_counts, n_maxima = _ans_table(batch, counted)
    # One buffer: the counts (int64), then the maxima (int32), zeroed in one launch.
    found = arena(stream).take(n_counts + n_maxima // 2 + 1, np.int64)
    if not n_counts:
        return _ans_read(np.zeros(1, np.int64), batch, table, counted, 0)
    fill(found, 0, stream)
    parts, = upload(stream, table)
    _ans_count(batch, parts, n_maxima, found, n_counts)
    return _ans_read(copy_to_host(found, stream), batch, table, counted, n_counts)


# The levels -ANS_NEAR..ANS_NEAR that ``ans_range_statistics`` counts in first (QSGD up to
# s = 16, TernGrad), and the most bins it counts there for a batch (int64: 512 KiB).
ANS_NEAR = 16
MAX_NEAR_BINS = 1 << 16


def ans_range_statistics(batch, counted_of):
    """(host int64 (parts, 2): every part's least and greatest level, as Batch.ranges; every
    part's AnsCount, ``counted_of(n, lo, hi)`` of its size and range (None for an empty part);
    its AnsStatistics, as ``ans_statistics`` gives them), with one copy to the host where it
    can.

    The ranges and the statistics are counted in one launch sequence and come back together, the
    statistics in the window -near..near for every part (``near_window`` of the batch's
    ``near``: at most -ANS_NEAR..ANS_NEAR; ``counted_of(n, -near, near)``). A part whose levels
    all lie there takes its own window's rows and columns from them, where its blocks and
    samples are those counted (they depend on its size alone, but for the limit on a plan's
    statistics): the same counts, for the rows above its largest |level| and the columns outside
    its range are empty. The other parts are counted again in their own windows: a second launch
    sequence and copy. A batch whose first counts would pass MAX_NEAR_BINS counts its ranges,
    then its statistics."""
    stream, n_parts = batch.stream, batch.n_parts
    first, window = near_window(batch.near, (-ANS_NEAR, 2 * ANS_NEAR + 1))
    near = [counted_of(int(n), first, first + window - 1) if n else None for n in batch.sizes]
    table, n_counts, n_maxima = _ans_table(batch, near)
    if n_counts > MAX_NEAR_BINS:
        ranges = batch.ranges()
        counted = [counted_of(int(n), int(lo), int(hi)) if n else None
                   for n, (lo, hi) in zip(batch.sizes, ranges)]
        return ranges, counted, ans_statistics(batch, counted)
    start = np.concatenate([batch.range_start(),
                            np.zeros(n_counts + n_maxima // 2 + 1, np.int64)])
    found, parts = upload(stream, start, table)
    batch.count_ranges(found)
    if batch.n_chunks and n_counts:
        _ans_count(batch, parts, n_maxima, found[2 * n_parts:], n_counts)
    host = copy_to_host(found, stream)
    ranges = batch.read_ranges(host)
    counted = [counted_of(int(n), int(lo), int(hi)) if n else None
               for n, (lo, hi) in zip(batch.sizes, ranges)]
    statistics = [None if want is None else _narrowed(guess, found_stats, want)
                  for want, guess, found_stats in
                  zip(counted, near, _ans_read(host[2 * n_parts:], batch, table, near,
                                               n_counts))]
    return ranges, counted, _filled(counted, statistics,
                                    lambda again: ans_statistics(batch, again))


def _narrowed(guess, found, want):
    """The AnsStatistics that ``want`` names, cut from ``found``, those that ``guess`` named
    (AnsCounts of one part), or None where ``guess`` did not count them."""
    if found is None or (want.bits, want.larger_bits, want.stride) != \
            (guess.bits, guess.larger_bits, guess.stride) or want.rows > guess.rows or \
            want.base < guess.base or want.base + want.window > guess.base + guess.window:
        return None
    at = want.base - guess.base

    def cut(plane):
        if plane is None:
            return None
        out = np.zeros((want.rows, want.window + 1), dtype=np.int64)
        out[:, :want.window] = plane[:want.rows, at:at + want.window]
        return out
    return AnsStatistics(found.maxima, cut(found.counts), found.larger_maxima,
                         cut(found.larger_counts))


def _ans_table(batch, counted):
    """(the parts table of kernels/cuda_ans.py note 7 for what ``counted`` names, the int64
    counts it holds, the int32 block maxima)."""
    table = np.zeros((batch.n_parts, cuda_ans.STAT_FIELDS), dtype=np.int64)
    n_maxima = n_counts = 0
    for p, want in enumerate(counted):
        if want is None:
            continue
        n, cols = int(batch.sizes[p]), want.window + 1
        plane = want.rows * cols
        row = table[p]
        row[[cuda_ans.STAT_OFFSET, cuda_ans.STAT_BASE, cuda_ans.STAT_COLS, cuda_ans.STAT_BITS,
             cuda_ans.STAT_STRIDE, cuda_ans.STAT_LARGER, cuda_ans.STAT_COUNTS,
             cuda_ans.STAT_BINS]] = (batch.offsets[p], want.base, cols,
                                     -1 if want.bits is None else want.bits, want.stride, -1,
                                     n_counts, plane)
        if want.bits is not None:
            row[cuda_ans.STAT_MAXIMA] = n_maxima
            n_maxima += -(-n >> want.bits)
            if want.larger_bits is not None:
                row[[cuda_ans.STAT_LARGER, cuda_ans.STAT_LARGER_BITS,
                     cuda_ans.STAT_LARGER_AT, cuda_ans.STAT_BINS]] = (n_maxima, want.larger_bits,
                                                                      plane, 2 * plane)
                n_maxima += -(-n >> want.larger_bits)
        n_counts += int(row[cuda_ans.STAT_BINS])
    return table, n_counts, n_maxima


def _ans_count(batch, parts, n_maxima, found, n_counts):
    """Count into ``found`` (zeroed: the counts, then the maxima) what the uploaded parts
    table ``parts`` names: the blocks' maxima, then the symbols, a launch each."""
    stream = batch.stream
    maxima = found[n_counts:].view(np.int32)
    if n_maxima:
        cuda_ans.block_maxima[batch.n_chunks, BLOCK, stream](batch.levels, batch.chunks, parts,
                                                             maxima)
    cuda_ans.context_counts[batch.n_chunks, BLOCK, stream](batch.levels, batch.chunks, parts,
                                                           maxima, found)


def _ans_read(host, batch, table, counted, n_counts):
    """The AnsStatistics of every part ``counted`` names (else None) from ``host``, the host
    copy of the counts and maxima ``_ans_count`` wrote."""
    maxima = host[n_counts:].view(np.int32)

    def blocks(first, n, bits):
        return maxima[first:first + -(-n >> bits)].astype(np.int64)

    def plane(at, want):
        return host[at:][:want.rows * (want.window + 1)].reshape(want.rows, want.window + 1)
    out = []
    for p, want in enumerate(counted):
        if want is None:
            out.append(None)
            continue
        n, row = int(batch.sizes[p]), table[p]
        contexts, larger = want.bits is not None, want.larger_bits is not None
        out.append(AnsStatistics(
            blocks(row[cuda_ans.STAT_MAXIMA], n, want.bits) if contexts else None,
            plane(row[cuda_ans.STAT_COUNTS], want),
            blocks(row[cuda_ans.STAT_LARGER], n, want.larger_bits) if larger else None,
            plane(row[cuda_ans.STAT_COUNTS] + row[cuda_ans.STAT_LARGER_AT], want)
            if larger else None))
    return out
