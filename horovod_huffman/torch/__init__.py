"""PyTorch adapter: Horovod compressors that send Huffman-coded quantized gradients
(compressor.py), a DistributedDataParallel communication hook (ddp.py), FSDP2's reduce-scatter
(fsdp.py) and Pufferfish's low-rank layers (pufferfish.py).

>>> import horovod.torch as hvd                                   # doctest: +SKIP
>>> from horovod_huffman.torch import Compression
>>> opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
...                                compression=Compression.rlh)    # doctest: +SKIP

docs/torch-adapter.md has the design.
"""
from ..adapters import ReadyCompressors, make_codec
from ..exchange.buckets import DEFAULT_BUCKET_BYTES, DEFAULT_MIN_NUMEL
from .compressor import HuffmanCompressor
from .horovod_ops import HorovodCompression as _HorovodCompression

__all__ = ["Compression", "HuffmanCompressor", "LowRankLinear", "LowRankConv2d", "LowRankLSTM",
           "Factorization", "factorize", "switch_to_low_rank"]


class Compression(ReadyCompressors):
    """Compressors for ``hvd.DistributedOptimizer(compression=...)``.

    ``Compression.none`` and ``Compression.fp16`` are Horovod's; ``Compression.<encoder>`` for
    every encoder in ``horovod_huffman.ENCODERS`` is QSGD (s = 8, buckets of 512) followed by that
    encoder; ``Compression.build(...)`` gives full control.
    """
    none = getattr(_HorovodCompression, "none", None)
    fp16 = getattr(_HorovodCompression, "fp16", None)

    @staticmethod
    def build(encoder="rlh", quantizer=None, error_feedback=None, min_numel=DEFAULT_MIN_NUMEL,
              named_parameters=None, process_set=None, seed=None, exchange="auto",
              bucket_bytes=DEFAULT_BUCKET_BYTES, route="encoded", **encoder_kwargs):
        """A HuffmanCompressor.

        encoder: a name from ``horovod_huffman.ENCODERS`` (``encoder_kwargs`` go to it) or an
            Encoder instance. quantizer: default ``QSGD(levels=8)``. error_feedback: None = on
            for biased quantizers. min_numel: smaller tensors skip encoding. named_parameters:
            optional, names gradients without Horovod's help. process_set: default: the
            optimizer's. seed: reproducible quantization per (bucket, shard, step).
            exchange: "allgather", "two_phase" or "auto" (``allreduce.choose``). bucket_bytes:
            bytes of float32 gradients fused into one bucket. route: "encoded", or "adaptive":
            encoded, encoded with ``rlh`` (the fastest coder), or float16 or float32 through
            Horovod's own allreduce, whichever gave the ranks the fastest steps
            (``routing.Router``).
        """
        codec = make_codec(encoder, quantizer, error_feedback, seed, **encoder_kwargs)
        named = list(named_parameters) if named_parameters is not None else None
        return HuffmanCompressor(codec, min_numel=min_numel, named_parameters=named,
                                 process_set=process_set, exchange=exchange,
                                 bucket_bytes=bucket_bytes, route=route)


# Pufferfish: low-rank, pre-factorized models (pufferfish.py).
from .pufferfish import (Factorization, LowRankConv2d, LowRankLinear, LowRankLSTM,  # noqa: E402
                         factorize, switch_to_low_rank)
