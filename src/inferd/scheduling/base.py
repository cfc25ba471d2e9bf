"""The scheduler protocol: three calls, as Triton's ``scheduler.h``."""

from __future__ import annotations

from typing import Protocol

from inferd.core.request import InferRequest


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
