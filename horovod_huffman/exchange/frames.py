"""The frames ranks send in the exchanges (allreduce.py), and what the placeholder that the
framework's own allreduce reduces says about its op.

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

import numpy as np

from ..codec.errors import DecodeError

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
