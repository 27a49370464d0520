"""The Horovod compressor of the TensorFlow adapter (``HuffmanCompressor``), and the graph stages
its exchanges run as.

The exchange (allreduce.py) runs as stages: a ``tf.numpy_function`` runs it up to its first
collective and returns the bytes to send, Horovod's TensorFlow ``alltoall``/``allgather`` moves
them in the graph, the next stage takes the received bytes and runs to the next collective, and
the last stage returns the sum. The generator waits between stages in the compressor, keyed by
its bucket. Works eagerly and inside ``tf.function``. With a GPU, the stages are
``tf.py_function`` calls that take the tensors through DLPack (horovod_huffman.codec.dlpack) and
run the CUDA kernels.

Horovod's tape and optimizers hand ``compress`` one gradient at a time: each gradient is then a
bucket of its own (a one-slot ``BucketPlan``: the bytes are the PyTorch adapter's for a bucket
holding that gradient alone), and the last stage (in ``decompress``) scales the sum as the
allreduce of the two-element placeholder says (Average or Sum). The entry points that see all of
a step's gradients fuse them into buckets instead (fused.py).
"""
import itertools
import threading
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from numba import cuda

import horovod.tensorflow as hvd

from ..adapters import CodecStats, sent_uncompressed
from ..codec.device import SIMULATED, cuda_usable
from ..codec.dlpack import from_dlpack, to_dlpack
from ..exchange.allreduce import Job, allgather_sum, choose, settle, two_phase_sum
from ..exchange.array_ops import DeviceOps, HostOps
from ..exchange.buckets import (DEFAULT_BUCKET_BYTES, DEFAULT_MIN_NUMEL, UNFUSED_MIN_NUMEL,
                                BucketPlan, bucket_layout)
from ..exchange.frames import placeholder_values, reduction_scale
from ..exchange.routing import check_route_mode

__all__ = ["HuffmanCompressor"]


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
    numel: int


class Hop:
    """A collective the graph runs between two stages (allreduce.py's Pending): the exchange
    leaves ``data`` (and ``splits`` for an alltoall) here, the next stage puts the received
    bytes in ``result``."""

    def __init__(self, data, splits=None):
        self.data, self.splits, self.result = data, splits, None

    def done(self):
        return self.result is not None

    def wait(self):
        return self.result


class Relay:
    """allreduce.py's collectives for a graph: they only hand the bytes out (``Hop``), for
    Horovod's ops in the graph to move."""

    def __init__(self, size, rank):
        self.size, self.rank = size, rank

    def allgather(self, data, name):
        return Hop(data)

    def alltoall(self, data, splits, name):
        return Hop(data, np.asarray(splits, dtype=np.int32))


