"""Worker: Horovod's Keras API in ``model.fit``, on the Keras the environment selects (Keras 3:
horovod_huffman.tensorflow.keras; TF_USE_LEGACY_KERAS=1: horovod.tensorflow.keras through
horovod_huffman.tensorflow.legacy_keras). Checks, on every rank:

- exact reduction: after one step of plain SGD from identical weights, the weights are identical
  on all ranks and equal to w - lr * (the mean of every rank's decoded gradient, expected.py);
- the broadcast callback: ranks that start from different weights train identical ones
  (Keras 3 route: identical already when the first batch begins);
- the metric-average callback: every rank's epoch logs equal the mean of the ranks' own;
- horovod_huffman.tensorflow.DistributedGradientTape on the Keras model's variables: exactly
  the mean of the ranks' decoded gradients.

The Keras 3 optimizer and the tape reduce in fused buckets (the expected values follow the
compressor's bucket plan); Horovod's legacy Keras optimizer reduces each gradient as a bucket of
its own.

Usage: tf_fit.py [exchange=allgather|two_phase|auto]. Prints "OK <route>" on rank 0.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                 # noqa: E402
import tensorflow as tf            # noqa: E402
import horovod.tensorflow as htf   # noqa: E402

import horovod_huffman as hh                                 # noqa: E402
from horovod_huffman.exchange.allreduce import choose                  # noqa: E402
from horovod_huffman.exchange.buckets import BucketPlan                # noqa: E402
from horovod_huffman.tensorflow import (Compression, DistributedGradientTape,  # noqa: E402
                                        legacy_keras_requested, tf_variables)
from horovod_huffman.tensorflow.fused import variable_names  # noqa: E402
from expected import expected_sum, fused_means, staged        # noqa: E402  (beside this file)

LEGACY = legacy_keras_requested()
if LEGACY:
    import horovod_huffman.tensorflow.legacy_keras  # noqa: E402,F401
    import horovod.tensorflow.keras as hvd           # noqa: E402
else:
    import horovod_huffman.tensorflow.keras as hvd   # noqa: E402

LEVELS, BUCKET, MIN_NUMEL, SEED, LR, BATCH = 4, 64, 100, 2000, 0.1, 16


def mlp(seed):
    """Dense 24 -> 64 (ReLU) -> 40: kernels 24x64 and 64x40 are encoded, biases (< MIN_NUMEL)
    ride Horovod's allreduce. Weights drawn from ``seed``."""
    model = tf.keras.Sequential([tf.keras.Input((24,)), tf.keras.layers.Dense(64, "relu"),
                                 tf.keras.layers.Dense(40)])
    rng = np.random.default_rng(seed)
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.2
                       for w in model.get_weights()])
    return model


def data(rank, n=BATCH):
    rng = np.random.default_rng(100 + rank)
    return rng.standard_normal((n, 24)).astype(np.float32), rng.integers(0, 40, n)


LOSS = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def local_gradients(model, x, y):
    """This rank's gradients as model.fit computes them (the model's compute_loss, traced)."""
    x, y = tf.constant(x), tf.constant(y)

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x, y, model(x, training=True))
        return tape.gradient(loss, tf_variables(model.trainable_variables))
    return [g.numpy() for g in grads()]


def compression(exchange):
    return Compression.build(quantizer=hh.QSGD(levels=LEVELS, bucket_size=BUCKET),
                             error_feedback=False, min_numel=MIN_NUMEL, seed=SEED + htf.rank(),
                             exchange=exchange)


def expected_means(local, comp, exchange, names=None):
    """The mean over ranks of every rank's decoded gradient (encoded ones: expected.py; the
    small ones ride Horovod's allreduce), for this rank's ``local`` gradients. ``names``: the
    gradients' names in fused buckets (the compressor's one plan); None: each gradient a bucket
    of its own."""
    n = htf.size()
    kind = choose(exchange, n)
    if names is not None:
        everyone = htf.allgather_object(dict(zip(names, local)))
        (reduce,) = comp.fused.values()
        (plan,) = reduce.plans
        fused = fused_means(plan, everyone, [SEED + r for r in range(n)], kind, "rlh", LEVELS,
                            BUCKET, 1.0 / n)
        return [fused[name].reshape(g.shape) if name in fused else
                sum(grads[name] for grads in everyone) / np.float32(n)
                for name, g in zip(names, local)]
    key_of = {shape: key for key, shape in comp.parameter_shapes.items()}
    everyone = htf.allgather_object({g.shape: g for g in local})
    means = []
    for g in local:
        if g.size >= MIN_NUMEL:
            key = key_of[g.shape]
            (bucket,) = BucketPlan([(key, g.size, "float32")], g.size, BUCKET).buckets
            buffers = [staged({key: grads[g.shape]}, bucket) for grads in everyone]
            total, _, _ = expected_sum(buffers, [SEED + r for r in range(n)], bucket, kind, "rlh",
                                    LEVELS, BUCKET)
            means.append((total[:g.size] * np.float32(1.0 / n)).reshape(g.shape))
        else:
            means.append(sum(grads[g.shape] for grads in everyone) / np.float32(n))
    return means


