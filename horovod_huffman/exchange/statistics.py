"""A compressor's statistics, kept per rank: what each step and all steps sent and how long they
took to code (``Statistics``), and a trace of every exchange's phases."""
import logging
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger("horovod_huffman")

# Phase spans kept (Statistics.trace): a few steps of a model with a few dozen buckets.
TRACE_SPANS = 4096


@dataclass
class StepStats:
    """Counters for one step (or the whole run): bytes in units of bytes, times in seconds."""
    tensors: int = 0
    coords: int = 0
    raw_bytes: int = 0          # what the uncompressed gradients would have sent
    sent_bytes: int = 0         # what this rank sent (framed messages)
    encode_s: float = 0.0       # error feedback + quantize + encode
    decode_s: float = 0.0       # decode + dequantize + sum over all ranks' messages

    def add(self, other):
        for f in self.__dataclass_fields__:
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def as_dict(self):
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["bits_per_coord"] = 8 * self.sent_bytes / self.coords if self.coords else 0.0
        d["ratio"] = self.raw_bytes / self.sent_bytes if self.sent_bytes else 0.0
        return d


class Statistics:
    """The counters of the step in progress (``current``), of the last completed one
    (``last``, None before the first) and of all completed ones (``total``), and ``trace``, the
    last TRACE_SPANS phase spans. A step closes when a key that already began in it begins
    again (``begin``), or on ``end_step``."""

    def __init__(self):
        self.current = StepStats()
        self.total = StepStats()
        self.last = None
        self.trace = deque(maxlen=TRACE_SPANS)
        self._seen = set()

    def begin(self, key):
        """``key``'s exchange starts: its second one in a step closes the step first."""
        if key in self._seen:
            self.end_step()
        self._seen.add(key)

    def count(self, coords, raw_bytes, sent_bytes, tensors=1):
        """Add one exchange to the current step (units as in StepStats)."""
        s = self.current
        s.tensors += tensors
        s.coords += coords
        s.raw_bytes += raw_bytes
        s.sent_bytes += sent_bytes

    @contextmanager
    def span(self, key, phase):
        """Time one phase of ``key``'s exchange: "encode" (quantize, error feedback, encode,
        frame), "decode" (decode, dequantize, sum) or "network" (a collective in flight, from
        its start to the exchange's resumption). Encode and decode seconds add to the current
        step; every span goes to ``trace`` as (key, phase, start, end) in
        ``time.perf_counter`` seconds."""
        start = time.perf_counter()
        try:
            yield
        finally:
            end = time.perf_counter()
            self.record(key, phase, start, end)

    def record(self, key, phase, start, end, seconds=None):
        """Add a phase span of ``key`` (as ``span`` times one) from ``start`` to ``end``;
        ``seconds``: the share of it charged to the step's times (None: all of it), for a span
        that served several exchanges at once (encode_queue.EncodeQueue)."""
        self.trace.append((key, phase, start, end))
        seconds = end - start if seconds is None else seconds
        if phase == "encode":
            self.current.encode_s += seconds
        elif phase == "decode":
            self.current.decode_s += seconds

    def end_step(self):
        """Close the current step: add it to the total, log it, and return its StepStats."""
        step = self.current
        self.total.add(step)
        self.current = StepStats()
        self.last = step
        self._seen = set()
        if step.tensors:
            d = step.as_dict()
            log.info("horovod-huffman step: %d tensors, %d coords, %.3f bits/coord, %.1fx smaller, "
                     "encode %.1f ms, decode %.1f ms", d["tensors"], d["coords"],
                     d["bits_per_coord"], d["ratio"], 1e3 * d["encode_s"], 1e3 * d["decode_s"])
        return step

    def summary(self):
        """{"step": the last completed step, "current": the step in progress, "total": all
        steps, the current one included}; each a dict of tensors, coords, raw_bytes,
        sent_bytes, bits_per_coord, ratio, encode_s, decode_s (bytes in bytes, times in
        seconds, as seen by this rank)."""
        total = StepStats()
        total.add(self.total)
        total.add(self.current)
        return {"step": self.last.as_dict() if self.last else None,
                "current": self.current.as_dict(), "total": total.as_dict()}


def share(charges, phase, start, end):
    """Charge the span [start, end) of work done for several exchanges at once (the queues
    of encode_queue.py, quantize_queue.py, rank_sums.py) to ``charges``: (Statistics, key,
    weight) each, or None for work that charges no one, in proportion to the weights."""
    charges = [c for c in charges if c is not None]
    total = max(sum(weight for _, _, weight in charges), 1)
    for statistics, key, weight in charges:
        statistics.record(key, phase, start, end, (end - start) * weight / total)
