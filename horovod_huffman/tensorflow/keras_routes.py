"""Which Keras route is in use, and the refusal of the one that would train silently
unreduced: Horovod's own Keras ``DistributedOptimizer`` around a Keras 3 optimizer.

``legacy_keras_requested`` reads ``TF_USE_LEGACY_KERAS`` with TensorFlow's own rule, so it
agrees with what ``tf.keras`` is.

Horovod 0.28's ``horovod.tensorflow.keras.DistributedOptimizer`` reduces gradients in the legacy
Keras optimizer methods (``get_gradients``, ``compute_gradients``), which Keras 3's
``model.fit`` never calls: every rank would train on its own gradients, with no error.
``refuse_keras_3`` (run when horovod_huffman.tensorflow is imported) wraps Horovod's builder so
that this case raises a TypeError naming the two routes that work. Every other call goes
through unchanged.
"""
import functools
import os
import sys

import horovod._keras as _horovod_keras

MESSAGE = (
    "horovod.tensorflow.keras.DistributedOptimizer does not reduce the gradients of a Keras 3 "
    "optimizer ({name}): Horovod 0.28 hooks only legacy Keras optimizers, so model.fit would "
    "train every rank on its own gradients. Use the same API for Keras 3 from horovod-huffman "
    "(import horovod_huffman.tensorflow.keras as hvd), or legacy Keras: set "
    "TF_USE_LEGACY_KERAS=1 with tf-keras installed and import "
    "horovod_huffman.tensorflow.legacy_keras before horovod.tensorflow.keras.")


# TensorFlow's values of TF_USE_LEGACY_KERAS that make tf.keras tf-keras (tensorflow/__init__.py).
LEGACY_KERAS_VALUES = ("true", "True", "1")


def legacy_keras_requested():
    """Whether ``TF_USE_LEGACY_KERAS`` makes ``tf.keras`` legacy Keras (tf-keras)."""
    return os.environ.get("TF_USE_LEGACY_KERAS") in LEGACY_KERAS_VALUES


def is_keras_3_optimizer(optimizer):
    """Whether ``optimizer`` is a Keras 3 optimizer (Keras 3 is then imported already)."""
    keras = sys.modules.get("keras")
    optimizers = getattr(keras, "optimizers", None)
    base = getattr(optimizers, "Optimizer", None)
    return isinstance(base, type) and isinstance(optimizer, base)


def refuse_keras_3():
    """Wrap Horovod's Keras ``create_distributed_optimizer`` (once) so that a Keras 3 optimizer
    raises TypeError(MESSAGE)."""
    build = _horovod_keras.create_distributed_optimizer
    if getattr(build, "refuses_keras_3", False):
        return

    @functools.wraps(build)
    def create_distributed_optimizer(*args, **kwargs):
        optimizer = kwargs["optimizer"] if "optimizer" in kwargs else args[1]
        if is_keras_3_optimizer(optimizer):
            raise TypeError(MESSAGE.format(name=type(optimizer).__name__))
        return build(*args, **kwargs)

    create_distributed_optimizer.refuses_keras_3 = True
    _horovod_keras.create_distributed_optimizer = create_distributed_optimizer
