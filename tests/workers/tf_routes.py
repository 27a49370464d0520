"""Worker: adaptive routing through horovod_huffman.tensorflow.DistributedGradientTape in a
tf.function, with the encoder named by argv[1] (default rlh; "mixed": rlh, ans and auto by
rank). Over the probing steps the buckets go encoded, encoded with rlh, as float16 and as
float32; the float32 steps are Horovod's allreduce of the gradients (compared with a reference
allreduce), the compressor's encoder writes the streams of the encoded steps and, for an encoder
other than rlh, an rlh encoder those of the rlh steps; every rank decides the same route, and
variables stay identical on all ranks at every step. Prints "OK routes <chosen>" on rank 0.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                 # noqa: E402
import tensorflow as tf            # noqa: E402
import horovod.tensorflow as hvd   # noqa: E402

import horovod_huffman as hh                                               # noqa: E402
from horovod_huffman.exchange.routing import (BUCKETS_KEY, FAST_ROUTE, PROBE_ROUNDS,  # noqa: E402
                                              ROUTES)
from horovod_huffman.tensorflow import Compression, DistributedGradientTape  # noqa: E402
from route_checks import check_agreed, counted, expected_writers  # noqa: E402 (beside this file)


def main():
    hvd.init()
    name = sys.argv[1] if len(sys.argv) > 1 else "rlh"
    if name == "mixed":
        name = ("rlh", "ans", "auto")[hvd.rank() % 3]
    encoder = hh.get_encoder(name)
    try:                                   # Horovod's per-gradient path has no buckets to route
        Compression.build(route="adaptive").compress(tf.ones(4096))
        raise AssertionError("compress() took route='adaptive'")
    except ValueError as e:
        assert "fused buckets" in str(e), e
    comp = Compression.build(encoder=encoder, quantizer=hh.QSGD(levels=8, bucket_size=128),
                             route="adaptive", bucket_bytes=4 * 10000, seed=hvd.rank())
    init = np.random.default_rng(0)
    weights = [tf.Variable(init.standard_normal(shape).astype(np.float32) * 0.1)
               for shape in [(64, 256), (256,), (256, 10), (10,)]]
    written = {"own": 0, "rlh": 0}
    for own in [encoder] + (encoder.members() if encoder.name == "auto" else []):
        counted(own, written, "own")
    if encoder.name != FAST_ROUTE:
        counted(comp.codec.for_route(FAST_ROUTE).encoder, written, "rlh")
    rng = np.random.default_rng(hvd.rank())

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(x @ weights[0] + weights[1])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                y, h @ weights[2] + weights[3]))
        local = tape.gradient(loss, weights)
        with tf.GradientTape() as tape2:
            h = tf.nn.relu(x @ weights[0] + weights[1])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                y, h @ weights[2] + weights[3]))
        reduced = DistributedGradientTape(tape2, compression=comp).gradient(loss, weights)
        return local, reduced

    seen = set()
    for k in range(len(ROUTES) * PROBE_ROUNDS + 2):
        written.update(own=0, rlh=0)
        x = rng.standard_normal((32, 64)).astype(np.float32)
        y = rng.integers(0, 10, 32)
        local, reduced = step(x, y)
        (router,) = next(iter(comp.fused.values())).routers
        route = router.plan(BUCKETS_KEY, k) or router.chosen[BUCKETS_KEY]
        seen.add(route)
        if route == "fp32":
            for i, (g, r) in enumerate(zip(local, reduced)):
                ref = hvd.allreduce(g, op=hvd.Average, name=f"ref.{k}.{i}")
                np.testing.assert_allclose(r.numpy(), ref.numpy(), rtol=1e-6, atol=1e-7)
        expect = expected_writers(encoder.name, route)
        assert {key: n > 0 for key, n in written.items()} == expect, (k, route, written)
        for w, g in zip(weights, reduced):
            w.assign_sub(0.05 * g)
        flat = np.concatenate([w.numpy().reshape(-1) for w in weights])
        assert all(np.array_equal(flat, o) for o in hvd.allgather_object(flat)), k
    check_agreed(seen, router, hvd.rank(), hvd.allgather_object)



if __name__ == "__main__":
    main()
