"""The tf.Variables behind Keras variables.

Keras 3 wraps each ``tf.Variable`` in a ``keras.Variable``, which has no ``ref()`` and is not
a ``tf.Variable``; Horovod 0.28's TensorFlow API (``DistributedGradientTape``,
``broadcast_variables``, optimizers' ``groups``) needs the ``tf.Variable`` itself. Legacy Keras
(tf-keras) variables and plain ``tf.Variable``s are returned as they are.
"""
import tensorflow as tf


def tf_variable(variable):
    """The ``tf.Variable`` behind ``variable`` (a Keras 3 variable's ``value``; anything else
    unchanged)."""
    if isinstance(variable, tf.Variable):
        return variable
    inner = getattr(variable, "value", None)
    return inner if isinstance(inner, tf.Variable) else variable


def tf_variables(variables):
    """``tf_variable`` of each of ``variables``, as a list."""
    return [tf_variable(v) for v in variables]
