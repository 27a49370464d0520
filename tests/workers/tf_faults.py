"""Worker: faults that every rank must report promptly through TensorFlow, never hang on.

Usage: tf_faults.py CASE [EXCHANGE [horovod|fused]], CASE one of
  corrupt: rank 1's link flips a byte of each frame it sends -> every rank's step fails with DecodeError;
  mismatch: rank 1's variable has more columns, so its bucket differs from the others' ->
           every rank's step fails with MismatchError;
  min:     op=hvd.Min -> every rank's step fails naming the supported ops.
The last argument picks the tape: Horovod's (one exchange per gradient, the default) or
horovod_huffman.tensorflow's (fused buckets). Prints "RAISED <rank> <message>" and exits 0 when
the expected error came.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                 # noqa: E402
import tensorflow as tf            # noqa: E402
import horovod.tensorflow as hvd   # noqa: E402

from horovod_huffman.tensorflow import Compression, DistributedGradientTape  # noqa: E402
from corrupting import corrupt_outgoing_frames                    # noqa: E402  (beside this file)


def main():
    case = sys.argv[1]
    exchange = sys.argv[2] if len(sys.argv) > 2 else "auto"
    tape_class = DistributedGradientTape if sys.argv[3:] == ["fused"] else \
        hvd.DistributedGradientTape
    hvd.init()
    columns = 66 if case == "mismatch" and hvd.rank() == 1 else 64
    w = tf.Variable(np.random.default_rng(0).standard_normal((32, columns)).astype(np.float32))
    x = np.random.default_rng(hvd.rank()).standard_normal((8, 32)).astype(np.float32)
    if case == "corrupt" and hvd.rank() == 1:
        corrupt_outgoing_frames()
    comp = Compression.build(encoder="rlh", exchange=exchange)
    op = hvd.Min if case == "min" else hvd.Average
    expected = {"corrupt": "DecodeError", "mismatch": "MismatchError"}.get(case,
                                                                          "Average or Sum")

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(x @ w))
        return tape_class(tape, compression=comp, op=op).gradient(loss, [w])

    try:
        step()
    except ValueError as e:                # the fused tape refuses an op when it is built
        if expected in str(e):
            print(f"RAISED {hvd.rank()} {str(e)[:200]}", flush=True)
            return 0
        raise
    except tf.errors.OpError as e:
        cause = [line for line in e.message.splitlines() if expected in line]
        if cause:
            print(f"RAISED {hvd.rank()} {cause[0].strip()[:200]}", flush=True)
            return 0
        print(f"WRONG ERROR on rank {hvd.rank()}: {e.message[:500]}", flush=True)
        return 1
    print(f"NO ERROR on rank {hvd.rank()}", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
