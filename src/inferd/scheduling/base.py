"""The scheduler protocol: three calls, as Triton's ``scheduler.h``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from inferd.backends.base import BackendInstance
from inferd.core.request import InferRequest

if TYPE_CHECKING:
    from inferd.scheduling.rate_limiter import Gate


class Scheduler(Protocol):
    """Takes validated requests of one model version and answers through ``request.stream``."""

    def enqueue(self, request: InferRequest) -> None:
        """Queue ``request`` (called on the event loop; never blocks)."""
        ...

    def inflight(self) -> int:
        """Requests queued or executing."""
        ...

    async def stop(self, timeout_s: float) -> None:
        """Finish in-flight work (up to ``timeout_s``), then release instances."""
        ...


class Resizable(Protocol):
    """A scheduler whose instances change while it serves: an ``instance_group`` update made in
    place (engine/instance_update.py, the reference's ``UpdateInstanceGroup``)."""

    @property
    def promoted(self) -> bool:
        """Whether its instances moved to worker processes (execution_mode auto): new ones are
        made as the move makes them."""
        ...

    def add_instances(
        self, instances: list[tuple[str, BackendInstance]], gate: Gate | None = None
    ) -> list[int]:
        """Serve on ``instances`` too, from now on; their indices (``remove_instances``'s). ``gate``:
        their slots in the rate limiter, registered already (one per instance, in order)."""
        ...

    async def remove_instances(self, indices: list[int], timeout_s: float) -> None:
        """Retire the instances at ``indices``: they take nothing new, finish what they run (up to
        ``timeout_s``) and unload; a sequence batcher's wait for their sequences to end."""
        ...
