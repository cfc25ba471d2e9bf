"""End-to-end fixtures: a real ``inferd serve`` subprocess, one per xdist worker.

Every server binds port 0 (HTTP, gRPC, metrics): the kernel hands each a port no other socket holds,
so servers started side by side never race for one; the ports it got are read from its start-up
lines ("Started HTTPService at 0.0.0.0:41234", the reference's words with the port bound).

The model repository is a copy of tests/fixtures/reference_models (the models both inferd and the
real Triton must load unmodified) plus the test-only models of tests/fixtures/models.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ports import listening_ports
from repo_paths import FIXTURE_MODELS, REFERENCE_MODELS, ROOT

REPO_ROOT = ROOT  # the name the e2e modules import
#: the six models of the reference repository
REFERENCE_MODEL_NAMES = (
    "add_sub",
    "batched_sleep",
    "ensemble_add_sub",
    "identity_bytes",
    "identity_fp32",
    "mul_fp32",
)

#: A starting server shows its progress: its log grows (each model's "loading:" and "successfully
#: loaded" lines) and it, or its worker processes, use CPU. A start is waited for while it moves; one
#: that shows neither for START_STALL_S hangs. START_LIMIT_S bounds a start whatever it shows: a
#: loaded 2-core machine takes minutes to start every test model in worker processes, never that long.
START_STALL_S = 60.0
START_LIMIT_S = 600.0
STOP_TIMEOUT_S = 15.0


def log_file_flags(args: list[str]) -> list[Path]:
    """The ``--log-file`` paths of a command line: where its start-up lines go instead."""
    found = []
    for i, arg in enumerate(args):
        if arg.startswith("--log-file="):
            found.append(Path(arg.split("=", 1)[1]))
        elif arg == "--log-file" and i + 1 < len(args):
            found.append(Path(args[i + 1]))
    return [p for p in found if str(p)]


def build_repository(dest: Path) -> Path:
    """A model repository with the reference models and the test-only models (no __pycache__)."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for src in (REFERENCE_MODELS, FIXTURE_MODELS):
        for model in sorted(src.iterdir()):
            if model.is_dir():
                shutil.copytree(model, dest / model.name, ignore=ignore)
    return dest


@dataclass
class Response:
    """An HTTP answer: status, lower-cased headers, body."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        doc = self.json()
        assert isinstance(doc, dict) and set(doc) == {"error"}, self.body
        return str(doc["error"])


#: every server this test process started: whatever a fixture's teardown did not reach is killed when
#: the session ends (pytest_sessionfinish), so no server outlives its test run
_STARTED: list[InferdProcess] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for proc in _STARTED:
        proc.kill()
    _STARTED.clear()


#: the running test's pytest-timeout timer (the test, the plugin's settings for it), while it runs
_TIMER: tuple[pytest.Item, Any] | None = None


@pytest.hookimpl(hookwrapper=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Iterator[None]:
    global _TIMER
    _TIMER = (item, settings)
    yield


@pytest.hookimpl(hookwrapper=True, optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> Iterator[None]:
    global _TIMER
    _TIMER = None
    yield


@contextlib.contextmanager
def timeout_paused() -> Iterator[None]:
    """The running test's pytest-timeout stopped while a server starts, then started again for its
    whole length: a start has limits of its own, by its progress (``InferdProcess.wait_starting``),
    which hold on a loaded machine where a share of a fixed test timeout does not."""
    timer = _TIMER
    if timer is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    item, settings = timer
    hook = item.config.pluginmanager.hook
    hook.pytest_timeout_cancel_timer(item=item)
    try:
        yield
    finally:
        hook.pytest_timeout_set_timer(item=item, settings=settings)


def _cpu_ticks(pid: int) -> int:
    """The CPU time (clock ticks) of process ``pid`` and of its children, live and reaped."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
            if int(entry) == pid:
                total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
            elif int(fields[1]) == pid:  # ppid
                total += int(fields[11]) + int(fields[12])
    return total


class StartProgress:
    """Whether a starting server still moves: its log grew or its processes used CPU within the last
    START_STALL_S, and START_LIMIT_S has not passed."""

    def __init__(self, pid: int, log_path: Path) -> None:
        self.pid = pid
        self.log_path = log_path
        now = time.monotonic()
        self.until = now + START_LIMIT_S
        self.moved = self.looked = now
        self.mark = self._mark()

    def _mark(self) -> tuple[int, int]:
        try:
            size = self.log_path.stat().st_size
        except OSError:
            size = -1
        return size, _cpu_ticks(self.pid)

    def moving(self) -> bool:
        now = time.monotonic()
        if now - self.looked >= 1.0:  # reading /proc is not free: once a second
            self.looked = now
            mark = self._mark()
            if mark != self.mark:
                self.mark, self.moved = mark, now
        return now < self.until and now - self.moved < START_STALL_S


