"""TensorFlow adapter: Horovod compressors that send Huffman-coded quantized gradients.

>>> import horovod.tensorflow as hvd                                # doctest: +SKIP
>>> from horovod_huffman.tensorflow import Compression
>>> tape = hvd.DistributedGradientTape(tape, compression=Compression.rlh)  # doctest: +SKIP

The same core as the PyTorch adapter (allreduce.py), in graph-safe form. Horovod's tape hands
``compress`` one gradient at a time, so each gradient is a bucket of its own (a one-slot
``BucketPlan``: the bytes are the PyTorch adapter's for a bucket holding that gradient alone).
The exchange runs as stages: a ``tf.numpy_function`` runs it up to its first collective and
returns the bytes to send, Horovod's TensorFlow ``alltoall``/``allgather`` moves them in the
graph, the next stage takes the received bytes and runs to the next collective, and the last
stage (in ``decompress``) returns the sum, scaled as the allreduce of the two-element placeholder
says (Average or Sum). Works eagerly and inside ``tf.function``, which is where Horovod runs the
tape's allreduce. With a GPU, the stages are ``tf.py_function`` calls that take the tensors
through DLPack (horovod_huffman.codec.dlpack) and run the CUDA kernels.
"""
import itertools
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from numba import cuda

import horovod.tensorflow as hvd
from horovod.tensorflow.compression import Compression as _HorovodCompression

from ..adapters import CodecStats, ReadyCompressors, make_codec, sent_uncompressed
from ..exchange.allreduce import Job, allgather_sum, choose, two_phase_sum
from ..exchange.array_ops import DeviceOps, HostOps
from ..exchange.buckets import UNFUSED_MIN_NUMEL, BucketPlan, bucket_layout
from ..codec.device import SIMULATED, cuda_usable
from ..codec.dlpack import from_dlpack, to_dlpack
from ..exchange.frames import placeholder_values, reduction_scale

__all__ = ["Compression", "HuffmanCompressor", "DistributedGradientTape", "tf_variables",
           "LowRankDense", "LowRankConv2D", "factorize", "switch_to_low_rank"]


@dataclass
class _Pending:
    """ctx of a gradient sent encoded: ``received``, the bytes its exchange's last collective
    brought (a graph tensor); ``key``, the parameter key its exchange stages run under; ``shape``
    (a shape tensor) and ``dtype`` to rebuild the gradient; ``ranks``, the process set's size."""
    received: object
    key: str
    shape: object
    dtype: object
    ranks: int


class _Hop:
    """A collective the graph runs between two stages (allreduce.py's Pending): the exchange
    leaves ``data`` (and ``splits`` for an alltoall) here, the next stage puts the received
    bytes in ``result``."""

    def __init__(self, data, splits=None):
        self.data, self.splits, self.result = data, splits, None

    def done(self):
        return self.result is not None

    def wait(self):
        return self.result


class _Relay:
    """allreduce.py's collectives for a graph: they only hand the bytes out (``_Hop``)."""

    def __init__(self, size, rank):
        self.size, self.rank = size, rank

    def allgather(self, data, name):
        return _Hop(data)

    def alltoall(self, data, splits, name):
        return _Hop(data, np.asarray(splits, dtype=np.int32))


