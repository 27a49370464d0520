"""Worker (1 rank): the PyTorch and TensorFlow adapters send identical bytes for the same
gradient under the same parameter key, seed and step (a bucket holding that gradient alone), and
reduce it to the same array.
Prints "SAME BYTES" on success."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                   # noqa: E402
import tensorflow as tf              # noqa: E402
import torch                         # noqa: E402
import horovod.tensorflow as hvd_tf  # noqa: E402
import horovod.torch as hvd_torch    # noqa: E402

import horovod_huffman as hh                                       # noqa: E402
from horovod_huffman.tensorflow import Compression as TFCompression   # noqa: E402
from horovod_huffman.torch import horovod_ops                      # noqa: E402
from horovod_huffman.torch import Compression as TorchCompression     # noqa: E402

KEY = "layer/kernel"


def main():
    hvd_tf.init()
    hvd_torch.init()
    grad = np.random.default_rng(0).standard_normal((40, 30)).astype(np.float32)
    kwargs = dict(encoder="rlh", quantizer=hh.QSGD(levels=4), seed=3, min_numel=1)

    # TensorFlow: compress inside a tf.function, where the gradient's graph name is the key.
    tf_comp = TFCompression.build(**kwargs)

    @tf.function
    def tf_round_trip(g):
        placeholder, ctx = tf_comp.compress(tf.identity(g, name=KEY))
        reduced = hvd_tf.allreduce(placeholder, op=hvd_tf.Average, name="placeholder")
        return ctx.received, tf_comp.decompress(reduced, ctx)

    tf_bytes, tf_out = (t.numpy() for t in tf_round_trip(tf.constant(grad)))
    assert list(tf_comp.parameter_shapes) == [KEY], tf_comp.parameter_shapes

    # PyTorch: the parameter is named KEY through named_parameters, so it is a bucket of its own
    # with the same key; the bytes its exchange hands Horovod's allgather are recorded.
    sent = []
    allgather = horovod_ops.Collectives.allgather

    def recording(self, data, name):
        sent.append(data.copy())
        return allgather(self, data, name)

    horovod_ops.Collectives.allgather = recording
    param = torch.nn.Parameter(torch.zeros(40, 30))
    param.grad = torch.from_numpy(grad.copy())
    torch_comp = TorchCompression.build(named_parameters=[(KEY, param)], **kwargs)
    p = param                                     # noqa: F841  (found by the adapter's frame walk)
    placeholder, ctx = torch_comp.compress(param.grad)
    torch_out = torch_comp.decompress(hvd_torch.allreduce(placeholder, name="ph"), ctx).numpy()
    (torch_bytes,) = sent

    np.testing.assert_array_equal(tf_bytes, torch_bytes)
    np.testing.assert_array_equal(tf_out, torch_out)
    print("SAME BYTES", len(tf_bytes), "bytes", flush=True)


if __name__ == "__main__":
    main()