class HuffmanCompressor(CodecStats):
    """A Horovod compressor (``compress``/``decompress``) around a ``Codec``, and the codec of
    the fused entry points (``DistributedGradientTape``, the Keras 3 ``DistributedOptimizer``).

    ``compress(tensor) -> (placeholder, ctx)``. ctx is None when the tensor rides the ordinary
    allreduce (fewer than ``min_numel`` elements, not floating point, or of unknown size), a
    ``tf.DType`` when it is sent uncompressed as float32 and cast back (bfloat16), and otherwise
    a ``_Pending`` record that the last stage of the exchange reads. ``exchange``: "allgather",
    "two_phase" or "auto" (``allreduce.choose``).

    min_numel: gradients with fewer elements ride Horovod's allreduce; None: 1024 where each
    gradient is a bucket of its own (``compress``), 0 in fused buckets (every floating-point
    gradient joins one). bucket_bytes: bytes of float32 gradients per fused bucket.
    route: "encoded", or "adaptive" (fused buckets only): each step's buckets go encoded,
    encoded with ``rlh``, or as float16 or float32 through Horovod's allreduce, whichever gave
    the ranks the fastest steps (routing.Router).
    """

    def __init__(self, codec, min_numel=None, process_set=None, exchange="auto",
                 bucket_bytes=DEFAULT_BUCKET_BYTES, route="encoded"):
        self.codec = codec
        self.min_numel = UNFUSED_MIN_NUMEL if min_numel is None else int(min_numel)
        self.fused_min_numel = DEFAULT_MIN_NUMEL if min_numel is None else int(min_numel)
        self.process_set = process_set
        choose(exchange, 1)                         # reject a bad name at build time
        self.exchange = exchange
        self.bucket_bytes = int(bucket_bytes)
        self.route = check_route_mode(route)
        self.lock = threading.Lock()
        """Held by every stage: one stage of this compressor runs at a time."""
        self._eager_keys = itertools.count()
        self.parameter_shapes = {}
        """Key -> static shape of every gradient ``compress`` has encoded (keys are graph
        tensor names: the same on every rank)."""
        self._running = {}
        self._gpu_stream = _gpu_stream()
        self.fused = {}
        """The fused reductions (fused.FusedReduce) built on this compressor, by their
        settings: one per optimizer or tape configuration, kept across steps."""

    # ---- Horovod's Compressor API: one gradient per bucket ----------------------------------

    def compress(self, tensor):
        if self.route != "encoded":
            raise ValueError("route='adaptive' routes fused buckets: use "
                             "horovod_huffman.tensorflow.DistributedGradientTape or "
                             "horovod_huffman.tensorflow.keras.DistributedOptimizer")
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
        rows = tensor.shape[0] if tensor.shape.rank and tensor.shape.rank > 1 else 1
        layout = bucket_layout(bucket, {key: rows})
        received = self.exchange_stages(bucket, layout, [tf.cast(tensor, work)],
                                        [numel * tensor.dtype.size], process_set,
                                        stateful=True)
        placeholder = tf.constant(placeholder_values(process_set.rank()), dtype=tf.float32)
        return placeholder, _Pending(received, bucket.key, tf.shape(tensor), tensor.dtype,
                                     process_set.size(), numel)

    def decompress(self, tensor, ctx):
        if ctx is None:
            return tensor
        if isinstance(ctx, tf.DType):
            return tf.cast(tensor, ctx)
        key, n, numel = ctx.key, ctx.ranks, ctx.numel
        work = tf.float64 if ctx.dtype == tf.float64 else tf.float32

        def finish(received, reduced):
            scale = reduction_scale(np.asarray(reduced), n, key)
            with self.lock:
                return self.outgoing(self.finish(key, received), scale, work, [(0, numel)])[0]

        out = self.stage(finish, [ctx.received, tf.cast(tensor, tf.float32)], work,
                         "horovod_huffman_decode", stateful=True)
        return tf.cast(tf.reshape(out, ctx.shape), ctx.dtype)

    # ---- the stages of one bucket's exchange -------------------------------------------------

    def exchange_stages(self, bucket, layout, grads, sizes, process_set, stateful,
                        route="encoded"):
        """The graph of ``bucket``'s exchange up to its last collective: the gathered bytes that
        ``finish`` takes. ``grads``: the bucket's gradients in slot order, as work-dtype tensors;
        ``sizes``: their bytes as the caller had them (the statistics' raw bytes). ``stateful``
        stages keep their order in the graph; stateless ones are ordered by their data only.
        ``route``: the encoded route (routing.ENCODED_ROUTES) whose codec codes the bucket
        (``Codec.for_route``)."""
        n = process_set.size()
        exchange = choose(self.exchange, n)
        codec = self.codec.for_route(route)
        align = getattr(codec.quantizer, "bucket_size", None) or 1
        raw_bytes = int(sum(sizes))
        coll = Relay(n, process_set.rank())
        name = op_name(bucket.key)

        def start(*arrays):
            with self.lock:
                ops = self.ops()
                buffer = self._zeros(ops, bucket.size, arrays[0].dtype)
                for slot, grad in zip(bucket.slots, arrays):
                    ops.assign(buffer, slot.offset, self._incoming(grad))
                job = Job(bucket.key, bucket.tag, codec.begin(bucket.key),
                          len(bucket.slots), bucket.numel, raw_bytes, layout)
                run = two_phase_sum(codec, ops, coll, job, buffer, align) \
                    if exchange == "two_phase" else \
                    allgather_sum(codec, ops, coll, job, buffer)
                hop = _next_collective(run)
                self._running[bucket.key] = (run, hop)
                return hop.data, hop.splits if hop.splits is not None else np.zeros(0, np.int32)

        def middle(received):
            with self.lock:
                run, hop = self._running[bucket.key]
                hop.result = np.asarray(received)
                hop = _next_collective(run)
                self._running[bucket.key] = (run, hop)
                return hop.data

        data, splits = self.stage(start, grads, [tf.uint8, tf.int32], name + "_encode",
                                  stateful)
        data.set_shape([None])
        if exchange == "two_phase":
            received, _ = hvd.alltoall(data, splits=splits, name=name + "_alltoall",
                                       process_set=process_set)
            data = self.stage(middle, [received], tf.uint8, name + "_sum_shard", stateful)
            data.set_shape([None])
        return hvd.allgather(data, name=name + "_allgather", process_set=process_set)

    def finish(self, key, received):
        """The sum the exchange of ``key`` ends with, given its last collective's bytes (call
        with ``lock`` held)."""
        run, hop = self._running.pop(key)
        hop.result = np.asarray(received)
        try:
            _next_collective(run)
        except StopIteration as stop:
            return stop.value
        raise RuntimeError(f"the exchange of {key!r} wants more collectives")

    def stage(self, fn, inputs, out_types, name, stateful):
        """One stage of the exchange as a graph op: ``tf.numpy_function`` on the host;
        ``tf.py_function`` with a GPU, whose eager tensors the stage reads through DLPack
        (``tf.py_function`` is always stateful)."""
        if self._gpu_stream is None:
            return tf.numpy_function(fn, inputs, out_types, stateful=stateful, name=name)
        return tf.py_function(fn, inputs, out_types, name=name)

    def outgoing(self, total, scale, work, spans):
        """The (offset, numel) ``spans`` of the sum ``total``, scaled, as a stage returns them:
        NumPy arrays, or on the GPU TF tensors."""
        if self._gpu_stream is None:
            if scale != 1.0:
                total *= scale            # the exchange's sum is this step's own array
            return [total[a:a + n].astype(work.as_numpy_dtype, copy=False) for a, n in spans]
        if scale != 1.0:
            DeviceOps(self._gpu_stream).scale(total, scale)
        self._gpu_stream.synchronize()              # TF's stream reads the result next
        return [tf.experimental.dlpack.from_dlpack(to_dlpack(total[a:a + n])) for a, n in spans]

    @property
    def on_gpu(self):
        """Whether the stages run the CUDA kernels (TensorFlow has a GPU and Numba's CUDA
        works)."""
        return self._gpu_stream is not None

    def ops(self):
        """HostOps, or one DeviceOps (its queues and status buffer) for every stage."""
        if self._gpu_stream is None:
            return HostOps
        if getattr(self, "_device_ops", None) is None:
            self._device_ops = DeviceOps(self._gpu_stream)
        return self._device_ops

    def _zeros(self, ops, n, dtype):
        """n zeros of ``dtype`` on the host or the device."""
        zeros = np.zeros(n, dtype=dtype)
        return zeros if ops is HostOps else cuda.to_device(zeros, stream=ops.stream)

    def _incoming(self, grad):
        """The gradient a stage received as a 1-D host or device array."""
        if self._gpu_stream is None:
            return np.asarray(grad).reshape(-1)
        return from_dlpack(tf.experimental.dlpack.to_dlpack(grad)).reshape(-1)

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


def op_name(key):
    """A graph op name for a bucket key (Horovod names its collectives after their ops)."""
    return "".join(c if c.isalnum() or c in "_." else "_" for c in key)


def _next_collective(run):
    """Advance the exchange generator ``run`` to its next collective (a ``Hop``); the device
    work it waits for on the way (queued encodes and sums, allreduce.py's other Pendings) runs
    here, in this stage."""
    hop = run.send(None)
    while not isinstance(hop, Hop):
        settle(hop)
        hop = run.send(None)
    return hop
