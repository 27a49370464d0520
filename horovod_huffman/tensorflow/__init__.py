"""TensorFlow adapter: Horovod compressors that send Huffman-coded quantized gradients.

>>> import horovod.tensorflow as hvd                                # doctest: +SKIP
>>> from horovod_huffman.tensorflow import Compression
>>> tape = hvd.DistributedGradientTape(tape, compression=Compression.rlh)  # doctest: +SKIP

The same design as the PyTorch adapter (docs/torch-adapter.md), in graph-safe form: ``compress``
encodes the gradient in a ``tf.numpy_function`` (the shared framework-free core), starts
Horovod's TensorFlow allgather of the bytes, and hands the allreduce a two-element placeholder;
``decompress`` decodes and sums every rank's stream in a second ``tf.numpy_function`` with a
static output shape, scaled as the placeholder's reduction says (Average or Sum). Works eagerly
and inside ``tf.function``, which is where Horovod runs the tape's allreduce. Streams are the
same bytes the PyTorch adapter sends. With a GPU, both steps are ``tf.py_function`` calls that
take the tensors through DLPack (horovod_huffman.dlpack) and run the CUDA kernels.
"""
import itertools

import numpy as np
import tensorflow as tf
from numba import cuda

import horovod.tensorflow as hvd
from horovod.tensorflow.compression import Compression as _HorovodCompression

from ..adapters import CodecStats, add_ready_compressors, make_codec
from ..array_ops import DeviceOps
from ..device import SIMULATED, cuda_usable
from ..dlpack import from_dlpack, to_dlpack
from ..exchange import placeholder_values, reduction_scale

__all__ = ["Compression", "HuffmanCompressor"]

# As in the PyTorch adapter: smaller tensors ride the ordinary allreduce.
DEFAULT_MIN_NUMEL = 1024


