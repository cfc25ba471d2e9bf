"""The event loop of a Python model instance whose ``execute`` is a coroutine (``async def``).

Triton's answer to "one instance cannot overlap requests": the instance's executes run as tasks
on one asyncio loop, so while one awaits (I/O, a sleep, a BLS request) the next one runs. The loop
has a thread of its own; the instance's worker (or the server's loop, inline) only hands each
batch over and takes the next one. Tasks a model starts itself (``asyncio.create_task``) run
there too, also after the execute that started them returned.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("inferd.python")

T = TypeVar("T")


class ModelLoop:
    """An asyncio loop running in its own thread for one instance (see the module docstring)."""

    def __init__(self, name: str, on_start: Callable[[], None]) -> None:
        self.loop = asyncio.new_event_loop()
        self._on_start = on_start
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"inferd-{name}-loop", daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self._on_start()
        finally:
            self._started.set()
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (initialize, finalize)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Start ``coro`` on the loop without waiting (an execute: it answers its requests itself)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self, timeout_s: float = 5.0) -> None:
        """Cancel what still runs (tasks the model left behind), stop the loop and its thread."""
        loop = self.loop
        if loop.is_closed():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=timeout_s)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout_s + 1)
        except Exception:
            log.debug("cancelling a model loop's tasks failed", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            loop.close()
