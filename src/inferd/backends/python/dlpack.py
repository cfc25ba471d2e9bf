"""DLPack for ``pb_utils.Tensor``: :func:`export` (an array as a capsule, without a copy) and
:func:`consume` (a capsule as an array over the producer's memory, kept alive until it is freed).

The C structures of dlpack.h (v0.8 legacy ``DLManagedTensor``, v1.x ``DLManagedTensorVersioned``)
read and written through ctypes. What a model gets wrong raises ``pb_utils.TritonModelException``
with the texts of Triton's Python backend.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from inferd.backends.python.pb_errors import TritonModelException
from inferd.core import types as _types
from inferd.gpu.cuda import CudaArray

# dlpack.h's device types, type codes, flags and structures
DL_CPU = 1
DL_CUDA = 2
DL_CUDA_HOST = 3  # pinned host memory: CPU-addressable
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6
_DL_FLAG_READ_ONLY = 1
DLPACK_VERSION = (1, 0)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


# Private prototypes (ctypes.pythonapi's shared attributes stay untouched). PYFUNCTYPE: called
# with the GIL held, a Python error they set is raised.
_py_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_py_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_py_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
_py_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))
#: ``void deleter(DLManagedTensor*)``; called without the GIL (deleters take it when they need it)
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _static_name(name: bytes) -> int:
    """A C string that lives as long as the process: a capsule keeps its name pointer, and a
    producer's destructor reads it whenever the capsule dies, module teardown included."""
    buf = ctypes.create_string_buffer(name)
    _py_incref(buf)  # never freed
    return ctypes.addressof(buf)


_USED_DLTENSOR = _static_name(b"used_dltensor")
_USED_DLTENSOR_VERSIONED = _static_name(b"used_dltensor_versioned")

#: (DLDataType code, bits) -> numpy dtype, Triton datatype (None: the numpy dtype's own)
_FROM_DL: dict[tuple[int, int], tuple[np.dtype[Any], _types.DataType | None]] = {
    **{(_DL_INT, 8 * n): (np.dtype(f"int{8 * n}"), None) for n in (1, 2, 4, 8)},
    **{(_DL_UINT, 8 * n): (np.dtype(f"uint{8 * n}"), None) for n in (1, 2, 4, 8)},
    **{(_DL_FLOAT, 8 * n): (np.dtype(f"float{8 * n}"), None) for n in (2, 4, 8)},
    (_DL_BFLOAT, 16): (np.dtype(np.uint16), _types.BF16),
    (_DL_BOOL, 8): (np.dtype(np.bool_), None),
}


class _WritableAlias:
    """A writable numpy view's base over the memory of a read-only ``array`` (kept alive)."""

    __slots__ = ("__array_interface__", "array")

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        iface = array.__array_interface__
        iface["data"] = (iface["data"][0], False)
        self.__array_interface__ = iface
        self.array = array


class _DLPackOwner:
    """The base of an array over a consumed DLPack tensor: calls the producer's deleter when freed."""

    __slots__ = ("__array_interface__", "deleter", "managed")

    def __init__(self, managed: int, deleter: int | None, iface: dict[str, Any] | None) -> None:
        self.managed = managed
        self.deleter = deleter
        if iface is not None:
            self.__array_interface__ = iface

    def release(self) -> None:
        d = self.deleter
        if d:
            self.deleter = None
            _DELETER(d)(self.managed)

    def __del__(self) -> None:
        self.release()


def _set_dl_dtype(capsule: Any, code: int, bits: int) -> None:
    """Set the DLDataType of the tensor in a capsule that was just made (and not handed out)."""
    if _py_capsule_is_valid(capsule, b"dltensor"):
        ptr = _py_capsule_get_pointer(capsule, b"dltensor")
        dtype = _DLManagedTensor.from_address(ptr).dl_tensor.dtype
    else:
        ptr = _py_capsule_get_pointer(capsule, b"dltensor_versioned")
        dtype = _DLManagedTensorVersioned.from_address(ptr).dl_tensor.dtype
    dtype.code = code
    dtype.bits = bits


