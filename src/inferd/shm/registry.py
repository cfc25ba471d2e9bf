"""What the system and the CUDA shared-memory registries share: one namespace of region names,
status and unregister with the reference's texts, the bounds of a request's window, and the
``--workers`` propagation of a change. system.py and cuda.py hold what differs: how a region is
opened, read and written.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from inferd.errors import InternalError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from inferd.shm.system import Window


class Region(Protocol):
    def status(self) -> dict[str, Any]: ...

    def close(self) -> bool:
        """Release the region; False (and kept) while a request still uses it."""
        ...


R = TypeVar("R", bound=Region)


def check_window(name: str, region_size: int, offset: int, byte_size: int | None) -> None:
    """A request's ``[offset, offset + byte_size)`` of a region of ``region_size`` bytes: in bounds,
    or INVALID_ARGUMENT with the reference's texts (the offset alone first)."""
    if offset < 0 or offset >= region_size:
        raise InvalidArgumentError(f"Invalid offset for shared memory region: '{name}'")
    if byte_size is None or byte_size <= 0 or offset + byte_size > region_size:
        raise InvalidArgumentError(f"Invalid offset + byte size for shared memory region: '{name}'")


def too_small(output: str, have: int, need: int) -> InternalError:
    """An output that does not fit the window its request named (the reference's text)."""
    return InternalError(
        f"shared memory size specified with the request for output '{output}' ({have} bytes) "
        f"should be at least {need} bytes to hold the results"
    )


class Regions(ABC, Generic[R]):
    """The regions of one kind (thread-safe)."""

    #: the kind in the reference's lower-case texts ("system", "cuda") and in its mixed-case ones
    KIND: ClassVar[str]
    LABEL: ClassVar[str]
    #: the peers' operations that apply a register and an unregister (workers/peers.py)
    OPS: ClassVar[tuple[str, str]]

    def __init__(self, allow_client_shm: bool = True) -> None:
        self._regions: dict[str, R] = {}
        #: reentrant: a CUDA window's release may run inside (a finalizer)
        self._lock = threading.RLock()
        self.allow_client_shm = allow_client_shm
        #: ``--workers``: applies a change in every other serving process (workers/peers.py), so a
        #: region registered on one connection serves requests on any; None in a single process
        self.propagate: Callable[..., Awaitable[None]] | None = None
        #: the registry of the other kind: one namespace of names, as in the reference's one manager
        self.sibling: Regions[Any] | None = None

    def has(self, name: str) -> bool:
        return name in self._regions

    def taken(self, name: str) -> bool:
        """A region of either kind holds ``name``."""
        return name in self._regions or (self.sibling is not None and self.sibling.has(name))

    # -- what the front ends call: here, then in every other process -----------------------------
    async def register_everywhere(self, name: str, *args: Any) -> None:
        await self._register_from_loop(name, *args)
        if self.propagate is not None:
            await self.propagate(self.OPS[0], name, *args)

    async def _register_from_loop(self, name: str, *args: Any) -> None:
        self.register(name, *args)

    async def unregister_everywhere(self, name: str = "") -> None:
        self.unregister(name)
        if self.propagate is not None:
            await self.propagate(self.OPS[1], name)

    # -- extension endpoints ---------------------------------------------------------------------
    #: a region's registration, with the arguments of its kind (a method of each subclass)
    register: Callable[..., None]

    @abstractmethod
    def resolve(self, name: str, offset: int, byte_size: int | None) -> Window:
        """The window ``[offset, offset + byte_size)`` of region ``name``, bounds checked."""

    def unregister(self, name: str = "") -> None:
        """Forget one region (unknown names, and the other kind's, are fine, as the reference) or,
        with no name, all; a region a request still uses stays (INTERNAL, the reference 2.51's texts)."""
        with self._lock:
            if name:
                r = self._regions.get(name)
                if r is not None and not r.close():
                    raise InternalError(
                        f"Cannot unregister shared memory region '{name}', it is currently in use."
                    )
                self._regions.pop(name, None)
                return
            busy = [n for n, r in self._regions.items() if not r.close()]
            self._regions = {n: r for n, r in self._regions.items() if n in busy}
        if busy:
            raise InternalError(
                f"Failed to unregister the following {self.KIND} shared memory regions: "
                + "".join(f"{n} ," for n in busy)
            )

    def status(self, name: str = "") -> list[dict[str, Any]]:
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values()]
            r = self._regions.get(name)
        if r is not None:
            return [r.status()]
        other = self.sibling
        if other is not None and other.has(name):
            raise NotFoundError(
                f"The region named '{name}' is registered as {other.LABEL} shared memory, not "
                f"{self.LABEL} shared memory"
            )
        raise NotFoundError(f"Unable to find {self.KIND} shared memory region: '{name}'")
