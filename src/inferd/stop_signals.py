"""SIGTERM and SIGINT for ``inferd serve``: seen by a thread of their own, with a hard exit bound.

The event loop's own signal handling (``loop.add_signal_handler``) runs on the loop: a model whose
execute holds the loop (a short execute run inline that hangs this time) would keep a SIGTERM from
ever being handled. Here the signals' wakeup file descriptor is a pipe that a thread reads: each
signal sets the server's ``stop`` event (on the loop, whenever it runs), and the first arms the
bound: ``--exit-timeout-secs`` after the signal, and ``EXIT_MARGIN_S`` more, the process exits
whatever it still waits for (a hung thread, a loop that never returns), with status 1, as the
reference exits when its exit timeout expires. The drain itself ends within the timeout
(runtime.py); the bound is for what the drain cannot stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any

log = logging.getLogger("inferd")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: past the exit timeout, how long the bound waits for the server's own exit before forcing it
EXIT_MARGIN_S = 0.5


def _ignore(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: nothing (the C-level one writes the wakeup pipe, which counts)."""


class StopSignals:
    """SIGTERM and SIGINT stop the server (``stop``, set on ``loop``) and bound its exit."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event, exit_timeout_s: float) -> None:
        self._loop = loop
        self._stop = stop
        self.exit_timeout_s = exit_timeout_s
        #: monotonic time of the first signal (None: none yet)
        self.received_at: float | None = None
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._old: dict[int, Any] = {sig: signal.signal(sig, _ignore) for sig in SIGNALS}
        threading.Thread(target=self._watch, name="inferd-signals", daemon=True).start()

    def restore(self) -> None:
        """The handlers and wakeup descriptor as they were (the thread ends; an armed bound stays)."""
        signal.set_wakeup_fd(self._old_fd)
        for sig, old in self._old.items():
            signal.signal(sig, old)
        os.close(self._write)

    def _watch(self) -> None:
        try:
            while data := os.read(self._read, 64):
                for signum in data:
                    if signum in SIGNALS:
                        self._received(signal.Signals(signum))
        finally:
            os.close(self._read)

    def _received(self, sig: signal.Signals) -> None:
        if self.received_at is None:
            self.received_at = time.monotonic()
            log.info(
                "Received %s: no new connections; finishing the requests and sequences under way (exit "
                "timeout %g s)",
                sig.name,
                self.exit_timeout_s,
            )
            bound = threading.Timer(self.exit_timeout_s + EXIT_MARGIN_S, _give_up, (self.exit_timeout_s,))
            bound.daemon = True
            bound.start()
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is exiting anyway
            self._loop.call_soon_threadsafe(self._stop.set)


def _give_up(exit_timeout_s: float) -> None:
    """The bound: the server did not exit in time (a hung thread or event loop); exit now. The line
    is logged from a thread of its own, waited for briefly: a stuck thread may hold a handler's lock."""

    def say() -> None:
        log.error(
            "the server did not stop within --exit-timeout-secs %g s (and %g s more): exiting now",
            exit_timeout_s,
            EXIT_MARGIN_S,
        )
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()

    saying = threading.Thread(target=say, daemon=True)
    saying.start()
    saying.join(0.2)
    os._exit(1)
