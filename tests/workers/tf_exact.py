"""Worker: one step through Horovod's TensorFlow API for every encoder; checks that each rank's
reduced gradient is exactly what the compressed exchange defines (expected.py; each gradient is
a bucket of its own), and that variables end identical.

Usage: tf_exact.py MODE[:EXCHANGE][@ENCODERS] ..., MODE in tape (tf.function), eager, optimizer
(tf.compat.v1 optimizer), sum (op=hvd.Sum), all through Horovod's tape or optimizer; or fused,
fused_eager, fused_sum, the same through horovod_huffman.tensorflow.DistributedGradientTape,
whose fused buckets here are [b2], [w2] and [b1, w1] (every gradient encoded, 2048 coordinates
per bucket). EXCHANGE in allgather, two_phase, auto (the default). ENCODERS (after "@",
comma-separated; default: every encoder) limits a case to those encoders. Prints "OK <n>
checks" on rank 0.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                 # noqa: E402
import tensorflow as tf            # noqa: E402
import horovod.tensorflow as hvd   # noqa: E402

import horovod_huffman as hh                           # noqa: E402
from horovod_huffman.exchange.allreduce import choose            # noqa: E402
from horovod_huffman.exchange.buckets import BucketPlan          # noqa: E402
from expected import expected_sum, fused_means, staged  # noqa: E402  (beside this file)
from horovod_huffman.tensorflow import Compression, DistributedGradientTape  # noqa: E402
from horovod_huffman.tensorflow.fused import variable_names  # noqa: E402

LEVELS, BUCKET, MIN_NUMEL, SEED = 4, 64, 100, 1000
FUSED_BUCKET_BYTES = 4 * 2048


class MLP(tf.Module):
    """Plain tf.Variables (the same under Keras 2 and 3): kernels 24x64 and 64x40 are encoded,
    the biases (< MIN_NUMEL) ride the ordinary allreduce."""

    def __init__(self):
        super().__init__()
        init = np.random.default_rng(0)
        self.w1 = tf.Variable(init.standard_normal((24, 64)).astype(np.float32) * 0.2)
        self.b1 = tf.Variable(np.zeros(64, np.float32))
        self.w2 = tf.Variable(init.standard_normal((64, 40)).astype(np.float32) * 0.2)
        self.b2 = tf.Variable(np.zeros(40, np.float32))

    def __call__(self, x):
        return tf.nn.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2

    def weights(self):
        return [self.w1, self.b1, self.w2, self.b2]


def model_and_data(rank):
    model = MLP()
    rng = np.random.default_rng(rank)
    return model, rng.standard_normal((16, 24)).astype(np.float32), rng.integers(0, 40, 16)


def model_data_and_gradients(rank):
    """``model_and_data(rank)`` and this rank's local gradients (NumPy) of its loss."""
    model, x, y = model_and_data(rank)
    with tf.GradientTape() as tape:
        loss = loss_of(model, x, y)
    return model, x, y, [g.numpy() for g in tape.gradient(loss, model.weights())]


def loss_of(model, x, y):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x)))


def run_fused(encoder, mode, exchange):
    """Our tape: every gradient (biases too) in fused buckets; each equals its slice of its
    bucket's exact sum, scaled by the op."""
    rank, n = hvd.rank(), hvd.size()
    model, x, y, local = model_data_and_gradients(rank)
    comp = Compression.build(encoder=encoder, quantizer=hh.QSGD(levels=LEVELS, bucket_size=BUCKET),
                             error_feedback=False, min_numel=0, seed=SEED + rank,
                             exchange=exchange, bucket_bytes=FUSED_BUCKET_BYTES)
    op = hvd.Sum if mode == "fused_sum" else hvd.Average

    def reduce():
        with tf.GradientTape() as tape:
            loss = loss_of(model, x, y)
        return DistributedGradientTape(tape, compression=comp, op=op).gradient(
            loss, model.weights())
    reduced = [g.numpy() for g in (reduce() if mode == "fused_eager" else tf.function(reduce)())]
    names = variable_names(model.weights())
    (fused,) = comp.fused.values()
    (plan,) = fused.plans
    assert [[s.name for s in b.slots] for b in plan.buckets] == \
        [[names[3]], [names[2]], [names[1], names[0]]], plan.buckets
    everyone = hvd.allgather_object(dict(zip(names, local)))
    means = fused_means(plan, everyone, [SEED + r for r in range(n)], choose(exchange, n), encoder,
                        LEVELS, BUCKET, 1.0 if op == hvd.Sum else 1.0 / n)
    for name, g, got in zip(names, local, reduced):
        expected = means[name].reshape(g.shape)
        assert got.dtype == g.dtype and np.array_equal(got, expected), \
            (encoder, mode, name, np.abs(got - expected).max())
    return len(names)


def run_case(encoder, mode, exchange):
    if mode.startswith("fused"):
        return run_fused(encoder, mode, exchange)
    rank, n = hvd.rank(), hvd.size()
    model, x, y, local = model_data_and_gradients(rank)
    comp = Compression.build(encoder=encoder, quantizer=hh.QSGD(levels=LEVELS, bucket_size=BUCKET),
                             error_feedback=False, min_numel=MIN_NUMEL, seed=SEED + rank,
                             exchange=exchange)
    op = hvd.Sum if mode == "sum" else hvd.Average
    if mode == "optimizer":
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                       compression=comp, op=op)
        pairs = opt.compute_gradients(lambda: loss_of(model, x, y), model.weights())
        reduced = [g.numpy() for g, _ in pairs]
    else:
        def reduce():
            with tf.GradientTape() as tape:
                loss = loss_of(model, x, y)
            dtape = hvd.DistributedGradientTape(tape, compression=comp, op=op)
            return dtape.gradient(loss, model.weights())
        reduced = [g.numpy() for g in (tf.function(reduce)() if mode == "tape" else reduce())]
    key_of = {shape: key for key, shape in comp.parameter_shapes.items()}
    everyone = hvd.allgather_object({g.shape: g for g in local})
    checks = 0
    for g, got in zip(local, reduced):
        if g.size >= MIN_NUMEL:
            # Each gradient is a bucket of its own, named by its graph key.
            key = key_of[g.shape]
            (bucket,) = BucketPlan([(key, g.size, "float32")], g.size, BUCKET).buckets
            buffers = [staged({key: grads[g.shape]}, bucket) for grads in everyone]
            total, _, _ = expected_sum(buffers, [SEED + r for r in range(n)], bucket,
                                    choose(exchange, n), encoder, LEVELS, BUCKET)
            expected = (total[:g.size] * np.float32(1.0 if mode == "sum" else 1.0 / n))
            expected = expected.reshape(g.shape)
            assert np.array_equal(got, expected), (encoder, mode, g.shape,
                                                   np.abs(got - expected).max())
        else:
            ref = hvd.allreduce(tf.constant(g), op=op, name=f"check_{encoder}_{mode}_{g.shape}")
            assert np.allclose(got, ref.numpy(), rtol=1e-6, atol=1e-7), (encoder, mode, g.shape)
        checks += 1
    return checks


def main():
    hvd.init()
    checks = 0
    for case in sys.argv[1:]:
        case, _, encoders = case.partition("@")
        mode, _, exchange = case.partition(":")
        for encoder in encoders.split(",") if encoders else hh.ENCODERS:
            checks += run_case(encoder, mode, exchange or "auto")
    if hvd.rank() == 0:
        print(f"OK {checks} checks", flush=True)


if __name__ == "__main__":
    main()
