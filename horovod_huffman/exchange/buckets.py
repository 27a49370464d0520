"""Fused buckets: which gradients travel together, and where each one sits in its bucket.

A bucket is one flat buffer of ``size`` coordinates that holds several gradients end to end and is
quantized, encoded and exchanged as one. Invariants:

- every gradient starts at a multiple of ``align`` coordinates (the quantizer's bucket size), so
  no quantizer scale spans two gradients; the gaps between gradients are zero;
- a bucket holds gradients of one kind only (work dtype and device), in the order given;
- a bucket's coordinates, without its gaps, are at most ``capacity`` unless one gradient alone is
  larger, which then travels alone;
- the plan depends only on the ordered (name, numel, kind) list, so ranks that are given the same
  list (Horovod's parameter names are the same on every rank) build the same buckets; each
  bucket's ``tag`` is a CRC-32 of its members, carried in every frame, so ranks that built
  different plans raise ``MismatchError`` instead of mixing gradients.
"""
import zlib
from dataclasses import dataclass

# 4 MiB of float32 gradients per bucket: large enough that per-collective latency is amortised,
# small enough that the first bucket is encoded while backward is still running (docs/design.md).
DEFAULT_BUCKET_BYTES = 4 << 20
# Gradients with fewer elements ride the framework's own allreduce. With fused buckets every
# floating-point gradient joins one (a small one costs a few bytes there and no collective of
# its own); where each gradient is a bucket of its own (Horovod's TensorFlow tape), gradients
# under ~1K elements cost more in message headers and two collectives than they save, and
# Horovod's fused allreduce carries them.
DEFAULT_MIN_NUMEL = 0
UNFUSED_MIN_NUMEL = 1024


@dataclass(frozen=True)
class Slot:
    """One gradient's place in its bucket: coordinates [offset, offset + numel)."""
    name: str
    numel: int
    offset: int


@dataclass(frozen=True)
class Bucket:
    """A fused bucket: ``slots`` in order, ``size`` coordinates in all (gaps included)."""
    index: int
    kind: str
    slots: tuple
    size: int
    tag: int

    @property
    def key(self):
        """The name of this bucket's collectives and state, the same on every rank and unique
        within a plan: its first gradient's name, and how many more it holds."""
        more = f"+{len(self.slots) - 1}" if len(self.slots) > 1 else ""
        return f"horovod_huffman.{self.slots[0].name}{more}"

    @property
    def numel(self):
        """Gradient coordinates in this bucket, gaps excluded."""
        return sum(s.numel for s in self.slots)


class BucketPlan:
    """Gradients assigned to buckets: ``buckets`` in order and ``where[name] -> (bucket, slot)``."""

    def __init__(self, entries, capacity, align):
        """entries: ordered (name, numel, kind) triples; capacity: coordinates per bucket;
        align: every slot's offset is a multiple of this many coordinates."""
        if align < 1 or capacity < 1:
            raise ValueError(f"align ({align}) and capacity ({capacity}) must be positive")
        self.align, self.capacity = int(align), int(capacity)
        self.buckets, self.where = [], {}
        group, used, kind = [], 0, None
        for name, numel, entry_kind in entries:
            if name in self.where or any(name == n for n, _, _ in group):
                raise ValueError(f"gradient {name!r} appears twice in the bucket plan")
            if group and (entry_kind != kind or used + numel > self.capacity):
                self._close(group, kind)
                group, used = [], 0
            group.append((name, int(numel), entry_kind))
            used += int(numel)
            kind = entry_kind
        if group:
            self._close(group, kind)

    def _close(self, group, kind):
        slots, offset = [], 0
        for name, numel, _ in group:
            slots.append(Slot(name, numel, offset))
            offset += -(-numel // self.align) * self.align
        # The tag leaves the kind out: ranks put their gradients on different devices (cuda:0,
        # cuda:1, ...) and still reduce the same bucket.
        signature = ";".join(f"{s.name}:{s.numel}@{s.offset}" for s in slots)
        bucket = Bucket(len(self.buckets), kind, tuple(slots), offset,
                        zlib.crc32(signature.encode()))
        self.buckets.append(bucket)
        for slot in slots:
            self.where[slot.name] = (bucket, slot)

    def __repr__(self):
        return (f"BucketPlan({len(self.buckets)} buckets, "
                f"{sum(b.numel for b in self.buckets)} coordinates, align={self.align})")


def shard_bounds(size, n_shards, align):
    """Cut ``size`` coordinates into ``n_shards`` contiguous shards, as even as whole blocks of
    ``align`` coordinates allow: a list of ``n_shards + 1`` offsets from 0 to ``size``. Shards may
    be empty (a bucket smaller than ``n_shards`` blocks)."""
    blocks = -(-size // align)
    return [min(size, (j * blocks // n_shards) * align) for j in range(n_shards)] + [size]


def bucket_layout(bucket, rows):
    """The layout of ``bucket``'s coordinates (encoders/rows.py): each gradient as ``rows[name]``
    rows (its shape's first dimension; 1 for a vector) of numel / rows coordinates, each gap
    as one row."""
    layout, at = [], 0
    for slot in bucket.slots:
        if slot.offset > at:
            layout.append((1, slot.offset - at))
        n_rows = rows.get(slot.name, 1) or 1
        layout.append((n_rows, slot.numel // n_rows) if slot.numel % n_rows == 0
                      else (1, slot.numel))
        at = slot.offset + slot.numel
    return tuple(layout)
