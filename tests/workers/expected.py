"""What the compressed exchanges define as a bucket's reduced sum, computed from every rank's local
gradients with the public API only (shared by the torch and TensorFlow exactness workers)."""
import numpy as np

import horovod_huffman as hh
from horovod_huffman.array_ops import contract
from horovod_huffman.buckets import shard_bounds
from horovod_huffman.exchange import derive_seed


def round_trip(x, seed, name, encoder, levels, bucket_size):
    """What a rank with quantization ``seed`` sends for ``x`` under ``name`` at step 0: the round
    trip of its quantized levels through ``encoder``."""
    qt = hh.QSGD(levels=levels, bucket_size=bucket_size).quantize(
        x, seed=derive_seed(seed, name, 0))
    return hh.unpack(hh.pack(qt, encoder))


def staged(grads, bucket):
    """A rank's bucket buffer: its gradients (name -> array) as float32 at their slots, zero
    gaps."""
    buf = np.zeros(bucket.size, dtype=np.float32)
    for slot in bucket.slots:
        buf[slot.offset:slot.offset + slot.numel] = np.asarray(grads[slot.name],
                                                               dtype=np.float32).reshape(-1)
    return buf


def expected_sum(buffers, seeds, bucket, exchange, encoder, levels, bucket_size, feedback=False):
    """(the bucket's sum over ranks as ``exchange`` defines it, {shard: server residual}).

    buffers, seeds: every rank's staged bucket and quantization seed, in rank order. two_phase:
    shard j is rank j's requantization of the rank-ordered sum of every rank's shard j; with
    server error feedback (``feedback``) it is sent contracted, and the residual is the error.
    """
    n = len(buffers)
    if exchange == "allgather":
        total = None
        for r in range(n):
            part = hh.dequantize(round_trip(buffers[r], seeds[r], f"{bucket.key}/all", encoder,
                                            levels, bucket_size))
            total = part if total is None else total + part
        return total, {}
    bounds = shard_bounds(bucket.size, n, bucket_size)
    out, residuals = np.empty(bucket.size, np.float32), {}
    for j in range(n):
        a, b = bounds[j], bounds[j + 1]
        piece = None
        for r in range(n):
            part = hh.dequantize(round_trip(buffers[r][a:b], seeds[r], f"{bucket.key}/shard{j}",
                                            encoder, levels, bucket_size))
            piece = part if piece is None else piece + part
        qt = round_trip(piece, seeds[j], f"{bucket.key}/sum{j}", encoder, levels, bucket_size)
        sent = contract(piece, qt)
        residuals[j] = piece - hh.dequantize(sent)
        out[a:b] = hh.dequantize(sent if feedback else qt)
    return out, residuals
