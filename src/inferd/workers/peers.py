"""The links between the processes of ``inferd serve --workers N``: one consistent server for clients.

Each process answers its peers on a Unix socket in the supervisor's folder (``PeerServer``): its
own statistics, its own metrics text, and model loads and unloads applied to its own core. The
front ends of every process see the core through ``WorkersCore``, which asks the peers
(``Peers``) where one process alone would answer for itself:

- statistics (HTTP, gRPC) and ``GET /metrics`` are the sum over every process (``metrics/aggregate.py``);
- a model load or unload is applied here first (its error, if any, is the client's answer), then in
  every other process; the first peer's error is answered too;
- a system shared-memory region registered or unregistered here is so in every process too
  (``SharedMemoryManager.propagate``), so a client may register on one connection and infer on others;
- the logging and trace settings the extensions change follow in every process, just after the
  answer (``LogSettings.propagate``, ``Tracing.propagate``); each process writes its own trace file
  (the flag's name with ``.<process number>`` added);
- everything else (health, metadata, inference) is this process's own: the processes load the same
  repository with the same options, so their answers agree.

A process started again (after a crash) catches up at start: the regions the others hold, and in
explicit mode the models they serve.

The socket's folder is the supervisor's, mode 0700: only the same user reaches it, and messages are
pickled. A peer that cannot be reached (restarting) is left out, with a warning.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import struct
from collections.abc import Callable
from typing import Any

from inferd.engine.server import ServerCore
from inferd.errors import ErrorCode, InferdError, InternalError, error_for_code
from inferd.logs import LogSettings
from inferd.metrics.aggregate import HIGHEST_FAMILIES, MACHINE_FAMILIES, merge_metrics, merge_statistics
from inferd.shm.system import SharedMemoryManager
from inferd.trace import Tracing
from inferd.trace.settings import NewSetting
from inferd.workers.place import WorkerPlace

log = logging.getLogger("inferd.workers")
_LEN = struct.Struct(">Q")
#: how long a peer may take to answer a statistics or metrics question
_QUERY_TIMEOUT_S = 10.0
#: the largest message accepted from a peer (a load's files included)
_MAX_MESSAGE = 1 << 31


async def _read(reader: asyncio.StreamReader) -> Any:
    n = _LEN.unpack(await reader.readexactly(_LEN.size))[0]
    if n > _MAX_MESSAGE:
        raise ValueError(f"peer message of {n} bytes")
    return pickle.loads(await reader.readexactly(n))


def _write(writer: asyncio.StreamWriter, message: Any) -> None:
    data = pickle.dumps(message, protocol=5)
    writer.write(_LEN.pack(len(data)) + data)


class PeerServer:
    """Answers the other processes' questions about this process's core."""

    def __init__(
        self,
        place: WorkerPlace,
        core: ServerCore,
        metrics_text: Callable[[], bytes],
        shm: SharedMemoryManager | None = None,
        logs: LogSettings | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.place = place
        self.core = core
        self.metrics_text = metrics_text
        self.shm = shm if shm is not None else SharedMemoryManager()
        self.logs = logs
        self.tracing = tracing
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        path = self.place.socket_path()
        path.unlink(missing_ok=True)  # a predecessor's, left by a crash
        self._server = await asyncio.get_running_loop().create_unix_server(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=1 << 20), self._serve),
            str(path),
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self.place.socket_path().unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            op, args = await _read(reader)
            try:
                answer: tuple[Any, ...] = ("ok", await self._answer(op, args))
            except InferdError as e:
                answer = ("error", e.code.name, e.message)
            _write(writer, answer)
            await writer.drain()
        except (OSError, EOFError, ValueError, pickle.UnpicklingError, asyncio.IncompleteReadError) as e:
            log.warning("peer request failed: %s", e)
        finally:
            writer.close()

    async def _answer(self, op: str, args: tuple[Any, ...]) -> Any:
        core = self.core
        if op == "statistics":
            return core.statistics(*args)
        if op == "metrics":
            return self.metrics_text().decode()
        if op == "index":
            return core.repository_index(True)
        if op == "load":
            await core.load_model(*args)
            return None
        if op == "unload":
            await core.unload_model(*args)
            return None
        if op == "register_repository":
            await core.register_repository(*args)
            return None
        if op == "unregister_repository":
            await core.unregister_repository(*args)
            return None
        if op == "registrations":
            return core.registrations()
        for registry in (self.shm, self.shm.sibling):  # system and CUDA shared memory (shm/registry.py)
            if registry is not None and op in registry.OPS:
                (registry.register if op == registry.OPS[0] else registry.unregister)(*args)
                return None
        if op == "shm_status":
            return self.shm.status()
        if op == "log_settings" and self.logs is not None:
            self.logs.apply(*args)
            return None
        if op == "trace_update" and self.tracing is not None:
            model, fields = args
            self.tracing.update(model, NewSetting(**fields), share=False)
            return None
        raise InternalError(f"unknown peer request '{op}'")


class Peers:
    """Asks every other process one question and collects their answers."""

    def __init__(self, place: WorkerPlace) -> None:
        self.place = place
        self._sending: set[asyncio.Task[None]] = set()

    async def ask_all(self, op: str, *args: Any, timeout: float | None = _QUERY_TIMEOUT_S) -> list[Any]:
        """Every reachable peer's answer, in process order; an InferdError for a peer that answered
        one (unreachable peers are logged and left out)."""
        paths = self.place.peer_paths()
        answers = await asyncio.gather(*(self._ask(str(p), op, args, timeout) for p in paths))
        return [a for a in answers if a is not _UNREACHED]

    def soon(self, op: str, *args: Any) -> None:
        """Apply a change in every reachable peer without waiting (settings: the answer goes out
        first); a peer's error is logged."""
        task = asyncio.get_running_loop().create_task(self._logged(op, args))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _logged(self, op: str, args: tuple[Any, ...]) -> None:
        try:
            await self.everywhere(op, *args)
        except InferdError as e:
            log.warning("another worker refused '%s': %s", op, e)

    async def everywhere(self, op: str, *args: Any) -> None:
        """Apply a change in every reachable peer, as long as it takes; the first peer's error."""
        for answer in await self.ask_all(op, *args, timeout=None):
            if isinstance(answer, InferdError):
                raise answer

    async def _ask(self, path: str, op: str, args: tuple[Any, ...], timeout: float | None) -> Any:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path, limit=1 << 20)
                try:
                    _write(writer, (op, args))
                    await writer.drain()
                    reply = await _read(reader)
                finally:
                    writer.close()
        except (
            OSError,
            EOFError,
            ValueError,
            TimeoutError,
            pickle.UnpicklingError,
            asyncio.IncompleteReadError,
        ) as e:
            log.warning("worker at %s did not answer '%s': %s", path, op, e or type(e).__name__)
            return _UNREACHED
        if reply[0] == "error":
            return error_for_code(ErrorCode[reply[1]], reply[2])
        return reply[1]


