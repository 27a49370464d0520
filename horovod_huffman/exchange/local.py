"""In-process ranks: allreduce.py's collectives for N ranks held by one process, so that the
exchanges run, and are tested and measured, without a cluster.

>>> import numpy as np, horovod_huffman as hh
>>> from horovod_huffman.exchange.allreduce import Job, allgather_sum
>>> from horovod_huffman.exchange.array_ops import HostOps
>>> from horovod_huffman.exchange.codec_state import Codec
>>> from horovod_huffman.exchange.local import LocalGroup, run_ranks
>>> group = LocalGroup(3)
>>> grads = [np.full(1000, r + 1.0, np.float32) for r in range(3)]
>>> sums = run_ranks([allgather_sum(Codec(seed=r), HostOps, group.member(r), Job("w", 0, 0), g)
...                   for r, g in enumerate(grads)])
>>> len({s.tobytes() for s in sums}), sums[0].shape          # the same sum on every rank
(1, (1000,))

A rank's k-th collective under a name meets every other rank's k-th collective under that name,
as Horovod matches them by name. ``run_ranks`` drives one exchange per rank on this thread,
advancing each until it waits for a collective that some rank has not started yet.
"""
import numpy as np


class LocalGroup:
    """N ranks in this process; ``member(rank)`` is rank ``rank``'s collectives."""

    def __init__(self, size):
        if size < 1:
            raise ValueError(f"a group needs at least one rank, got {size}")
        self.size = int(size)
        self._submitted = {}        # (name, k) -> {rank: (kind, data, splits)}
        self._count = {}            # (rank, name) -> collectives started so far

    def member(self, rank):
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is not in a group of {self.size}")
        return LocalCollectives(self, rank)

    def _start(self, rank, name, kind, data, splits=None):
        k = self._count.get((rank, name), 0)
        self._count[(rank, name)] = k + 1
        slot = self._submitted.setdefault((name, k), {})
        slot[rank] = (kind, np.array(data, copy=True), splits)
        return _LocalPending(self, (name, k), rank)


class LocalCollectives:
    """One rank's view of a LocalGroup: ``size``, ``rank`` and the collectives."""

    def __init__(self, group, rank):
        self.group, self.size, self.rank = group, group.size, rank

    def allgather(self, data, name):
        return self.group._start(self.rank, name, "allgather", data)

    def alltoall(self, data, splits, name):
        return self.group._start(self.rank, name, "alltoall", data, [int(s) for s in splits])

    def allreduce(self, data, name):
        return self.group._start(self.rank, name, "allreduce", data)


class _LocalPending:
    """A collective in flight: done once every rank started it."""

    def __init__(self, group, slot, rank):
        self.group, self.slot, self.rank = group, slot, rank

    def done(self):
        return len(self.group._submitted[self.slot]) == self.group.size

    def wait(self):
        if not self.done():
            raise RuntimeError(f"collective {self.slot[0]!r} waits for ranks that have not "
                               "started it: one thread cannot block here")
        parts = [self.group._submitted[self.slot][r] for r in range(self.group.size)]
        kinds = {kind for kind, _, _ in parts}
        if kinds != {parts[0][0]}:
            raise RuntimeError(f"ranks started different collectives under {self.slot[0]!r}: "
                               f"{sorted(kinds)}")
        kind = parts[0][0]
        if kind == "allgather":
            return np.concatenate([data for _, data, _ in parts])
        if kind == "allreduce":
            total = parts[0][1].copy()
            for _, data, _ in parts[1:]:
                total += data
            return total
        pieces = []
        for _, data, splits in parts:
            start = sum(splits[:self.rank])
            pieces.append(data[start:start + splits[self.rank]])
        return np.concatenate(pieces)


def run_ranks(exchanges, return_exceptions=False):
    """Run exchange generators (one per rank, or several buckets' per rank) to the end on
    this thread; their results in order. An exchange's exception propagates, or with
    ``return_exceptions`` stands as its result. When every exchange waits, the encodes and sums
    they queued run (encode_queue.py, rank_sums.py: on a GPU, together). Raises RuntimeError
    when no exchange can advance (ranks wait on different collectives: a deadlock on a real
    cluster)."""
    pending = [None] * len(exchanges)
    results, finished = [None] * len(exchanges), [False] * len(exchanges)
    while not all(finished):
        progressed = False
        for r, exchange in enumerate(exchanges):
            if finished[r] or (pending[r] is not None and not pending[r].done()):
                continue
            progressed = True
            try:
                pending[r] = exchange.send(None)
            except StopIteration as stop:
                results[r], finished[r] = stop.value, True
            except Exception as error:          # noqa: B902 (handed back by request)
                if not return_exceptions:
                    raise
                results[r], finished[r] = error, True
        if not progressed:
            queued = [p for p in pending if p is not None and not p.done() and
                      hasattr(p, "flush")]
            if queued:
                queued[0].flush()
                continue
            raise RuntimeError("every unfinished rank waits for a collective another rank never "
                               "starts")
    return results
