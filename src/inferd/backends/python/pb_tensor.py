"""``pb_utils.Tensor``: a named numpy tensor, with the Triton datatype its array stands for (BF16).

Apart from ``pb_utils`` (which re-exports it) for size: the tensor and its DLPack exchange.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.backends.python import dlpack as _dlpack
from inferd.backends.python.pb_args import incompatible
from inferd.backends.python.pb_errors import TritonModelException
from inferd.core import tensor as _core_tensor
from inferd.core import types as _types

#: the native dtypes ``Tensor`` takes without asking ``types.from_numpy`` (the others: it decides)
_SUPPORTED = frozenset(_types.NUMPY_DTYPES)
BF16_AS_NUMPY = (
    "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."
)


class Tensor:
    """A named numpy tensor, optionally with the Triton datatype its array stands for.

    The datatype matters only where numpy has no dtype of its own: a BF16 tensor holds its
    elements as raw ``uint16`` words (the upper half of the float32 bit pattern); ``as_numpy()``
    refuses it as the reference does, ``to_dlpack()`` hands it on as ``bfloat16`` (e.g. to
    ``torch.from_dlpack``), and ``Tensor.from_dlpack`` of a bfloat16 tensor gives a BF16 Tensor.
    """

    __slots__ = ("_array", "_dt", "_name")
    _name: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) == 2 and not kwargs:  # what models write: a name and an array of a known dtype
            name, data = args
            if type(name) is str and name and type(data) is np.ndarray and data.dtype in _SUPPORTED:
                self._name = name
                self._array = data
                self._dt: _types.DataType | None = None
                return
        self._checked_init(args, kwargs)

    def _checked_init(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """``__init__`` with every check the reference makes, and its errors."""
        if len(args) != 2 or kwargs or not isinstance(args[0], str) or not isinstance(args[1], np.ndarray):
            raise incompatible(
                "__init__",
                "c_python_backend_utils.Tensor(arg0: str, arg1: numpy.ndarray)",
                args,
                kwargs,
                True,
            )
        name, data = args
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        try:
            _types.from_numpy(data.dtype)
        except TypeError:
            raise TritonModelException("NumPy dtype is not supported.") from None
        self._name = name
        self._array = data
        self._dt = None

    @staticmethod
    def _typed(name: str, array: np.ndarray[Any, Any], datatype: _types.DataType | None) -> Tensor:
        """A tensor over ``array`` whose Triton datatype is ``datatype`` (None: the array's own)."""
        self = Tensor.__new__(Tensor)
        self._name = name
        self._array = array
        self._dt = datatype
        return self

    def _datatype(self) -> _types.DataType | None:
        """The Triton datatype this tensor was given (BF16 over uint16 words), else None."""
        return self._dt

    def _data(self) -> np.ndarray[Any, Any]:
        """The array (BF16: the uint16 words), for the server's side."""
        return self._array  # type: ignore[no-any-return]

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray[Any, Any]:
        """The data as numpy, shared, not copied (BF16 has no numpy dtype: refused)."""
        if self._dt is _types.BF16:
            raise TritonModelException(BF16_AS_NUMPY)
        return self._array  # type: ignore[no-any-return]

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        dt = self._dt
        return (dt if dt is not None else _types.from_numpy(self._array.dtype)).triton_code

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule (``"dltensor"``) over this tensor's memory, read-only inputs included."""
        return _dlpack.export(self._array, self._dt, None, None, None, None)

    def __dlpack__(
        self, stream: Any = None, *, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        return _dlpack.export(self._array, self._dt, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_dlpack.DL_CPU, 0)

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor over the memory of a DLPack capsule or of an object with ``__dlpack__`` (no copy).

        The capsule is consumed; the producer's memory stays alive until the tensor's array is
        freed. bfloat16 becomes a BF16 tensor (over ``uint16`` words).
        """
        if not isinstance(name, str):
            raise incompatible(
                "from_dlpack",
                "(arg0: str, arg1: object) -> c_python_backend_utils.Tensor",
                (name, capsule),
                {},
            )
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if hasattr(capsule, "__dlpack__"):
            device = getattr(capsule, "__dlpack_device__", None)
            if device is None:
                raise TritonModelException(_dlpack.NOT_DLPACK)
            kind = int(device()[0])
            if kind not in (_dlpack.DL_CPU, _dlpack.DL_CUDA_HOST):
                raise TritonModelException(f"DLDevice type {kind} is not support by Python backend.")
            try:
                capsule = capsule.__dlpack__(stream=None, max_version=_dlpack.DLPACK_VERSION)
            except TypeError:  # a producer older than DLPack 1.0
                capsule = capsule.__dlpack__(stream=None)
        array, datatype = _dlpack.consume(capsule)
        return Tensor._typed(name, array, datatype)

    def __repr__(self) -> str:
        dt = self._dt
        shown = dt.wire if dt is _types.BF16 else self._array.dtype
        return f"Tensor({self._name!r}, shape={list(self._array.shape)}, dtype={shown})"


# -- type conversions (pb_utils exports them) ------------------------------------------------
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    row.config: (np.object_ if row is _types.BYTES else row.numpy.type)
    for row in _types.BY_CONFIG.values()
    if row is not _types.BF16
}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32`` (``TYPE_STRING`` -> ``np.object_``)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """TRITONSERVER_DataType code -> numpy type."""
    row = _types.BY_TRITON_CODE[data_type]
    return np.object_ if row is _types.BYTES else row.numpy.type


def numpy_to_triton_type(data_type: Any) -> int:
    """numpy type -> TRITONSERVER_DataType code."""
    return _types.from_numpy(np.dtype(data_type)).triton_code


def serialize_byte_tensor(input_tensor: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """Object/bytes array -> uint8 array of length-prefixed elements (None when empty)."""
    if input_tensor.size == 0:
        return None
    return np.frombuffer(_core_tensor.serialize_bytes(input_tensor), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray[Any, Any]:
    """Length-prefixed bytes -> object array of ``bytes``."""
    return _core_tensor.deserialize_bytes(encoded_tensor)
