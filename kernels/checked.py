"""Bounds checks for the raw loads and stores, in a process under Numba's bounds checks.

READ ME FIRST
1. The intrinsics of stores.py, squares.py and vector_runs.py address element i of an array as
   data + i * itemsize in LLVM IR. Numba's bounds checks (NUMBA_BOUNDSCHECK=1) cover its own
   indexing only, so they never see these accesses; the callers keep them inside their arrays
   by arithmetic (lanes.safe_iterations, ans_tokens.batch_until and the like).
2. ``CHECKED`` is Numba's flag when the kernels are imported. Where it is set, those modules
   bind each intrinsic's name to a twin that calls ``check_span`` and then the intrinsic: the
   same arguments and result, and an IndexError, as Numba's own checks raise, for an access
   outside the array. The callers import the names, so they need no change, and a
   bounds-checked run (``python -m horovod_huffman.tools.fuzz``) covers every access.
3. Numba's cache index does not record the flag, and a caller's compiled code holds whichever
   function its name was bound to: a checked process caches its kernels in a directory of its
   own (kernels/__init__.py).
"""
from numba import config, int64, njit

CHECKED = bool(config.BOUNDSCHECK)


@njit(cache=True)
def check_span(what, ary, first, count):
    """Raise IndexError naming ``what`` unless elements first .. first + count - 1 (count >= 0)
    lie inside the 1-D contiguous ``ary``. ``first`` may be of any integer type: a uint64 that
    wrapped below zero reads as negative."""
    i = int64(first)
    if i < 0 or i > ary.size - int64(count):
        raise IndexError(what + " outside its array (first element, elements, array size)",
                         i, int64(count), ary.size)
    if ary.size > 1 and ary.strides[0] != ary.itemsize:
        raise IndexError(what + " on a strided array: element i is not at data + i * itemsize")
