"""Pufferfish for TensorFlow/Keras: the Dense and Conv2D layers of a Keras model as low-rank
factors (Wang et al., MLSys 2021), trained through ``hvd.DistributedGradientTape``.

>>> import numpy as np, tensorflow as tf
>>> from horovod_huffman.tensorflow import factorize
>>> model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(256),
...                              tf.keras.layers.Dense(256), tf.keras.layers.Dense(10)])
>>> low, report = factorize(model)       # the first and last layers stay full-rank
>>> type(low.layers[1]).__name__, report.params_before, report.params_after
('LowRankDense', 85002, 52234)

- ``Dense`` (kernel in x out) -> ``LowRankDense``: Dense(r, no bias), then Dense(out) with the
  layer's activation and bias;
- ``Conv2D`` (k x k, C_in -> C_out) -> ``LowRankConv2D``: the k x k convolution C_in -> r (no
  bias), optionally a BatchNormalization (``extra_bn``), then a 1 x 1 convolution r -> C_out
  with the activation and bias.

r = round(rank_ratio x units or filters); layers whose factors would not be smaller stay
full-rank (horovod_huffman.lowrank). ``factorize`` returns a new model (Sequential or
functional; subclassed models cannot be rebuilt from their layers) that shares the kept layers
with the old one; ``switch_to_low_rank`` also makes every rank's copy equal.
"""
import keras
import horovod.tensorflow as hvd

from ..lowrank import (DEFAULT_RANK_RATIO, Factorization, factorizes, full_rank_layers,
                       rank_for, split)

__all__ = ["LowRankDense", "LowRankConv2D", "factorize", "switch_to_low_rank"]

_LAYERS = (keras.layers.Dense, keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D,
           keras.layers.Embedding, keras.layers.RNN, keras.layers.LSTM, keras.layers.GRU)


class LowRankDense(keras.layers.Layer):
    """Dense(rank, no bias) then Dense(units): an in x units kernel as rank (in + units)."""

    def __init__(self, units, rank, activation=None, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.units, self.rank = int(units), int(rank)
        self.activation, self.use_bias = keras.activations.get(activation), use_bias
        self.first = keras.layers.Dense(self.rank, use_bias=False, name="first")
        self.second = keras.layers.Dense(self.units, activation=activation, use_bias=use_bias,
                                         name="second")

    def build(self, input_shape):
        self.first.build(input_shape)
        self.second.build(tuple(input_shape[:-1]) + (self.rank,))

    def call(self, x):
        return self.second(self.first(x))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "rank": self.rank,
                "activation": keras.activations.serialize(self.activation),
                "use_bias": self.use_bias}

    @classmethod
    def from_dense(cls, dense, rank):
        """The factorization of a built ``Dense`` (truncated SVD of its kernel)."""
        kernel = dense.kernel.numpy()                          # in x out
        out = cls(dense.units, rank, dense.activation, dense.use_bias, name=dense.name)
        out.build((None, kernel.shape[0]))
        u, v = split(kernel.T, rank)                           # out x r, r x in
        out.first.kernel.assign(v.T.astype(kernel.dtype))
        out.second.kernel.assign(u.T.astype(kernel.dtype))
        if dense.use_bias:
            out.second.bias.assign(dense.bias.numpy())
        return out


