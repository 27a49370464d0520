"""What torch_amp.py and tf_amp.py share: the schedule, the compressions and a run's RESULT."""
import math

import numpy as np

import horovod_huffman as hh

# Steps of a run; the step whose gradients overflow on rank 0; SGD's learning rate.
STEPS, OVERFLOW, LR = 60, 20, 0.1


def compression(name, compressions, rank):
    """``compressions.none`` for "none", else "<encoder>:<exchange>" built from the adapter's
    ``compressions`` (its ``Compression``) with error feedback on and QSGD s = 8."""
    if name == "none":
        return compressions.none
    encoder, exchange = name.split(":")
    return compressions.build(encoder=encoder, quantizer=hh.QSGD(levels=8, bucket_size=512),
                              error_feedback=True, seed=100 + rank, exchange=exchange)


def result(name, comp, skipped, losses, accuracy, identical, **extra):
    """A run's RESULT: the steps the scaler skipped, the final training loss and test accuracy,
    whether every loss after the overflow was finite and every rank holds the same parameters,
    the norm of each error-feedback residual kept, and ``grad_bytes``: the bytes per
    coordinate of the gradients the compressor encoded (None uncompressed)."""
    codec = getattr(comp, "codec", None)
    residuals, grad_bytes = {}, None
    if codec is not None:
        residuals = {repr(k): float(np.linalg.norm(v)) for k, v in codec.feedback.residuals.items()}
        total = codec.statistics.summary()["total"]
        grad_bytes = total["raw_bytes"] / total["coords"]
    return {"compression": name, "skipped": skipped, "final_loss": losses[-1],
            "accuracy": accuracy, "finite_after": all(math.isfinite(l)
                                                      for l in losses[OVERFLOW + 1:]),
            "identical_parameters": identical, "residual_norms": residuals,
            "grad_bytes": grad_bytes, **extra}
