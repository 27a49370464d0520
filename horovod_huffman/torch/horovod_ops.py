"""Horovod's torch operations as allreduce.py's collectives (``Collectives``), and
horovod.torch itself, or None where it does not import: DDP's hook (ddp.py), FSDP's
reduce-scatter (fsdp.py) and Pufferfish's layers need no Horovod, and its compressors raise
(``needs_horovod``)."""
import torch

try:
    import horovod.torch as hvd
    from horovod.torch.compression import Compression as HorovodCompression
except ImportError:
    hvd = HorovodCompression = None

__all__ = ["Collectives", "Handle", "HorovodCompression", "hvd", "needs_horovod"]


class Collectives:
    """allreduce.py's collectives over Horovod's torch operations on one process set."""

    def __init__(self, process_set):
        self.process_set = process_set
        self.size, self.rank = process_set.size(), process_set.rank()

    def allgather(self, data, name):
        return Handle(hvd.allgather_async(torch.from_numpy(data), name=name,
                                           process_set=self.process_set))

    def allreduce(self, data, name):
        return Handle(hvd.allreduce_async(torch.from_numpy(data), op=hvd.Sum, name=name,
                                           process_set=self.process_set))

    def alltoall(self, data, splits, name):
        return Handle(hvd.alltoall_async(torch.from_numpy(data),
                                          splits=torch.tensor(splits, dtype=torch.int32),
                                          name=name, process_set=self.process_set), first=True)


class Handle:
    """A Horovod handle as allreduce.py's Pending: ``done`` polls, ``wait`` returns the bytes."""

    def __init__(self, handle, first=False):
        self.handle, self.first, self.result = handle, first, None

    def done(self):
        return self.result is not None or hvd.poll(self.handle)

    def wait(self):
        if self.result is None:
            out = hvd.synchronize(self.handle)
            self.result = (out[0] if self.first else out).numpy()
        return self.result


def needs_horovod():
    """Raise ImportError, saying what to do, where horovod.torch does not import."""
    if hvd is None:
        raise ImportError("horovod_huffman.torch's Horovod compressors need horovod.torch "
                          "(scripts/install_horovod.sh); DistributedDataParallel's hook, "
                          "horovod_huffman.torch.ddp, does not")
