"""Data-parallel training of a small CNN on scikit-learn's digits with TensorFlow and
Huffman-coded gradients.

    horovodrun --gloo -np 2 python examples/tensorflow2_digits.py --compression rlh --mode fit
    TF_USE_LEGACY_KERAS=1 horovodrun --gloo -np 2 python examples/tensorflow2_digits.py \
        --compression rlh --mode fit       # the same through legacy Keras (tf-keras)
    horovodrun --gloo -np 2 python examples/tensorflow2_digits.py --pufferfish --warmup-epochs 2 \
        --compression rlh                  # Pufferfish's low-rank model, its gradients coded

--mode tape:      a tf.function train step with horovod_huffman.tensorflow.DistributedGradientTape
                  (Horovod's arguments, Keras 3 variables, gradients in fused buckets);
--mode keras:     a Keras model whose custom train_step uses the tape, trained with model.fit;
--mode optimizer: hvd.DistributedOptimizer around a tf.compat.v1 optimizer;
--mode fit:       model.compile/model.fit with Horovod's Keras API (a DistributedOptimizer and
                  the broadcast and metric-average callbacks): horovod_huffman.tensorflow.keras
                  under Keras 3, horovod.tensorflow.keras under legacy Keras
                  (TF_USE_LEGACY_KERAS=1, tf-keras installed).
Rank 0 prints per-epoch loss, test accuracy and compression statistics, then a JSON line
(``RESULT {...}``) that the tests read: one per seed (``--seed 0 1 2`` trains three times in
one launch).
"""
import argparse
import json
import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                   # noqa: E402
import tensorflow as tf              # noqa: E402
import horovod.tensorflow as hvd     # noqa: E402

import horovod_huffman as hh                                 # noqa: E402
from horovod_huffman.tools.bench.traces import digits_data         # noqa: E402
from horovod_huffman.tensorflow import (Compression, DistributedGradientTape,   # noqa: E402
                                        legacy_keras_requested, switch_to_low_rank, tf_variables)

COMPRESSIONS = ["none", "fp16"] + list(hh.ENCODERS)


def make_compression(name, args, seed):
    if name in ("none", "fp16"):
        return getattr(Compression, name)
    return Compression.build(encoder=name, quantizer=hh.QSGD(levels=args.levels),
                             error_feedback=not args.no_error_feedback,
                             seed=seed * 65536 + hvd.rank())


def keras_horovod():
    """Horovod's Keras API for the Keras in use: ours for Keras 3, Horovod's own for legacy
    Keras (with the one line that points it at tf-keras)."""
    if legacy_keras_requested():
        import horovod_huffman.tensorflow.legacy_keras   # noqa: F401  (before Horovod's module)
        import horovod.tensorflow.keras as hvd_keras
    else:
        import horovod_huffman.tensorflow.keras as hvd_keras
    return hvd_keras


def cnn():
    layers = tf.keras.layers
    return [layers.Reshape((8, 8, 1)), layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.Conv2D(64, 3, padding="same", activation="relu"), layers.MaxPool2D(),
            layers.Flatten(), layers.Dense(128, activation="relu"), layers.Dense(10)]


def cosine_rate(lr, epoch, epochs):
    """The learning rate of 0-based ``epoch`` of ``epochs`` under ``--schedule cosine``: ``lr``
    at epoch 0, decayed towards 0 along half a cosine."""
    return lr * 0.5 * (1 + math.cos(math.pi * epoch / epochs))


def tape_step(model, compression, loss_fn, opt):
    """A tf.function train step of ``model`` through DistributedGradientTape with the Keras
    optimizer ``opt``."""

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        tape = DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return step


def identical(model):
    """Whether every rank holds the same trainable variables (exactly)."""
    flat = np.concatenate([v.numpy().reshape(-1) for v in model.trainable_variables])
    return bool(all(np.array_equal(flat, o) for o in hvd.allgather_object(flat)))


class TapeModel(tf.keras.Sequential):
    """A Keras model whose train_step reduces gradients with DistributedGradientTape."""

    def __init__(self, compression, loss_fn, **kwargs):
        super().__init__(cnn(), **kwargs)
        self.compression = compression
        self.loss_fn = loss_fn

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, self(x, training=True))
        tape = DistributedGradientTape(tape, compression=self.compression)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compression", default="rlh", choices=COMPRESSIONS)
    p.add_argument("--mode", default="tape", choices=["tape", "keras", "optimizer", "fit"])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="scaled by the number of ranks")
    p.add_argument("--schedule", default="constant", choices=["constant", "cosine"],
                   help="the learning rate per epoch: --lr throughout, or cosine decay to 0")
    p.add_argument("--levels", type=int, default=8, help="QSGD levels s")
    p.add_argument("--no-error-feedback", action="store_true")
    p.add_argument("--pufferfish", action="store_true",
                   help="--mode tape: after --warmup-epochs of full-rank training, factorize the "
                        "model (Pufferfish) and train the low-rank model")
    p.add_argument("--warmup-epochs", type=int, default=2, help="Pufferfish's vanilla warm-up")
    p.add_argument("--rank-ratio", type=float, default=0.25, help="Pufferfish's rank per output")
    p.add_argument("--extra-bn", action="store_true",
                   help="Pufferfish: a BatchNormalization between a convolution's two factors")
    p.add_argument("--seed", type=int, nargs="+", default=[0],
                   help="one training run per seed, one after another, each printing its RESULT")
    args = p.parse_args()
    if args.pufferfish and args.mode != "tape":
        p.error("--pufferfish rebuilds the model and its train step: use --mode tape")

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    data = digits_data()
    for seed in args.seed:
        train(args, seed, data)