def check_exact_reduction(exchange):
    model = mlp(0)                                       # identical on every rank
    x, y = data(htf.rank())
    before = [w.copy() for w in model.get_weights()]
    comp = compression(exchange)
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(LR),
                                                     compression=comp), loss=LOSS)
    local = local_gradients(model, x, y)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    after = model.get_weights()
    names = None if LEGACY else variable_names(tf_variables(model.trainable_variables))
    for g, w0, w1, mean in zip(local, before, after,
                               expected_means(local, comp, exchange, names)):
        expected = w0 - np.float32(LR) * mean
        np.testing.assert_allclose(w1, expected, rtol=1e-6, atol=1e-7, err_msg=str(g.shape))
    assert_identical(after, "after one step")


def check_tape(exchange):
    """horovod_huffman.tensorflow.DistributedGradientTape on the model's own (Keras) variables:
    the reduced gradients are exactly the mean of the ranks' decoded gradients."""
    model = mlp(1)
    x, y = (tf.constant(a) for a in data(htf.rank()))
    model.compile(loss=LOSS)
    local = local_gradients(model, x, y)
    comp = compression(exchange)

    @tf.function
    def reduced():
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x, y, model(x, training=True))
        tape = DistributedGradientTape(tape, compression=comp)
        return tape.gradient(loss, model.trainable_variables)

    got = [g.numpy() for g in reduced()]
    names = variable_names(tf_variables(model.trainable_variables))
    for g, mean, value in zip(local, expected_means(local, comp, exchange, names), got):
        if g.size >= MIN_NUMEL:
            assert np.array_equal(value, mean), (g.shape, np.abs(value - mean).max())
        else:
            np.testing.assert_allclose(value, mean, rtol=1e-6, atol=1e-7, err_msg=str(g.shape))


def check_callbacks():
    rank = htf.rank()
    model = mlp(rank)                                   # different on every rank
    x, y = data(rank, 4 * BATCH)
    first_batch, before, after = [], [], []

    class Record(tf.keras.callbacks.Callback):
        def __init__(self, into):
            super().__init__()
            self.into = into

        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0 and not first_batch:
                first_batch.append([w.copy() for w in self.model.get_weights()])

        def on_epoch_end(self, epoch, logs=None):
            self.into.append({k: float(v) for k, v in (logs or {}).items()})

    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(LR),
                                                     compression=Compression.rlh),
                  loss=LOSS, metrics=["accuracy"])
    model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
              validation_data=data(rank + 10), callbacks=[
                  hvd.callbacks.BroadcastGlobalVariablesCallback(0), Record(before),
                  hvd.callbacks.MetricAverageCallback(), Record(after)])
    assert_identical(model.get_weights(), "after training")
    if not LEGACY:      # Horovod's own callback broadcasts at the end of the first batch
        assert_identical(first_batch[0], "when the first batch begins")
    own = htf.allgather_object(before)
    seen = htf.allgather_object(after)
    assert all(s == seen[0] for s in seen), seen
    for epoch, logs in enumerate(after):
        assert set(logs) == {"loss", "accuracy", "val_loss", "val_accuracy"}, logs
        for metric, value in logs.items():
            mean = np.mean([o[epoch][metric] for o in own])
            assert abs(value - mean) <= 1e-6 * max(1.0, abs(mean)), (metric, value, mean)


def assert_identical(weights, when):
    flat = np.concatenate([w.reshape(-1) for w in weights])
    everyone = htf.allgather_object(flat)
    assert all(np.array_equal(flat, other) for other in everyone), f"ranks differ {when}"


def main():
    hvd.init()
    exchange = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("exchange=")),
                    "auto")
    check_exact_reduction(exchange)
    check_tape(exchange)
    check_callbacks()
    if htf.rank() == 0:
        print(f"OK {'legacy tf-keras' if LEGACY else 'keras 3'}", flush=True)


if __name__ == "__main__":
    main()
