"""HttpServer: a listener serving an app over HttpConnection (protocol.py), one per port; its stop
closes the listener and the idle connections."""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import time

from inferd.core.unsent import UnsentBudget
from inferd.frontends.address import bind_host
from inferd.frontends.http.head import HttpLimits
from inferd.frontends.http.protocol import App, HttpConnection
from inferd.frontends.sweep import sweep_forever


class HttpServer:
    """Listens on (host, port) and serves ``app``; ``stop`` closes the listener and idle connections."""

    def __init__(
        self,
        app: App,
        host: str,
        port: int,
        limits: HttpLimits = HttpLimits(),
        ssl: ssl_module.SSLContext | None = None,
        reuse_port: bool = False,
        budget: UnsentBudget | None = None,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.limits = limits
        self.ssl = ssl
        #: SO_REUSEPORT: several processes listen on the port, the kernel spreads the connections
        self.reuse_port = reuse_port
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[HttpConnection] = set()
        self._sweeper: asyncio.Task[None] | None = None
        #: while winding down: when each idle connection was first seen idle
        self._idle_since: dict[HttpConnection, float] = {}
        #: the process's bound on unsent answers, shared with the other front ends (``frontends/flow.py``;
        #: None: one of this listener's own, without a limit)
        self.budget = budget if budget is not None else UnsentBudget(0)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HttpConnection(self.app, self._connections, self.limits, self.budget),
            bind_host(self.host),
            self.port,
            reuse_address=True,
            reuse_port=self.reuse_port or None,
            backlog=1024,
            ssl=self.ssl,
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        if self.limits.header_timeout_s or self.limits.idle_timeout_s:
            self._sweeper = loop.create_task(sweep_forever(self._connections))

    def stop_listening(self) -> None:
        """Refuse new connections. The open ones are served on while the server drains (a sequence's
        next request comes on its client's connection); ``wind_down`` ends them, ``stop`` closes
        what is left."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def wind_down(self, idle_grace_s: float) -> int:
        """Let the open connections go (called while the server drains, once nothing it serves
        needs them): every answer from now says ``Connection: close``, so its client goes elsewhere
        and the connection ends after it, and a connection idle for ``idle_grace_s`` is closed. Not
        an idle one at once: a request its client sent just before the signal may be on its way,
        and would get an empty reply (the soak's SIGTERM check counted 16 in 40,000). The number of
        connections still open."""
        now = time.monotonic()
        seen = self._idle_since
        left = 0
        for c in list(self._connections):
            c.draining = True
            if not c.idle:
                seen.pop(c, None)
            elif now - seen.setdefault(c, now) >= idle_grace_s:
                c.close(only_idle=True)
            transport = c._transport
            left += transport is not None and not transport.is_closing()
        for c in [c for c in seen if c not in self._connections]:
            del seen[c]
        return left

    async def stop(self) -> None:
        self.stop_listening()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._idle_since.clear()
        for c in list(self._connections):
            c.close(only_idle=False)
        await asyncio.sleep(0)
