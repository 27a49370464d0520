"""A worker thread that runs compressed exchanges (``allreduce`` generators) off the training
thread, several at once.

The training thread ``submit``s an exchange as soon as its bucket is complete and goes on with
backward; the worker starts it (quantize, encode, start the first collective) and, while its
bytes are in flight, starts the next bucket or continues any exchange whose collective has
completed. Each round advances every exchange that can advance, then runs the device encodes
and sums they queued (encode_queue.py, rank_sums.py): the buckets that became ready while the
worker was busy encode as one batch and decode together. The result (or the exception) lands in a ``concurrent.futures.Future``, which the
optimizer step waits for. The worker only polls collectives (``Pending.done``): Horovod's own
wait holds the GIL while it spins, which would stall the training thread.
"""
import threading
from collections import deque
from concurrent.futures import Future

# How long the worker sleeps when every exchange it holds waits for the network: it starts at
# MIN_POLL_SECONDS after any progress and doubles while nothing completes, up to
# MAX_POLL_SECONDS (short against Horovod's cycle time, 1 ms by default), so that a quick
# collective is picked up at once and a slow one does not take CPU from training
# (docs/design.md has the measurements).
MIN_POLL_SECONDS = 1e-4
MAX_POLL_SECONDS = 2e-3


class Pipeline:
    """Runs submitted exchange generators to completion on one daemon thread, in submission
    order as far as their collectives allow."""

    def __init__(self, name="horovod_huffman.exchange"):
        self._name = name
        self._wake = threading.Condition()
        self._incoming = deque()
        self._thread = None

    def submit(self, exchange):
        """A Future of ``exchange``'s return value (or exception)."""
        future = Future()
        with self._wake:
            self._incoming.append((exchange, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._wake.notify()
        return future

    def _loop(self):
        active = []             # (exchange, future, pending collective)
        poll = MIN_POLL_SECONDS
        while True:
            with self._wake:
                if not self._incoming and not any(p.done() for _, _, p in active):
                    if active:
                        self._wake.wait(poll)
                    else:
                        self._wake.wait()
                new = list(self._incoming)
                self._incoming.clear()
            waiting = [_advance(exchange, future) for exchange, future in new]
            progressed = bool(new)
            for exchange, future, pending in active:
                if pending.done():
                    waiting.append(_advance(exchange, future))
                    progressed = True
                else:
                    waiting.append((exchange, future, pending))
            active = [item for item in waiting if item is not None]
            # The encodes and sums the exchanges just queued run now, every queue's together.
            for _, _, pending in active:
                if not pending.done() and hasattr(pending, "flush"):
                    pending.flush()
            poll = MIN_POLL_SECONDS if progressed else min(2 * poll, MAX_POLL_SECONDS)


def _advance(exchange, future):
    """Run ``exchange`` to its next collective: (exchange, future, pending), or None when it
    ended (its result or exception is then in ``future``)."""
    try:
        return exchange, future, exchange.send(None)
    except StopIteration as stop:
        future.set_result(stop.value)
    except BaseException as error:          # noqa: B902 (re-raised on the training thread)
        future.set_exception(error)
    return None
