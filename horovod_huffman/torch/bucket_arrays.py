"""The exchange (allreduce.py) of one flat torch bucket on a worker thread: on the host for a
CPU tensor, and for a CUDA tensor on the device, with the kernels on a stream of the worker's
own (array_ops.DeviceOps), so that only encoded bytes reach the host.

A thread's CUDA buckets on one GPU share a stream and its queues (``_device_ops``).
A CUDA bucket is written by the training thread's stream. The exchange first yields a
``StreamReady`` recorded on that stream after the writes, and last one recorded on its own
stream after the sum; the worker polls them like collectives: neither the training thread
nor the worker blocks on the device for them.
"""
import threading

import torch
from numba import cuda

from ..codec.device import SIMULATED, cuda_usable, is_device_array
from ..exchange.allreduce import allgather_sum, two_phase_sum
from ..exchange.array_ops import DeviceOps, HostOps

__all__ = ["StreamReady", "as_torch", "bucket_sum"]

_THREAD = threading.local()


class StreamReady:
    """allreduce.py's Pending for the work queued so far on a CUDA stream: an ``event`` (a
    torch or Numba CUDA event) recorded on ``stream`` now, on the thread that queued the work.
    ``done`` once that work has run (the event's query, which never blocks); ``wait``
    blocks until then and gives None."""

    def __init__(self, event, stream):
        self.event = event
        self.event.record(stream)

    @classmethod
    def torch(cls, device):
        """The work queued so far on the current torch stream of ``device``."""
        return cls(torch.cuda.Event(), torch.cuda.current_stream(device))

    def done(self):
        # The simulator's events have no query: its work has run once it is queued.
        return self.event.query() if hasattr(self.event, "query") else True

    def wait(self):
        self.event.synchronize()


def bucket_sum(codec, coll, job, tensor, exchange, align, ready):
    """The sum over ranks of the flat float32/64 ``tensor`` (a generator the worker runs):
    ``exchange`` "allgather" or "two_phase" (``align``: its shard alignment) of ``job`` with
    ``codec`` over ``coll``, once ``ready`` (a StreamReady, or None). Returns the sum as the
    exchange gives it: a NumPy array, or for a CUDA tensor a device array whose stream is
    done, yielded as a StreamReady for the worker to poll rather than synchronized (a host
    array where the device kernels cannot run: the tensor is copied)."""
    if ready is not None:
        yield ready
    stream = None
    if tensor.is_cuda and cuda_usable():
        ops = _device_ops(tensor.device.index or 0)
        stream, work = ops.stream, cuda.as_cuda_array(tensor, sync=False)
    else:
        ops, work = HostOps, tensor.cpu().numpy()
    if exchange == "two_phase":
        total = yield from two_phase_sum(codec, ops, coll, job, work, align)
    else:
        total = yield from allgather_sum(codec, ops, coll, job, work)
    if stream is not None:
        with cuda.gpus[tensor.device.index or 0]:
            done = StreamReady(cuda.event() if SIMULATED else cuda.event(timing=False), stream)
        yield done
    return total


def _device_ops(index):
    """The DeviceOps of GPU ``index`` for this thread: one stream, and one set of queues, for
    every bucket the thread exchanges on that GPU, so that the buckets it holds at once
    quantize, encode and sum as one batch (quantize_queue.py, encode_queue.py,
    rank_sums.py)."""
    held = _THREAD.__dict__.setdefault("ops", {})
    if index not in held:
        with cuda.gpus[index]:
            held[index] = DeviceOps(cuda.stream())
    return held[index]


def as_torch(array, device):
    """``array`` (from ``bucket_sum``: NumPy or device) as a tensor on ``device``, sharing its
    memory where it is already there."""
    if is_device_array(array):
        return torch.as_tensor(array, device=device)
    return torch.from_numpy(array).to(device)
