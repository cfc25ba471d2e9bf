"""``inferd serve --workers N``: start N serving processes on the same ports and keep them serving.

The supervisor loads no model and serves no request. It starts N copies of its own command line
(``python -m inferd ...``), each told its place by the environment (``place.py``): every process
loads the repository and listens on the HTTP, gRPC and metrics ports with SO_REUSEPORT, so the
kernel spreads new connections over them, and each answers its peers on a Unix socket in a folder
of the supervisor's (``peers.py``).

- Start: the supervisor is ready when every process is (each says so on a pipe). A process that ends
  before it is ready (a model that fails to load with ``--exit-on-error``, a port in use) stops the
  others, and the supervisor exits with its status.
- A process that dies later (a crash, the kernel's OOM killer) is logged and started again, no
  sooner than a second after its last start; the others serve on meanwhile.
- SIGTERM or SIGINT reaches every process, which drain as one server would; the supervisor exits
  when they all have, with the first non-zero status among them (0 when they all ended cleanly). A
  process still there a second past ``--exit-timeout-secs`` (each bounds its own exit: stop_signals.py)
  is killed.
- The processes end with the supervisor, also when it is SIGKILLed (``PR_SET_PDEATHSIG``: they
  drain and exit).
- The ports are the supervisor's (``_claim_ports``): it first binds each one alone, so that a port
  another server holds fails the start as it fails one process ("failed to start HTTP service at
  ...: address in use"), then holds it bound (not listening, so it takes no connection) with
  SO_REUSEPORT until it exits. SO_REUSEPORT alone would let a second ``--workers`` server of the
  same user join the port and take half of this one's connections, silently; every supervisor binds
  alone first, so a second one fails, also across a process's restart. Port 0 is resolved here,
  once: the supervisor takes a free port and hands it to every process on its command line, so
  they all share it (each logs it in its "Started ..." line).
"""

from __future__ import annotations

import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from inferd.logs import from_options
from inferd.options import ServerOptions
from inferd.server_config import LogConfig
from inferd.workers.place import ENV_DIR, ENV_INDEX, ENV_READY_FD, ENV_SUPERVISOR

log = logging.getLogger("inferd.workers")
#: the least time between two starts of the same process
_RESTART_DELAY_S = 1.0
#: past the exit timeout, how long the supervisor waits before it kills a process that did not exit
_KILL_MARGIN_S = 1.0


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]
    ready_fd: int
    started: float = field(default_factory=time.monotonic)
    ready: bool = False


def _refusal(options: ServerOptions) -> str | None:
    if options.workers < 1:
        return f"--workers must be at least 1, got {options.workers}"
    return None  # (a port 0 is resolved once, by the supervisor: _claim_ports)


class PortTaken(Exception):
    """A port the server needs is held by another: the message is what ``inferd serve`` prints."""


