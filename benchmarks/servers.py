"""The servers a benchmark runs against, started and stopped one at a time on free ports: inferd
from a command line (CommandServer), the reference through scripts/reference/triton.sh
(ReferenceServer) and the floor, benchmarks/floor_server.py (FloorServer); ports, readiness polls and the logged subprocesses they need. Used by run.py and
by the *_bench.py modules."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bench_paths import REFERENCE_MODELS, ROOT, TRITON_SH

MODELS = REFERENCE_MODELS
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------------
# ports, readiness, subprocesses


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def free_ports() -> Ports:
    """Three free ports below the usual ephemeral range (so perf_analyzer's own sockets never collide)."""
    picked: list[int] = []
    while len(picked) < 3:
        p = random.randrange(20000, 32000)
        if p not in picked and _port_free(p):
            picked.append(p)
    return Ports(*picked)


def http_status(port: int, path: str, timeout: float = 1.0) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (OSError, ValueError):
        return None


def wait_port_released(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and http_status(port, "/v2/health/live", 0.5) is not None:
        time.sleep(0.1)


_current_child: subprocess.Popen[str] | None = None


def run_logged(
    cmd: Sequence[str], log_path: Path, env: dict[str, str] | None = None, echo: bool = True
) -> int:
    """Run cmd (cwd = repo root), stream its output to stdout (if echo) and into log_path; return rc."""
    global _current_child
    with open(log_path, "a", encoding="utf-8") as lf:
        lf.write(f"$ {shlex.join(cmd)}\n")
        lf.flush()
        proc = subprocess.Popen(
            list(cmd),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
        )
        _current_child = proc
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lf.write(line)
                if echo:
                    sys.stdout.write("    " + line)
                    sys.stdout.flush()
            return proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            _current_child = None


def on_sigterm(signum: int, frame: Any) -> None:
    if _current_child is not None and _current_child.poll() is None:
        _current_child.send_signal(signal.SIGTERM)
    raise KeyboardInterrupt(f"signal {signum}")


# --------------------------------------------------------------------------------------------
# servers


class StartError(RuntimeError):
    """A server under test did not start (or not in time): the round goes on without it."""


class Server(ABC):
    """A server under test: started/stopped for bench.sh, and given to measure.sh as a foreground command."""

    name: str
    label: str
    #: the bench.sh scenarios it serves (None: all), and whether measure.sh measures it
    serves: re.Pattern[str] | None = None
    measured = True

    @abstractmethod
    def start(self, ports: Ports, log_path: Path) -> None: ...

    @abstractmethod
    def stop(self) -> None:
        """Stop what start() started; idempotent; never raises for a server that is already gone."""

    @abstractmethod
    def alive(self) -> bool: ...

    @abstractmethod
    def foreground_cmd(self, ports: Ports) -> str:
        """Command for measure.sh's START_CMD (word-split by bash without quote handling)."""

    @abstractmethod
    def describe(self) -> str: ...

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (its process tree's CPU time is read from /proc)."""
        return None


class ReferenceServer(Server):
    """Real Triton through scripts/reference/triton.sh start/stop."""

    name = "reference"
    label = "reference"

    def __init__(self, models: Path = MODELS) -> None:
        self.models = models
        self._ports: Ports | None = None
        self._log: Path | None = None

    def start(self, ports: Ports, log_path: Path) -> None:
        self._log = log_path
        self._ports = ports  # set first: stop() also cleans up after a failed start (e.g. not ready in time)
        cmd = [
            "bash",
            str(TRITON_SH),
            "start",
            str(self.models),
            str(ports.http),
            str(ports.grpc),
            str(ports.metrics),
        ]
        rc = run_logged(cmd, log_path)
        if rc != 0:
            self.stop()
            raise StartError(f"triton.sh start exited {rc}:\n{tail(log_path)}")

    def stop(self) -> None:
        if self._ports is None:
            return
        ports, self._ports = self._ports, None
        assert self._log is not None
        run_logged(["bash", str(TRITON_SH), "stop", str(self.models), str(ports.http)], self._log)
        server_log = anchor_run_dir() / f"triton-{ports.http}.log"
        if server_log.exists():
            with open(self._log, "a", encoding="utf-8") as f:
                f.write(f"\n--- {server_log} ---\n")
                f.write(server_log.read_text(errors="replace"))
        wait_port_released(ports.http)

    def alive(self) -> bool:
        if self._ports is None:
            return False
        rc = subprocess.run(
            ["bash", str(TRITON_SH), "status", str(self.models), str(self._ports.http)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        ).returncode
        return rc == 0

    def foreground_cmd(self, ports: Ports) -> str:
        return f"bash {TRITON_SH} run {self.models} {ports.http} {ports.grpc} {ports.metrics}"

    @property
    def pid(self) -> int | None:
        """tritonserver's own pid (triton.sh's pid file: 'run' execs it)."""
        if self._ports is None:
            return None
        try:
            return int((anchor_run_dir() / f"triton-{self._ports.http}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def describe(self) -> str:
        return f"`{rel(TRITON_SH)} start|run <models> <http> <grpc> <metrics>`"


class CommandServer(Server):
    """A server started from a command template, in its own process group; stopped with SIGTERM."""

    def __init__(
        self,
        name: str,
        label: str,
        template: str,
        ready_timeout: float = READY_TIMEOUT_S,
        models: Path = MODELS,
    ) -> None:
        self.name = name
        self.label = label
        self.template = template
        self.ready_timeout = ready_timeout
        self.models = models
        self._proc: subprocess.Popen[bytes] | None = None
        self._logf: IO[bytes] | None = None
        self._ports: Ports | None = None

    def command(self, ports: Ports) -> str:
        return self.template.format(
            root=ROOT,
            repo=self.models,
            models=self.models,
            http=ports.http,
            grpc=ports.grpc,
            metrics=ports.metrics,
        )

    def foreground_cmd(self, ports: Ports) -> str:
        return self.command(ports)

    def describe(self) -> str:
        return f"`{self.template}`"

    def start(self, ports: Ports, log_path: Path) -> None:
        cmd = self.command(ports)
        log(f"{self.name}: {cmd}")
        self._logf = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._logf.write(f"$ {cmd}\n".encode())
        self._logf.flush()
        try:
            self._proc = subprocess.Popen(
                shlex.split(cmd),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=self._logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            self._close_log()
            raise StartError(f"cannot start {self.name}: {e}") from e
        self._ports = ports
        t0 = time.monotonic()
        while True:
            if self._proc.poll() is not None:
                rc = self._proc.returncode
                self.stop()
                raise StartError(f"{self.name} exited with {rc} during startup:\n{tail(log_path)}")
            if http_status(ports.http, "/v2/health/ready") == 200:
                break
            if time.monotonic() - t0 > self.ready_timeout:
                self.stop()
                raise StartError(f"{self.name} not ready after {self.ready_timeout:.0f}s:\n{tail(log_path)}")
            time.sleep(0.05)
        log(f"{self.name}: ready in {time.monotonic() - t0:.2f}s (pid {self._proc.pid})")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (its CPU time is read from /proc)."""
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    log(f"{self.name}: pid {proc.pid} alive {STOP_TIMEOUT_S:.0f}s after SIGTERM, SIGKILL")
                    proc.kill()
                    proc.wait()
            # leftovers of the process group we created (start_new_session: pgid == pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._ports is not None:
            wait_port_released(self._ports.http)
            self._ports = None
        self._close_log()

    def _close_log(self) -> None:
        if self._logf is not None:
            self._logf.close()
            self._logf = None


FLOOR_SCRIPT = ROOT / "benchmarks" / "floor_server.py"


class FloorServer(CommandServer):
    """benchmarks/floor_server.py (issue 48): add_sub over HTTP and nothing else, so only the add_sub
    HTTP rows; no measure.sh (its cold start and memory are no one's goal, its client latency needs gRPC)."""

    measured = False

    def __init__(self, python: str = sys.executable, rows: str = r"^add_sub_http_c\d+$") -> None:
        super().__init__("floor", "floor", f"{python} {FLOOR_SCRIPT} --http-port {{http}}")
        self.serves = re.compile(rows)


def anchor_run_dir() -> Path:
    anchor = Path(
        os.environ.get("ANCHOR_DIR") or Path(os.environ.get("TMPDIR") or "/tmp") / "inferd-reference"
    )
    return Path(os.environ.get("ANCHOR_RUN_DIR") or anchor / "run")


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def rel(p: Path) -> str:
    try:
        return os.path.relpath(p, ROOT)
    except ValueError:
        return str(p)


# --------------------------------------------------------------------------------------------
# the *_bench.py modules' view: one server, started on free ports


INFERD_TEMPLATE = (
    "{python} -m inferd serve --model-repository {{models}} "
    "--http-port {{http}} --grpc-port {{grpc}} --metrics-port {{metrics}}"
)


class BenchServer:
    """A Server with its own ports and log: ``start()`` returns the ports, ``stop()`` is idempotent."""

    def __init__(self, server: Server, log_path: Path) -> None:
        self.server = server
        self.log_path = log_path
        self.ports: Ports | None = None

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self.server.pid

    def start(self) -> Ports:
        self.ports = free_ports()
        self.server.start(self.ports, self.log_path)
        return self.ports

    def stop(self) -> None:
        self.server.stop()


def inferd(repo: Path, log_path: Path, python: str = sys.executable, extra: str = "") -> BenchServer:
    """inferd serving ``repo`` with ``python`` (``extra``: more command-line options)."""
    template = INFERD_TEMPLATE.format(python=python) + (f" {extra}" if extra else "")
    return BenchServer(CommandServer("inferd", "inferd", template, models=repo), log_path)


def floor(log_path: Path, python: str = sys.executable) -> BenchServer:
    """The floor (benchmarks/floor_server.py): add_sub over HTTP only."""
    return BenchServer(FloorServer(python), log_path)


def reference(repo: Path, log_path: Path) -> BenchServer:
    """The reference serving ``repo`` (scripts/reference/triton.sh)."""
    return BenchServer(ReferenceServer(models=repo), log_path)
