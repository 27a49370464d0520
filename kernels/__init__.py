"""Framework-free Numba kernels, installed as ``horovod_huffman.kernels``. Every kernel compiles
with ``cache=True``.

Limits: maxima (every stream and table maximum, and the packed layouts sized for them), errors
(decode status codes).
Bits: bits (MSB-first bit I/O, the reader's 64-bit buffer), stores (multi-level loads and
stores, byte swaps), checked (the raw loads and stores checked under Numba's bounds checks),
varints (LEB128 parameter fields), chunks (chunked payloads).
Codes: huffman (code lengths and canonical codes, decode tables), codebook (the codebook on the
wire), elias (Elias codes), fixed (fixed-width packing).
Encoders: symbols (per-element Huffman: histograms, writer, multi-symbol decode tables), runs
(rlh/shs tokens: run ends, histograms, writers), vector_runs (AVX-512 run pass for rlh), tokens
(token tables and the token decoder), lanes (the four-lane driver of both table decoders), ans
(rANS: normalized frequencies, coder tables, the chunk coder), ans_tokens (rla: rlh's tokens
rANS-coded under contexts, their run bits), rows (the row model of ``ans``), row_search
(finding matrices in levels without a layout), stats and estimate (sizing for ``auto``).
Quantizers: quantize (QSGD, TernGrad, dequantization), squares (the QSGD bucket norm's vector
sum).
GPU: cuda_bits, cuda_decode, cuda_tokens, cuda_ans, cuda_rla, cuda_quantize, cuda_feedback (the
same formats and results on the device), cuda_parts (kernels over a tuple of tensors).

The kernels inline one another's functions across files, and Numba's cache index checks only the
file that holds each function: a kernel cached before a function it inlines from another file
changed would run the old code. So at import a hash of every kernel source is compared with the
one stamped in the cache directory, and a cache compiled from other sources is dropped.

Numba's cache index does not record its bounds-check flag either (NUMBA_BOUNDSCHECK: the key is
the signature, the target machine and the function's bytecode), and under it the raw loads and
stores are other functions (kernels/checked.py). So a process with bounds checks on caches in a
directory of its own, CHECKED_CACHE below the usual one, for its own kernels and any other
library's it compiles after them; and the stamp records the flag, so a cache compiled the other
way that still meets a process is dropped.
"""
import glob
import hashlib
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_STAMP = "horovod_huffman.kernels.sources"
# The subdirectory of the cache directory where a bounds-checked process caches.
CHECKED_CACHE = "boundscheck"


def _separate_checked_cache():
    """Under Numba's bounds checks, point Numba's cache (numba.config.CACHE_DIR, and
    NUMBA_CACHE_DIR, which Numba rereads when its environment changes and child processes
    inherit) at CHECKED_CACHE below NUMBA_CACHE_DIR or the kernels' ``__pycache__``. Must run
    before any kernel is decorated: a function's cache directory is fixed then."""
    from numba.core import config
    if not config.BOUNDSCHECK:
        return
    base = config.CACHE_DIR or os.path.join(_HERE, "__pycache__")
    if os.path.basename(os.path.normpath(base)) != CHECKED_CACHE:
        base = os.path.join(base, CHECKED_CACHE)
    config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"] = base


def _cache_directory():
    """Where Numba caches this package's kernels: under NUMBA_CACHE_DIR where it is set,
    else beside them (numba.core.caching's locators)."""
    from numba.core import config
    from numba.core.caching import UserProvidedCacheLocator
    if config.CACHE_DIR:
        return os.path.join(config.CACHE_DIR, UserProvidedCacheLocator.get_suitable_cache_subpath(
            os.path.join(_HERE, "__init__.py")))
    return os.path.join(_HERE, "__pycache__")


def _drop_stale_cache():
    """Remove the cached kernels if they were compiled from other kernel sources than these,
    and stamp the directory with these sources' hash. Concurrent importers at worst remove
    what another just compiled, which then compiles again."""
    from numba.core import config
    digest = hashlib.sha256(b"boundscheck" if config.BOUNDSCHECK else b"")
    for path in sorted(glob.glob(os.path.join(_HERE, "*.py"))):
        with open(path, "rb") as f:
            digest.update(os.path.basename(path).encode() + b"\0" + f.read())
    directory = _cache_directory()
    stamp = os.path.join(directory, _STAMP)
    try:
        with open(stamp) as f:
            if f.read() == digest.hexdigest():
                return
    except OSError:
        pass
    try:
        for path in glob.glob(os.path.join(directory, "*.nb[ic]")):
            try:
                os.remove(path)
            except FileNotFoundError:                 # another importer removed it
                pass
        os.makedirs(directory, exist_ok=True)
        with open(stamp, "w") as f:
            f.write(digest.hexdigest())
    except OSError:                                   # a cache Numba cannot write either
        pass


_separate_checked_cache()
_drop_stale_cache()