class InferdProcess:
    """``python -m inferd serve`` in a subprocess; ``stop()`` sends SIGTERM and returns the exit code."""

    def __init__(
        self,
        repository: Path,
        log_path: Path,
        extra_args: tuple[str, ...] = (),
        command: Callable[[int, int, int], list[str]] | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        launcher: list[str] | None = None,
    ) -> None:
        self.repository = repository
        self.log_path = log_path
        self.extra_args = extra_args
        # the whole command line after `python -m inferd` for the (HTTP, gRPC, metrics) ports, 0 each,
        # in place of serving ``repository`` (the Helm chart's test runs the container's arguments)
        self.command = command
        # what runs ``command``: ``python -m inferd``, or e.g. the ``tritonserver`` console script
        self.launcher = launcher or [sys.executable, "-m", "inferd"]
        self.env = env or {}  # set on top of this process's environment
        self.cwd = cwd or REPO_ROOT
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = self.grpc_port = self.metrics_port = 0
        #: where ``request`` connects (``::1`` for a server on ``--http-address ipv6:[::1]``)
        self.host = "127.0.0.1"
        #: the files the start-up lines go to, each with its size before the start
        self._logs: list[tuple[Path, int]] = [(log_path, 0)]
        #: every port the start-up lines name, by service ("HTTPService", "Sagemaker HTTPService"...)
        self.listening: dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> InferdProcess:
        """Start on port 0 for HTTP, gRPC and metrics and wait until it is live; ``port``,
        ``grpc_port`` and ``metrics_port`` are then the ports it logged (0: not served)."""
        cmd = [
            sys.executable,
            "-m",
            "inferd",
            "serve",
            "--model-repository",
            str(self.repository),
            "--http-port=0",
            "--grpc-port=0",
            "--metrics-port=0",
            "--exit-on-error=false",
            *self.extra_args,
        ]
        if self.command is not None:
            cmd = [*self.launcher, *self.command(0, 0, 0)]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **self.env)
        self.port = self.grpc_port = self.metrics_port = 0
        # where its start-up lines go, and how much of each was there before this start
        self._logs = [
            (path, path.stat().st_size if path.exists() else 0)
            for path in [self.log_path, *log_file_flags(cmd)]
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.cwd)
        _STARTED.append(self)
        if self._wait_live():
            return self
        last = self.log()
        code = self.proc.poll()
        why = f"it exited with {code}" if code is not None else "its start stalled (StartProgress)"
        if code is None:
            self.kill()
        raise RuntimeError(f"inferd did not become live: {why}; log:\n{last}")

    def read_ports(self) -> bool:
        """Take the ports from the start-up lines this start wrote so far; True once HTTP's is known."""
        text = ""
        for path, offset in self._logs:
            with contextlib.suppress(OSError), open(path, "rb") as f:
                f.seek(offset)
                text += f.read().decode(errors="replace")
        self.listening = ports = listening_ports(text)
        self.port = ports.get("HTTPService", 0)
        self.grpc_port = ports.get("GRPCInferenceService", 0)
        self.metrics_port = ports.get("Metrics Service", 0)
        return self.port != 0

    def _wait_live(self) -> bool:
        def live() -> bool:
            if not self.read_ports():  # HTTP is the last port opened: the others are known too
                return False
            with contextlib.suppress(OSError, http.client.HTTPException):
                return self.request("GET", "/v2/health/live", timeout=1).status == 200
            return False

        return self.wait_starting(live)

    def wait_starting(self, predicate: Callable[[], bool]) -> bool:
        """Wait until ``predicate()`` holds (the server live, or all its processes serving) for as
        long as the server is alive and its start moves (``StartProgress``): True when it held, False
        when the server exited or its start stalled. The test's own timeout is paused meanwhile."""
        assert self.proc is not None
        progress = StartProgress(self.proc.pid, self.log_path)
        with timeout_paused():
            while not predicate():
                if self.proc.poll() is not None or not progress.moving():
                    return False
                time.sleep(0.05)
        return True

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, then wait up to ``timeout``; the exit code, or None when it had to be killed."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- addresses ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """host:port as tritonclient takes it."""
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- requests ----------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | dict[str, Any] | list[Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> Response:
        """One request on a fresh connection (http.client)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read()
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        finally:
            conn.close()

    def infer(
        self, model: str, doc: dict[str, Any] | bytes, headers: dict[str, str] | None = None
    ) -> Response:
        return self.request("POST", f"/v2/models/{model}/infer", doc, headers)

    def assert_serving(self) -> None:
        """A good request still succeeds (after a malformed one)."""
        r = self.infer(
            "identity_fp32",
            {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]},
        )
        assert r.status == 200, r.body
        assert r.json()["outputs"][0]["data"] == [1.0, 2.0]


@contextlib.contextmanager
def serving(repository: Path, log_path: Path, *extra_args: str) -> Iterator[InferdProcess]:
    """A module's own server: started, and at the end stopped with SIGTERM, which must exit 0."""
    proc = InferdProcess(repository, log_path, tuple(extra_args)).start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"inferd exited with {code}; log:\n{proc.log()[-4000:]}"


@contextlib.contextmanager
def http_client(proc: InferdProcess, concurrency: int = 4) -> Iterator[Any]:
    """tritonclient's HTTP client on ``proc`` (closed at the end)."""
    import tritonclient.http as httpclient

    c = httpclient.InferenceServerClient(proc.url, concurrency=concurrency, network_timeout=60)
    try:
        yield c
    finally:
        c.close()


@contextlib.contextmanager
def grpc_client(proc: InferdProcess) -> Iterator[Any]:
    """tritonclient's gRPC client on ``proc`` (closed at the end)."""
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("e2e") / "models")


@pytest.fixture(scope="session")
def server(model_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    """The shared server of this worker (each xdist worker starts its own, on ports of its own)."""
    proc = InferdProcess(model_repository, tmp_path_factory.mktemp("log") / "inferd.log").start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"inferd exited with {code} after SIGTERM; log:\n{proc.log()[-4000:]}"


@pytest.fixture
def start_server(model_repository: Path, tmp_path: Path) -> Iterator[Any]:
    """Start an extra server of its own (stopped at teardown if the test did not stop it)."""
    started: list[InferdProcess] = []

    def start(*extra_args: str) -> InferdProcess:
        p = InferdProcess(
            model_repository, tmp_path / f"inferd-{len(started)}.log", tuple(extra_args)
        ).start()
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()
