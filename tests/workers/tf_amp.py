"""Worker: training under Keras's loss scaler (``keras.optimizers.LossScaleOptimizer``) through
DistributedGradientTape, with one overflow step; the TensorFlow twin of torch_amp.py.

A Keras MLP on the digits trains STEPS full-shard steps on every rank; at step OVERFLOW rank 0's
scaled loss is multiplied by 1e38, so its gradients overflow to Inf. The scaler must skip that
step on every rank and only that one. DTYPE "float16" trains float16 variables (so the tape hands
the adapter float16 gradients) under the same scaler.

Usage: tf_amp.py DTYPE COMPRESSION [COMPRESSION ...], each "none" or "<encoder>:<exchange>"
(error feedback on, QSGD s = 8). Rank 0 prints one ``RESULT {...}`` line per compression, with
the fields of torch_amp.py's and ``grad_bytes``, the bytes per coordinate of the gradients the
compressor encoded (2 for float16).
"""
import json
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                   # noqa: E402
import tensorflow as tf              # noqa: E402
import horovod.tensorflow as hvd     # noqa: E402
import keras                         # noqa: E402

import horovod_huffman as hh                                         # noqa: E402
from horovod_huffman.bench.traces import digits_data                 # noqa: E402
from horovod_huffman.tensorflow import Compression, DistributedGradientTape   # noqa: E402

STEPS, OVERFLOW, LR = 60, 20, 0.1


def compression(name):
    if name == "none":
        return Compression.none
    encoder, exchange = name.split(":")
    return Compression.build(encoder=encoder, quantizer=hh.QSGD(levels=8, bucket_size=512),
                             error_feedback=True, seed=100 + hvd.rank(), exchange=exchange)


def run(name, dtype, data):
    rank, n = hvd.rank(), hvd.size()
    x, y, test_x, test_y = data
    x, y = x[rank::n].astype(dtype), y[rank::n]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)),
                              keras.layers.Dense(512, activation="relu", dtype=dtype),
                              keras.layers.Dense(256, activation="relu", dtype=dtype),
                              keras.layers.Dense(10, dtype=dtype)])
    comp = compression(name)
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
    codec = getattr(comp, "codec", None)
    residuals = {} if codec is None else \
        {repr(k): float(np.linalg.norm(v)) for k, v in codec.residuals.items()}
    stats = None if codec is None else codec.stats()["total"]
    grad_bytes = None if stats is None else stats["raw_bytes"] / stats["coords"]
    return {"compression": name, "dtype": dtype, "grad_bytes": grad_bytes, "skipped": skipped, "final_loss": losses[-1],
            "accuracy": accuracy, "finite_after": all(math.isfinite(l)
                                                      for l in losses[OVERFLOW + 1:]),
            "identical_parameters": identical, "residual_norms": residuals}


def main():
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    data = digits_data()
    dtype = sys.argv[1]
    for name in sys.argv[2:]:
        result = run(name, dtype, data)
        if hvd.rank() == 0:
            print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
