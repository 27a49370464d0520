"""GPU arrays: recognising them, viewing framework tensors as Numba device arrays without a copy,
and streams.

Anything exposing ``__cuda_array_interface__`` (a Numba device array, a torch CUDA tensor, a
CuPy array) is a device array; TensorFlow GPU tensors come in through DLPack
(``horovod_huffman.codec.dlpack``). Under the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the
simulator's own arrays count as device arrays, which is how the tests run without a GPU.
"""
import functools
import sys
import threading
import weakref

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


class PinnedPool:
    """Page-locked host buffers for copies from the device (``copy_to_host``). A copy into
    page-locked memory is one DMA on the stream; into pageable memory the driver stages it
    through a buffer of its own and copies it again on the host. A buffer is lent again once
    no array views it: NumPy points every view's ``base`` at the buffer's array (the first
    array that is no view of another), so its reference count is back to what it was when
    the buffer was made. Buffers are powers of two from 64 KiB, the smallest free one that
    fits is lent, and the pool holds at most ``limit`` bytes (beyond that ``host_array``
    gives None, and the copy goes to pageable memory)."""

    def __init__(self, limit=256 << 20):
        self.limit, self.held = int(limit), 0
        self._lock = threading.Lock()
        self._buffers = []          # [uint8 array, its reference count when nothing views it]

    def host_array(self, shape, dtype):
        """A C-contiguous array of ``shape`` and ``dtype`` viewing a page-locked buffer that
        nothing else views (made under the pool's lock, so no other thread is lent it), or
        None."""
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        with self._lock:
            free = [entry for entry in self._buffers
                    if entry[0].size >= nbytes and _refs(entry) == entry[1]]
            if free:
                entry = min(free, key=lambda e: e[0].size)
            else:
                size = max(1 << 16, 1 << max(nbytes - 1, 0).bit_length())
                if self.held + size > self.limit:
                    return None
                entry = [cuda.pinned_array(size, dtype=np.uint8), 0]
                entry[1] = _refs(entry)
                self._buffers.append(entry)
                self.held += size
            return entry[0][:nbytes].view(dtype).reshape(shape)


def _refs(entry):
    return sys.getrefcount(entry[0])


_PINNED = PinnedPool()


def copy_to_host(array, stream):
    """A host copy of a contiguous device array, waiting on ``stream`` only: it lands in a
    page-locked buffer of the pool (``PinnedPool``), which the result views until it is
    dropped."""
    host = _PINNED.host_array(array.shape, array.dtype) \
        if array.size and array.is_c_contiguous() else None
    if host is None:
        host = array.copy_to_host(stream=stream)
    else:
        array.copy_to_host(host, stream=stream)
    stream.synchronize()
    return host


class Arena:
    """Device memory for the temporaries of one thread's work on one stream. Inside a
    ``with`` block, ``take`` hands out regions of one device buffer one after another (each
    from a 256-byte boundary); when the outermost block ends, the next one takes them again
    from the start. A block that needs more than the buffer holds gets plain allocations
    beyond it, and the next one a buffer large enough (a power of two). Outside a block,
    ``take`` allocates.

    The contract: a region is used only by work this thread enqueues on ``stream`` inside the
    block, and by copies to the host that complete inside it. A later block's writes into the
    region are enqueued after that work, on the same stream, so they never overtake it: no
    allocation and no free (whose implicit synchronization stalls the device) per step."""
    ALIGN = 256

    def __init__(self, stream):
        self.stream = stream
        self.buffer, self.used, self.wanted, self.depth = None, 0, 0, 0

    def __enter__(self):
        if self.depth == 0:
            if self.wanted > (0 if self.buffer is None else self.buffer.size):
                self.buffer = cuda.device_array(1 << (self.wanted - 1).bit_length(),
                                                dtype=np.uint8, stream=self.stream)
            self.used = self.wanted = 0
        self.depth += 1
        return self

    def __exit__(self, kind, value, traceback):
        self.depth -= 1

    def take(self, shape, dtype):
        """An uninitialized device array of ``shape`` and ``dtype`` (C order)."""
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        start = -(-self.used // self.ALIGN) * self.ALIGN
        if self.depth:
            self.used = start + nbytes
            self.wanted = max(self.wanted, self.used)
        if not self.depth or not nbytes or self.buffer is None or \
                self.used > self.buffer.size:
            return cuda.device_array(shape, dtype=dtype, stream=self.stream)
        return self.buffer[start:start + nbytes].view(dtype).reshape(shape)

    def upload(self, host):
        """A device copy of the host array ``host``, in a region ``take`` gives."""
        host = np.ascontiguousarray(host)
        region = self.take(host.shape, host.dtype)
        cuda.to_device(host, stream=self.stream, to=region)
        return region


_ARENAS = threading.local()


def arena(stream):
    """This thread's ``Arena`` for ``stream`` (kept while the stream lives)."""
    arenas = getattr(_ARENAS, "by_stream", None)
    if arenas is None:
        arenas = _ARENAS.by_stream = weakref.WeakKeyDictionary()
    found = arenas.get(stream)
    if found is None:
        found = arenas[stream] = Arena(stream)
    return found


# Most blocks a grid-stride kernel gets: enough to fill an H100 (132 SMs x 8 blocks of 256
# threads) several times; the simulator runs blocks one after another, so it gets few.
MAX_STRIDE_BLOCKS = 4 if SIMULATED else 4096


def grid_for(n, block):
    """Blocks for ``n`` items at ``block`` threads each, for grid-stride kernels."""
    return max(1, min(-(-int(n) // block), MAX_STRIDE_BLOCKS))
