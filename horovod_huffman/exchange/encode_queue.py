"""Encodings as pendings (allreduce.py's ``Pending``): an exchange asks for its messages
(``Codec.encoding``) and yields the answer until it is ready, so that the device encodes of
several buckets run as one batch.

On the device a batch of tensors costs the launches, synchronizations and host copies of one
tensor (gpu.Batch). ``EncodeQueue`` (one per ``DeviceOps``) holds the tensors that exchanges
queued with it; they are encoded when a driver flushes the queue, which it does when every
exchange it holds waits (``pipeline.Pipeline``, ``local.run_ranks``), or when one of them is
waited for (``allreduce.run_to_end``). Every tensor queued since the last flush with an
encoder of the same settings and the same level dtype then goes in one ``ops.encode_batch``
call, whatever bucket, shard or rank it belongs to: the bytes are those of each tensor
encoded alone. The call's time goes to the statistics of the exchanges it served, shared in
proportion to their coordinates.

A driver that never flushes loses nothing but the batching: ``wait`` flushes too.
"""
import numpy as np

from .batch_queue import BatchItem, BatchQueue


class QueuedEncode(BatchItem):
    """A Pending of the messages (message.Message, in order) of quantized tensors ``qts``
    queued on an ``EncodeQueue``: ``done`` once the queue has run them; ``wait`` gives the
    messages, or raises what encoding them raised."""

    def __init__(self, queue, qts, encoder, statistics, key):
        self.runner, self.qts, self.encoder = queue, list(qts), encoder
        self.charge = statistics, key

    @property
    def batch_key(self):
        """Tensors encode in one batch when this is equal: the encoder's type and settings
        (its repr), whichever codec holds it, and the level dtype."""
        return repr(self.encoder), np.dtype(self.qts[0].levels.dtype).str

    @property
    def weight(self):
        return sum(qt.numel for qt in self.qts)


class EncodeQueue(BatchQueue):
    """The encodes queued on one ``ops`` (array_ops.DeviceOps) since its last ``run``: one
    ``ops.encode_batch`` per encoder and level dtype."""

    def put(self, qts, encoder, statistics, key):
        """A QueuedEncode of ``qts`` (a non-empty list) with ``encoder`` (one that codes
        batches, Encoder.codes_in_batches); ``statistics`` (statistics.Statistics) is charged
        its share of the encoding time under ``key``."""
        return self.add(QueuedEncode(self, qts, encoder, statistics, key))

    def batch(self, items):
        messages = self.ops.encode_batch([qt for item in items for qt in item.qts],
                                         items[0].encoder)
        at = 0
        for item in items:
            item.value, at = messages[at:at + len(item.qts)], at + len(item.qts)
