"""allreduce.py's collectives over a torch.distributed process group, for the DDP hook (ddp.py)
and the FSDP reduce-scatter (fsdp.py)."""
import numpy as np
import torch
import torch.distributed as dist

__all__ = ["Collectives", "Done", "Started"]


class Done:
    """allreduce.py's Pending for a collective already complete: ``wait`` gives its bytes."""

    def __init__(self, result):
        self.result = result

    def done(self):
        return True

    def wait(self):
        return self.result


class Started:
    """allreduce.py's Pending for a torch.distributed Work: ``wait`` gives ``result`` once the
    Work has completed."""

    def __init__(self, work, result):
        self.work, self.result = work, result

    def done(self):
        return self.work.is_completed()

    def wait(self):
        self.work.wait()
        return self.result


class Collectives:
    """allreduce.py's collectives over a torch.distributed process group (CPU tensors, as Gloo
    takes them), each one blocking: the caller issues them one at a time, in one order on every
    rank. Variable-length bytes go in two collectives: the lengths, then the bytes padded to the
    longest."""

    def __init__(self, group):
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)

    def allgather(self, data, name):
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        dist.all_gather(sizes, torch.tensor([data.size], dtype=torch.int64), group=self.group)
        sizes = [int(s) for s in sizes]
        longest = max(sizes)
        padded = torch.zeros(longest, dtype=torch.uint8)
        padded.numpy()[:data.size] = data
        out = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.size)]
        dist.all_gather(out, padded, group=self.group)
        return Done(np.concatenate([o.numpy()[:n] for o, n in zip(out, sizes)]))

    def alltoall(self, data, splits, name):
        counts = torch.empty(self.size, dtype=torch.int64)
        dist.all_to_all_single(counts, torch.tensor(splits, dtype=torch.int64),
                               group=self.group)
        received = torch.empty(int(counts.sum()), dtype=torch.uint8)
        dist.all_to_all_single(received, torch.from_numpy(data), counts.tolist(), list(splits),
                               group=self.group)
        return Done(received.numpy())

    def allreduce(self, data, name):
        out = torch.from_numpy(np.array(data))
        dist.all_reduce(out, group=self.group)
        return Done(out.numpy())

    def allreduce_tensor(self, tensor):
        """Sum ``tensor`` over the group in place, started now: a Pending whose ``wait`` gives
        it."""
        return Started(dist.all_reduce(tensor, group=self.group, async_op=True), tensor)
