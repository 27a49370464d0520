"""The sums an exchange decodes (allreduce.py): every rank's tensor of a bucket or shard added
in rank order, the other ranks' decoded from their streams and this rank's own from its
quantized levels, as a Pending (``ops.sum_later``) that the exchange yields.

On the host a sum is computed when it is asked for. On a GPU (``DeviceOps``) it waits in a
``SumQueue`` until a driver flushes it, as queued encodes do (encode_queue.py); then every
queued sum is computed at once: their totals are slices of one new array per dtype, and round
by round the streams of every sum up to its next own tensor decode in one launch (the decode
groups of the Huffman family and ``ans``, gpu.StreamGroup, sharing one list of streams), then
the own tensors are added, in one launch too (``ops.dequantize_all``). A step's buckets then
take two launches per round, not two per bucket, and their decode statuses come back in one
copy (``ops.checks``), each sum keeping its own verdict.
Every element of a total gets its additions in rank order, as the host's sum does.
"""
import time
from collections import namedtuple

from ..codec.errors import DecodeError
from ..codec.quantizers import QuantizedTensor
from ..codec.pending import Queued
from .frames import MismatchError
from .statistics import share

Part = namedtuple("Part", "offset size entries")
Part.__doc__ = """Elements [offset, offset + size) of a total and what they sum, in rank order:
each entry a (message.Contents, label) to decode (checked against ``size`` and the dtype), or
this rank's own QuantizedTensor; the first is assigned, the others added."""


class QueuedSum(Queued):
    """A Pending (allreduce.py) of a total: a 1-D array of ``size`` elements of ``dtype``, the
    sum of its ``parts``. ``wait`` gives it, or raises the DecodeError of a stream it could not
    decode (named by the stream's label), or what computing it raised. ``charge``: None, or
    (statistics.Statistics, key) charged its share of the decoding time when it is computed
    with others."""

    def __init__(self, queue, parts, size, dtype, charge=None):
        self.runner, self.parts, self.size, self.dtype = queue, parts, int(size), dtype
        self.charge = charge
        self.total, self.error, self.group, self.ran = None, None, None, False
        self.at = None              # (the array the total is a slice of, its first element)

    def done(self):
        return self.ran and (self.error is not None or self.group.checked().done())

    def result(self):
        self.group.checked().wait()
        return self.total


class SumQueue:
    """The sums queued on one ``ops`` (array_ops.DeviceOps) since its last ``run``."""

    def __init__(self, ops):
        self.ops = ops
        self._queued = []

    def put(self, parts, size, dtype, charge=None):
        queued = QueuedSum(self, parts, size, dtype, charge)
        self._queued.append(queued)
        return queued

    def run(self):
        """Compute every queued sum, then read every decode status back in one copy. The
        time goes to the sums' ``charge``, in proportion to their sizes; an error that is no
        stream's (a device failure) goes to every sum."""
        queued, self._queued = self._queued, []
        start = time.perf_counter()
        try:
            add_all(self.ops, queued)
            self.ops.checks.run()
        except Exception as error:          # noqa: B902 (raised where each one is waited for)
            for s in queued:
                s.ran, s.error = True, s.error or error
        share([None if s.charge is None else (*s.charge, s.size) for s in queued], "decode",
              start, time.perf_counter())


def add_all(ops, sums):
    """Compute ``sums`` (QueuedSum) with ``ops``: their totals, slices of one new array per
    dtype, and round by round every part's streams up to its next own tensor in one decode
    group flush, then those own tensors."""
    shared = []
    for dtype in {s.dtype for s in sums}:
        alike = [s for s in sums if s.dtype == dtype]
        array = ops.empty(sum(s.size for s in alike), dtype)
        at = 0
        for s in alike:
            s.total, s.at, at = array[at:at + s.size], (array, at), at + s.size
    for s in sums:
        s.group, s.ran = ops.decode_group(shared), True
    work = [(s, part, 0) for s in sums for part in s.parts]
    while work:
        owns, later = [], []
        for s, part, k in work:
            while k < len(part.entries) and s.error is None:
                entry = part.entries[k]
                if isinstance(entry, QuantizedTensor):
                    owns.append((s, part, k))
                    k += 1
                    break
                _decode(ops, s, part, k, *entry)
                k += 1
            if k < len(part.entries) and s.error is None:
                later.append((s, part, k))
        if sums:
            sums[0].group.flush()           # every group's streams: they share one list
        ops.dequantize_all([(s.at[0], s.at[1] + part.offset, part.entries[k], k > 0)
                            for s, part, k in owns if s.error is None])
        work = later


def _decode(ops, s, part, k, contents, label):
    """Entry k of ``part`` of the sum ``s``: the stream ``contents`` decoded into it."""
    array, at = s.at
    try:
        ops.decode_into(contents, s.total[part.offset:part.offset + part.size], k > 0, s.group,
                        label, (array, at + part.offset))
    except (DecodeError, MismatchError) as e:
        s.error = DecodeError(f"{label}: {e}")
        s.error.__cause__ = e