_UNREACHED = object()


class WorkersCore:
    """The core as the front ends of one process of N see it: the whole server's statistics and
    metrics, model control applied everywhere; the rest is this process's ``ServerCore``."""

    def __init__(self, core: ServerCore, peers: Peers, metrics_text: Callable[[], bytes]) -> None:
        self._core = core
        self._peers = peers
        self._metrics_text = metrics_text

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._core, name)
        if callable(value):  # bound once: the request path does not come back here
            object.__setattr__(self, name, value)
        return value

    async def gather_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        local = self._core.statistics(name, version)  # this process's errors, texts and filter
        answers = await self._peers.ask_all("statistics", name, version)
        merged = merge_statistics([local, *(a for a in answers if isinstance(a, dict))])
        found = {(s["name"], s["version"]): s for s in merged["model_stats"]}
        return {"model_stats": [found[(s["name"], s["version"])] for s in local["model_stats"]]}

    async def gather_metrics(self) -> bytes:
        """``GET /metrics`` of the whole server."""
        answers = await self._peers.ask_all("metrics")
        texts = [self._metrics_text().decode(), *(a for a in answers if isinstance(a, str))]
        return merge_metrics(texts, once=MACHINE_FAMILIES, highest=HIGHEST_FAMILIES).encode()

    async def catch_up(self, shm: SharedMemoryManager, models: bool) -> None:
        """A process started again: register the shared-memory regions the first peer to answer
        holds, and with ``models`` (explicit mode) load the models it serves (from the repository:
        a config given with a load is not replayed)."""
        for regions in await self._peers.ask_all("shm_status"):
            if isinstance(regions, list):
                for r in regions:
                    try:
                        shm.register(r["name"], r["key"], r["offset"], r["byte_size"])
                    except InferdError as e:
                        log.warning(
                            "could not map region '%s', which the other workers hold: %s", r["name"], e
                        )
                break
        if not models:
            return
        for answer in await self._peers.ask_all("registrations"):  # before the models they hold
            if isinstance(answer, list):
                for label, path, mapping in answer:
                    try:
                        await self._core.register_repository(path, mapping, label)
                    except InferdError as e:
                        log.warning("could not register '%s', which the other workers hold: %s", path, e)
                break
        here = {e["name"] for e in self._core.repository_index(True)}
        for answer in await self._peers.ask_all("index"):
            if isinstance(answer, list):
                for name in sorted({e["name"] for e in answer} - here):
                    try:
                        await self._core.load_model(name)
                    except InferdError as e:
                        log.warning("could not load '%s', which the other workers serve: %s", name, e)
                return

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        await self._core.load_model(name, config, files)
        await self._peers.everywhere("load", name, config, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self._core.unload_model(name, unload_dependents)
        await self._peers.everywhere("unload", name, unload_dependents)

    async def register_repository(self, path: str, mapping: dict[str, str], label: str = "") -> None:
        await self._core.register_repository(path, mapping, label)
        await self._peers.everywhere("register_repository", path, mapping, label)

    async def unregister_repository(self, path: str) -> None:
        await self._core.unregister_repository(path)
        await self._peers.everywhere("unregister_repository", path)
