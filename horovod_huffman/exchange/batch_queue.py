"""Work that exchanges queue on a ``DeviceOps`` to run in batches with other exchanges' work
(quantize_queue.py, encode_queue.py): the items, Pendings of allreduce.py, and the queue that a
driver flushes.

``BatchQueue.run`` groups the items queued since the last run by their ``batch_key``, in the
order they were queued, and hands each group to the subclass's ``batch``, which sets each
item's ``value``. The time of a batch goes to the statistics of the exchanges it served
(``charge``), in proportion to their ``weight``. What grouping or a batch raises goes to every
item it would have served, to be raised where each is waited for.
"""
import time

from ..codec.pending import Queued
from .statistics import share


class BatchItem(Queued):
    """A Pending of work queued on a BatchQueue: ``done`` once the queue has run it (its
    ``value`` set, or its ``error``); ``wait`` gives the value. A subclass gives ``batch_key``
    and ``weight`` (coordinates), and sets ``charge``: (statistics.Statistics, key)."""
    value = None
    charge = None

    def done(self):
        return self.value is not None or self.error is not None

    def result(self):
        return self.value


class BatchQueue:
    """The items queued on one ``ops`` (array_ops.DeviceOps) since the last ``run``; the
    time of a batch is charged to ``phase``."""
    phase = "encode"

    def __init__(self, ops):
        self.ops = ops
        self._queued = []

    def add(self, item):
        """Queue ``item`` (a BatchItem whose runner is this queue); returns it."""
        self._queued.append(item)
        return item

    def run(self):
        """Run everything queued, one ``batch`` per batch key."""
        queued, self._queued = self._queued, []
        try:
            batches = {}
            for item in queued:
                batches.setdefault(item.batch_key, []).append(item)
        except Exception as error:          # noqa: B902 (raised where each one is waited for)
            _fail(queued, error)
            return
        for items in batches.values():
            start = time.perf_counter()
            try:
                self.batch(items)
            except Exception as error:      # noqa: B902 (raised where each one is waited for)
                _fail(items, error)
                continue
            share([(*item.charge, item.weight) for item in items], self.phase, start,
                  time.perf_counter())

    def batch(self, items):
        """Run ``items`` (of one batch key) together, setting each one's ``value``."""
        raise NotImplementedError


def _fail(items, error):
    for item in items:
        item.error = error
