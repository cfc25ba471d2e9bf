"""``ControlLock``: model control's one lock, and one action per model at a time.

Loads and unloads after start run under one asyncio lock, so that their bookkeeping never
interleaves; but a slow part (reading a model's files, loading its versions, draining its old ones)
lets the lock go (``window``), so a slow load holds up no other model's. What must not interleave
then is two actions on one model: each action claims its model (``claimed``) from its start to its
end, and an action on a model that is claimed waits for that end, the lock let go meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from inferd.errors import UnavailableError


class ControlLock:
    """The lock, and the models whose action is under way (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        #: model key -> the task whose action holds it and the future its end sets
        self._inflight: dict[str, tuple[asyncio.Task[Any] | None, asyncio.Future[None]]] = {}

    async def wait_free(self, name: str, locked: bool) -> None:
        """Wait (the lock let go meanwhile) until no load or unload of ``name`` is under way;
        ``locked``: whether the caller holds the lock (if not, it cannot wait: it is refused)."""
        while (under_way := self._inflight.get(name)) is not None:
            owner, pending = under_way
            if not locked or owner is asyncio.current_task():  # waiting would wait for itself
                raise UnavailableError(f"'{name}' is being loaded or unloaded: try again once it is done")
            self.lock.release()
            try:
                await asyncio.shield(pending)
            finally:
                await self.lock.acquire()

    @contextlib.asynccontextmanager
    async def claimed(self, name: str, locked: bool) -> AsyncIterator[None]:
        """``name``'s action from here to its end: others on ``name`` wait for it."""
        await self.wait_free(name, locked)
        done = asyncio.get_running_loop().create_future()
        self._inflight[name] = (asyncio.current_task(), done)
        try:
            yield
        finally:
            del self._inflight[name]
            done.set_result(None)

    @contextlib.asynccontextmanager
    async def window(self, release: bool) -> AsyncIterator[None]:
        """The lock let go for a slow part when ``release`` (the caller holds it): other models'
        loads and unloads run meanwhile."""
        if not release:
            yield
            return
        self.lock.release()
        try:
            yield
        finally:
            await self.lock.acquire()
