"""How an HTTP/2 server connection ends: ``H2Lifetime``, the base class of ``h2conn.H2Connection``.

- Timeouts and keepalive (``sweep``, about once a second): a client preface that does not come, and
  a client that stops answering the server's keepalive PINGs, end the connection.
- A connection error (``_error``): GOAWAY with its code, then the socket closes.
- Graceful shutdown (``goaway``, at stop and at ``--grpc-max-connection-age``) in two steps, as RFC
  9113 section 6.8 advises and gRPC's own servers do: a GOAWAY naming the highest stream id and a
  PING, so that a call the client sent before it read that GOAWAY is still served; at the PING's
  ACK (or ``_SHUTDOWN_ACK_S``) the final GOAWAY, naming the last stream taken, after which new
  streams are refused. Once the open calls are over (``_finish``) the server half-closes and reads
  until the client closes (at most ``_LINGER_S``): closing at once made the kernel answer the
  client's unread bytes with a reset, and a client that had not read the GOAWAY yet lost the call it
  was sending ("Stream removed", which gRPC does not retry).

The connection's state is H2Connection's; this class owns the keepalive and shutdown fields
(``_init_lifetime``). A base class, not a mixin beside ``asyncio.Protocol``: mypyc compiles these
classes (``hotpath.MODULES``), and a compiled class has one compiled base (the event loops take any
object with a protocol's methods).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct

from inferd.frontends.grpc.h2wire import (
    ENHANCE_YOUR_CALM,
    GOAWAY,
    NO_ERROR,
    PING,
    PROTOCOL_ERROR,
    H2Limits,
    frame,
)

log = logging.getLogger("inferd.grpc")

#: graceful shutdown: the PING after the first GOAWAY, and how long its ACK is waited for
_SHUTDOWN_PING = b"inferd\x00\x01"
_SHUTDOWN_ACK_S = 1.0
#: after the last GOAWAY the server half-closes and reads until the client closes, at most this long
_LINGER_S = 2.0


class H2Lifetime:
    """Keepalive, timeouts, connection errors and the graceful end of one connection."""

    # H2Connection's state, read and written here
    _transport: asyncio.Transport | None
    _limits: H2Limits
    _opened_at: float
    last_io: float
    _preface: bool
    _dead: bool
    lost: bool
    _buf: bytes
    _last_sid: int

    def _write(self, data: bytes) -> None:
        """Queue frames (written once per loop iteration): H2Connection's."""
        raise NotImplementedError

    def _flush_out(self) -> None:
        """Write what is queued now: H2Connection's."""
        raise NotImplementedError

    def _open_streams(self) -> int:
        """How many streams are open: H2Connection's."""
        raise NotImplementedError

    def _init_lifetime(self) -> None:
        self._ping_sent: float | None = None  # an unanswered keepalive PING went out then
        self._ping_payload = b""
        self.going_away = False  # the final GOAWAY went out: new streams are refused
        self._shutdown: asyncio.TimerHandle | None = None  # the first GOAWAY went out: its PING's ACK due

    def goaway(self) -> None:
        """Start the graceful shutdown: the first GOAWAY (every stream id) and its PING."""
        if self.going_away or self._shutdown is not None or self._transport is None or self.lost:
            return
        self._write(
            frame(GOAWAY, 0, 0, struct.pack(">II", 0x7FFFFFFF, NO_ERROR)) + frame(PING, 0, 0, _SHUTDOWN_PING)
        )
        self._shutdown = asyncio.get_running_loop().call_later(_SHUTDOWN_ACK_S, self._final_goaway)

    def _ping_acked(self, payload: bytes) -> None:
        """A PING ACK: the keepalive's, or the shutdown's (then the final GOAWAY)."""
        if payload == self._ping_payload:
            self._ping_sent = None
        elif payload == _SHUTDOWN_PING:
            self._final_goaway()

    def _final_goaway(self) -> None:
        if self._shutdown is not None:
            self._shutdown.cancel()
        if self.going_away or self._transport is None or self.lost:
            return
        self.going_away = True
        self._write(frame(GOAWAY, 0, 0, struct.pack(">II", self._last_sid, NO_ERROR)))
        if not self._open_streams():
            self._finish()

    def _finish(self) -> None:
        """End a connection whose calls are over: FIN after what was written, then read and drop
        what the client still sends until it closes (at most ``_LINGER_S``)."""
        transport = self._transport
        if transport is None or self.lost or transport.is_closing():
            return
        self._flush_out()
        self._dead = True  # nothing more is parsed; what comes is dropped
        if not transport.can_write_eof():  # TLS: close_notify, then the socket closes
            transport.close()
            return
        transport.write_eof()
        transport.resume_reading()
        asyncio.get_running_loop().call_later(_LINGER_S, transport.close)

    def eof_received(self) -> bool:
        """The client closed its side: the transport closes (its streams are cancelled)."""
        return False

    def close(self) -> None:
        if self._transport is not None:
            self._flush_out()
            self._transport.close()

    def _error(self, code: int, why: str) -> None:
        log.debug("HTTP/2 connection error %d: %s", code, why)
        self._dead = True
        if self._transport is not None and not self.lost:
            self._write(frame(GOAWAY, 0, 0, struct.pack(">II", self._last_sid, code) + why.encode()))
            self.close()
        self._buf = b""

    def sweep(self, now: float) -> None:
        """Close a connection past a timeout; send a keepalive PING when one is due."""
        if self._dead or self.lost:
            return
        limits = self._limits
        if not self._preface:
            if limits.preface_timeout_s and now - self._opened_at > limits.preface_timeout_s:
                self._error(PROTOCOL_ERROR, "no client preface")
            return
        if self._ping_sent is not None:
            if limits.keepalive_timeout_s and now - self._ping_sent > limits.keepalive_timeout_s:
                self._error(ENHANCE_YOUR_CALM, "keepalive PING not answered")
        elif limits.keepalive_time_s and now - self.last_io > limits.keepalive_time_s:
            self._ping_sent = now
            self._ping_payload = os.urandom(8)
            self._write(frame(PING, 0, 0, self._ping_payload))
