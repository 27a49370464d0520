"""PyTorch adapter: Horovod compressors that send Huffman-coded quantized gradients.

>>> import horovod.torch as hvd                                   # doctest: +SKIP
>>> from horovod_huffman.torch import Compression
>>> opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
...                                compression=Compression.rlh)    # doctest: +SKIP

Horovod sums whatever ``compress`` returns with allreduce, and encoded streams cannot be summed.
So ``compress`` quantizes and encodes the gradient, starts an asynchronous Horovod *allgather* of
the bytes (each rank may send a different length) and hands allreduce a two-element placeholder;
``decompress`` waits for the allgather, decodes every rank's stream, sums the dequantized
gradients and scales the sum the way the allreduce of the placeholder says the optimizer reduces
(Average or Sum). docs/torch-adapter.md has the design.
"""
import sys
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from numba import cuda

import horovod.torch as hvd
from horovod.torch.compression import Compression as _HorovodCompression

from ..adapters import CodecStats, add_ready_compressors, make_codec
from ..device import cuda_usable
from ..exchange import placeholder_values, reduction_scale

__all__ = ["Compression", "HuffmanCompressor"]

# Tensors with fewer elements ride the ordinary allreduce: below ~1K elements the message
# headers (about 60 bytes) and a second collective cost more than they save.
DEFAULT_MIN_NUMEL = 1024
_HOST_DTYPES = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
# How many caller frames to search for Horovod's optimizer (hook -> _allreduce_grad_async ->
# compress, or the grouped path's list comprehension one level deeper).
_FRAME_SEARCH_DEPTH = 6


@dataclass
class _Pending:
    """ctx of an encoded gradient: the allgather in flight and what ``decompress`` needs to
    rebuild the tensor (parameter name and step, shape, dtype, device, process set)."""
    handle: int
    name: str
    step: int
    shape: tuple
    dtype: torch.dtype
    device: torch.device
    process_set: object


class HuffmanCompressor(CodecStats):
    """A Horovod compressor (``compress``/``decompress``) around a ``Codec``.

    ``compress(tensor) -> (placeholder, ctx)``. ctx is None when the tensor is sent uncompressed
    through Horovod's allreduce (fewer than ``min_numel`` elements or not floating point), a
    ``torch.dtype`` when it is sent uncompressed as float32 and cast back (bfloat16, which
    Horovod 0.28's own ops reject), and otherwise a ``_Pending`` record of the allgather that
    carries the encoded bytes.
    """

    def __init__(self, codec, min_numel=DEFAULT_MIN_NUMEL, named_parameters=None,
                 process_set=None):
        self.codec = codec
        self.min_numel = int(min_numel)
        self._names = None
        if named_parameters is not None:
            self._names = {id(p): name for name, p in named_parameters}
        self.process_set = process_set

    # ---- Horovod's Compressor API --------------------------------------------------------

    def compress(self, tensor):
        if isinstance(tensor, torch.nn.Parameter):
            raise ValueError("horovod-huffman cannot be used with op=hvd.Adasum: Adasum reduces "
                             "parameter deltas pairwise and needs summable tensors; use "
                             "op=hvd.Average or hvd.Sum")
        if tensor.numel() < self.min_numel or not tensor.is_floating_point():
            if tensor.dtype == torch.bfloat16:
                return tensor.float(), torch.bfloat16
            return tensor, None
        name, process_set = self._identify(tensor)
        grad = tensor.detach()
        if _on_gpu(tensor):
            # Quantize and encode on the GPU, on torch's current stream, straight from the
            # tensor's memory (__cuda_array_interface__); only the encoded bytes come back.
            with _numba_device(tensor.device) as stream:
                data, step = self.codec.encode(name, _device_float(grad), stream=stream,
                                               raw_itemsize=grad.element_size())
        else:
            host = grad.to(_HOST_DTYPES.get(grad.dtype, grad.dtype)).cpu().contiguous()
            data, step = self.codec.encode(name, host.numpy(), raw_itemsize=grad.element_size())
        handle = hvd.allgather_async(torch.from_numpy(data), name=f"horovod_huffman.{name}",
                                     process_set=process_set)
        rank = process_set.rank()
        placeholder = torch.tensor(placeholder_values(rank), dtype=torch.float32,
                                   device=tensor.device)
        return placeholder, _Pending(handle, name, step, tuple(tensor.shape), tensor.dtype,
                                     tensor.device, process_set)

    def decompress(self, tensor, ctx):
        if ctx is None:
            return tensor
        if isinstance(ctx, torch.dtype):
            return tensor.to(ctx)
        gathered = hvd.synchronize(ctx.handle)
        n = ctx.process_set.size()
        scale = reduction_scale(tensor.detach().float().cpu().numpy(), n, ctx.name)
        if _on_gpu(tensor):
            with _numba_device(ctx.device) as stream:
                total = self.codec.decode_sum(gathered.numpy(), n, ctx.name, ctx.step,
                                              ctx.shape, device="cuda", stream=stream)
            out = torch.as_tensor(total, device=ctx.device)     # zero-copy (CUDA array interface)
        else:
            out = torch.from_numpy(self.codec.decode_sum(gathered.numpy(), n, ctx.name,
                                                         ctx.step, ctx.shape))
        if scale != 1.0:
            out.mul_(scale)
        return out.reshape(ctx.shape).to(device=ctx.device, dtype=ctx.dtype)

    # ---- statistics --------------------------------------------------------------------------

    # ---- which parameter is this? --------------------------------------------------------------

    def _identify(self, tensor):
        """(parameter name, process set) for a gradient handed to ``compress``.

        Finds the parameter whose ``.grad`` this is, from the ``named_parameters`` given to
        ``Compression.build`` or from Horovod's optimizer frames (which hold the parameter ``p``
        and the optimizer's own name table); names are the same on every rank and every step.
        """
        param, optimizer = None, None
        frame = sys._getframe(2)
        for _ in range(_FRAME_SEARCH_DEPTH):
            if frame is None:
                break
            local = frame.f_locals
            p = local.get("p")
            if param is None and isinstance(p, torch.nn.Parameter) and \
                    (p.grad is tensor or (p.grad is not None and p.grad.is_sparse)):
                param = p
            owner = local.get("self")
            if param is not None and hasattr(owner, "_parameter_names"):
                optimizer = owner
                break
            frame = frame.f_back
        if param is None and self._names is not None:
            raise RuntimeError("gradient handed to compress() belongs to no known parameter")
        name = None
        if param is not None and self._names is not None:
            name = self._names.get(id(param))
        if name is None and optimizer is not None:
            name = optimizer._parameter_names.get(param)
        if name is None:
            raise RuntimeError(
                "horovod-huffman could not tell which parameter this gradient belongs to: use it "
                "through hvd.DistributedOptimizer, or pass named_parameters=model.named_parameters() "
                "to Compression.build")
        process_set = self.process_set
        if process_set is None and optimizer is not None:
            process_set = getattr(optimizer, "process_set", None)
        return name, process_set if process_set is not None else hvd.global_process_set


