"""GPU arrays: recognising them, viewing framework tensors as Numba device arrays without a copy,
and streams.

Anything exposing ``__cuda_array_interface__`` (a Numba device array, a torch CUDA tensor, a
CuPy array) is a device array; TensorFlow GPU tensors come in through DLPack
(``horovod_huffman.codec.dlpack``). Under the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the
simulator's own arrays count as device arrays, which is how the tests run without a GPU.
"""
import functools

import numpy as np
from numba import config, cuda

SIMULATED = bool(config.ENABLE_CUDASIM)


def is_device_array(x):
    """True for a GPU array (or a simulator array), False for NumPy arrays and host tensors."""
    if isinstance(x, np.ndarray):
        return False
    if SIMULATED:
        return isinstance(x, cuda.devicearray.FakeCUDAArray)
    return hasattr(x, "__cuda_array_interface__")


def as_device_array(x):
    """A Numba device array viewing ``x``'s memory (no copy)."""
    if SIMULATED or cuda.devicearray.is_cuda_ndarray(x):
        return x
    return cuda.as_cuda_array(x)


@functools.lru_cache(maxsize=None)
def cuda_usable():
    """Whether device kernels can run here: a CUDA GPU with a working driver, or the simulator."""
    try:
        return bool(cuda.is_available())
    except Exception:          # a broken driver or toolkit: report unusable rather than fail
        return False


def stream_or_default(stream):
    """``stream`` if given, else the default stream (the simulator has only plain streams)."""
    if stream is not None:
        return stream
    return cuda.stream() if SIMULATED else cuda.default_stream()


def copy_to_host(array, stream):
    """A host copy of a (small) device array, waiting on ``stream`` only."""
    host = array.copy_to_host(stream=stream)
    stream.synchronize()
    return host


# Most blocks a grid-stride kernel gets: enough to fill an H100 (132 SMs x 8 blocks of 256
# threads) several times; the simulator runs blocks one after another, so it gets few.
MAX_STRIDE_BLOCKS = 4 if SIMULATED else 4096


def grid_for(n, block):
    """Blocks for ``n`` items at ``block`` threads each, for grid-stride kernels."""
    return max(1, min(-(-int(n) // block), MAX_STRIDE_BLOCKS))
