"""``pb_utils.Tensor``: a named numpy tensor, with the Triton datatype its array stands for (BF16),
or a tensor in GPU memory (``is_cpu()`` False).

Apart from ``pb_utils`` (which re-exports it) for size: the tensor and its DLPack exchange. A GPU
tensor comes from ``from_dlpack`` of a torch or CuPy CUDA tensor (or capsule), or as an input of a
model that sets ``FORCE_CPU_ONLY_INPUT_TENSORS: "no"``; it is described, not copied (a
``CudaArray``), goes on to ``to_dlpack`` consumers, BLS requests and responses in place, and
``as_numpy()`` gives a host copy of it where the reference raises (server#3547).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from inferd.backends.python import dlpack as _dlpack
from inferd.backends.python.pb_args import incompatible
from inferd.backends.python.pb_errors import TritonModelException
from inferd.core import tensor as _core_tensor
from inferd.core import types as _types
from inferd.gpu.cuda import CudaArray

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

    __slots__ = ("_array", "_dev", "_dt", "_name")
    _name: str
    #: the numpy array (None for a GPU tensor)
    _array: Any
    #: the tensor in GPU memory (``_array`` is then None); None for a host tensor
    _dev: CudaArray | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) == 2 and not kwargs:  # what models write: a name and an array of a known dtype
            name, data = args
            if type(name) is str and name and type(data) is np.ndarray and data.dtype in _SUPPORTED:
                self._name = name
                self._array = data
                self._dt: _types.DataType | None = None
                self._dev = None
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
        self._dev = None

    @staticmethod
    def _typed(name: str, array: np.ndarray[Any, Any], datatype: _types.DataType | None) -> Tensor:
        """A tensor over ``array`` whose Triton datatype is ``datatype`` (None: the array's own)."""
        self = Tensor.__new__(Tensor)
        self._name = name
        self._array = array
        self._dt = datatype
        self._dev = None
        return self

    @staticmethod
    def _on_device(name: str, dev: CudaArray, datatype: _types.DataType | None) -> Tensor:
        """A tensor over GPU memory (no copy)."""
        self = Tensor.__new__(Tensor)
        self._name = name
        self._array = None
        self._dt = datatype
        self._dev = dev
        return self

    @staticmethod
    def _of_core(name: str, ct: _core_tensor.Tensor, keep_device: bool) -> Tensor:
        """A server-side tensor as the model sees it: in GPU memory where it lies there and
        ``keep_device`` (else on the host: a copy of a GPU tensor, made once)."""
        dev = ct.device
        if keep_device and dev is not None and ct.raw is None:
            typed = ct.datatype.numpy
            if dev.dtype != typed or dev.shape != ct.shape:  # raw bytes (CUDA shared memory): typed
                dev = CudaArray(dev.ptr, dev.device_id, typed, ct.shape, dev, dev.stream)
            return Tensor._on_device(name, dev, ct.datatype)
        return Tensor._typed(name, ct.array, ct.datatype)

    def _core(self) -> _core_tensor.Tensor:
        """This tensor for the server's side (no copy; a GPU tensor stays in GPU memory)."""
        dev = self._dev
        if dev is not None:
            dt = self._dt if self._dt is not None else _types.from_numpy(dev.dtype)
            return _core_tensor.Tensor(self._name, dt, dev.shape, device=dev)
        return _core_tensor.Tensor.from_array(self._name, self._array, self._dt)

    def _datatype(self) -> _types.DataType | None:
        """The Triton datatype this tensor was given (BF16 over uint16 words), else None."""
        return self._dt

    def _data(self) -> np.ndarray[Any, Any]:
        """The array (BF16: the uint16 words), for the server's side (a GPU tensor: a host copy)."""
        if self._dev is not None:
            return self._dev.to_host()
        return self._array  # type: ignore[no-any-return]

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray[Any, Any]:
        """The data as numpy, shared, not copied (BF16 has no numpy dtype: refused); a GPU tensor's
        is a host copy (the reference raises there)."""
        if self._dt is _types.BF16:
            raise TritonModelException(BF16_AS_NUMPY)
        if self._dev is not None:
            return self._dev.to_host()
        return self._array  # type: ignore[no-any-return]

    def shape(self) -> list[int]:
        dev = self._dev
        return list(dev.shape if dev is not None else self._array.shape)

    def triton_dtype(self) -> int:
        dt = self._dt
        if dt is None:
            dev = self._dev
            dt = _types.from_numpy(dev.dtype if dev is not None else self._array.dtype)
        return dt.triton_code

    def is_cpu(self) -> bool:
        return self._dev is None

    def to_dlpack(self) -> Any:
        """A DLPack capsule (``"dltensor"``) over this tensor's memory, read-only inputs included."""
        if self._dev is not None:
            return _device_capsule(self._dev, self._dt, None)
        return _dlpack.export(self._array, self._dt, None, None, None, None)

    def __dlpack__(
        self, stream: Any = None, *, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        if self._dev is not None:
            return _device_capsule(self._dev, self._dt, stream)
        return _dlpack.export(self._array, self._dt, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._dev is not None:
            return (_dlpack.DL_CUDA, self._dev.device_id)
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
            if kind not in (_dlpack.DL_CPU, _dlpack.DL_CUDA_HOST, _dlpack.DL_CUDA):
                raise TritonModelException(f"DLDevice type {kind} is not support by Python backend.")
            try:
                capsule = capsule.__dlpack__(stream=None, max_version=_dlpack.DLPACK_VERSION)
            except TypeError:  # a producer older than DLPack 1.0
                capsule = capsule.__dlpack__(stream=None)
        array, datatype = _dlpack.consume(capsule)
        if isinstance(array, CudaArray):
            return Tensor._on_device(name, array, datatype)
        return Tensor._typed(name, array, datatype)

    def __repr__(self) -> str:
        dt = self._dt
        dev = self._dev
        shown = dt.wire if dt is _types.BF16 else (dev.dtype if dev is not None else self._array.dtype)
        where = "" if dev is None else f", device=cuda:{dev.device_id}"
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={shown}{where})"


def _device_capsule(dev: CudaArray, datatype: _types.DataType | None, stream: Any) -> Any:
    """A DLPack capsule over GPU memory, through torch or CuPy (whichever is installed) reading the
    memory's ``__cuda_array_interface__``: no copy."""
    torch: Any = None
    with contextlib.suppress(ImportError):
        import torch as _torch

        torch = _torch
    if torch is not None:
        t = torch.as_tensor(dev, device=f"cuda:{dev.device_id}")
        if datatype is _types.BF16:
            t = t.view(torch.bfloat16)
        return t.__dlpack__(stream=stream)
    try:
        import cupy
    except ImportError:
        raise TritonModelException(
            "a GPU tensor goes out through DLPack with torch or CuPy, and neither is installed"
        ) from None
    return cupy.asarray(dev).__dlpack__(stream=stream)


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
