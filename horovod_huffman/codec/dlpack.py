"""DLPack in and out, for frameworks without ``__cuda_array_interface__`` (TensorFlow).

``from_dlpack(capsule)`` views a DLPack tensor without copying: a Numba device array for CUDA
memory, a NumPy array for host memory. ``to_dlpack(array)`` exports a Numba device array (or a
NumPy array) as a DLPack capsule that a framework consumes without copying, e.g.
``tf.experimental.dlpack.from_dlpack``.

READ ME FIRST
1. The structs are DLPack's stable ``DLManagedTensor`` ABI (capsule name "dltensor"); a consumer
   renames the capsule "used_dltensor" and calls the tensor's ``deleter`` when it is done.
2. Imported memory stays valid until the returned array (and every view of it) is gone: its
   owner object calls the producer's deleter on collection.
3. Exported arrays are kept alive in ``_EXPORTED`` until the consumer calls our deleter (or the
   capsule dies unconsumed); both callbacks are module-level ctypes functions, never freed.
"""
import ctypes

import numpy as np

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
_CODES = {0: "i", 1: "u", 2: "f"}          # DLDataTypeCode -> NumPy kind (bfloat16 unsupported)
_KINDS = {kind: code for code, kind in _CODES.items()}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int),
                ("dtype", _DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                     ("deleter", _DELETER)]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
# The capsule destructor gets a raw pointer: separate function objects taking void pointers
# (indexing pythonapi makes a new one; attribute access would share the ones above).
_raw_is_valid = _api["PyCapsule_IsValid"]
_raw_is_valid.restype, _raw_is_valid.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
_raw_get = _api["PyCapsule_GetPointer"]
_raw_get.restype, _raw_get.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]


class _Imported:
    """Owner of imported memory: exposes it through the array interfaces and calls the
    producer's deleter when collected."""

    def __init__(self, managed_ptr, interface, on_device):
        self._ptr = managed_ptr
        key = "__cuda_array_interface__" if on_device else "__array_interface__"
        setattr(self, key, interface)

    def __del__(self):
        managed = ctypes.cast(self._ptr, ctypes.POINTER(_Managed))
        if managed.contents.deleter:
            managed.contents.deleter(managed)


def from_dlpack(capsule):
    """A zero-copy view of a DLPack capsule: Numba device array (CUDA) or NumPy array (host)."""
    if not _api.PyCapsule_IsValid(capsule, b"dltensor"):
        raise ValueError("not an unconsumed DLPack capsule (name 'dltensor')")
    ptr = _api.PyCapsule_GetPointer(capsule, b"dltensor")
    t = ctypes.cast(ptr, ctypes.POINTER(_Managed)).contents.dl_tensor
    if t.dtype.code not in _CODES or t.dtype.lanes != 1:
        raise TypeError(f"unsupported DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
                        f"{t.dtype.lanes} lanes)")
    if t.device.device_type not in (KDL_CPU, KDL_CUDA, KDL_CUDA_HOST):
        raise TypeError(f"unsupported DLPack device type {t.device.device_type}")
    dtype = np.dtype(f"{_CODES[t.dtype.code]}{t.dtype.bits // 8}")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] * dtype.itemsize
                                                for i in range(t.ndim))
    interface = {"shape": shape, "typestr": dtype.str, "strides": strides, "version": 3,
                 "data": ((t.data or 0) + t.byte_offset, False)}
    on_device = t.device.device_type == KDL_CUDA
    if on_device:
        interface["stream"] = None             # ordered by the caller (see adapters)
    _api.PyCapsule_SetName(capsule, b"used_dltensor")      # the deleter is ours to call now
    owner = _Imported(ptr, interface, on_device)
    if on_device:
        from numba import cuda
        return cuda.as_cuda_array(owner)
    return np.asarray(owner)


_EXPORTED = {}           # address of a DLManagedTensor -> (array, struct, shape) kept alive


@_DELETER
def _release(managed):
    _EXPORTED.pop(ctypes.addressof(managed.contents), None)


@_CAPSULE_DESTRUCTOR
def _capsule_died(capsule):
    # A capsule never consumed (still named "dltensor") releases its tensor itself.
    if _raw_is_valid(capsule, b"dltensor"):
        _EXPORTED.pop(_raw_get(capsule, b"dltensor"), None)


def to_dlpack(array):
    """A DLPack capsule viewing a contiguous Numba device array or NumPy array (no copy)."""
    if isinstance(array, np.ndarray):
        if not array.flags.c_contiguous:
            raise ValueError("to_dlpack needs a C-contiguous array")
        data, device = array.ctypes.data, _Device(KDL_CPU, 0)
    else:
        from numba import cuda
        if not array.is_c_contiguous():
            raise ValueError("to_dlpack needs a C-contiguous array")
        data = array.__cuda_array_interface__["data"][0]
        device = _Device(KDL_CUDA, cuda.get_current_device().id)
    dtype = np.dtype(array.dtype)
    if dtype.kind not in _KINDS:
        raise TypeError(f"cannot export dtype {dtype} through DLPack")
    shape = (ctypes.c_int64 * max(1, array.ndim))(*array.shape)
    managed = _Managed()
    managed.dl_tensor = _Tensor(data, device, array.ndim,
                                _DType(_KINDS[dtype.kind], 8 * dtype.itemsize, 1), shape, None, 0)
    managed.deleter = _release
    address = ctypes.addressof(managed)
    _EXPORTED[address] = (array, managed, shape)
    return _api.PyCapsule_New(address, b"dltensor", _capsule_died)
