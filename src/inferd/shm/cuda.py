"""CUDA shared-memory regions: a client's device memory, opened once through its CUDA IPC handle.

A client (``tritonclient.utils.cuda_shared_memory``, perf_analyzer ``--shared-memory cuda``)
allocates device memory, sends its ``cudaIpcMemHandle_t`` with the device id and size, and names
the region in its requests as it names system shared memory. Region names are one namespace with
the system regions (shm/system.py resolves both). Texts are the reference's.

An input in a CUDA region becomes a tensor in device memory (``Tensor.device``): a backend on that
GPU reads it where it lies (torch: ``torch.as_tensor`` over its ``__cuda_array_interface__``, no
copy); any other backend reads a host copy made on first use. An output written to a CUDA region
is copied from the device memory it lies in (device to device) or from host memory. A region some
request still uses is not unregistered (the answer system shared memory gives, "it is currently in
use"). Without a GPU (or the ``gpu`` extra), every registration fails as the reference's does, and
the detail goes to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.core.tensor import Tensor
from inferd.core.types import BYTES, DataType
from inferd.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)
from inferd.gpu import cuda
from inferd.shm.registry import Regions, check_window, too_small
from inferd.shm.system import CLIENT_SHM_DISABLED

if TYPE_CHECKING:
    from inferd.shm.system import SharedMemoryManager

log = logging.getLogger("inferd.shm")
_BYTE = np.dtype(np.uint8)


@dataclass(slots=True)
class CudaRegion:
    """A registered region: the device pointer its IPC handle opened, and the requests using it."""

    name: str
    device_id: int
    byte_size: int
    ptr: int
    users: int = 0

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def release(self) -> None:  # a CudaArray over this region is gone (CudaArray.on_release)
        self.users -= 1

    def close(self) -> bool:
        """Close the IPC handle; False (and kept open) while a request's tensor is over the region."""
        if self.users > 0:
            return False
        _close(self.ptr)
        return True


@dataclass(slots=True)
class CudaWindow:
    """``[offset, offset + nbytes)`` of a CUDA region, as an input or an output names it."""

    region: CudaRegion
    offset: int
    nbytes: int
    lock: threading.RLock  # the registry's: the use count changes under it

    @property
    def ptr(self) -> int:
        return self.region.ptr + self.offset

    def input_tensor(self, name: str, datatype: DataType, shape: tuple[int, ...]) -> Tensor:
        """An input over this window: in device memory (BYTES, which the core decodes on the host,
        as a host copy)."""
        if datatype is BYTES:
            return Tensor(name, datatype, shape, raw=self._read())
        arr = cuda.CudaArray(self.ptr, self.region.device_id, _BYTE, (self.nbytes,), self.region)
        with self.lock:
            self.region.users += 1
        arr.on_release(self._released)
        return Tensor(name, datatype, shape, device=arr)

    def _released(self) -> None:
        with self.lock:
            self.region.release()

    def _read(self) -> bytearray:
        try:
            return cuda.to_host(self.ptr, self.nbytes)
        except cuda.CudaError as e:
            raise InternalError(f"failed to read CUDA shared memory region '{self.region.name}': {e}") from e

    def write(self, t: Tensor) -> None:
        """Copy output ``t`` here: from its device memory where it has some, else from the host."""
        dev = t.device if t.raw is None else None
        size = dev.nbytes if dev is not None else -1
        data: bytes | memoryview | None = None
        if dev is None:
            data = t.to_bytes()
            size = len(data) if isinstance(data, bytes) else data.nbytes
        if size > self.nbytes:
            raise too_small(t.name, self.nbytes, size)
        try:
            if dev is not None:
                dev.ready()
                cuda.copy(self.ptr, dev.ptr, size)
            else:
                assert data is not None
                cuda.from_host(self.ptr, data)
        except cuda.CudaError as e:
            raise InternalError(
                f"failed to write output '{t.name}' to CUDA shared memory region '{self.region.name}': {e}"
            ) from e


class CudaSharedMemoryManager(Regions[CudaRegion]):
    """The CUDA shared-memory regions of one server (thread-safe), in one namespace with ``system``'s."""

    KIND = "cuda"
    LABEL = "CUDA"
    OPS = ("cuda_shm_register", "cuda_shm_unregister")

    def __init__(self, allow_client_shm: bool = True, system: SharedMemoryManager | None = None) -> None:
        super().__init__(allow_client_shm)
        if system is not None:
            self.sibling, system.sibling = system, self

    async def _register_from_loop(self, name: str, *args: Any) -> None:
        # off the event loop: the first CUDA call of a process makes its CUDA context (~0.1-1 s)
        await asyncio.to_thread(self.register, name, *args)

    # -- extension endpoints ---------------------------------------------------------------------
    def register(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        if not self.allow_client_shm:
            raise UnsupportedError(CLIENT_SHM_DISABLED)
        if self.taken(name):
            raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        try:
            ptr = cuda.ipc_open(bytes(raw_handle), device_id)
        except cuda.CudaError as e:  # the reference logs the reason and answers "invalid args"
            log.error("failed to open CUDA IPC handle: %s", e)
            raise InvalidArgumentError("failed to register shared memory region: invalid args") from None
        try:
            available = cuda.allocation_bytes(ptr)
        except cuda.CudaError as e:
            log.error("%s", e)
            available = -1
        if byte_size > available:  # the window must lie in the allocation the handle stands for
            _close(ptr)
            raise InvalidArgumentError(f"failed to register shared memory region '{name}': invalid args")
        with self._lock:
            if name in self._regions:
                _close(ptr)
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
            self._regions[name] = CudaRegion(name, device_id, byte_size, ptr)

    def close(self) -> None:
        """At shutdown: close every handle no request holds."""
        with contextlib.suppress(InternalError):  # a region a request still holds: the exit closes it
            self.unregister()

    # -- request side ------------------------------------------------------------------------------
    def resolve(self, name: str, offset: int, byte_size: int | None) -> CudaWindow:
        """The window ``[offset, offset + byte_size)`` of CUDA region ``name``, bounds checked."""
        with self._lock:
            r = self._regions.get(name)
        if r is None:
            raise NotFoundError(f"Unable to find shared memory region: '{name}'")
        check_window(name, r.byte_size, offset, byte_size)
        assert byte_size is not None
        return CudaWindow(r, offset, byte_size, self._lock)


def _close(ptr: int) -> None:
    try:
        cuda.ipc_close(ptr)
    except cuda.CudaError as e:
        log.error("failed to close CUDA IPC handle: %s", e)
