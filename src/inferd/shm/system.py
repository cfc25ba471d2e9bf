"""System (POSIX) shared memory regions: registered once, mapped once, read and written in place.

Both frontends resolve ``shared_memory_region`` parameters here; inputs become views over the
mapping (no copy) and outputs are written straight into it. Bounds are checked before any byte
is read or written. Texts are the reference's.
"""

from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass
from typing import Any

from inferd.core.tensor import Tensor
from inferd.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
)

#: where POSIX shm_open keys live on Linux
SHM_DIR = "/dev/shm"
#: sizeof(cudaIpcMemHandle_t)
CUDA_IPC_HANDLE_SIZE = 64


@dataclass(slots=True)
class SystemRegion:
    """A registered region: the client's key and window, and our mapping of the whole object."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    view: memoryview  # the registered window [offset, offset + byte_size)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def close(self) -> None:
        self.view.release()
        try:
            self.mapping.close()
        except BufferError:
            pass  # an in-flight request still holds a view: the mapping closes when it is released


class SharedMemoryManager:
    """The system shared-memory regions of one server (thread-safe)."""

    def __init__(self) -> None:
        self._regions: dict[str, SystemRegion] = {}
        self._lock = threading.Lock()

    # -- extension endpoints ---------------------------------------------------------------------
    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the shm object ``key`` under ``name``."""
        with self._lock:
            if name in self._regions:
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        path = os.path.join(SHM_DIR, key.lstrip("/"))
        if "/" in key.lstrip("/") or not key.strip("/"):
            raise InternalError(f"Unable to open shared memory region: '{key}'")
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            raise InternalError(f"Unable to open shared memory region: '{key}'") from e
        try:
            size = os.fstat(fd).st_size
            if offset < 0 or byte_size <= 0 or offset + byte_size > size:
                raise InvalidArgumentError(f"failed to register shared memory region '{name}': invalid args")
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        region = SystemRegion(
            name, key, offset, byte_size, mapping, memoryview(mapping)[offset : offset + byte_size]
        )
        with self._lock:
            if name in self._regions:
                region.close()
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
            self._regions[name] = region

    def unregister(self, name: str = "") -> None:
        """Forget one region (unknown names are fine, as the reference) or, with no name, all."""
        with self._lock:
            if name:
                regions = [r for r in [self._regions.pop(name, None)] if r is not None]
            else:
                regions = list(self._regions.values())
                self._regions.clear()
        for r in regions:
            r.close()

    def status(self, name: str = "") -> list[dict[str, Any]]:
        with self._lock:
            if name:
                r = self._regions.get(name)
                if r is None:
                    raise NotFoundError(f"Unable to find system shared memory region: '{name}'")
                return [r.status()]
            return [r.status() for r in self._regions.values()]

    def close(self) -> None:
        self.unregister()

    # -- request side ------------------------------------------------------------------------------
    def resolve(self, name: str, offset: int, byte_size: int | None) -> memoryview:
        """The window ``[offset, offset + byte_size)`` of region ``name``, bounds checked."""
        with self._lock:
            r = self._regions.get(name)
        if r is None:
            raise NotFoundError(f"Unable to find shared memory region: '{name}'")
        if byte_size is None or byte_size <= 0 or offset < 0 or offset + byte_size > r.byte_size:
            raise InvalidArgumentError(f"Invalid offset + byte size for shared memory region: '{name}'")
        return r.view[offset : offset + byte_size]


class CudaSharedMemoryManager:
    """CUDA IPC regions. Without a GPU every registration fails as the reference's does."""

    def __init__(self) -> None:
        self._regions: dict[str, dict[str, Any]] = {}

    def register(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        if len(raw_handle) != CUDA_IPC_HANDLE_SIZE:
            raise InvalidArgumentError("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        # No CUDA runtime here: opening the IPC handle is impossible (the reference's answer).
        raise InvalidArgumentError("failed to register shared memory region: invalid args")

    def unregister(self, name: str = "") -> None:
        if name:
            self._regions.pop(name, None)
        else:
            self._regions.clear()

    def status(self, name: str = "") -> list[dict[str, Any]]:
        if name:
            r = self._regions.get(name)
            if r is None:
                raise NotFoundError(f"Unable to find cuda shared memory region: '{name}'")
            return [r]
        return list(self._regions.values())


def write_to_target(t: Tensor, target: memoryview) -> None:
    """Copy an output into the shared-memory window the client named (500 when it is too small)."""
    data = t.to_bytes()
    size = len(data) if isinstance(data, bytes) else data.nbytes
    if size > target.nbytes:
        raise InternalError(
            f"shared memory size specified with the request for output '{t.name}' ({target.nbytes} bytes) "
            f"should be at least {size} bytes to hold the results"
        )
    target[:size] = data