def _claim(address: str, port: int) -> list[socket.socket]:
    """Bind ``address:port`` alone (OSError when anything holds it), then hold it with SO_REUSEPORT:
    the serving processes join it, a server that binds alone, as every supervisor first does, fails.
    The addresses are asyncio's for ``create_server``: "" is every interface, IPv6 sockets v6-only."""
    held: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(address or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, where in dict.fromkeys(infos):
            for reuse_port in (False, True):
                s = socket.socket(family, kind, proto)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if reuse_port:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                    held.append(s)
                try:
                    s.bind(where)
                finally:
                    if not reuse_port:
                        s.close()
    except BaseException:
        for s in held:
            s.close()
        raise
    return held


def _free_port(address: str) -> int:
    """A port the kernel hands out for ``address`` now (bound alone, then let go)."""
    family, kind, proto, _, where = socket.getaddrinfo(
        address or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    with socket.socket(family, kind, proto) as s:
        s.bind(where)
        return int(s.getsockname()[1])


def _claim_free(address: str) -> tuple[int, list[socket.socket]]:
    """Port 0: a free port, claimed as ``_claim`` does. Another process may take the port the kernel
    handed out before it is claimed (between two binds): then another is picked."""
    for _ in range(_FREE_PORT_TRIES - 1):
        port = _free_port(address)
        try:
            return port, _claim(address, port)
        except OSError:
            continue
    port = _free_port(address)
    return port, _claim(address, port)


#: how often port 0 is picked again when another process took the port between its two binds
_FREE_PORT_TRIES = 5


def _claim_ports(options: ServerOptions) -> tuple[list[socket.socket], list[str]]:
    """The server's ports, claimed in the order one process binds them, and the flags that give the
    processes the ports picked for port 0; PortTaken (with the message one process prints) when gRPC
    or HTTP is taken. A metrics port in use is logged and the server goes on without it, as the
    reference does."""
    held: list[socket.socket] = []
    picked: list[str] = []
    wanted = [
        ("GRPC service", "--grpc-port", options.grpc_address, options.grpc_port, options.allow_grpc),
        (
            "Metrics Service",
            "--metrics-port",
            options.metrics_address or options.http_address,
            options.metrics_port,
            options.allow_metrics,
        ),
        ("Sagemaker service", "--sagemaker-port", "0.0.0.0", options.sagemaker_port, options.allow_sagemaker),
        ("Vertex AI service", "--vertex-ai-port", "0.0.0.0", options.vertex_ai_port, options.allow_vertex_ai),
        ("HTTP service", "--http-port", options.http_address, options.http_port, options.allow_http),
    ]
    for what, flag, address, port, used in wanted:
        if not used:
            continue
        try:
            if port == 0:
                port, sockets = _claim_free(address)
                picked.append(f"{flag}={port}")
            else:
                sockets = _claim(address, port)
            held += sockets
        except OSError as e:
            if what == "Metrics Service":
                log.error("failed to start Metrics Service at %s:%d: %s", address, port, e)
                continue
            for s in held:
                s.close()
            raise PortTaken(f"failed to start {what} at {address}:{port}: {e}") from e
    return held, picked


class Supervisor:
    """Starts, watches and stops the ``--workers`` processes of one server."""

    def __init__(self, options: ServerOptions, command_line: list[str]) -> None:
        self.count = options.workers
        self.exit_timeout_s = float(options.exit_timeout_secs)
        #: when the processes still there at stop are killed (monotonic; None: not stopping)
        self.kill_at: float | None = None
        self.command = [sys.executable, "-m", "inferd", *command_line]
        self.directory = Path(tempfile.mkdtemp(prefix="inferd-workers-"))  # mode 0700
        self.workers: dict[int, _Worker] = {}
        self.pending: dict[int, float] = {}  # index -> when it may start again
        self.stopping = False
        self.status = 0
        self.all_ready = False
        self._selector = selectors.DefaultSelector()

    def _start(self, index: int) -> None:
        read_fd, write_fd = os.pipe()
        env = dict(
            os.environ,
            **{
                ENV_DIR: str(self.directory),
                ENV_INDEX: str(index),
                ENV_READY_FD: str(write_fd),
                ENV_SUPERVISOR: str(os.getpid()),
            },
        )
        try:
            proc = subprocess.Popen(self.command, env=env, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        os.set_blocking(read_fd, False)
        worker = _Worker(index, proc, read_fd)
        self.workers[index] = worker
        self._selector.register(read_fd, selectors.EVENT_READ, worker)
        log.info("started worker %d of %d (pid %d)", index, self.count, proc.pid)

    def _signal_all(self, sig: int) -> None:
        for worker in self.workers.values():
            if worker.proc.poll() is None:
                worker.proc.send_signal(sig)

    def stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            self.kill_at = time.monotonic() + self.exit_timeout_s + _KILL_MARGIN_S
            self.pending.clear()
            self._signal_all(signal.SIGTERM)

    def _on_ready_pipe(self, worker: _Worker) -> None:
        try:
            data = os.read(worker.ready_fd, 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data and not worker.ready:
            worker.ready = True
            everyone = len(self.workers) == self.count and all(w.ready for w in self.workers.values())
            if everyone and not self.all_ready:
                self.all_ready = True
                log.info("all %d workers serving", self.count)
        if not data:
            self._selector.unregister(worker.ready_fd)
            os.close(worker.ready_fd)
            worker.ready_fd = -1

    def _reap(self) -> None:
        for index, worker in list(self.workers.items()):
            code = worker.proc.poll()
            if code is None:
                continue
            del self.workers[index]
            if worker.ready_fd >= 0:
                self._selector.unregister(worker.ready_fd)
                os.close(worker.ready_fd)
            exit_status = code if code >= 0 else 128 - code
            if self.stopping:
                if code != 0 and self.status == 0:
                    self.status = exit_status
                continue
            if not worker.ready and not self.all_ready:  # at start: the server cannot start
                log.error("worker %d exited with status %d before it was ready; stopping", index, exit_status)
                self.status = exit_status or 1
                self.stop()
                continue
            from inferd.backends.process.spawn import how_it_ended  # (the worker processes' words too)

            how = how_it_ended(code)
            log.error(
                "worker %d (pid %d) exited unexpectedly (%s); starting it again", index, worker.proc.pid, how
            )
            self.pending[index] = worker.started + _RESTART_DELAY_S

    def _restart_due(self) -> float | None:
        """Start the processes whose delay passed; the seconds until the next one is due (or until
        the processes still there at stop are killed)."""
        now = time.monotonic()
        if self.kill_at is not None:
            if now >= self.kill_at:
                if self.workers:
                    log.error(
                        "%d worker(s) still running %g s after SIGTERM: killing them",
                        len(self.workers),
                        self.exit_timeout_s + _KILL_MARGIN_S,
                    )
                self._signal_all(signal.SIGKILL)
                self.kill_at = now + 1.0  # reaped by then; looked at again if not
            return max(0.0, self.kill_at - now)
        for index, due in sorted(self.pending.items()):
            if due <= now:
                del self.pending[index]
                self._start(index)
        return max(0.0, min(self.pending.values()) - now) if self.pending else None

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, lambda *_: None)  # the wakeup fd carries the number
        self._selector.register(wake_r, selectors.EVENT_READ, None)
        try:
            for index in range(self.count):
                self._start(index)
            while self.workers or self.pending:
                for key, _ in self._selector.select(self._restart_due()):
                    if key.data is None:
                        for signum in os.read(wake_r, 512):
                            if signum in (signal.SIGTERM, signal.SIGINT):
                                log.info("stopping %d workers", len(self.workers))
                                self.stop()
                    else:
                        self._on_ready_pipe(key.data)
                self._reap()
        finally:
            signal.set_wakeup_fd(-1)
            self._signal_all(signal.SIGKILL)  # only when the loop itself failed: they are gone otherwise
            shutil.rmtree(self.directory, ignore_errors=True)
        return self.status


def supervise(options: ServerOptions, command_line: list[str]) -> int:
    """Run ``--workers`` processes of ``command_line`` until SIGTERM/SIGINT; the exit status."""
    from_options(LogConfig.from_options(options))  # the supervisor's own lines look like the processes'
    refusal = _refusal(options)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 1
    try:
        ports, picked = _claim_ports(options)
    except PortTaken as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        # the ports picked for port 0 come last on the command line: they win over the 0 given
        return Supervisor(options, [*command_line, *picked]).run()
    finally:
        for s in ports:
            s.close()
