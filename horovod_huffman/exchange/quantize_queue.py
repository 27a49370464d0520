"""Quantizations as pendings (allreduce.py's ``Pending``): an exchange asks for its quantized
tensors (``Codec.quantizing``) and yields the answer until it is ready, so that on a GPU the
quantizations of several buckets run in one launch per kernel, as their encodes do
(encode_queue.py).

``QuantizeQueue`` (one per ``DeviceOps``) holds the gradients that exchanges queued with it
for a quantizer that ``quantizes_in_batches`` (QSGD, TernGrad) and no error feedback. When a
driver flushes it, every gradient queued with quantizers of the same settings and the same
float dtype goes into one ``quantize_batch``: their levels and scales are slices of one array each,
and each tensor's levels are those it has quantized alone with its seed, which was drawn
when it was queued, in the order the exchanges asked. The time goes to the statistics of the
exchanges it served, in proportion to their coordinates.
"""
import time

import numpy as np

from ..codec.pending import Queued
from .statistics import share


class QueuedQuantize(Queued):
    """A Pending of the QuantizedTensors (in order) of device gradients ``works`` quantized
    by ``quantizer`` with ``seeds`` (kernel seeds): ``done`` once the queue has run them;
    ``wait`` gives them, or raises what quantizing them raised."""

    def __init__(self, queue, quantizer, works, seeds, charge):
        self.runner, self.quantizer = queue, quantizer
        self.works, self.seeds, self.charge = list(works), list(seeds), charge
        self.qts = None

    @property
    def batch_key(self):
        """Gradients quantize in one batch when this is equal: the quantizer's settings
        (``batch_key``: its seed aside, as each tensor brings its own) and the float dtype."""
        return self.quantizer.batch_key, np.dtype(self.works[0].dtype).str

    def done(self):
        return self.qts is not None or self.error is not None

    def result(self):
        return self.qts


class QuantizeQueue:
    """The quantizations queued on one ``ops`` (array_ops.DeviceOps) since its last ``run``."""

    def __init__(self, ops):
        self.ops = ops
        self._queued = []

    def put(self, quantizer, works, seeds, charge):
        """A QueuedQuantize of ``works`` (a non-empty list of device arrays) with
        ``quantizer`` (one that ``quantizes_in_batches``) and ``seeds``; ``charge``:
        (statistics.Statistics, key) charged its share of the time."""
        queued = QueuedQuantize(self, quantizer, works, seeds, charge)
        self._queued.append(queued)
        return queued

    def run(self):
        """Quantize everything queued: one ``quantize_batch`` per batch key. What this raises
        goes to every item it would have quantized."""
        queued, self._queued = self._queued, []
        try:
            batches = {}
            for item in queued:
                batches.setdefault(item.batch_key, []).append(item)
        except Exception as error:          # noqa: B902 (raised where each one is waited for)
            for item in queued:
                item.error = error
            return
        for items in batches.values():
            self._quantize(items)

    def _quantize(self, items):
        start = time.perf_counter()
        try:
            qts = items[0].quantizer.quantize_batch(
                [w for item in items for w in item.works],
                [seed for item in items for seed in item.seeds], self.ops.stream)
        except Exception as error:          # noqa: B902 (raised where each one is waited for)
            for item in items:
                item.error = error
            return
        at = 0
        for item in items:
            item.qts, at = qts[at:at + len(item.works)], at + len(item.works)
        share([(*item.charge, sum(w.size for w in item.works)) for item in items], "encode",
              start, time.perf_counter())
