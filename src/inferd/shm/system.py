"""System (POSIX) shared memory regions: registered once, mapped once, read and written in place.

Both frontends resolve ``shared_memory_region`` parameters here; inputs become views over the
mapping (no copy) and outputs are written straight into it. Bounds are checked before any byte
is read or written. Texts are the reference's.

Safety: a key is opened with ``O_NOFOLLOW`` and must name a regular shared-memory object (a
symlink in /dev/shm cannot point a region at another file); the registered window must lie in
the object as it is, and is checked again against the object's size on every request (a client
that shrinks its object afterwards gets an error, not a server killed by SIGBUS, except in the
moment between that check and the copy). A region some request still uses (any view over its
mapping is alive) is not unregistered: the reference 2.51's answer, "it is currently in use".
``allow_client_shm=False`` refuses registrations altogether, as newer reference releases do by
default.
"""

from __future__ import annotations

import mmap
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from inferd.core.request import Target
from inferd.core.tensor import Tensor
from inferd.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)
from inferd.shm.registry import Regions, check_window, too_small

if TYPE_CHECKING:
    from inferd.shm.cuda import CudaWindow

#: a resolved ``shared_memory_region``: a view of system shared memory, or a CUDA window
Window: TypeAlias = "memoryview | CudaWindow"

#: where POSIX shm_open keys live on Linux
SHM_DIR = "/dev/shm"
#: newer reference releases' answer when client shared memory is off
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)


@dataclass(slots=True)
class SystemRegion:
    """A registered region: the client's key and window, and our mapping of the whole object."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    view: memoryview  # the registered window [offset, offset + byte_size)
    fd: int  # kept open: the object's size is checked again per request

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def close(self) -> bool:
        """Unmap; False (and still mapped) while a request holds a view over the mapping."""
        self.view.release()
        try:
            self.mapping.close()
        except BufferError:
            self.view = memoryview(self.mapping)[self.offset : self.offset + self.byte_size]
            return False
        os.close(self.fd)
        return True


class SharedMemoryManager(Regions[SystemRegion]):
    """The system shared-memory regions of one server (thread-safe); ``sibling``: the CUDA ones."""

    KIND = "system"
    LABEL = "system"
    OPS = ("shm_register", "shm_unregister")

    # -- extension endpoints ---------------------------------------------------------------------
    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the shm object ``key`` under ``name``."""
        if not self.allow_client_shm:
            raise UnsupportedError(CLIENT_SHM_DISABLED)
        if self.taken(name):
            raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        path = os.path.join(SHM_DIR, key.lstrip("/"))
        if "/" in key.lstrip("/") or not key.strip("/") or "\0" in key:  # a NUL: no such C string
            raise InternalError(f"Unable to open shared memory region: '{key}'")
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise InternalError(f"Unable to open shared memory region: '{key}'") from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a FIFO, a device, a directory: not a shm object
                raise InternalError(f"Invalid shared memory region: '{key}'")
            size = st.st_size
            if offset < 0 or byte_size < 0 or offset + byte_size > size:
                raise InvalidArgumentError(f"failed to register shared memory region '{name}': invalid args")
            if byte_size == 0 or offset % mmap.ALLOCATIONGRANULARITY:  # what mmap(2) refuses there: EINVAL
                raise InvalidArgumentError(
                    f"failed to register shared memory region '{name}': unable to process address space"
                    "Invalid argument"
                )
            mapping = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        region = SystemRegion(
            name, key, offset, byte_size, mapping, memoryview(mapping)[offset : offset + byte_size], fd
        )
        with self._lock:
            if name in self._regions:
                region.close()
                raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
            self._regions[name] = region

    def close(self) -> None:
        """At shutdown: unmap what can be unmapped (a mapping still in use goes with its last view)."""
        with self._lock:
            regions, self._regions = list(self._regions.values()), {}
        for r in regions:
            if not r.close():
                r.view.release()

    # -- request side ------------------------------------------------------------------------------
    def resolve(self, name: str, offset: int, byte_size: int | None) -> Window:
        """The window of region ``name``, or of the CUDA region of that name (shm/cuda.py)."""
        with self._lock:
            r = self._regions.get(name)
        if r is None:
            cuda = self.sibling
            if cuda is not None and cuda.has(name):
                return cuda.resolve(name, offset, byte_size)
            raise NotFoundError(f"Unable to find shared memory region: '{name}'")
        check_window(name, r.byte_size, offset, byte_size)
        assert byte_size is not None
        try:
            size = os.fstat(r.fd).st_size
        except OSError:
            size = -1
        if r.offset + offset + byte_size > size:  # the client shrank its object: reading would SIGBUS
            raise InvalidArgumentError(
                f"shared memory region '{name}' is smaller than when it was registered ({size} bytes)"
            )
        return r.view[offset : offset + byte_size]


def write_to_target(t: Tensor, target: Target) -> None:
    """Copy an output into the shared-memory window the client named (500 when it is too small)."""
    if type(target) is not memoryview:  # a CUDA shared-memory window: device to device where it can
        target.write(t)
        return
    data = t.to_bytes()
    size = len(data) if isinstance(data, bytes) else data.nbytes
    if size > target.nbytes:
        raise too_small(t.name, target.nbytes, size)
    target[:size] = data
