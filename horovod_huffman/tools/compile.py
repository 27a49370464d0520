"""Compile every Numba kernel the training path uses and write it to Numba's cache, ahead of
training: ``python -m horovod_huffman.tools.compile``.

Run once per install (scripts/setup.sh and the Docker images do), so that neither the first
training step on a fresh machine nor a new container compiles. Processes that share a cache
directory (ranks started together on one host) take turns under a file lock: the first compiles,
the others then find every kernel cached and only load it.

What it calls: every encoder's encode and decode on int8 and int16 levels (QSGD s = 8 and 127
fill int8, larger s int16), ``ans`` and ``auto`` with a layout (the row model) and ``auto``
without one (the search for it), QSGD and TernGrad on float32 and float64 gradients,
dequantization, the tensor message and the exchange's error feedback.
"""
import argparse
import fcntl
import os
import tempfile
import time
from contextlib import contextmanager

import numpy as np

# Levels per warm-up tensor: more than one chunk of every chunked kernel, so the multi-chunk
# and lane paths compile too (kernels/chunks.py: 64K levels per chunk).
WARM_UP_LEVELS = 200_000


def cache_dir():
    """The directory Numba writes this package's kernel cache to (``NUMBA_CACHE_DIR``, else
    the kernels' own ``__pycache__``)."""
    from horovod_huffman import kernels
    return os.environ.get("NUMBA_CACHE_DIR") or \
        os.path.join(os.path.dirname(os.path.abspath(kernels.__file__)), "__pycache__")


@contextmanager
def cache_lock():
    """An exclusive lock on the kernel cache (a lock file beside it, or in the temporary
    directory where the cache directory cannot be written)."""
    directory = cache_dir()
    try:
        os.makedirs(directory, exist_ok=True)
        handle = open(os.path.join(directory, "horovod_huffman.tools.compile.lock"), "a+")
    except OSError:
        handle = open(os.path.join(tempfile.gettempdir(), "horovod_huffman.tools.compile.lock"), "a+")
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def warm_up():
    """Call every kernel of the training path once (compiling, or loading from the cache)."""
    import horovod_huffman as hh
    from horovod_huffman.exchange.array_ops import HostOps
    from horovod_huffman.exchange.codec_state import Codec

    rng = np.random.default_rng(0)
    grad = rng.standard_normal(WARM_UP_LEVELS).astype(np.float32)
    quantizers = [hh.QSGD(levels=8), hh.QSGD(levels=127), hh.QSGD(levels=1000),
                  hh.TernGrad(), hh.TernGrad(clip=2.5, bucket_size=512)]
    for work in (np.float32, np.float64):
        for quantizer in quantizers:
            qt = quantizer.quantize(grad.astype(work), seed=1)
            hh.dequantize(qt)
            for name in hh.ENCODERS:
                levels = hh.decode(hh.get_encoder(name).encode(qt.levels))
                assert np.array_equal(levels, qt.levels), name
            hh.dequantize(hh.unpack(hh.pack(qt, "rlh")))
    # ``ans``'s row model (the exchange passes every bucket's layout): a matrix of rank one
    # and noise, which the model fits, on int8 and int16 levels.
    rows = 256
    matrix = np.outer(rng.standard_normal(rows), rng.standard_normal(WARM_UP_LEVELS // rows))
    matrix += 0.1 * rng.standard_normal(matrix.shape)
    for quantizer in quantizers[:3]:
        qt = quantizer.quantize(matrix.astype(np.float32).ravel(), seed=1)
        for name in ("ans", "auto"):
            buf = hh.get_encoder(name).encode(qt.levels, layout=[matrix.shape])
            assert np.array_equal(hh.decode(buf), qt.levels), name
        # and ``auto`` without it, which searches for it (encoders/row_search.py)
        buf = hh.get_encoder("auto").encode(qt.levels)
        assert np.array_equal(hh.decode(buf), qt.levels), "auto"
    codec = Codec(quantizer=hh.QSGD(levels=8), error_feedback=True, seed=0)
    for work in (grad, grad.astype(np.float64)):          # error feedback in both work dtypes
        codec.quantize(HostOps, work, work.shape, "warm-up", 0, state="warm-up")
        codec.feedback.settle(HostOps, ["warm-up"], work.reshape(-1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    t0 = time.perf_counter()
    with cache_lock():
        waited = time.perf_counter() - t0
        warm_up()
    print(f"horovod-huffman kernels compiled and cached in {cache_dir()} "
          f"({time.perf_counter() - t0 - waited:.1f} s; {waited:.1f} s waiting for the lock)",
          flush=True)


if __name__ == "__main__":
    main()
