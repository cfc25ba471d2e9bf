"""Device memory through the CUDA runtime: the one place inferd calls CUDA itself.

The CUDA runtime's own Python bindings (``cuda-bindings``, in the ``gpu`` extra, as tritonclient's
CUDA shared-memory utilities use them) open and close the IPC handles of CUDA shared-memory
regions (shm/cuda.py) and copy between host and device memory. The frameworks (torch, CuPy) are
not needed for any of it; they exchange device tensors with inferd through
``__cuda_array_interface__`` (``CudaArray``), without copies.

Without the bindings, a driver or a GPU, every call raises ``CudaError`` with the runtime's reason;
nothing is imported before the first call, so a CPU server never loads CUDA.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

#: sizeof(cudaIpcMemHandle_t)
IPC_HANDLE_SIZE = 64


class CudaError(RuntimeError):
    """A CUDA runtime call failed (or there is no CUDA runtime here); the text is the runtime's."""


@functools.cache
def _runtime() -> Any:
    try:
        import cuda.bindings.runtime as rt
    except ImportError as e:
        raise CudaError(
            f"the CUDA runtime's Python bindings are not installed ({e}): pip install 'inferd[gpu]'"
        ) from None
    return rt


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` of cuda.bindings: its values after the error code, or CudaError."""
    rt = _runtime()
    try:
        res = fn(*args)
    except Exception as e:  # the bindings raise where no driver library can be loaded at all
        raise CudaError(str(e)) from e
    err = res[0]
    if err != rt.cudaError_t.cudaSuccess:
        _, text = rt.cudaGetErrorString(err)
        raise CudaError(text.decode() if isinstance(text, bytes) else str(text))
    return res[1] if len(res) == 2 else res[1:]


def device_count() -> int:
    """CUDA devices this process sees; 0 without a runtime, driver or GPU."""
    try:
        return int(_call(_runtime().cudaGetDeviceCount))
    except CudaError:
        return 0


def set_device(device_id: int) -> None:
    _call(_runtime().cudaSetDevice, device_id)


def ipc_open(handle: bytes, device_id: int) -> int:
    """The device pointer another process's ``cudaIpcGetMemHandle`` handle stands for."""
    rt = _runtime()
    if len(handle) != IPC_HANDLE_SIZE:
        raise CudaError(f"a cudaIpcMemHandle_t is {IPC_HANDLE_SIZE} bytes, not {len(handle)}")
    set_device(device_id)
    h = rt.cudaIpcMemHandle_t()
    ctypes.memmove(h.getPtr(), handle, IPC_HANDLE_SIZE)
    return int(_call(rt.cudaIpcOpenMemHandle, h, rt.cudaIpcMemLazyEnablePeerAccess))


def ipc_close(ptr: int) -> None:
    _call(_runtime().cudaIpcCloseMemHandle, ptr)


def allocation_bytes(ptr: int) -> int:
    """Bytes of the allocation ``ptr`` lies in, from ``ptr`` on (the driver's address range)."""
    try:
        import cuda.bindings.driver as drv

        err, base, size = drv.cuMemGetAddressRange(ptr)
    except Exception as e:
        raise CudaError(f"Failed to get CUDA address range: {e}") from e
    if err != drv.CUresult.CUDA_SUCCESS:
        raise CudaError(f"Failed to get CUDA address range: {err}")
    return int(size) - (ptr - int(base))


def synchronize_stream(stream: int) -> None:
    _call(_runtime().cudaStreamSynchronize, stream)


def copy(dst: int, src: int, nbytes: int) -> None:
    """``nbytes`` from ``src`` to ``dst``, host or device either (unified addressing), synchronously."""
    if nbytes:
        rt = _runtime()
        _call(rt.cudaMemcpy, dst, src, nbytes, rt.cudaMemcpyKind.cudaMemcpyDefault)


def to_host(ptr: int, nbytes: int) -> bytearray:
    """A host copy of ``nbytes`` of device memory at ``ptr``."""
    out = bytearray(nbytes)
    if nbytes:
        copy(ctypes.addressof((ctypes.c_char * nbytes).from_buffer(out)), ptr, nbytes)
    return out


def from_host(ptr: int, data: bytes | bytearray | memoryview) -> None:
    """Copy host ``data`` to device memory at ``ptr``."""
    host = np.frombuffer(data, dtype=np.uint8)
    copy(ptr, int(host.ctypes.data), host.nbytes)


class CudaArray:
    """A C-contiguous tensor in device memory: the one device-tensor description of the core.

    ``owner`` keeps the memory alive (a registered CUDA shared-memory region, a torch or CuPy
    tensor); ``stream`` is the producer's stream to wait for before reading (0: none).
    ``__cuda_array_interface__`` (v3) hands it to torch (``torch.as_tensor``) and CuPy
    (``cupy.asarray``) without a copy.
    """

    __slots__ = ("__weakref__", "device_id", "dtype", "owner", "ptr", "shape", "stream")

    def __init__(
        self,
        ptr: int,
        device_id: int,
        dtype: np.dtype[Any],
        shape: tuple[int, ...],
        owner: Any,
        stream: int = 0,
    ) -> None:
        self.ptr = ptr
        self.device_id = device_id
        self.dtype = dtype
        self.shape = shape
        self.owner = owner
        self.stream = stream

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for d in self.shape:
            n *= d
        return n

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
        }

    def ready(self) -> None:
        """Wait for the producer's stream (the interface's consumer duty)."""
        if self.stream:
            synchronize_stream(self.stream)

    def to_host(self) -> np.ndarray[Any, Any]:
        """A host copy as numpy."""
        self.ready()
        return np.frombuffer(to_host(self.ptr, self.nbytes), dtype=self.dtype).reshape(self.shape)

    def on_release(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once this array is gone (a region's use count)."""
        weakref.finalize(self, callback)

    @classmethod
    def of(cls, obj: Any) -> CudaArray | None:
        """A CudaArray over a device tensor with ``__cuda_array_interface__`` (torch, CuPy), None for
        anything else or a tensor that is not C-contiguous (the caller copies those)."""
        try:
            iface = obj.__cuda_array_interface__
        except (AttributeError, RuntimeError, TypeError):  # torch raises for a CPU or grad tensor
            return None
        shape = tuple(int(d) for d in iface["shape"])
        dtype = np.dtype(iface["typestr"])
        strides = iface.get("strides")
        if strides is not None:
            expected = dtype.itemsize
            for d, s in zip(reversed(shape), reversed(tuple(strides)), strict=True):
                if d > 1 and s != expected:
                    return None
                expected *= d
        ptr = int(iface["data"][0])
        stream = iface.get("stream") or 0
        device = _device_of(obj, ptr)
        return cls(ptr, device, dtype, shape, obj, int(stream))


def _device_of(obj: Any, ptr: int) -> int:
    """The CUDA ordinal a device tensor lives on."""
    dev = getattr(obj, "device", None)
    index = getattr(dev, "index", None)  # torch.device
    if isinstance(index, int):
        return index
    ident = getattr(dev, "id", None)  # cupy.cuda.Device
    if isinstance(ident, int):
        return ident
    rt = _runtime()
    attrs = _call(rt.cudaPointerGetAttributes, ptr)
    return int(attrs.device)
