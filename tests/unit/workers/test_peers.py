"""The links between ``--workers`` processes, over real Unix sockets in one loop: three peers whose
cores are fakes with statistics of their own."""

from __future__ import annotations

import asyncio
import functools
import os
import socket
from pathlib import Path
from typing import Any, cast

import pytest

from inferd.engine.server import ServerCore
from inferd.errors import InferdError, InvalidArgumentError, UnavailableError
from inferd.logs import LogSettings
from inferd.options import ServerOptions
from inferd.shm.system import SharedMemoryManager
from inferd.trace import Tracing
from inferd.trace.settings import NewSetting
from inferd.workers.peers import Peers, PeerServer, WorkersCore
from inferd.workers.place import WorkerPlace
from inferd.workers.supervisor import _claim_ports, _refusal


class _Core:
    """What a peer asks of a process's core: statistics, the index, load and unload."""

    def __init__(self, count: int, loaded: set[str] | None = None) -> None:
        self.count = count
        self.loaded = set(loaded or {"m"})
        self.calls: list[tuple[Any, ...]] = []

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        if name and name not in self.loaded:
            raise InvalidArgumentError(f"requested model '{name}' is not available")
        return {
            "model_stats": [
                {"name": n, "version": "1", "inference_count": self.count, "last_inference": self.count}
                for n in sorted(self.loaded)
                if not name or n == name
            ]
        }

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return [{"name": n, "version": "1", "state": "READY"} for n in sorted(self.loaded)]

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        self.calls.append(("load", name, config, files))
        if name == "broken":
            raise UnavailableError("failed to load 'broken'")
        self.loaded.add(name)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self.calls.append(("unload", name, unload_dependents))
        self.loaded.discard(name)


def _metrics(count: int) -> bytes:
    return (
        "# TYPE nv_inference_count counter\n"
        f'nv_inference_count{{model="m",version="1"}} {count}\n'
        "# TYPE nv_cpu_memory_total_bytes gauge\nnv_cpu_memory_total_bytes 1000\n"
    ).encode()


async def _cluster(
    tmp_path: Path, counts: list[int]
) -> tuple[list[_Core], list[PeerServer], list[WorkersCore]]:
    cores, servers, views = [], [], []
    for i, count in enumerate(counts):
        place = WorkerPlace(tmp_path, i)
        core = _Core(count)
        server = PeerServer(place, cast(ServerCore, core), functools.partial(_metrics, count))
        await server.start()
        cores.append(core)
        servers.append(server)
        views.append(WorkersCore(cast(ServerCore, core), Peers(place), functools.partial(_metrics, count)))
    return cores, servers, views


def test_statistics_and_metrics_are_summed_over_every_process(tmp_path: Path) -> None:
    async def main() -> None:
        _, servers, views = await _cluster(tmp_path, [1, 2, 4])
        doc = await views[0].gather_statistics("m")
        assert doc == {
            "model_stats": [{"name": "m", "version": "1", "inference_count": 7, "last_inference": 4}]
        }
        with pytest.raises(InvalidArgumentError, match="requested model 'x' is not available"):
            await views[1].gather_statistics("x")  # the asking process's own error
        text = (await views[2].gather_metrics()).decode().splitlines()
        assert 'nv_inference_count{model="m",version="1"} 7' in text
        assert "nv_cpu_memory_total_bytes 1000" in text  # the machine's, once
        # a process that is gone (its socket left behind, or removed) is left out
        await servers[2].stop()
        (tmp_path / "peer-2.sock").touch()
        doc = await views[0].gather_statistics("m")
        assert doc["model_stats"][0]["inference_count"] == 3
        for s in servers[:2]:
            await s.stop()

    asyncio.run(main())


def test_model_control_reaches_every_process(tmp_path: Path) -> None:
    async def main() -> None:
        cores, servers, views = await _cluster(tmp_path, [0, 0, 0])
        await views[1].load_model("n", "{}", {"file:1/model.py": b"x"})
        assert [c.calls for c in cores] == [[("load", "n", "{}", {"file:1/model.py": b"x"})]] * 3
        await views[0].unload_model("n", True)
        assert all(c.calls[-1] == ("unload", "n", True) for c in cores)
        with pytest.raises(InferdError, match="failed to load 'broken'"):
            await views[2].load_model("broken")
        assert [c.calls[-1][1] for c in cores] == ["n", "n", "broken"]  # not sent on after a local failure
        # a process started again in explicit mode loads what its peers serve
        cores[0].loaded.add("late")
        cores[1].loaded.add("late")
        await servers[2].stop()
        fresh = _Core(0, loaded=set())
        view = WorkersCore(cast(ServerCore, fresh), Peers(WorkerPlace(tmp_path, 2)), lambda: b"")
        await view.catch_up(SharedMemoryManager(), models=True)
        assert fresh.loaded == {"m", "late"}
        for s in servers[:2]:
            await s.stop()

    asyncio.run(main())