class HuffmanCompressor(CodecStats):
    """A Horovod TensorFlow compressor (``compress``/``decompress``) around a ``Codec``.

    ``compress(tensor) -> (placeholder, ctx)``. ctx is None when the tensor rides the ordinary
    allreduce (fewer than ``min_numel`` elements, not floating point, or of unknown size), a
    ``tf.DType`` when it is sent uncompressed as float32 and cast back (bfloat16), and otherwise
    a ``_Pending`` record that the last stage of the exchange reads. ``exchange``: "allgather", "two_phase" or "auto"
    (``allreduce.choose``).
    """

    def __init__(self, codec, min_numel=UNFUSED_MIN_NUMEL, process_set=None, exchange="auto"):
        self.codec = codec
        self.min_numel = int(min_numel)
        self.process_set = process_set
        choose(exchange, 1)                         # reject a bad name at build time
        self.exchange = exchange
        self._eager_keys = itertools.count()
        self.parameter_shapes = {}
        """Key -> static shape of every gradient this compressor has encoded (keys are graph
        tensor names: the same on every rank)."""
        self._running = {}
        self._gpu_stream = _gpu_stream()

    def compress(self, tensor):
        numel = tensor.shape.num_elements()
        if sent_uncompressed(numel, tensor.dtype.is_floating, self.min_numel):
            if tensor.dtype == tf.bfloat16:
                return tf.cast(tensor, tf.float32), tf.bfloat16
            return tensor, None
        process_set = self.process_set or hvd.global_process_set
        key = self._key(tensor)
        self.parameter_shapes[key] = tuple(tensor.shape)
        work = tf.float64 if tensor.dtype == tf.float64 else tf.float32
        align = getattr(self.codec.quantizer, "bucket_size", None) or 1
        (bucket,) = BucketPlan([(key, numel, work.name)], capacity=numel, align=align).buckets
        coll = _Relay(process_set.size(), process_set.rank())
        exchange = choose(self.exchange, coll.size)
        raw_bytes = numel * tensor.dtype.size
        rows = tensor.shape[0] if tensor.shape.rank and tensor.shape.rank > 1 else 1
        layout = bucket_layout(bucket, {key: rows})

        def start(grad):
            job = Job(bucket.key, bucket.tag, self.codec.begin(bucket.key), 1, numel, raw_bytes,
                      layout=layout)
            ops = self._ops()
            flat = self._incoming(grad)
            padded = _zeros(ops, bucket.size, flat.dtype)       # the bucket's gap stays zero
            ops.assign(padded, 0, flat)
            run = two_phase_sum(self.codec, ops, coll, job, padded, align) \
                if exchange == "two_phase" else allgather_sum(self.codec, ops, coll, job, padded)
            hop = run.send(None)
            self._running[key] = (run, hop)
            return hop.data, hop.splits if hop.splits is not None else np.zeros(0, np.int32)

        def middle(received):
            run, hop = self._running[key]
            hop.result = np.asarray(received)
            hop = run.send(None)
            self._running[key] = (run, hop)
            return hop.data

        data, splits = self._stage(start, [tf.cast(tensor, work)], [tf.uint8, tf.int32],
                                   "horovod_huffman_encode")
        data.set_shape([None])
        if exchange == "two_phase":
            received, _ = hvd.alltoall(data, splits=splits, process_set=process_set)
            data = self._stage(middle, [received], tf.uint8, "horovod_huffman_sum_shard")
            data.set_shape([None])
        gathered = hvd.allgather(data, process_set=process_set)
        placeholder = tf.constant(placeholder_values(process_set.rank()), dtype=tf.float32)
        return placeholder, _Pending(gathered, key, tf.shape(tensor), tensor.dtype,
                                     process_set.size())

    def decompress(self, tensor, ctx):
        if ctx is None:
            return tensor
        if isinstance(ctx, tf.DType):
            return tf.cast(tensor, ctx)
        key, n = ctx.key, ctx.ranks
        work = tf.float64 if ctx.dtype == tf.float64 else tf.float32

        def finish(received, reduced):
            run, hop = self._running.pop(key)
            hop.result = np.asarray(received)
            try:
                run.send(None)
                raise RuntimeError(f"the exchange of {key!r} wants more collectives")
            except StopIteration as stop:
                total = stop.value
            scale = reduction_scale(np.asarray(reduced), n, key)
            numel = int(np.prod(self.parameter_shapes[key], dtype=np.int64))
            return self._outgoing(total[:numel], scale, work)

        out = self._stage(finish, [ctx.received, tf.cast(tensor, tf.float32)], work,
                          "horovod_huffman_decode")
        return tf.cast(tf.reshape(out, ctx.shape), ctx.dtype)

    # ---- stages on the host or the GPU -------------------------------------------------------

    def _ops(self):
        return HostOps if self._gpu_stream is None else DeviceOps(self._gpu_stream)

    def _stage(self, fn, inputs, out_types, name):
        """One stage of the exchange as a graph op: ``tf.numpy_function`` on the host;
        ``tf.py_function`` with a GPU, whose eager tensors the stage reads through DLPack."""
        if self._gpu_stream is None:
            return tf.numpy_function(fn, inputs, out_types, stateful=True, name=name)
        return tf.py_function(fn, inputs, out_types, name=name)

    def _incoming(self, grad):
        """The gradient a stage received as a 1-D host or device array."""
        if self._gpu_stream is None:
            return np.asarray(grad).reshape(-1)
        return from_dlpack(tf.experimental.dlpack.to_dlpack(grad)).reshape(-1)

    def _outgoing(self, total, scale, work):
        """The scaled sum as a stage returns it: a NumPy array, or on the GPU a TF tensor."""
        if self._gpu_stream is None:
            return (total * scale).astype(work.as_numpy_dtype, copy=False)
        if scale != 1.0:
            DeviceOps(self._gpu_stream).scale(total, scale)
        self._gpu_stream.synchronize()              # TF's stream reads the result next
        return tf.experimental.dlpack.from_dlpack(to_dlpack(total))

    def _key(self, tensor):
        """The parameter key: the gradient's graph tensor name, the same on every rank and every
        step (Horovod runs the tape's allreduce in a tf.function); eager tensors have no name and
        take their call order."""
        try:
            return tensor.name.split(":")[0]
        except (AttributeError, ValueError):
            return f"eager_{next(self._eager_keys)}"


def _zeros(ops, n, dtype):
    """n zeros of ``dtype`` on the host or the device."""
    zeros = np.zeros(n, dtype=dtype)
    return zeros if ops is HostOps else cuda.to_device(zeros, stream=ops.stream)


def _gpu_stream():
    """A Numba stream when TensorFlow has a GPU and Numba's CUDA works, else None (host path)."""
    if SIMULATED or not tf.config.list_logical_devices("GPU") or not cuda_usable():
        return None
    return cuda.stream()


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
    def build(encoder="rlh", quantizer=None, error_feedback=None, min_numel=UNFUSED_MIN_NUMEL,
              process_set=None, seed=None, exchange="auto", **encoder_kwargs):
        """A HuffmanCompressor; see horovod_huffman.torch.Compression.build (the same
        arguments but ``named_parameters`` and ``bucket_bytes``: each gradient is its own
        bucket here)."""
        codec = make_codec(encoder, quantizer, error_feedback, seed, **encoder_kwargs)
        return HuffmanCompressor(codec, min_numel=min_numel, process_set=process_set,
                                 exchange=exchange)


# Horovod's tape taking Keras 3 variables (tape.py); the tf.Variables behind Keras variables.
from .tape import DistributedGradientTape  # noqa: E402
from .variables import tf_variables  # noqa: E402

# Horovod's Keras DistributedOptimizer around a Keras 3 optimizer raises instead of training
# unreduced (keras_routes.py); horovod_huffman.tensorflow.keras is the Keras 3 route.
from .keras_routes import legacy_keras_requested, refuse_keras_3  # noqa: E402,F401
refuse_keras_3()

# Pufferfish: low-rank, pre-factorized Keras models (pufferfish.py).
from .pufferfish import LowRankConv2D, LowRankDense, factorize, switch_to_low_rank  # noqa: E402,F401
