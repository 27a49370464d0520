"""TensorFlow adapter: Horovod compressors that send Huffman-coded quantized gradients.

>>> import horovod_huffman.tensorflow as hh_tf
>>> tape = hh_tf.DistributedGradientTape(tape, compression=hh_tf.Compression.rlh)  # doctest: +SKIP

The same core as the PyTorch adapter (horovod_huffman.exchange), run as graph stages
(compressor.py). Two kinds of entry point:

- ``DistributedGradientTape`` here and ``horovod_huffman.tensorflow.keras.DistributedOptimizer``
  see all of a step's gradients, and fuse them into the PyTorch adapter's buckets (fused.py):
  the same bucket sizes, layouts, exchanges and bytes, with each bucket's exchange overlapping
  backward and the other buckets'. The fastest route.
- Horovod's own ``hvd.DistributedGradientTape``, ``hvd.DistributedOptimizer`` and legacy Keras
  optimizer take ``compression=Compression.<encoder>`` too; they hand ``compress`` one gradient
  at a time, which is then a bucket of its own.

docs/tensorflow-adapter.md has the design.
"""
from horovod.tensorflow.compression import Compression as _HorovodCompression

from ..adapters import ReadyCompressors, make_codec
from ..exchange.buckets import DEFAULT_BUCKET_BYTES
from .compressor import HuffmanCompressor

__all__ = ["Compression", "HuffmanCompressor", "DistributedGradientTape", "tf_variables",
           "LowRankDense", "LowRankConv2D", "factorize", "switch_to_low_rank"]


class Compression(ReadyCompressors):
    """Compressors for ``hvd.DistributedGradientTape``/``hvd.DistributedOptimizer``.

    ``Compression.none`` and ``Compression.fp16`` are Horovod's; ``Compression.<encoder>`` for
    every encoder in ``horovod_huffman.ENCODERS`` is QSGD (s = 8, buckets of 512) followed by that
    encoder; ``Compression.build(...)`` gives full control (same arguments as the PyTorch one,
    without ``named_parameters``).
    """
    none = _HorovodCompression.none
    fp16 = _HorovodCompression.fp16

    @staticmethod
    def build(encoder="rlh", quantizer=None, error_feedback=None, min_numel=None,
              process_set=None, seed=None, exchange="auto", bucket_bytes=DEFAULT_BUCKET_BYTES,
              route="encoded", **encoder_kwargs):
        """A HuffmanCompressor; see horovod_huffman.torch.Compression.build (the same
        arguments but ``named_parameters``). min_numel None: 1024 where Horovod's own tape or
        optimizer hands over one gradient at a time, 0 in fused buckets. bucket_bytes: bytes
        of float32 gradients per fused bucket. route "adaptive": fused buckets only."""
        codec = make_codec(encoder, quantizer, error_feedback, seed, **encoder_kwargs)
        return HuffmanCompressor(codec, min_numel=min_numel, process_set=process_set,
                                 exchange=exchange, bucket_bytes=bucket_bytes, route=route)


# Horovod's tape taking Keras 3 variables (tape.py); the tf.Variables behind Keras variables.
from .tape import DistributedGradientTape  # noqa: E402
from .variables import tf_variables  # noqa: E402

# Horovod's Keras DistributedOptimizer around a Keras 3 optimizer raises instead of training
# unreduced (keras_routes.py); horovod_huffman.tensorflow.keras is the Keras 3 route.
from .keras_routes import legacy_keras_requested, refuse_keras_3  # noqa: E402,F401
refuse_keras_3()

# Pufferfish: low-rank, pre-factorized Keras models (pufferfish.py).
from .pufferfish import LowRankConv2D, LowRankDense, factorize, switch_to_low_rank  # noqa: E402,F401