class LowRankConv2D(keras.layers.Layer):
    """The k x k convolution C_in -> rank (no bias), an optional BatchNormalization, then a
    1 x 1 convolution rank -> filters: a k x k x C_in x filters kernel as
    rank (k k C_in + filters)."""

    def __init__(self, filters, kernel_size, rank, strides=1, padding="valid",
                 dilation_rate=1, activation=None, use_bias=True, extra_bn=False, **kwargs):
        super().__init__(**kwargs)
        self.filters, self.rank, self.extra_bn = int(filters), int(rank), bool(extra_bn)
        self.kernel_size, self.strides = kernel_size, strides
        self.padding, self.dilation_rate = padding, dilation_rate
        self.activation, self.use_bias = keras.activations.get(activation), use_bias
        self.first = keras.layers.Conv2D(self.rank, kernel_size, strides=strides,
                                         padding=padding, dilation_rate=dilation_rate,
                                         use_bias=False, name="first")
        self.bn = keras.layers.BatchNormalization(name="bn") if extra_bn else None
        self.second = keras.layers.Conv2D(self.filters, 1, activation=activation,
                                          use_bias=use_bias, name="second")

    def build(self, input_shape):
        self.first.build(input_shape)
        shape = self.first.compute_output_shape(input_shape)
        if self.bn is not None:
            self.bn.build(shape)
        self.second.build(shape)

    def call(self, x, training=None):
        x = self.first(x)
        if self.bn is not None:
            x = self.bn(x, training=training)
        return self.second(x)

    def compute_output_shape(self, input_shape):
        return self.second.compute_output_shape(self.first.compute_output_shape(input_shape))

    def get_config(self):
        return {**super().get_config(), "filters": self.filters,
                "kernel_size": self.kernel_size, "rank": self.rank, "strides": self.strides,
                "padding": self.padding, "dilation_rate": self.dilation_rate,
                "activation": keras.activations.serialize(self.activation),
                "use_bias": self.use_bias, "extra_bn": self.extra_bn}

    @classmethod
    def from_conv(cls, conv, rank, extra_bn=False):
        """The factorization of a built ``Conv2D`` (channels last, groups 1): the SVD of its
        kernel as C_out x (k k C_in)."""
        kernel = conv.kernel.numpy()                           # kh x kw x C_in x C_out
        kh, kw, cin, cout = kernel.shape
        out = cls(conv.filters, conv.kernel_size, rank, conv.strides, conv.padding,
                  conv.dilation_rate, conv.activation, conv.use_bias, extra_bn, name=conv.name)
        out.build((None, None, None, cin))
        u, v = split(kernel.reshape(-1, cout).T, rank)         # C_out x r, r x (kh kw C_in)
        out.first.kernel.assign(v.T.reshape(kh, kw, cin, rank).astype(kernel.dtype))
        out.second.kernel.assign(u.T.reshape(1, 1, rank, cout).astype(kernel.dtype))
        if conv.use_bias:
            out.second.bias.assign(conv.bias.numpy())
        return out


def _low_rank(layer, rank_ratio, extra_bn):
    """(factorized replacement of a built ``layer``, rank), or (None, None)."""
    if type(layer) is keras.layers.Dense:
        fan_in = layer.kernel.shape[0]
        rank = rank_for(layer.units, rank_ratio)
        if factorizes(layer.units, fan_in, rank):
            return LowRankDense.from_dense(layer, rank), rank
    elif type(layer) is keras.layers.Conv2D and layer.groups == 1 and \
            layer.data_format == "channels_last":
        kh, kw, cin, cout = layer.kernel.shape
        rank = rank_for(cout, rank_ratio)
        if factorizes(cout, kh * kw * cin, rank):
            return LowRankConv2D.from_conv(layer, rank, extra_bn), rank
    return None, None


def factorize(model, rank_ratio=DEFAULT_RANK_RATIO, keep=None, extra_bn=False):
    """``(new model, Factorization)``: ``model`` (a built Sequential or functional Keras model)
    with every Dense and Conv2D replaced by its low-rank factorization from the current weights,
    except the layers named in ``keep`` (default: the first and last layers). Kept layers are
    shared with ``model``, not copied."""
    if not isinstance(model, keras.Sequential) and not _is_functional(model):
        raise TypeError("factorize rebuilds a model from its layers: pass a Sequential or "
                        f"functional Keras model, not a subclassed {type(model).__name__}")
    if not model.built:
        raise ValueError("build the model first (call it on a batch) so its weights exist")
    names = [layer.name for layer in model.layers if isinstance(layer, _LAYERS)]
    keep = full_rank_layers(names, keep)
    replaced, layers, kept = {}, {}, []
    for layer in model.layers:
        if layer.name not in names:
            continue
        new, rank = (None, None) if layer.name in keep else _low_rank(layer, rank_ratio, extra_bn)
        if new is None:
            kept.append(layer.name)
        else:
            replaced[layer.name], layers[layer.name] = new, rank
    new_model = keras.models.clone_model(
        model, clone_function=lambda layer: replaced.get(layer.name, layer))
    return new_model, Factorization(layers, kept, model.count_params(),
                                    new_model.count_params())


def _is_functional(model):
    return type(model).__name__ == "Functional" or (type(model) is keras.Model and
                                                    hasattr(model, "_operations"))


def switch_to_low_rank(model, rank_ratio=DEFAULT_RANK_RATIO, keep=None, extra_bn=False,
                       root_rank=0):
    """End Pufferfish's vanilla warm-up under Horovod: ``factorize`` the model and broadcast the
    new model's variables from ``root_rank``, so every rank holds the same factors. Returns
    ``(new model, Factorization)``; build a fresh optimizer (and a new ``tf.function`` train
    step) for the new model's variables. Call it on every rank at the same step."""
    new_model, report = factorize(model, rank_ratio, keep, extra_bn)
    hvd.broadcast_variables([getattr(v, "value", v) for v in new_model.variables],
                            root_rank=root_rank)
    return new_model, report
