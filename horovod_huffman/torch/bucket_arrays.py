"""The arrays a worker thread's exchange (allreduce.py) works on for one flat torch bucket: on
the host for a CPU tensor, and for a CUDA tensor on the device, with the kernels on a stream of
the worker's own (array_ops.DeviceOps), so that only encoded bytes reach the host.

A CUDA bucket is written by the training thread's stream. The exchange first yields a
``StreamReady`` recorded on that stream after the writes, and the worker polls it like a
collective: neither the training thread nor the worker blocks on the device for it.
"""
import torch
from numba import cuda

from ..codec.device import cuda_usable
from ..exchange.array_ops import DeviceOps, HostOps

__all__ = ["BucketArrays", "StreamReady"]


class StreamReady:
    """allreduce.py's Pending for the CUDA work queued so far on the current torch stream of
    ``device`` (recorded now, on the thread that queued it): ``done`` once that work has run;
    ``wait`` blocks until then and gives None."""

    def __init__(self, device):
        self.event = torch.cuda.Event()
        self.event.record(torch.cuda.current_stream(device))

    def done(self):
        return self.event.query()

    def wait(self):
        self.event.synchronize()


class BucketArrays:
    """``ops`` (HostOps or a DeviceOps) and ``work`` (a 1-D float32/64 NumPy or device array
    sharing the tensor's memory, or a host copy of a CUDA tensor where the device kernels cannot
    run) for the exchange of ``tensor``, made on the worker thread once the tensor is written."""

    def __init__(self, tensor):
        self.device = tensor.device
        self.stream = None
        if tensor.is_cuda and cuda_usable():
            with cuda.gpus[tensor.device.index or 0]:
                self.stream = cuda.stream()
            self.ops, self.work = DeviceOps(self.stream), cuda.as_cuda_array(tensor, sync=False)
        else:
            self.ops, self.work = HostOps, tensor.cpu().numpy()

    def finish(self):
        """Wait for this exchange's device work (a no-op on the host)."""
        if self.stream is not None:
            self.stream.synchronize()

    def tensor(self, total):
        """The exchange's sum ``total`` (from ``ops``) as a tensor on the bucket's device, once
        the device work is done; it shares ``total``'s memory where it can."""
        self.finish()
        if self.stream is not None:
            return torch.as_tensor(total, device=self.device)
        return torch.from_numpy(total).to(self.device)
