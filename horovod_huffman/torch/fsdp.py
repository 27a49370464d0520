"""A reduce-scatter for PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``) that sends each
rank's gradient shards quantized and entropy-coded: the first phase of the two-phase exchange
(``allreduce.reduce_scatter_sum``) with the Horovod adapter's codec and streams.

>>> from torch.distributed.fsdp import fully_shard                    # doctest: +SKIP
>>> from horovod_huffman.torch import fsdp
>>> for layer in model.layers:                                        # doctest: +SKIP
...     fully_shard(layer)
>>> fully_shard(model)                                                # doctest: +SKIP
>>> fsdp.install(model, fsdp.State(encoder="rlh"))                    # doctest: +SKIP

FSDP2 reduces each of its modules' gradients in one reduce-scatter per backward: the gradients
flat in one tensor of N equal shards (N ranks), rank j keeping the reduction of shard j. Here
every shard but a rank's own is quantized and encoded and goes to its rank (one all_to_all), and
each rank decodes and sums its shard in rank order: the exact sum of what the ranks quantized,
averaged where FSDP asks for the mean. A three-number allreduce follows, so that a stream that
does not decode raises on every rank. The collectives run on the calling thread, on a process
group of their own (``State`` makes it), in FSDP's order, which is the same on every rank.

CPU gradients over Gloo. FSDP's parameters stay as they are: only the gradients' reduction
changes, and ``install`` is one call after ``fully_shard``.
"""
import zlib

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _FSDPReduceScatter

from ..adapters import make_codec
from ..exchange.allreduce import Job, reduce_scatter_sum, run_to_end
from ..exchange.array_ops import HostOps
from .process_group import Collectives

__all__ = ["State", "ReduceScatter", "install"]


class State:
    """The codec (quantizer + encoder + error feedback) and the process group that every
    ``ReduceScatter`` of a model shares.

    encoder: a name from ``horovod_huffman.ENCODERS`` (``encoder_kwargs`` go to it) or an
    Encoder; quantizer: default QSGD(levels=8); error_feedback: None = on for biased
    quantizers; seed: reproducible quantization per (module, shard, step); process_group: the
    ranks FSDP shards over (default: the default group's).

    Making a State makes a process group of the same ranks for its collectives
    (``torch.distributed.new_group``), so every rank makes its States in the same order."""

    def __init__(self, encoder="rlh", quantizer=None, error_feedback=None, seed=None,
                 process_group=None, **encoder_kwargs):
        self.codec = make_codec(encoder, quantizer, error_feedback, seed, **encoder_kwargs)
        ranks = None if process_group is None else dist.get_process_group_ranks(process_group)
        group = dist.new_group(ranks)
        self.ranks = dist.get_process_group_ranks(group)
        self._coll = Collectives(group)
        self._count = 0                  # ReduceScatters made: the next one's index

    def stats(self):
        """Bytes, bits per coordinate and times of this rank (``Statistics.summary``)."""
        return self.codec.statistics.summary()


class ReduceScatter(_FSDPReduceScatter):
    """FSDP2's reduce-scatter of one module (``FSDPModule.set_custom_reduce_scatter``), coded
    with ``state``'s codec. Its streams and error-feedback residuals are named by the order in
    which the ReduceScatters of ``state`` were made, the same on every rank."""

    def __init__(self, state):
        self.state = state
        self.key = f"horovod_huffman.fsdp.{state._count}"
        state._count += 1

    def allocate(self, size, *, dtype, device):
        return torch.empty(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        """Reduce shard j (``output_tensor.numel()`` elements) of ``input_tensor`` (flat, N
        shards) over the ranks into rank j's ``output_tensor``; ``op``: SUM or AVG. Runs to the
        end on this thread, so it returns no Work."""
        state = self.state
        coll, codec = state._coll, state.codec
        if input_tensor.is_cuda:
            raise NotImplementedError("horovod_huffman.torch.fsdp codes CPU gradients over Gloo; "
                                      "CUDA gradients are not supported")
        if async_op:
            raise NotImplementedError("horovod_huffman.torch.fsdp's reduce-scatter runs "
                                      "synchronously (async_op=False)")
        if dist.get_process_group_ranks(group) != state.ranks:
            raise ValueError(f"FSDP reduces over ranks {dist.get_process_group_ranks(group)} "
                             f"but the State was made for ranks {state.ranks}: pass FSDP's "
                             "group as State(process_group=...)")
        average = _is_average(op)
        n, shard = coll.size, output_tensor.numel()
        if input_tensor.numel() != n * shard:
            raise ValueError(f"a reduce-scatter over {n} ranks of {input_tensor.numel()} "
                             f"elements cannot fill {shard}")
        flat = input_tensor.detach().reshape(-1)
        work = flat.numpy() if flat.dtype in (torch.float32, torch.float64) else \
            flat.float().numpy()
        key = self.key
        job = Job(key, zlib.crc32(f"{key}/{flat.numel()}".encode()), codec.begin(key), 1,
                  flat.numel(), flat.numel() * flat.element_size())
        total = run_to_end(reduce_scatter_sum(codec, HostOps, coll, job, work,
                                              [j * shard for j in range(n + 1)]))
        if average:
            total /= n
        output_tensor.copy_(torch.from_numpy(total).reshape(output_tensor.shape))
        return None


def _is_average(op):
    """True for ReduceOp.AVG, False for SUM; any other op raises."""
    if op == dist.ReduceOp.AVG:
        return True
    if op == dist.ReduceOp.SUM:
        return False
    raise ValueError(f"horovod_huffman.torch.fsdp reduces by SUM or AVG, not {op}; FSDP asks "
                     "for another op when set_gradient_divide_factor is used")


def install(model, state):
    """Give every FSDP module of ``model`` (``model.modules()`` order, ``model`` included if it
    is one) a ``ReduceScatter`` of ``state``. Returns how many modules got one."""
    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for module in modules:
        module.set_custom_reduce_scatter(ReduceScatter(state))
    return len(modules)
