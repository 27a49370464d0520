"""Pufferfish's factorization of Keras models (horovod_huffman.tensorflow.pufferfish): shapes and
parameter counts against the formulas, full-rank factorizations that reproduce the layer,
truncated ones whose error is the dropped singular values."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                 # noqa: E402
import pytest                      # noqa: E402
import tensorflow as tf            # noqa: E402

from horovod_huffman import lowrank                                              # noqa: E402
from horovod_huffman.tensorflow import LowRankConv2D, LowRankDense, factorize   # noqa: E402

layers = tf.keras.layers


def built(layer, shape):
    layer.build(shape)
    return layer


@pytest.mark.parametrize("use_bias", [True, False])
def test_dense_shapes_counts_and_full_rank_outputs(use_bias):
    tf.keras.utils.set_random_seed(0)
    dense = built(layers.Dense(24, activation="relu", use_bias=use_bias), (None, 40))
    low = LowRankDense.from_dense(dense, 6)
    assert tuple(low.first.kernel.shape) == (40, 6) and tuple(low.second.kernel.shape) == (6, 24)
    assert low.count_params() == lowrank.dense_params(40, 24, use_bias, rank=6)
    x = np.random.default_rng(0).standard_normal((8, 40)).astype(np.float32)
    full = LowRankDense.from_dense(dense, 24)
    np.testing.assert_allclose(full(x), dense(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("extra_bn", [False, True])
def test_conv_shapes_counts_and_full_rank_outputs(extra_bn):
    tf.keras.utils.set_random_seed(0)
    conv = built(layers.Conv2D(20, 3, strides=2, padding="same"), (None, 11, 11, 6))
    low = LowRankConv2D.from_conv(conv, 5, extra_bn=extra_bn)
    assert tuple(low.first.kernel.shape) == (3, 3, 6, 5)
    assert tuple(low.second.kernel.shape) == (1, 1, 5, 20)
    # BatchNormalization holds 4 vectors, 2 of them trainable (PyTorch counts those 2).
    trainable = sum(int(np.prod(v.shape)) for v in low.trainable_variables)
    assert trainable == lowrank.conv_params(6, 20, 3, True, rank=5, extra_bn=extra_bn)
    x = np.random.default_rng(0).standard_normal((2, 11, 11, 6)).astype(np.float32)
    full = LowRankConv2D.from_conv(conv, 20, extra_bn=extra_bn)
    # A fresh BatchNormalization in inference mode scales by 1/sqrt(1 + eps).
    scale = 1 / np.sqrt(1 + 1e-3) if extra_bn else 1.0
    expected = conv(x).numpy() - conv.bias.numpy()
    np.testing.assert_allclose(full(x, training=False) - conv.bias.numpy(), expected * scale,
                               rtol=1e-4, atol=1e-4)


def test_truncated_conv_error_is_the_dropped_singular_values():
    tf.keras.utils.set_random_seed(1)
    conv = built(layers.Conv2D(16, 3), (None, 9, 9, 8))
    low = LowRankConv2D.from_conv(conv, 4)
    w = conv.kernel.numpy().reshape(-1, 16).T.astype(np.float64)
    rebuilt = low.second.kernel.numpy().reshape(4, 16).T.astype(np.float64) @ \
        low.first.kernel.numpy().reshape(-1, 4).T.astype(np.float64)
    s = np.linalg.svd(w, compute_uv=False)
    assert np.linalg.norm(w - rebuilt) == pytest.approx(np.linalg.norm(s[4:]), rel=1e-5)


def test_factorize_a_sequential_cnn_keeps_first_and_last_and_counts():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([
        tf.keras.Input((64,)), layers.Reshape((8, 8, 1)),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.Conv2D(64, 3, padding="same", activation="relu"), layers.MaxPool2D(),
        layers.Flatten(), layers.Dense(128, activation="relu"), layers.Dense(10)])
    low, report = factorize(model)
    names = [layer.name for layer in model.layers]
    assert report.kept == [names[1], names[-1]]
    assert report.layers == {names[2]: 16, names[5]: 32}
    assert report.params_after == low.count_params() == (
        lowrank.conv_params(1, 32, 3) + lowrank.conv_params(32, 64, 3, rank=16) +
        lowrank.dense_params(1024, 128, rank=32) + lowrank.dense_params(128, 10))
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    assert low(x).shape == (4, 10)
    assert low.layers[1] is model.layers[1]                  # kept layers are shared


def test_factorize_rejects_subclassed_models_and_unknown_names():
    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = layers.Dense(4)

        def call(self, x):
            return self.dense(x)

    with pytest.raises(TypeError, match="subclassed"):
        factorize(Net())
    model = tf.keras.Sequential([tf.keras.Input((8,)), layers.Dense(8)])
    with pytest.raises(ValueError, match="keep names no layer"):
        factorize(model, keep=["nope"])
