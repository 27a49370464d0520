"""Points Horovod's Keras API at legacy Keras (tf-keras): import this before
``horovod.tensorflow.keras``.

>>> import horovod_huffman.tensorflow.legacy_keras  # noqa: F401     # doctest: +SKIP
>>> import horovod.tensorflow.keras as hvd                             # doctest: +SKIP

With ``TF_USE_LEGACY_KERAS=1`` and tf-keras installed, ``tf.keras`` is tf-keras, and Horovod's
``DistributedOptimizer`` and callbacks work on its models and optimizers. But Horovod 0.28 also
takes its Keras backend from ``import keras``, which is still Keras 3, so its callbacks fail
(``MetricAverageCallback``: "module 'keras.backend' has no attribute 'constant'"). Importing
this module imports ``horovod.tensorflow.keras`` once with ``keras`` resolving to tf-keras, then
restores ``keras``; the later ``import horovod.tensorflow.keras`` gets that module. It raises
ImportError, instead of doing anything, when the legacy route is not set up (the variable
unset, tf-keras missing) or Horovod's Keras module was already imported against Keras 3.
"""
import importlib
import sys

from .keras_routes import legacy_keras_requested


def _import_horovod_keras():
    """horovod.tensorflow.keras, imported with ``keras`` resolving to tf-keras."""
    if not legacy_keras_requested():
        raise ImportError("horovod_huffman.tensorflow.legacy_keras: set TF_USE_LEGACY_KERAS=1 "
                          "before TensorFlow is imported (without it tf.keras is Keras 3: use "
                          "horovod_huffman.tensorflow.keras instead)")
    try:
        import tf_keras
    except ImportError as e:
        raise ImportError("horovod_huffman.tensorflow.legacy_keras needs tf-keras, pinned to the "
                          "TensorFlow version (pip install -e '.[tensorflow]')") from e
    loaded = sys.modules.get("horovod.tensorflow.keras")
    if loaded is not None:
        if getattr(loaded, "K", None) is tf_keras.backend:
            return loaded
        raise ImportError("horovod.tensorflow.keras was imported before "
                          "horovod_huffman.tensorflow.legacy_keras, against Keras 3: import "
                          "this module first")
    keras_3 = sys.modules.get("keras")
    sys.modules["keras"] = tf_keras
    try:
        return importlib.import_module("horovod.tensorflow.keras")
    finally:
        if keras_3 is None:
            sys.modules.pop("keras", None)
        else:
            sys.modules["keras"] = keras_3


horovod_keras = _import_horovod_keras()
"""Horovod's ``horovod.tensorflow.keras`` module, bound to tf-keras."""
