"""Horovod's Keras API for Keras 3: ``model.fit`` with gradients reduced through any compressor.

Horovod 0.28's ``horovod.tensorflow.keras`` predates Keras 3: its ``DistributedOptimizer`` does
not hook a Keras 3 optimizer, so ``model.fit`` trains every rank on its own gradients. This
module offers the same names for Keras 3; a script changes its import only:

>>> import horovod_huffman.tensorflow.keras as hvd        # was: import horovod.tensorflow.keras
>>> hvd.init()                                                           # doctest: +SKIP
>>> opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01),
...                                compression=hvd.Compression.rlh)      # doctest: +SKIP
>>> model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")  # doctest: +SKIP
>>> model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
...                            hvd.callbacks.MetricAverageCallback()])   # doctest: +SKIP

``Compression`` is horovod_huffman.tensorflow's (Horovod's ``none`` and ``fp16`` and every
encoder). With legacy Keras (tf-keras, ``TF_USE_LEGACY_KERAS=1``) use Horovod's own module
instead (horovod_huffman.tensorflow.legacy_keras says how). docs/tensorflow-adapter.md has both
routes.
"""
import horovod.tensorflow as _hvd
from horovod.tensorflow import (Average, Sum, allgather, allgather_object, allreduce,   # noqa: F401
                                broadcast, broadcast_object, broadcast_variables,
                                cross_rank, cross_size, global_process_set, init,
                                is_initialized, local_rank, local_size, rank, shutdown, size)

from .. import Compression
from ..compressor import HuffmanCompressor
from ..fused import fused_reduce
from ..keras_routes import is_keras_3_optimizer
from ..variables import tf_variables
from . import callbacks                                                    # noqa: F401

__all__ = ["DistributedOptimizer", "Compression", "callbacks", "init", "shutdown", "rank",
           "size", "local_rank", "local_size", "cross_rank", "cross_size", "Average", "Sum"]


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",   # noqa: N802
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A Keras 3 optimizer of ``optimizer``'s class and configuration whose ``apply`` (and so
    ``apply_gradients``, which ``model.fit`` calls) first reduces the gradients over
    ``process_set`` with Horovod's allreduce through ``compression``, then applies them.

    Arguments as ``horovod.tensorflow.keras.DistributedOptimizer``'s; ``groups`` may list Keras
    variables. Local gradient aggregation (``backward_passes_per_step`` > 1) is Horovod's
    legacy-Keras feature: here it raises; Keras 3's own ``gradient_accumulation_steps`` option
    of the optimizer accumulates reduced gradients instead. ``scale_local_gradients`` has no
    effect: this optimizer has no local variables. With a ``HuffmanCompressor``
    (``Compression.<encoder>``, ``Compression.build``) the gradients are reduced in fused buckets
    (horovod_huffman.tensorflow.fused), each exchanged as soon as its gradients exist; ``groups``
    then has no effect.
    """
    if not is_keras_3_optimizer(optimizer):
        raise TypeError(
            f"horovod_huffman.tensorflow.keras.DistributedOptimizer wraps Keras 3 optimizers; "
            f"got {type(optimizer).__module__}.{type(optimizer).__name__}. With legacy Keras "
            "(tf-keras, TF_USE_LEGACY_KERAS=1) use horovod.tensorflow.keras.DistributedOptimizer "
            "(see horovod_huffman.tensorflow.legacy_keras)")
    if backward_passes_per_step != 1:
        raise ValueError("backward_passes_per_step > 1 is not supported with Keras 3; use the "
                         "optimizer's own gradient_accumulation_steps")
    if op not in (Average, Sum):
        raise ValueError("op must be hvd.Average or hvd.Sum")
    if num_groups:
        groups = groups if groups is not None else num_groups
    if isinstance(groups, list):
        groups = [tf_variables(group) for group in groups]
    name = name or f"Distributed{type(optimizer).__name__}"
    if isinstance(compression, HuffmanCompressor):
        reduce = fused_reduce(compression, op=op, process_set=process_set,
                             sparse_as_dense=sparse_as_dense,
                             gradient_predivide_factor=gradient_predivide_factor, name=name)
    else:
        reduce = _hvd._make_allreduce_grads_fn(name, device_dense, device_sparse, compression,
                                               sparse_as_dense, op, gradient_predivide_factor,
                                               groups, process_set)
    base = type(optimizer)

    def apply(self, grads, trainable_variables=None):
        variables = self._trainable_variables if trainable_variables is None else \
            list(trainable_variables)
        grads = list(grads)
        if grads:
            grads = list(reduce(grads, tf_variables(variables)))
        return base.apply(self, grads, trainable_variables)

    cls = type(base.__name__, (base,), {"apply": apply, "__module__": __name__,
                                        "__doc__": DistributedOptimizer.__doc__})
    return cls.from_config(optimizer.get_config())
