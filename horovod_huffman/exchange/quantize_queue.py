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
import numpy as np

from .batch_queue import BatchItem, BatchQueue


class QueuedQuantize(BatchItem):
    """A Pending of the QuantizedTensors (in order) of device gradients ``works`` quantized
    by ``quantizer`` with ``seeds`` (kernel seeds): ``done`` once the queue has run them;
    ``wait`` gives them, or raises what quantizing them raised."""

    def __init__(self, queue, quantizer, works, seeds, charge):
        self.runner, self.quantizer = queue, quantizer
        self.works, self.seeds, self.charge = list(works), list(seeds), charge

    @property
    def batch_key(self):
        """Gradients quantize in one batch when this is equal: the quantizer's settings
        (``batch_key``: its seed aside, as each tensor brings its own) and the float dtype."""
        return self.quantizer.batch_key, np.dtype(self.works[0].dtype).str

    @property
    def weight(self):
        return sum(w.size for w in self.works)


class QuantizeQueue(BatchQueue):
    """The quantizations queued on one ``ops`` (array_ops.DeviceOps) since its last ``run``:
    one ``quantize_batch`` per batch key."""

    def put(self, quantizer, works, seeds, charge):
        """A QueuedQuantize of ``works`` (a non-empty list of device arrays) with
        ``quantizer`` (one that ``quantizes_in_batches``) and ``seeds``; ``charge``:
        (statistics.Statistics, key) charged its share of the time."""
        return self.add(QueuedQuantize(self, quantizer, works, seeds, charge))

    def batch(self, items):
        qts = items[0].quantizer.quantize_batch([w for item in items for w in item.works],
                                                [s for item in items for s in item.seeds],
                                                self.ops.stream)
        at = 0
        for item in items:
            item.value, at = qts[at:at + len(item.works)], at + len(item.works)