def _on_gpu(tensor):
    """Whether a tensor takes the GPU path: a CUDA tensor, with Numba's CUDA usable."""
    return tensor.is_cuda and cuda_usable()


def _device_float(grad):
    """A Numba view of a contiguous float16/32/64 CUDA tensor (bfloat16, which the CUDA array
    interface cannot describe, becomes float32 on the device). No synchronization: the kernels
    run on the same (torch's current) stream."""
    if grad.dtype == torch.bfloat16:
        grad = grad.float()
    return cuda.as_cuda_array(grad.contiguous(), sync=False)


@contextmanager
def _numba_device(device):
    """Numba on the tensor's GPU, with torch's current stream on it as a Numba stream."""
    with cuda.gpus[device.index if device.index is not None else torch.cuda.current_device()]:
        yield cuda.external_stream(torch.cuda.current_stream(device).cuda_stream)


@add_ready_compressors
class Compression:
    """Compressors for ``hvd.DistributedOptimizer(compression=...)``.

    ``Compression.none`` and ``Compression.fp16`` are Horovod's; ``Compression.<encoder>`` for
    every encoder in ``horovod_huffman.ENCODERS`` is QSGD (s = 8, buckets of 512) followed by that
    encoder; ``Compression.build(...)`` gives full control.
    """
    none = _HorovodCompression.none
    fp16 = _HorovodCompression.fp16

    @staticmethod
    def build(encoder="rlh", quantizer=None, error_feedback=None, min_numel=DEFAULT_MIN_NUMEL,
              named_parameters=None, process_set=None, seed=None, **encoder_kwargs):
        """A HuffmanCompressor.

        encoder: a name from ``horovod_huffman.ENCODERS`` (``encoder_kwargs`` go to it) or an
            Encoder instance. quantizer: default ``QSGD(levels=8)``. error_feedback: None = on
            for biased quantizers. min_numel: smaller tensors skip encoding. named_parameters:
            optional, names gradients without Horovod's help. process_set: default: the
            optimizer's. seed: reproducible quantization per (parameter, step).
        """
        codec = make_codec(encoder, quantizer, error_feedback, seed, **encoder_kwargs)
        named = list(named_parameters) if named_parameters is not None else None
        return HuffmanCompressor(codec, min_numel=min_numel, named_parameters=named,
                                 process_set=process_set)