def export(
    array: np.ndarray[Any, Any],
    datatype: _types.DataType | None,
    stream: Any,
    max_version: Any,
    dl_device: Any,
    copy: Any,
) -> Any:
    """A DLPack capsule of ``array``, without a copy (unless ``copy`` asks for one).

    numpy builds the DLManagedTensor (its C deleter holds the array until the consumer lets go,
    and its capsule destructor frees a capsule nobody consumed; both are safe wherever they run,
    which a ctypes callback is not: called while an exception is being raised, one swallows it).
    A read-only array (request inputs are views over received bytes) goes out through a writable
    alias when the consumer asks for a legacy capsule, which cannot say "read-only"; a DLPack 1.x
    capsule carries the read-only flag instead. BF16 (uint16 words) and bool (exported as its
    bytes, for numpy < 1.25) get their DLDataType set in the new capsule.
    """
    kind = array.dtype.kind
    if kind in "OUSV":
        raise BufferError("DLPack does not have support for string tensors.")
    code = None
    if datatype is _types.BF16:
        code, bits = _DL_BFLOAT, 16
    elif kind == "b":
        array, code, bits = array.view(np.uint8), _DL_BOOL, 8
    kwargs = {}
    if max_version is not None:
        kwargs["max_version"] = max_version
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    if copy is not None:
        kwargs["copy"] = copy
    if not array.flags.writeable and (max_version is None or max_version[0] < 1):
        array = np.asarray(_WritableAlias(array))
    capsule = array.__dlpack__(stream=stream, **kwargs)
    if code is not None:
        _set_dl_dtype(capsule, code, bits)
    return capsule


#: the reference's text, nine spaces and all (a line continuation inside its C++ string)
NOT_DLPACK = (
    "Provided tensor is not supported. Tensor must be a DLPack capsule         or have `__dlpack__` and "
    "`__dlpack_device__` attributes"
)


def consume(capsule: Any) -> tuple[np.ndarray[Any, Any] | CudaArray, _types.DataType | None]:
    """Consume a ``"dltensor"`` / ``"dltensor_versioned"`` capsule: an array over its memory (a
    CudaArray over a GPU's)."""
    if _py_capsule_is_valid(capsule, b"dltensor"):
        ptr = _py_capsule_get_pointer(capsule, b"dltensor")
        managed: Any = _DLManagedTensor.from_address(ptr)
        used, read_only = _USED_DLTENSOR, False
    elif _py_capsule_is_valid(capsule, b"dltensor_versioned"):
        ptr = _py_capsule_get_pointer(capsule, b"dltensor_versioned")
        managed = _DLManagedTensorVersioned.from_address(ptr)
        if managed.version.major != DLPACK_VERSION[0]:
            raise BufferError(f"unsupported DLPack version {managed.version.major}.{managed.version.minor}")
        used, read_only = _USED_DLTENSOR_VERSIONED, bool(managed.flags & _DL_FLAG_READ_ONLY)
    elif type(capsule).__name__ == "PyCapsule":
        raise TritonModelException(
            "the DLPack capsule is not an unconsumed 'dltensor' capsule (a capsule can be consumed once)"
        )
    else:
        raise TritonModelException(NOT_DLPACK)
    t = managed.dl_tensor
    kind = t.device.device_type
    if kind not in (DL_CPU, DL_CUDA_HOST, DL_CUDA):
        raise TritonModelException(f"DLDevice type {kind} is not support by Python backend.")
    dtype = t.dtype
    found = _FROM_DL.get((dtype.code, dtype.bits)) if dtype.lanes == 1 else None
    if found is None:
        raise TritonModelException(
            f"DLPack data type (code {dtype.code}, {dtype.bits} bits, {dtype.lanes} lanes) is not supported"
        )
    np_dtype, datatype = found
    shape = tuple(t.shape[i] for i in range(t.ndim))
    size = 1
    for d in shape:
        size *= d
    if t.strides and size > 0:
        expected = 1
        for i in range(t.ndim - 1, -1, -1):
            if shape[i] != 1 and t.strides[i] != expected:
                raise TritonModelException(
                    "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored "
                    "in C-Order are supported."
                )
            expected *= shape[i]
    deleter = managed.deleter
    _py_capsule_set_name(capsule, used)  # consumed: the producer's destructor leaves it alone now
    if kind == DL_CUDA:  # GPU memory: described, not mapped; the owner calls the deleter when freed
        owner = _DLPackOwner(ptr, deleter, None)
        data = (t.data or 0) + t.byte_offset
        return CudaArray(data, int(t.device.device_id), np_dtype, shape, owner), datatype
    if size == 0:  # nothing to share (the pointer may even be NULL)
        _DLPackOwner(ptr, deleter, None).release()
        array = np.empty(shape, np_dtype)
    else:
        iface = {
            "version": 3,
            "shape": shape,
            "typestr": np_dtype.str,
            "data": ((t.data or 0) + t.byte_offset, read_only),
        }
        array = np.asarray(_DLPackOwner(ptr, deleter, iface))
    return array, datatype
