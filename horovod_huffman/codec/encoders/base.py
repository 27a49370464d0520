"""What every encoder shares: input checks, the encode frame, and kernel status handling."""
import numpy as np

from horovod_huffman.kernels.chunks import CHUNK_GROWTH, CHUNK_LEVELS, CHUNK_PAYLOAD_BITS
from horovod_huffman.kernels.stats import level_range

from .. import wire
from ..device import arena, is_device_array, as_device_array, stream_or_default, copy_to_host
from ..errors import check_status  # noqa: F401 (encoders import it from here)
from .gpu import level_range as gpu_range
from .rows import check_layout

_INT32 = np.iinfo(np.int32)


def check_levels(levels):
    """Validate encoder input: a 1-D NumPy array of int8/int16/int32/int64 levels.

    int64 arrays are accepted when every level fits int32 (the wire format's value range).
    """
    if not isinstance(levels, np.ndarray):
        raise TypeError(f"levels must be a NumPy array, got {type(levels).__name__}")
    if levels.dtype not in wire.DTYPE_CODES:
        raise TypeError(f"levels must be a signed integer array (int8/16/32/64), got {levels.dtype}")
    if levels.ndim != 1:
        raise ValueError(f"levels must be 1-D, got shape {levels.shape}; pass levels.ravel()")
    if levels.size > wire.MAX_ELEMENTS:
        raise ValueError(f"{levels.size} levels exceed the format maximum {wire.MAX_ELEMENTS}")
    if levels.dtype == np.int64 and levels.size and \
            (levels.min() < _INT32.min or levels.max() > _INT32.max):
        raise ValueError("int64 levels must lie in the int32 range "
                         f"[{_INT32.min}, {_INT32.max}]; got [{levels.min()}, {levels.max()}]")
    return np.ascontiguousarray(levels)


def check_device_levels(levels, stream):
    """check_levels for a device array: 1-D, C-contiguous, signed integers in range."""
    if levels.dtype not in wire.DTYPE_CODES:
        raise TypeError(f"levels must be a signed integer array (int8/16/32/64), got {levels.dtype}")
    if levels.ndim != 1:
        raise ValueError(f"levels must be 1-D, got shape {levels.shape}; pass a flat view")
    if not levels.is_c_contiguous():
        raise ValueError("device levels must be contiguous; pass tensor.contiguous()")
    if levels.size > wire.MAX_ELEMENTS:
        raise ValueError(f"{levels.size} levels exceed the format maximum {wire.MAX_ELEMENTS}")
    if levels.dtype == np.int64 and levels.size:
        lo, hi = gpu_range(levels, stream)
        if lo < _INT32.min or hi > _INT32.max:
            raise ValueError("int64 levels must lie in the int32 range "
                             f"[{_INT32.min}, {_INT32.max}]; got [{lo}, {hi}]")


def check_chunk_levels(chunk_levels, name="chunk_levels"):
    """Validate a ``chunk_levels`` argument (or another of levels per chunk, ``name``)."""
    if not isinstance(chunk_levels, (int, np.integer)) or not 1 <= chunk_levels <= 2**31:
        raise ValueError(f"{name} must be an integer in [1, 2**31], got {chunk_levels!r}")
    return int(chunk_levels)


def part_slices(sizes):
    """The slice of each part of consecutive parts of ``sizes`` levels, in order."""
    ends = np.cumsum(sizes)
    return [slice(int(end - n), int(end)) for n, end in zip(sizes, ends)]


