"""Framework-free core of the exchanges (allreduce.py): the frames ranks send, and the ``Codec``
that quantizes (with error feedback), encodes and decodes for them.

A rank's contribution to a collective is a frame around a tensor message (message.py), both
written once into the buffer the collective sends:

    offset  size  field
    0       4     magic: b"HHGX" (a tensor message) or b"HHGE" (the sender failed; the body is
                  its error, "<ExceptionType>: <text>" in UTF-8)
    4       4     tag: CRC-32 of what is being reduced (a parameter name, or a bucket's members
                  and the phase and shard of the exchange); every rank must send the same
    8       8     step of that tensor on the sending rank (every rank must be at the same step)
    16      8     body length in bytes, L
    24      L     body

Horovod's allgather and alltoall concatenate the frames of all ranks in rank order;
``split_frames`` walks them with a bound on every length. A frame for another tensor or another
step raises ``MismatchError``: tensors are never mixed silently. An error frame re-raises the
sender's ``DecodeError`` or ``MismatchError`` on the receiver, so a rank that fails in the middle
of an exchange still takes part in its next collective and every rank raises.
"""
import struct
import zlib
from dataclasses import InitVar, dataclass, field

import numpy as np

from .array_ops import contract, work_dtype  # noqa: F401 (contract: public here too)
from .encoders import as_encoder
from .encoders.rows import slice_layout
from .errors import DecodeError
from .feedback import ErrorFeedback
from .message import contents, verify
from .quantizers import QSGD
from .statistics import Statistics

FRAME = struct.Struct("<4sIQQ")
FRAME_MAGIC = b"HHGX"
ERROR_MAGIC = b"HHGE"


class MismatchError(RuntimeError):
    """Ranks sent different parameters or steps for the same collective."""


def name_tag(name):
    """The frame tag of a tensor name (a str) or an already computed tag (an int)."""
    return name if isinstance(name, int) else zlib.crc32(name.encode())


def derive_seed(seed, name, step):
    """Quantization seed for one (parameter, step): the same whatever order gradients arrive in."""
    return zlib.crc32(struct.pack("<qQ", step, seed & (2**64 - 1)), name_tag(name)) \
        | (zlib.crc32(name.encode(), seed & 0xFFFFFFFF) << 32)


def frames(items):
    """The frames of ``items``, (name or tag, step, message.Message) each, written once into
    one uint8 array; and each frame's size in bytes (the splits of an alltoall)."""
    sizes = [FRAME.size + message.nbytes for _, _, message in items]
    out = np.empty(sum(sizes), dtype=np.uint8)
    pos = 0
    for (name, step, message), size in zip(items, sizes):
        FRAME.pack_into(out, pos, FRAME_MAGIC, name_tag(name), step, message.nbytes)
        message.write(out, pos + FRAME.size)
        pos += size
    return out, sizes


def frame(name, step, message):
    """One rank's contribution: the frame of one message (``frames``)."""
    return frames([(name, step, message)])[0]


def error_frame(name, step, error):
    """The frame a rank sends in place of its message when it failed with ``error``."""
    body = f"{type(error).__name__}: {error}".encode()[:4096]
    head = FRAME.pack(ERROR_MAGIC, name_tag(name), step, len(body))
    return np.frombuffer(head + body, dtype=np.uint8)


def split_frames(buf, n_ranks, name, step, what=None):
    """The ``n_ranks`` messages in a gathered buffer, checked against ``name`` (a str or a tag)
    and ``step``; ``what`` names the tensor in errors (default: ``name``)."""
    buf = np.asarray(buf, dtype=np.uint8)
    messages, pos, tag = [], 0, name_tag(name)
    name = name if what is None else what
    for rank in range(n_ranks):
        if len(buf) - pos < FRAME.size:
            raise DecodeError(f"gathered bytes for {name!r} end before rank {rank}'s frame")
        magic, rank_tag, rank_step, length = FRAME.unpack_from(buf, pos)
        if magic not in (FRAME_MAGIC, ERROR_MAGIC):
            raise DecodeError(f"rank {rank}'s frame for {name!r} has bad magic {magic!r}")
        if rank_tag != tag or rank_step != step:
            raise MismatchError(
                f"rank {rank} sent step {rank_step} of a parameter tagged {rank_tag:#x} where "
                f"step {step} of {name!r} ({tag:#x}) was expected: ranks disagree on which "
                "gradient is being reduced")
        pos += FRAME.size
        if length > len(buf) - pos:
            raise DecodeError(f"rank {rank}'s frame for {name!r} declares {length} bytes, "
                              f"{len(buf) - pos} remain")
        if magic == ERROR_MAGIC:
            _raise_reported(buf[pos:pos + length], rank, name)
        messages.append(buf[pos:pos + length])
        pos += length
    if pos != len(buf):
        raise DecodeError(f"{len(buf) - pos} stray bytes after {n_ranks} frames for {name!r}")
    return messages


def _raise_reported(body, rank, name):
    """Raise, on this rank, the error that ``rank`` reported in an error frame."""
    text = bytes(body).decode("utf-8", "replace")
    kind = MismatchError if text.startswith("MismatchError") else DecodeError
    raise kind(f"rank {rank} failed on {name!r}: {text}")


def placeholder_values(rank):
    """What ``compress`` hands the optimizer's allreduce in place of the gradient: [1, rank + 1].
    Reduced, it reads [1, (n + 1) / 2] under Average (whatever the pre/postscale factors) and
    [n, n (n + 1) / 2] under Sum, which tells ``reduction_scale`` the op."""
    return [1.0, rank + 1.0]


