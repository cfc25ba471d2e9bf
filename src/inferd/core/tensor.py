"""Tensor: a named, typed, shaped numpy array; zero-copy from received buffers; the BYTES codec.

TensorSpec: an input or output as the ModelConfig describes it, the one tensor description the
core (validation, metadata) and the native backends (reshape) read.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.core.types import BY_CONFIG_VALUE, BYTES, DataType, from_numpy

if TYPE_CHECKING:
    from inferd.gpu.cuda import CudaArray

_LEN = struct.Struct("<I")

#: What received tensor bytes may be (3.11 has no collections.abc.Buffer).
Buffer = bytes | bytearray | memoryview


class Tensor:
    """One input or output tensor.

    Built either from an ndarray or from raw little-endian bytes (``raw``); the array view over
    raw bytes is made on first use, after validation has checked the byte size, and never copies.
    Or in device memory (``device``: a CUDA shared-memory input, a GPU model's output): a backend
    on that device reads it there; ``array`` makes a host copy on first use, for everyone else.
    """

    __slots__ = ("_array", "datatype", "device", "name", "raw", "shape")

    def __init__(
        self,
        name: str,
        datatype: DataType,
        shape: tuple[int, ...],
        array: np.ndarray[Any, Any] | None = None,
        raw: Buffer | None = None,
        device: CudaArray | None = None,
    ) -> None:
        self.name = name
        self.datatype = datatype
        self.shape = shape
        self._array = array
        self.raw = raw
        self.device = device

    @classmethod
    def from_array(cls, name: str, array: np.ndarray[Any, Any], datatype: DataType | None = None) -> Tensor:
        """A tensor over ``array`` (str/bytes arrays become BYTES)."""
        dt = datatype if datatype is not None else from_numpy(array.dtype)
        return cls(name, dt, tuple(int(d) for d in array.shape), array=array)

    def renamed(self, name: str) -> Tensor:
        """The same data under another name (no copy)."""
        return Tensor(name, self.datatype, self.shape, array=self._array, raw=self.raw, device=self.device)

    @property
    def element_count(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def raw_byte_size(self) -> int:
        """Bytes of the raw buffer (or device memory) this tensor was received as (-1 when it came
        as an array)."""
        if self.raw is None:
            return -1 if self.device is None else self.device.nbytes
        return memoryview(self.raw).nbytes

    @property
    def array(self) -> np.ndarray[Any, Any]:
        """The data as numpy (BYTES: object array of ``bytes``); a view over ``raw`` when received raw."""
        arr = self._array
        if arr is None:
            if self.raw is None:  # in device memory: a host copy, once (of raw bytes or typed)
                assert self.device is not None
                arr = self.device.to_host()
                if arr.dtype != self.datatype.numpy:
                    arr = arr.reshape(-1).view(self.datatype.numpy)
                arr = self._array = arr.reshape(self.shape)
                return arr
            if self.datatype is BYTES:
                arr = deserialize_bytes(self.raw, self.element_count).reshape(self.shape)
            else:
                arr = np.frombuffer(self.raw, dtype=self.datatype.numpy).reshape(self.shape)
            self._array = arr
        return arr

    def set_array(self, array: np.ndarray[Any, Any]) -> None:
        """Replace the data by an already decoded array (keeps ``raw`` for re-sending)."""
        self._array = array

    def to_bytes(self, copy_under: int = 0) -> bytes | memoryview:
        """Wire bytes: row-major little-endian; BYTES elements are length-prefixed. An array of
        fewer than ``copy_under`` bytes comes as one copy (cheaper than a view's three objects,
        where the caller joins the bytes into a message anyway), a larger one as a view."""
        if self.raw is not None:
            return memoryview(self.raw)
        arr = self.array
        if self.datatype is BYTES:
            return serialize_bytes(arr)
        if arr.nbytes < copy_under and arr.dtype.byteorder != ">":
            return arr.tobytes()  # row-major whatever the array's layout
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        # flat first: memoryview cannot cast a view with a zero in its shape ([0, 3])
        return memoryview(arr.reshape(-1)).cast("B")  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.datatype.wire}, {list(self.shape)})"


@dataclass(slots=True, frozen=True)
class TensorSpec:
    """An input or output of a model, copied out of its ModelConfig at load.

    ``dims`` is the API shape without the batch dimension; ``reshape`` the framework's shape
    when the config gives one (``reshape: { shape: [...] }``), which native backends apply to
    inputs and undo on outputs.
    """

    name: str
    datatype: DataType
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None
    optional: bool = False
    labels: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, io: Any, labels: tuple[str, ...] = ()) -> TensorSpec:
        """The spec of a ``ModelInput`` or ``ModelOutput`` (an output is never optional)."""
        reshape = tuple(io.reshape.shape) if io.HasField("reshape") else None
        optional = bool(getattr(io, "optional", False))
        return cls(io.name, BY_CONFIG_VALUE[io.data_type], tuple(io.dims), reshape, optional, labels)

    def full_shape(self, max_batch_size: int) -> list[int]:
        """Shape as metadata shows it: -1 batch dimension first when the model batches."""
        return ([-1] if max_batch_size > 0 else []) + list(self.dims)


def _as_bytes(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytearray, memoryview, np.bytes_)):
        return bytes(v)
    return str(v).encode()


def serialize_bytes(array: np.ndarray[Any, Any] | Sequence[Any]) -> bytes:
    """BYTES wire form: each element as a 4-byte little-endian length then its bytes."""
    flat = np.asarray(array, dtype=np.object_).reshape(-1) if not isinstance(array, list) else array
    parts: list[bytes] = []
    pack = _LEN.pack
    for v in flat:
        b = _as_bytes(v)
        parts.append(pack(len(b)))
        parts.append(b)
    return b"".join(parts)


class BytesDecodeError(ValueError):
    """A BYTES buffer whose length prefixes do not add up."""


def deserialize_bytes(buf: Buffer, count: int = -1) -> np.ndarray[Any, Any]:
    """Decode length-prefixed BYTES elements into an object array of ``bytes``.

    ``count`` >= 0 requires exactly that many elements filling the buffer exactly.
    """
    mv = memoryview(buf).cast("B")
    n = mv.nbytes
    out: list[bytes] = []
    off = 0
    unpack = _LEN.unpack_from
    while off < n:
        if off + 4 > n:
            raise BytesDecodeError("truncated BYTES element length")
        (ln,) = unpack(mv, off)
        off += 4
        if off + ln > n:
            raise BytesDecodeError("BYTES element length exceeds the buffer")
        out.append(bytes(mv[off : off + ln]))
        off += ln
    if count >= 0 and len(out) != count:
        raise BytesDecodeError(f"expected {count} BYTES elements, found {len(out)}")
    arr = np.empty(len(out), dtype=np.object_)
    arr[:] = out
    return arr