def out_words(max_bits):
    """A uint32 word buffer with room for ``max_bits`` payload bits plus one flush."""
    return np.empty(int(max_bits) // 32 + 2, dtype=np.uint32)


class Encoder:
    """A lossless encoder of 1-D signed integer levels into self-describing bytes.

    Subclasses set ``name`` and ``encoder_id`` and implement ``_encode`` (levels -> parameter
    bytes, uint32 payload words, payload bits) and ``_decode`` (parameters, payload -> levels).
    """
    name = None
    encoder_id = None

    # Whether ``_encode_device`` and ``_decode(..., stream)`` run on the GPU (else a device
    # array goes through a host copy).
    on_device = False
    # Whether the device decoder takes host words and decodes through its output's
    # gpu.StreamGroup (else it takes device words and writes the output at once).
    decodes_in_groups = False
    # Whether ``encoded_parts`` codes device parts as one batch (else part by part).
    codes_in_batches = False

    def encode(self, levels, stream=None, layout=None):
        """Encode ``levels`` (1-D signed integer array) into a uint8 array (docs/wire-format.md).

        ``layout``: (rows, row length) pairs of the matrices the levels hold row-major, one
        after another (encoders/rows.py); ``ans`` (and ``auto`` through it) may then code
        the levels against a rank-one prediction of each matrix's rows. The other encoders,
        and device arrays, do not use it. ``auto`` given None looks for the matrices itself
        (encoders/row_search.py); ``()`` says there are none.

        ``levels`` may be a GPU array (``__cuda_array_interface__``: a Numba device array, a torch
        CUDA tensor): the encoders of encoders.ON_DEVICE (huffman, sh, rlh, shs, raw, ans, rla)
        then encode on the device, on ``stream`` (default: the default stream), and return the
        same bytes as for a host copy.
        """
        return wire.frame(self.encoded(levels, stream, layout))

    def encode_parts(self, levels, sizes, stream=None):
        """``encode`` of each part of ``levels``, the consecutive slices of ``sizes`` levels
        (non-negative integers adding up to levels.size): a list of uint8 arrays, each the
        bytes the part alone gives (``encoded_parts``)."""
        return [wire.frame(e) for e in self.encoded_parts(levels, sizes, stream)]

    def encoded_parts(self, levels, sizes, stream=None, rider=None):
        """As ``encode_parts``, unframed: a list of ``wire.Encoded``. ``rider``: None, or a
        gpu.Rider, a device array that a batch coded on the device brings to the host in its
        payload's copy (``rider.host``; left None where no payload was copied).

        On the device, huffman, sh, rlh, shs, ans and rla code all the parts as one batch:
        each pass is one launch over every chunk of every part, and the copies to the host are
        a fixed few (the parts' level ranges and histograms, samples or context or token
        statistics, their chunks' bits, their payloads), whatever the number of parts
        (gpu.Batch, gpu.window_counts, gpu.ans_range_statistics,
        gpu.rla_range_statistics). The other encoders code part by part."""
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        if sizes.size and (sizes.min() < 0 or int(sizes.sum()) != len(levels)):
            raise ValueError(f"part sizes must be non-negative and add up to the {len(levels)} "
                             f"levels, got {sizes.size} parts of {int(sizes.sum())}")
        if is_device_array(levels) and self.on_device:
            levels, stream = as_device_array(levels), stream_or_default(stream)
            check_device_levels(levels, stream)
            with arena(stream):
                results = iter(self._encode_device_parts(levels, sizes, stream, rider))
            return [self._empty(levels.dtype) if n == 0 else
                    self._result(levels.dtype, int(n), *next(results)) for n in sizes]
        return [self.encoded(levels[part], stream) for part in part_slices(sizes)]

    def encode_part(self, encode, memory, slot, step, shape, layout):
        """The message of one part of an exchange (a bucket, a shard, a sum) of ``shape``:
        ``encode(encoder, layout)`` with this encoder. ``memory`` is a dict the caller keeps
        across steps (one per codec), ``slot`` names the part and ``step`` counts its steps
        (0, 1, ...): an encoder that chooses among others (``auto``) keeps its choices there."""
        return encode(self, layout)

    def batch_member(self, memory, slot, step):
        """The encoder that codes ``slot`` at ``step`` (as ``encode_part`` names them) where it
        codes device tensors in batches (``codes_in_batches``): this one, or None."""
        return self if self.codes_in_batches else None

    def encoded(self, levels, stream=None, layout=None):
        """As ``encode``, unframed: a ``wire.Encoded`` that a message writes straight into its
        own buffer (message.py)."""
        if is_device_array(levels):
            return self._encoded_on_device(as_device_array(levels), stream_or_default(stream))
        levels = check_levels(levels)
        if layout is not None:
            layout = check_layout(layout, levels.size)
        if levels.size == 0:
            return self._empty(levels.dtype)
        return self._result(levels.dtype, levels.size, *self._encode_with(levels, layout))

    def _encoded_on_device(self, levels, stream):
        check_device_levels(levels, stream)
        if not self.on_device:
            return self.encoded(copy_to_host(levels, stream))
        if levels.size == 0:
            return self._empty(levels.dtype)
        with arena(stream):
            return self._result(levels.dtype, levels.size, *self._encode_device(levels, stream))

    def _empty(self, dtype):
        return wire.Encoded(self.encoder_id, np.dtype(dtype), 0, b"", out_words(0), 0)

    def _result(self, dtype, n, params, out32, n_words, n_bits):
        """The ``wire.Encoded`` of ``n`` levels of ``dtype`` from an ``_encode`` result."""
        return wire.Encoded(self.encoder_id, np.dtype(dtype), n, params, out32[:n_words], n_bits)

    def _encode(self, levels):
        raise NotImplementedError

    def _encode_with(self, levels, layout):
        """``_encode``; an encoder with a row model (``ans``) overrides it to use ``layout``
        (None or checked)."""
        return self._encode(levels)

    def _encode_device(self, levels, stream):
        """As ``_encode`` for a device array (non-empty, checked), kernels on ``stream``."""
        raise NotImplementedError

    def _encode_device_parts(self, levels, sizes, stream, rider=None):
        """``_encode_device`` of every non-empty part of device ``levels`` (checked): a list of
        ``_encode`` results in part order. This one codes part by part (and carries no
        ``rider``); an encoder whose kernels code a batch (``Batched``) overrides it."""
        return [self._encode_device(levels[part], stream) for part in part_slices(sizes)
                if part.stop > part.start]

    @classmethod
    def _decode(cls, reader, words, payload_bits, out, stream=None):
        """Fill ``out`` (already of the stream's dtype and length) or raise DecodeError.

        With ``stream`` (only where ``on_device``), ``words`` and ``out`` are device arrays and
        the kernels run on that stream.
        """
        raise NotImplementedError

    def __repr__(self):
        config = {**self._config(), **self._chunk_config()}
        args = ", ".join(f"{k}={v!r}" for k, v in config.items())
        return f"{type(self).__name__}({args})"

    def _config(self):
        return {}

    def _chunk_config(self):
        """The chunk arguments that differ from their defaults (Chunked)."""
        return {}


class Chunked(Encoder):
    """An encoder whose payload is cut into independently decodable chunks."""

    def __init__(self, chunk_levels=CHUNK_LEVELS):
        """``chunk_levels``: levels per chunk (kernels/chunks.py); runs are cut at chunk
        boundaries, and smaller chunks decode with more parallelism on a GPU and cost ~3 bytes
        each."""
        self.chunk_levels = check_chunk_levels(chunk_levels)

    def _chunk_config(self):
        return {} if self.chunk_levels == CHUNK_LEVELS else {"chunk_levels": self.chunk_levels}


class GrowingChunks(Chunked):
    """A chunked encoder whose every chunk costs a fixed number of bits beside its symbols'
    (rANS: the final states and the padding to a word): a sparse stream's chunks take 2, 4,
    ... times ``chunk_levels`` levels, up to ``max_chunk_levels``, until each is estimated at
    ``chunk_payload_bits`` or more. Every producer (CPU or GPU) chooses the same size from the
    same estimate; the stream declares it."""

    # A chunk's least estimated bits before it stops growing (kernels/chunks.py note 4).
    chunk_payload_bits = CHUNK_PAYLOAD_BITS

    def __init__(self, chunk_levels=CHUNK_LEVELS, max_chunk_levels=None):
        """``max_chunk_levels``: the most levels a chunk may grow to (default: CHUNK_GROWTH
        times ``chunk_levels``, at most 2**31); ``max_chunk_levels=chunk_levels`` keeps every
        chunk at ``chunk_levels`` (the most chunks: a GPU codes and decodes one per thread)."""
        super().__init__(chunk_levels)
        if max_chunk_levels is None:
            max_chunk_levels = self._default_max()
        self.max_chunk_levels = check_chunk_levels(max_chunk_levels, "max_chunk_levels")
        if self.max_chunk_levels < self.chunk_levels:
            raise ValueError(f"max_chunk_levels ({self.max_chunk_levels}) must be at least "
                             f"chunk_levels ({self.chunk_levels})")

    def _default_max(self):
        """``max_chunk_levels`` when none is given."""
        return min(2**31, CHUNK_GROWTH * self.chunk_levels)

    def _chunk_config(self):
        config = super()._chunk_config()
        if self.max_chunk_levels != self._default_max():
            config["max_chunk_levels"] = self.max_chunk_levels
        return config

    def chunk_for(self, n, estimated_bytes):
        """Levels per chunk for ``n`` levels whose stream is estimated at ``estimated_bytes``
        with chunks of ``chunk_levels``: that size doubled while a chunk holds fewer than n
        levels, carries less than ``chunk_payload_bits`` of the estimate, and stays within
        max_chunk_levels."""
        chunk = self.chunk_levels
        while chunk < n and 2 * chunk <= self.max_chunk_levels and \
                8 * estimated_bytes * chunk < self.chunk_payload_bits * n:
            chunk *= 2
        return chunk


class Batched:
    """An on-device encoder whose kernels code a batch of parts (gpu.Batch): it implements
    ``_encode_device_parts``, a tensor alone is a batch of one part, and its device decoder
    decodes through a gpu.StreamGroup."""
    decodes_in_groups = True
    codes_in_batches = True
    # The largest |level| of every batch this encoder has coded on the device (None: none
    # yet): where a batch counts its statistics before its ranges are known
    # (gpu.near_window), which steps of one quantizer's levels stay within. The batches it
    # codes raise it (gpu.Batch, ``seen``).
    near = None

    def _encode_device(self, levels, stream):
        return self._encode_device_parts(levels, np.array([levels.size]), stream)[0]


class Sampled:
    """Plans from a uniform sample of positions (``sh``, ``shs``): the subclass sets
    ``sample_size`` and ``_rng`` and implements ``sampled_plan(lo, hi, sample)``."""

    def positions(self, n):
        """The next ``sample_size`` sample positions in [0, n) (advances the sequence)."""
        return self._rng.integers(0, n, size=self.sample_size)

    def plan(self, levels):
        """The code for host ``levels``."""
        return self.sampled_plan(*level_range(levels),
                                 levels[self.positions(levels.size)])

    def batch_positions(self, batch):
        """Every non-empty part's next ``sample_size`` sample positions in a gpu.Batch's flat
        array, in part order (int64)."""
        positions = [self.positions(int(n)) + at for n, at in zip(batch.sizes, batch.offsets)
                     if n]
        return np.concatenate(positions) if positions else np.zeros(0, np.int64)

    def batch_plans(self, batch, ranges, sample):
        """The code of every part of a gpu.Batch (None for an empty part) from its range and
        the levels at its ``batch_positions``."""
        plans, at = [], 0
        for (lo, hi), n in zip(ranges, batch.sizes):
            if n == 0:
                plans.append(None)
                continue
            plans.append(self.sampled_plan(int(lo), int(hi), sample[at:at + self.sample_size]))
            at += self.sample_size
        return plans