def test_place_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERD_WORKERS_DIR", raising=False)
    assert WorkerPlace.from_env() is None
    monkeypatch.setenv("INFERD_WORKERS_DIR", str(tmp_path))
    monkeypatch.setenv("INFERD_WORKER_INDEX", "3")
    place = WorkerPlace.from_env()
    assert place == WorkerPlace(tmp_path, 3, None)
    for i in (0, 3, 5):
        place.socket_path(i).touch()
    assert place.peer_paths() == [tmp_path / "peer-0.sock", tmp_path / "peer-5.sock"]


def test_the_supervisor_refuses_what_cannot_work() -> None:
    assert _refusal(ServerOptions(workers=2, http_port=8000)) is None
    assert _refusal(ServerOptions(workers=0)) == "--workers must be at least 1, got 0"
    # port 0: the supervisor picks one port for every process
    assert _refusal(ServerOptions(workers=3, http_port=0, grpc_port=0, metrics_port=0)) is None
    assert _refusal(ServerOptions(workers=3, sagemaker_port=0, allow_sagemaker=True)) is None


def test_the_supervisor_picks_one_port_for_port_0() -> None:
    """Port 0 is claimed once, by the supervisor: the flags it hands its processes name the port it
    holds, and a second server binding that port alone fails (it is held)."""
    options = ServerOptions(http_address="127.0.0.1", http_port=0, grpc_address="127.0.0.1", grpc_port=0)
    options.allow_metrics = False
    held, picked = _claim_ports(options)
    try:
        assert [flag.split("=")[0] for flag in picked] == ["--grpc-port", "--http-port"]
        ports = {int(flag.split("=")[1]) for flag in picked}
        assert ports == {s.getsockname()[1] for s in held} and 0 not in ports
        for port in ports:
            with socket.socket() as other, pytest.raises(OSError):
                other.bind(("127.0.0.1", port))
    finally:
        for s in held:
            s.close()


def test_shared_memory_changes_reach_every_process(tmp_path: Path) -> None:
    key = f"inferd_peers_{os.getpid()}"
    path = Path("/dev/shm") / key
    path.write_bytes(bytes(64))

    async def main() -> None:
        managers = [SharedMemoryManager() for _ in range(2)]
        servers = []
        for i, manager in enumerate(managers):
            server = PeerServer(WorkerPlace(tmp_path, i), cast(ServerCore, _Core(0)), lambda: b"", manager)
            await server.start()
            servers.append(server)
            manager.propagate = Peers(WorkerPlace(tmp_path, i)).everywhere
        await managers[0].register_everywhere("r", key, 0, 64)
        assert [m.status() for m in managers] == [
            [{"name": "r", "key": key, "offset": 0, "byte_size": 64}]
        ] * 2
        with pytest.raises(InferdError, match="already in manager"):
            await managers[1].register_everywhere("r", key, 0, 64)
        # a process started again maps what the others hold
        fresh = SharedMemoryManager()
        view = WorkersCore(cast(ServerCore, _Core(0)), Peers(WorkerPlace(tmp_path, 5)), lambda: b"")
        await view.catch_up(fresh, models=False)
        assert [r["name"] for r in fresh.status()] == ["r"]
        fresh.close()
        await managers[1].unregister_everywhere("r")
        assert [m.status() for m in managers] == [[], []]
        for s in servers:
            await s.stop()

    try:
        asyncio.run(main())
    finally:
        path.unlink()


def test_log_and_trace_settings_follow_in_every_process(tmp_path: Path) -> None:
    async def main() -> None:
        logs = [LogSettings(attach=False) for _ in range(2)]
        tracings = [Tracing() for _ in range(2)]
        servers = []
        for i in range(2):
            place = WorkerPlace(tmp_path, i)
            server = PeerServer(place, cast(ServerCore, _Core(0)), lambda: b"", None, logs[i], tracings[i])
            await server.start()
            servers.append(server)
            logs[i].propagate = tracings[i].propagate = Peers(place).soon
        logs[0].set_verbose(2)
        logs[0].set_format("ISO8601")
        logs[0].changed()
        tracings[1].update("", NewSetting(rate=5, count=None))
        for _ in range(200):  # sent without waiting: give the peers' answers the loop
            if logs[1].settings() == logs[0].settings() and tracings[0].describe() == tracings[1].describe():
                break
            await asyncio.sleep(0.01)
        assert logs[1].settings()["log_verbose_level"] == 2 and logs[1].settings()["log_format"] == "ISO8601"
        assert dict(tracings[0].describe())["trace_rate"] == "5"
        for s in servers:
            await s.stop()

    asyncio.run(main())