def reduction_scale(reduced, n, name):
    """1/n when the optimizer averaged the placeholder, 1 when it summed; other ops raise."""
    first, second = float(reduced[0]), float(reduced[1])
    tol = 1e-2
    if abs(first - 1.0) < tol and abs(second - (n + 1) / 2) < tol * n:
        return 1.0 / n
    if abs(first - n) < tol * n and abs(second - n * (n + 1) / 2) < tol * n * n:
        return 1.0
    raise ValueError(f"{name}: the optimizer reduced with an op other than Average or Sum "
                     f"(placeholder became [{first}, {second}] over {n} ranks); horovod-huffman "
                     "supports op=hvd.Average and op=hvd.Sum")


@dataclass
class Codec:
    """Quantizer + encoder + error feedback, keyed by parameter name.

    error_feedback: add each parameter's last quantization error to its next gradient, with
    the bucket scales contracted so that the residual never grows (feedback.py; None: on
    exactly when the quantizer is biased). server_error_feedback: in the two-phase exchange,
    keep the error of requantizing this rank's summed shard and add it to the next step's sum
    (None: as ``error_feedback``). Both live on in ``feedback`` (``ErrorFeedback``: ``client``,
    ``server`` and the residuals).
    seed: None draws quantization randomness from the quantizer's own sequence; an integer makes
    it a function of (seed, parameter name, step) only (``derive_seed``), reproducible whatever
    order the gradient hooks fire in.
    """
    encoder: object = "rlh"
    quantizer: object = field(default_factory=lambda: QSGD(levels=8))
    error_feedback: InitVar[object] = None
    server_error_feedback: InitVar[object] = None
    seed: object = None
    steps: dict = field(default_factory=dict)
    statistics: Statistics = field(default_factory=Statistics)
    choices: dict = field(default_factory=dict)
    feedback: ErrorFeedback = field(init=False)

    def __post_init__(self, error_feedback, server_error_feedback):
        self.encoder = as_encoder(self.encoder)
        if error_feedback is None:
            error_feedback = bool(getattr(self.quantizer, "biased", False))
        if server_error_feedback is None:
            server_error_feedback = error_feedback
        self.feedback = ErrorFeedback(error_feedback, server_error_feedback)

    def begin(self, key):
        """The step of ``key`` that starts now (0, 1, ...). A key's second step closes the
        statistics of the current step first."""
        self.statistics.begin(key)
        step = self.steps.get(key, 0)
        self.steps[key] = step + 1
        return step

    def quantize(self, ops, work, shape, seed_name, step, state=None):
        """QuantizedTensor of the 1-D work array ``work`` (float32/64) in ``shape``.

        seed_name, step: the quantization seed (``derive_seed``) when the codec has a seed.
        state: None, or the key of an error-feedback residual: ``feedback`` adds it to ``work``
        first, contracts the bucket scales and stages the new residual, which replaces the kept
        one when the exchange settles (``ErrorFeedback.settle``).
        """
        seed = None if self.seed is None else derive_seed(self.seed, seed_name, step)
        if state is not None:
            return self.feedback.quantize(ops, self.quantizer, work, shape, seed, state)
        return self.quantizer.quantize(work.reshape(shape), seed=seed, stream=ops.stream)

    def encode(self, ops, qt, job, part, start=0):
        """The message of ``qt``, ``part`` ("all", "shard<j>", "sum") of the exchange ``job``
        (allreduce.Job), which holds the bucket's coordinates from ``start``, encoded with
        ``job.encoder_of(self)`` and the part's share of ``job.layout``. The encoder's
        ``encode_part`` decides what codes it: ``auto`` reuses its choice for (job.key, part)
        over several steps of that key, kept in ``choices``."""
        layout = None if job.layout is None else \
            slice_layout(job.layout, start, start + qt.numel)
        return job.encoder_of(self).encode_part(
            lambda encoder, layout: ops.encode(qt, encoder, layout), self.choices,
            (job.key, part), job.step, qt.shape, layout)

    def decode_into(self, ops, message, total, add, numel, dtype, what, rank):
        """``total`` (a 1-D work array; None: a new one) with the tensor of ``rank``'s message
        for ``what`` dequantized into it, assigned or with ``add`` added
        (``ops.decode_into``). The message must hold ``numel`` coordinates of the work dtype
        ``dtype`` (``array_ops.work_dtype``); DecodeError or MismatchError naming both when it
        is malformed or of another size or dtype, raised before ``total`` is written."""
        try:
            found = contents(message, max_elements=numel)
        except DecodeError as e:
            raise DecodeError(f"{what!r} from rank {rank}: {e}") from e
        if found.numel != numel or work_dtype(found.dtype) != dtype:
            raise MismatchError(f"rank {rank} sent {found.numel} coordinates of {found.dtype} "
                                f"for {what!r}, expected {numel} of {np.dtype(dtype)}")
        try:
            return ops.decode_into(found, total, add)
        except DecodeError as e:
            raise DecodeError(f"{what!r} from rank {rank}: {e}") from e

    def own(self, message, qt, numel, what, rank):
        """This rank's own message as it came back from a collective: checked without decoding
        (``message.verify``: fields and the checksum, so bytes corrupted after encoding fail
        here as on every other rank); returns ``qt``, the QuantizedTensor it encodes
        losslessly."""
        try:
            verify(message, max_elements=numel)
        except DecodeError as e:
            raise DecodeError(f"{what!r} from rank {rank} (this rank): {e}") from e
        return qt

