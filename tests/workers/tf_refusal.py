"""Worker (one process, Keras 3): Horovod's own Keras DistributedOptimizer around a Keras 3
optimizer raises a TypeError naming the working routes once horovod_huffman.tensorflow is
imported, for Horovod's compressors and ours; horovod_huffman.tensorflow.keras refuses a
legacy-Keras (tf-keras) optimizer with a pointer to Horovod's module. Prints "OK"."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf                    # noqa: E402
import tf_keras                            # noqa: E402
import horovod.tensorflow.keras as hvd     # noqa: E402

from horovod_huffman.tensorflow import Compression          # noqa: E402
import horovod_huffman.tensorflow.keras as hh_keras          # noqa: E402


def main():
    hvd.init()
    assert int(tf.keras.__version__.split(".")[0]) == 3, tf.keras.__version__
    for compression in (Compression.none, Compression.rlh):
        try:
            hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), compression=compression)
        except TypeError as e:
            assert "horovod_huffman.tensorflow.keras" in str(e) and \
                "TF_USE_LEGACY_KERAS=1" in str(e), e
        else:
            raise AssertionError("Horovod's Keras DistributedOptimizer took a Keras 3 optimizer")
    try:
        hh_keras.DistributedOptimizer(tf_keras.optimizers.SGD(0.1), compression=Compression.rlh)
    except TypeError as e:
        assert "horovod.tensorflow.keras.DistributedOptimizer" in str(e), e
    else:
        raise AssertionError("horovod_huffman.tensorflow.keras took a non-Keras-3 optimizer")
    print("OK", flush=True)


if __name__ == "__main__":
    main()