class HuffmanCompressor(CodecStats):
    """A Horovod TensorFlow compressor (``compress``/``decompress``) around a ``Codec``.

    ``compress(tensor) -> (placeholder, ctx)``. ctx is None when the tensor rides the ordinary
    allreduce (fewer than ``min_numel`` elements, not floating point, or of unknown size), a
    ``tf.DType`` when it is sent uncompressed as float32 and cast back (bfloat16), and otherwise
    a tuple (gathered bytes tensor, step tensor, parameter key, shape tensor, dtype, ranks).
    """

    def __init__(self, codec, min_numel=DEFAULT_MIN_NUMEL, process_set=None):
        self.codec = codec
        self.min_numel = int(min_numel)
        self.process_set = process_set
        self._eager_keys = itertools.count()
        self.parameter_shapes = {}
        """Key -> static shape of every gradient this compressor has encoded (keys are graph
        tensor names: the same on every rank)."""
        self._gpu_stream = _gpu_stream()

    def compress(self, tensor):
        numel = tensor.shape.num_elements()
        if not tensor.dtype.is_floating or numel is None or numel < self.min_numel:
            if tensor.dtype == tf.bfloat16:
                return tf.cast(tensor, tf.float32), tf.bfloat16
            return tensor, None
        process_set = self.process_set or hvd.global_process_set
        key = self._key(tensor)
        self.parameter_shapes[key] = tuple(tensor.shape)
        work = tf.float64 if tensor.dtype == tf.float64 else tf.float32
        raw_itemsize = tensor.dtype.size

        if self._gpu_stream is not None:
            # GPU path: tf.py_function hands the gradient over as an eager tensor on its device
            # (TF waits for its stream before calling Python); DLPack views it without a copy,
            # and the kernels run on this compressor's own stream.
            def encode_gpu(grad):
                x = from_dlpack(tf.experimental.dlpack.to_dlpack(grad))
                data, step = self.codec.encode(key, x, raw_itemsize=raw_itemsize,
                                               stream=self._gpu_stream)
                return data, np.int64(step)

            data, step = tf.py_function(encode_gpu, [tf.cast(tensor, work)],
                                        [tf.uint8, tf.int64], name="horovod_huffman_encode")
        else:
            def encode(grad):
                data, step = self.codec.encode(key, grad, raw_itemsize=raw_itemsize)
                return data, np.int64(step)

            data, step = tf.numpy_function(encode, [tf.cast(tensor, work)], [tf.uint8, tf.int64],
                                           stateful=True, name="horovod_huffman_encode")
        data.set_shape([None])
        step.set_shape([])
        gathered = hvd.allgather(data, process_set=process_set)
        placeholder = tf.constant(placeholder_values(process_set.rank()), dtype=tf.float32)
        return placeholder, (gathered, step, key, tf.shape(tensor), tensor.dtype,
                             process_set.size())

    def decompress(self, tensor, ctx):
        if ctx is None:
            return tensor
        if isinstance(ctx, tf.DType):
            return tf.cast(tensor, ctx)
        gathered, step, key, shape, dtype, n = ctx
        work = tf.float64 if dtype == tf.float64 else tf.float32

        if self._gpu_stream is not None:
            stream = self._gpu_stream

            def decode_gpu(buf, step, reduced, shape):
                total = self.codec.decode_sum(buf.numpy(), n, key, int(step),
                                              tuple(int(d) for d in shape.numpy()),
                                              device="cuda", stream=stream)
                scale = reduction_scale(reduced.numpy(), n, key)
                if scale != 1.0:
                    DeviceOps(stream).scale(total.reshape(total.size), scale)
                stream.synchronize()            # TF's stream reads the result next
                return tf.experimental.dlpack.from_dlpack(to_dlpack(total))

            out = tf.py_function(decode_gpu, [gathered, step, tf.cast(tensor, tf.float32), shape],
                                 work, name="horovod_huffman_decode")
        else:
            def decode(buf, step, reduced, shape):
                total = self.codec.decode_sum(buf, n, key, int(step),
                                              tuple(int(d) for d in shape))
                scale = reduction_scale(reduced, n, key)
                return (total * scale).astype(work.as_numpy_dtype, copy=False)

            out = tf.numpy_function(decode, [gathered, step, tf.cast(tensor, tf.float32), shape],
                                    work, stateful=True, name="horovod_huffman_decode")
        return tf.cast(tf.reshape(out, shape), dtype)

    def _key(self, tensor):
        """The parameter key: the gradient's graph tensor name, the same on every rank and every
        step (Horovod runs the tape's allreduce in a tf.function); eager tensors have no name and
        take their call order."""
        try:
            return tensor.name.split(":")[0]
        except (AttributeError, ValueError):
            return f"eager_{next(self._eager_keys)}"


def _gpu_stream():
    """A Numba stream when TensorFlow has a GPU and Numba's CUDA works, else None (host path)."""
    if SIMULATED or not tf.config.list_logical_devices("GPU") or not cuda_usable():
        return None
    return cuda.stream()


@add_ready_compressors
class Compression:
    """Compressors for ``hvd.DistributedGradientTape``/``hvd.DistributedOptimizer``.

    ``Compression.none`` and ``Compression.fp16`` are Horovod's; ``Compression.<encoder>`` for
    every encoder in ``horovod_huffman.ENCODERS`` is QSGD (s = 8, buckets of 512) followed by that
    encoder; ``Compression.build(...)`` gives full control (same arguments as the PyTorch one,
    without ``named_parameters``).
    """
    none = _HorovodCompression.none
    fp16 = _HorovodCompression.fp16

    @staticmethod
    def build(encoder="rlh", quantizer=None, error_feedback=None, min_numel=DEFAULT_MIN_NUMEL,
              process_set=None, seed=None, **encoder_kwargs):
        """A HuffmanCompressor; see horovod_huffman.torch.Compression.build."""
        codec = make_codec(encoder, quantizer, error_feedback, seed, **encoder_kwargs)
        return HuffmanCompressor(codec, min_numel=min_numel, process_set=process_set)

