"""What the compressed exchanges define as a bucket's reduced sum, computed from every rank's local
gradients with the public API only (shared by the torch and TensorFlow exactness workers)."""
import numpy as np

import horovod_huffman as hh
from horovod_huffman.exchange.array_ops import contract
from horovod_huffman.exchange.buckets import shard_bounds
from horovod_huffman.exchange.frames import derive_seed


def round_trip(x, seed, name, encoder, levels, bucket_size, quantizer="qsgd", step=0):
    """What a rank with quantization ``seed`` sends for ``x`` under ``name`` at ``step``: the
    round trip of its quantized levels through ``encoder``. ``quantizer``: "qsgd" (s =
    ``levels``) or "terngrad", in buckets of ``bucket_size``."""
    q = hh.QSGD(levels=levels, bucket_size=bucket_size) if quantizer == "qsgd" else \
        hh.TernGrad(bucket_size=bucket_size)
    return hh.unpack(hh.pack(q.quantize(x, seed=derive_seed(seed, name, step)), encoder))


def staged(grads, bucket):
    """A rank's bucket buffer: its gradients (name -> array) as float32 at their slots, zero
    gaps."""
    buf = np.zeros(bucket.size, dtype=np.float32)
    for slot in bucket.slots:
        buf[slot.offset:slot.offset + slot.numel] = np.asarray(grads[slot.name],
                                                               dtype=np.float32).reshape(-1)
    return buf


def expected_sum(buffers, seeds, bucket, exchange, encoder, levels, bucket_size, feedback=False,
                 client_feedback=False, quantizer="qsgd", step=0):
    """(the bucket's sum over ranks as ``exchange`` defines it, {shard: server residual},
    {rank: {state: client residual}}), at the bucket's ``step`` with no residual before it.

    buffers, seeds: every rank's staged bucket and quantization seed, in rank order. two_phase:
    shard j is rank j's requantization of the rank-ordered sum of every rank's shard j; with
    server error feedback (``feedback``) it is sent contracted, and the residual is the error.
    With client error feedback (``client_feedback``) every rank sends its pieces contracted,
    and keeps each piece's error under its state: ("all",) or ("client", j).
    """
    n = len(buffers)
    clients = {r: {} for r in range(n)}

    def sent(x, r, name, state):
        qt = round_trip(x, seeds[r], name, encoder, levels, bucket_size, quantizer, step)
        if not client_feedback:
            return hh.dequantize(qt)
        contracted = contract(x, qt)
        clients[r][state] = x - hh.dequantize(contracted)
        return hh.dequantize(contracted)

    if exchange == "allgather":
        total = None
        for r in range(n):
            part = sent(buffers[r], r, f"{bucket.key}/all", ("all",))
            total = part if total is None else total + part
        return total, {}, clients
    bounds = shard_bounds(bucket.size, n, bucket_size)
    out, residuals = np.empty(bucket.size, np.float32), {}
    for j in range(n):
        a, b = bounds[j], bounds[j + 1]
        piece = None
        for r in range(n):
            part = sent(buffers[r][a:b], r, f"{bucket.key}/shard{j}", ("client", j))
            piece = part if piece is None else piece + part
        qt = round_trip(piece, seeds[j], f"{bucket.key}/sum{j}", encoder, levels, bucket_size,
                        quantizer, step)
        summed = contract(piece, qt)
        residuals[j] = piece - hh.dequantize(summed)
        out[a:b] = hh.dequantize(summed if feedback else qt)
    return out, residuals, clients


def fused_means(plan, everyone, seeds, exchange, encoder, levels, bucket_size, scale, step=0):
    """name -> what a fused exchange of ``plan``'s buckets gives that gradient: its slice of the
    bucket's sum (``expected_sum``) times ``scale``, flat. everyone: every rank's
    {name: gradient}, in rank order."""
    out = {}
    for bucket in plan.buckets:
        buffers = [staged(grads, bucket) for grads in everyone]
        total, _, _ = expected_sum(buffers, seeds, bucket, exchange, encoder, levels, bucket_size,
                                   step=step)
        for slot in bucket.slots:
            out[slot.name] = total[slot.offset:slot.offset + slot.numel] * np.float32(scale)
    return out
