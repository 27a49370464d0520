"""Worker: training under Keras's loss scaler (``keras.optimizers.LossScaleOptimizer``) through
DistributedGradientTape, with one overflow step; the TensorFlow twin of torch_amp.py.

A Keras MLP on the digits trains STEPS full-shard steps on every rank; at step OVERFLOW rank 0's
scaled loss is multiplied by 1e38, so its gradients overflow to Inf. The scaler must skip that
step on every rank and only that one. DTYPE "float16" trains float16 variables (so the tape hands
the adapter float16 gradients) under the same scaler.

Usage: tf_amp.py DTYPE COMPRESSION [COMPRESSION ...], each "none" or "<encoder>:<exchange>"
(error feedback on, QSGD s = 8). Rank 0 prints one ``RESULT {...}`` line per compression
(overflow_steps.result) and its dtype.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                   # noqa: E402
import tensorflow as tf              # noqa: E402
import horovod.tensorflow as hvd     # noqa: E402
import keras                         # noqa: E402

from horovod_huffman.tools.bench.traces import digits_data                 # noqa: E402
from horovod_huffman.tensorflow import Compression, DistributedGradientTape   # noqa: E402
from overflow_steps import LR, OVERFLOW, STEPS, compression, result  # noqa: E402  (beside this file)


def run(name, dtype, data):
    rank, n = hvd.rank(), hvd.size()
    x, y, test_x, test_y = data
    x, y = x[rank::n].astype(dtype), y[rank::n]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)),
                              keras.layers.Dense(512, activation="relu", dtype=dtype),
                              keras.layers.Dense(256, activation="relu", dtype=dtype),
                              keras.layers.Dense(10, dtype=dtype)])
    comp = compression(name, Compression, rank)
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(LR))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for v in model.trainable_variables:             # every rank starts from rank 0's values
        v.assign(hvd.broadcast(tf.convert_to_tensor(v), root_rank=0))
    skipped, losses = [], []
    for step in range(STEPS):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, tf.cast(model(x), tf.float32))
            scaled = opt.scale_loss(loss)
            if step == OVERFLOW and rank == 0:
                scaled = scaled * 1e38              # overflows in backward
        tape = DistributedGradientTape(tape, compression=comp)
        grads = tape.gradient(scaled, model.trainable_variables)
        before = float(opt.dynamic_scale.numpy()) if opt.built else opt.initial_scale
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if float(opt.dynamic_scale.numpy()) < before:
            skipped.append(step)
        losses.append(float(loss))
    logits = model(test_x.astype(dtype)).numpy()
    accuracy = float((logits.argmax(1) == test_y).mean())
    flat = np.concatenate([np.asarray(v).reshape(-1) for v in model.trainable_variables])
    identical = bool(all(np.array_equal(flat, o) for o in hvd.allgather_object(flat)))
    return result(name, comp, skipped, losses, accuracy, identical, dtype=dtype)


def main():
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    data = digits_data()
    dtype = sys.argv[1]
    for name in sys.argv[2:]:
        outcome = run(name, dtype, data)
        if hvd.rank() == 0:
            print("RESULT " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