def train(args, seed, data):
    """One training run from ``seed`` on ``data`` (``digits_data``'s): a new model,
    optimizer and compression."""
    tf.keras.utils.set_random_seed(seed)
    xtr, ytr, xte, yte = data
    x, y = xtr[hvd.rank()::hvd.size()], ytr[hvd.rank()::hvd.size()]
    steps = len(y) // args.batch_size
    x, y = x[:steps * args.batch_size], y[:steps * args.batch_size]
    compression = make_compression(args.compression, args, seed)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    lr = args.lr * hvd.size()
    rate = tf.Variable(lr, trainable=False)   # the epoch's learning rate, for --mode optimizer

    callbacks = []
    if args.mode == "fit":
        hvd_keras = keras_horovod()
        model = tf.keras.Sequential(cnn())
        model(x[:1])
        opt = hvd_keras.DistributedOptimizer(tf.keras.optimizers.SGD(lr, momentum=0.9),
                                             compression=compression)
        model.compile(optimizer=opt, loss=loss_fn)
        callbacks = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0),
                     hvd_keras.callbacks.MetricAverageCallback()]
    elif args.mode == "keras":
        model = TapeModel(compression, loss_fn)
        opt = tf.keras.optimizers.SGD(lr, momentum=0.9)
        model.compile(optimizer=opt, loss=loss_fn)
        model(x[:1])
        hvd.broadcast_variables(tf_variables(model.variables), root_rank=0)
    else:
        model = tf.keras.Sequential(cnn())
        model(x[:1])
        hvd.broadcast_variables(tf_variables(model.variables), root_rank=0)
        if args.mode == "tape":
            opt = tf.keras.optimizers.SGD(lr, momentum=0.9)
            step = tape_step(model, compression, loss_fn, opt)
        else:
            opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(rate, 0.9),
                                           compression=compression)
            variables = tf_variables(model.trainable_variables)

            def step(xb, yb):
                def loss():
                    return loss_fn(yb, model(xb, training=True))
                opt.minimize(loss, var_list=variables)
                return loss()

    full_rank_params = model.count_params()
    switched_identical = None

    def switch(model):
        """End of the warm-up: the low-rank model, a fresh optimizer and its train step."""
        model, report = switch_to_low_rank(model, rank_ratio=args.rank_ratio,
                                           extra_bn=args.extra_bn)
        if hvd.rank() == 0:
            print(f"pufferfish: {report.summary()}", flush=True)
        opt = tf.keras.optimizers.SGD(lr, momentum=0.9)
        return model, opt, tape_step(model, compression, loss_fn, opt), identical(model)

    if args.pufferfish and args.warmup_epochs == 0:
        model, opt, step, switched_identical = switch(model)
    rng = np.random.default_rng(seed + hvd.rank())
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        if args.schedule == "cosine":
            epoch_lr = cosine_rate(lr, epoch, args.epochs)
            rate.assign(epoch_lr)
            if args.mode != "optimizer":
                opt.learning_rate = epoch_lr
        order = rng.permutation(len(y))
        if args.mode in ("keras", "fit"):
            hist = model.fit(x[order], y[order], batch_size=args.batch_size, epochs=1,
                             shuffle=False, verbose=0, callbacks=callbacks)
            train_loss = float(hist.history["loss"][-1])
        else:
            losses = [float(step(x[order[s:s + args.batch_size]], y[order[s:s + args.batch_size]]))
                      for s in range(0, len(y), args.batch_size)]
            train_loss = float(np.mean(losses))
        logits = model(xte, training=False)
        acc = float(np.mean(np.argmax(logits, 1) == yte))
        if hvd.rank() == 0:
            line = f"epoch {epoch + 1}: train loss {train_loss:.4f}, test accuracy {100 * acc:.2f}%"
            if hasattr(compression, "stats"):
                t = compression.stats()["total"]
                line += f", {t['bits_per_coord']:.3f} bits/coord, {t['ratio']:.1f}x smaller"
            print(line, flush=True)
        if args.pufferfish and epoch + 1 == args.warmup_epochs:
            model, opt, step, switched_identical = switch(model)
    same = identical(model)
    if hvd.rank() == 0:
        result = {"compression": args.compression, "mode": args.mode, "ranks": hvd.size(),
                  "seed": seed, "test_accuracy": acc, "identical_parameters": same,
                  "seconds": time.perf_counter() - t0, "parameters": model.count_params(),
                  "full_rank_parameters": full_rank_params}
        if args.pufferfish:
            result["identical_after_switch"] = switched_identical
        if hasattr(compression, "stats"):
            result["stats"] = compression.stats()["total"]
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
