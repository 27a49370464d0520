"""Worker: faults that every rank must report promptly through TensorFlow, never hang on.

Usage: tf_faults.py CASE:EXCHANGE:TAPE [CASE:EXCHANGE:TAPE ...], the cases one after another
in one launch, CASE one of
  corrupt: rank 1's link flips a byte of each frame it sends -> every rank's step fails with DecodeError;
  mismatch: rank 1's variable has more columns, so its bucket differs from the others' ->
           every rank's step fails with MismatchError;
  min:     op=hvd.Min -> every rank's step fails naming the supported ops.
TAPE picks the tape: Horovod's ("horovod": one exchange per gradient) or
horovod_huffman.tensorflow's ("fused": fused buckets). Every rank prints "RAISED <rank>
<case>:<exchange>:<tape> <message>" for each case that raised its expected error, and the
worker exits 0 when every case did.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                 # noqa: E402
import tensorflow as tf            # noqa: E402
import horovod.tensorflow as hvd   # noqa: E402

from horovod_huffman.tensorflow import Compression, DistributedGradientTape  # noqa: E402
from corrupting import raised_expected, run_cases                   # noqa: E402  (beside this file)


def run_case(case, exchange, tape):
    """Whether one step of ``case`` raised its expected error on this rank."""
    tape_class = DistributedGradientTape if tape == "fused" else hvd.DistributedGradientTape
    columns = 66 if case == "mismatch" and hvd.rank() == 1 else 64
    w = tf.Variable(np.random.default_rng(0).standard_normal((32, columns)).astype(np.float32))
    x = np.random.default_rng(hvd.rank()).standard_normal((8, 32)).astype(np.float32)
    comp = Compression.build(encoder="rlh", exchange=exchange)
    op = hvd.Min if case == "min" else hvd.Average
    expected = {"corrupt": "DecodeError", "mismatch": "MismatchError"}.get(case,
                                                                          "Average or Sum")
    name = f"{case}:{exchange}:{tape}"

    @tf.function
    def step():
        with tf.GradientTape() as recorded:
            loss = tf.reduce_sum(tf.square(x @ w))
        return tape_class(recorded, compression=comp, op=op).gradient(loss, [w])

    def cause(e):
        # The fused tape refuses an op with a ValueError as its step is traced; the others
        # fail inside the step, with the cause among the OpError's lines.
        lines = [line for line in str(e).splitlines() if expected in line]
        return lines[0].strip()[:200] if lines else None

    return raised_expected(name, hvd.rank(), case == "corrupt" and hvd.rank() == 1, step,
                           (ValueError, tf.errors.OpError), cause)


def main():
    hvd.init()
    # Every rank done with a case before the next starts (Horovod's TensorFlow API has no
    # barrier).
    return run_cases(sys.argv[1:], run_case,
                     lambda: hvd.allreduce(tf.constant(0.0), name="case_done"))


if __name__ == "__main__":
    sys.exit(main())
