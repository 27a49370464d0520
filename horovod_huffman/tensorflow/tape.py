"""``DistributedGradientTape`` with Horovod's signature that also takes Keras 3 variables.

>>> import horovod_huffman.tensorflow as hh_tf
>>> with tf.GradientTape() as tape:
...     loss = loss_fn(y, model(x, training=True))                  # doctest: +SKIP
>>> tape = hh_tf.DistributedGradientTape(tape, compression=hh_tf.Compression.rlh)  # doctest: +SKIP
>>> grads = tape.gradient(loss, model.trainable_variables)          # doctest: +SKIP

This is Horovod's own tape (the same options, local sources and errors), with two changes:

- with a ``HuffmanCompressor`` (``Compression.<encoder>``, ``Compression.build``) it reduces
  the gradients in fused buckets (fused.py) instead of one exchange per gradient: the PyTorch
  adapter's buckets, each exchanged as soon as its gradients exist. ``groups`` and
  ``num_groups`` then have no effect: the buckets are the groups. Other compressors
  (``Compression.none``, ``Compression.fp16``) go through Horovod's allreduce as they are;
- ``gradient`` and ``register_local_source`` take Keras 3 variables, which lack the
  ``source.ref()`` Horovod 0.28 calls: they use the ``tf.Variable`` behind each one
  (variables.py). The gradients come back in the order of the sources given.
"""
import types

import horovod.tensorflow as hvd

from .compressor import HuffmanCompressor
from .fused import fused_reduce
from .variables import tf_variable, tf_variables


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802
                            compression=hvd.Compression.none, sparse_as_dense=False,
                            op=hvd.Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=hvd.global_process_set,
                            scale_local_gradients=True):
    """``hvd.DistributedGradientTape(gradtape, ...)`` (same arguments), reducing through fused
    buckets with a ``HuffmanCompressor``, for sources that may be Keras 3 variables. ``groups``
    may list Keras 3 variables too."""
    if isinstance(groups, list):
        groups = [tf_variables(group) for group in groups]
    tape = hvd.DistributedGradientTape(
        gradtape, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense, op=op,
        gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    # Bound to this instance: Horovod's methods find their base class through
    # ``super(self.__class__, self)``, so a subclass of Horovod's tape class would recurse.
    tape.gradient = types.MethodType(_gradient, tape)
    tape.register_local_source = types.MethodType(_register_local_source, tape)
    if isinstance(compression, HuffmanCompressor):
        tape._allreduce_grads = fused_reduce(
            compression, op=op, process_set=process_set, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor,
            name="DistributedGradientTape")
    return tape


def _gradient(self, target, sources, output_gradients=None, use_generic_names=False):
    return type(self).gradient(self, target, tf_variables(sources), output_gradients,
                               use_generic_names)


def _register_local_source(self, source):
    return type(self).register_local_source(self, tf_variable(source))
