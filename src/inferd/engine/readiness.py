"""A model's own readiness check: the optional ``is_ready()`` of a Python model, as newer Triton asks it.

The model-ready endpoints (HTTP ``GET /v2/models/<m>/ready``, gRPC ModelReady, ``inferd.Server.
model_ready``) answer ready when the version is READY and its check passes. As in Triton's Python
backend (``TRITONBACKEND_ModelInstanceReady``), every instance is asked and all must say True; an
exception, a value that is not a bool, or no answer within ``TIMEOUT_S`` (five seconds, the
reference's) is "not ready", never an error of the endpoint. One check runs at a time per model
version, in a thread of its own (a model's check may block); callers that come while it runs wait
for it and share its answer, so a hanging ``is_ready`` holds one thread, and every endpoint call
answers "not ready" within the timeout.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from inferd.logs import VERBOSE1

log = logging.getLogger("inferd")

#: seconds a readiness check may take (the reference's kUserModelReadinessTimeoutMs)
TIMEOUT_S = 5.0


class ReadinessCheck:
    """Runs a backend's blocking check (True: ready; it may raise) for one model version."""

    def __init__(self, who: str, check: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> None:
        self.who = who
        self._check = check
        self.timeout_s = timeout_s
        self._running: asyncio.Future[bool] | None = None

    async def __call__(self) -> bool:
        running = self._running
        if running is None or running.done():
            running = self._running = self._start()
        try:
            return await asyncio.wait_for(asyncio.shield(running), self.timeout_s)
        except TimeoutError:
            log.log(
                VERBOSE1, "%s is not ready: is_ready() did not answer within %g s", self.who, self.timeout_s
            )
            return False

    def _start(self) -> asyncio.Future[bool]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()

        def settle(ok: bool) -> None:
            if not future.done():
                future.set_result(ok)

        def run() -> None:
            try:
                ok = self._check()
            except Exception as e:
                log.log(VERBOSE1, "%s is not ready: is_ready() failed: %s", self.who, e)
                ok = False
            if not ok:
                log.log(VERBOSE1, "%s is not ready (user-defined check failed)", self.who)
            try:
                loop.call_soon_threadsafe(settle, ok)
            except RuntimeError:  # the loop closed meanwhile (the server stopped)
                return

        threading.Thread(target=run, name=f"inferd-ready-{self.who}", daemon=True).start()
        return future
