"""What the reliability suites share: the model repository, a real ``inferd serve`` on port 0, its
memory, a health check timed every 100 ms, a raw HTTP/1.1 client, how answers are judged, and
RELIABILITY.md's sections.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import multiprocessing
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httptools

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_MODELS = ROOT / "tests" / "fixtures" / "models"
#: the six reference models (add_sub, batched_sleep, ensemble_add_sub, identity_bytes, identity_fp32,
#: mul_fp32), the ones the real Triton loads too: the one place here that says where they are
REFERENCE_MODELS = ROOT / "tests" / "fixtures" / "reference_models"
DEFAULT_MODEL_DIRS = (FIXTURE_MODELS, REFERENCE_MODELS)
REPORT = ROOT / "RELIABILITY.md"
MiB = 1 << 20


# -- the model repository ------------------------------------------------------------------------
def build_repository(dest: Path, sources: Sequence[Path], only: Sequence[str] | None = None) -> Path:
    """A repository in ``dest`` with the model folders of ``sources`` (the later ones win), or only
    the models named in ``only``."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for src in sources:
        if not src.is_dir():
            raise SystemExit(f"no model repository at {src} (pass --models DIR)")
        for model in sorted(src.iterdir()):
            if model.is_dir() and (only is None or model.name in only):
                target = dest / model.name
                if target.exists():
                    shutil.rmtree(target)
                shutil.copytree(model, target, ignore=ignore)
    return dest


#: a start-up line naming the port a front end got: the server binds port 0 and says which it got
_LISTENING = re.compile(r"Started (GRPCInferenceService|Metrics Service|HTTPService) at (\S+):(\d+)")


def raise_fd_limit(want: int) -> int:
    """Raise this process's soft limit of open files towards ``want`` (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- the server ------------------------------------------------------------------------------------
class Server:
    """``python -m inferd serve`` (this checkout's ``src`` first) on port 0 of 127.0.0.1: the ports
    it got are read from its start-up lines (ports picked ahead raced: bound and let go one after
    another, the kernel once gave HTTP and gRPC the same port)."""

    def __init__(
        self, repository: Path, log_path: Path, args: Sequence[str] = (), env: dict[str, str] | None = None
    ) -> None:
        self.repository = repository
        self.log_path = log_path
        self.args = list(args)
        self.env = env or {}  # on top of this process's environment
        self.proc: subprocess.Popen[bytes] | None = None
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.command: list[str] = []

    def start(self, timeout: float = 60.0) -> Server:
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.command = [
            sys.executable,
            "-m",
            "inferd",
            "serve",
            "--model-repository",
            str(self.repository),
            "--http-address",
            "127.0.0.1",
            "--grpc-address",
            "127.0.0.1",
            "--http-port=0",
            "--grpc-port=0",
            "--metrics-port=0",
            "--exit-on-error=false",
            *self.args,
        ]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **self.env)
        # INFERD_SRC: another source tree to attack (a worktree of an older commit: before/after)
        src = os.environ.get("INFERD_SRC") or str(ROOT / "src")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
                preexec_fn=_server_limits,
            )
        deadline = time.monotonic() + timeout
        while not self._read_ports(offset):  # HTTP opens last: once it is named, every port is
            if not self.alive() or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if self.http_port and self.wait_ready(max(0.0, deadline - time.monotonic())):
            return self
        tail = self.log()[-3000:]
        self.kill()
        raise RuntimeError(f"inferd did not become ready; log:\n{tail}")

    def _read_ports(self, offset: int) -> bool:
        """The ports the start-up lines written since ``offset`` name; True once HTTP's is known."""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            ports = {m[1]: int(m[3]) for m in _LISTENING.finditer(f.read().decode(errors="replace"))}
        self.http_port = ports.get("HTTPService", 0)
        self.grpc_port = ports.get("GRPCInferenceService", 0)
        self.metrics_port = ports.get("Metrics Service", 0)
        return self.http_port != 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            if self.ready():
                return True
            time.sleep(0.05)
        return False

    def ready(self, timeout: float = 2.0) -> bool:
        with contextlib.suppress(OSError, http.client.HTTPException):
            return self.get("/v2/health/ready", timeout)[0] == 200
        return False

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=timeout)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        try:
            conn.request("POST", path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> tuple[int | None, float]:
        """SIGTERM; (exit code or None when it had to be killed, seconds it took)."""
        t0 = time.monotonic()
        if self.proc is None:
            return None, 0.0
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None, time.monotonic() - t0
        return self.proc.returncode, time.monotonic() - t0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- memory --------------------------------------------------------------------------------
    def status_kib(self, key: str) -> int:
        """A ``/proc/<pid>/status`` figure in KiB (VmRSS, VmHWM), 0 once the process is gone."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        except (OSError, ValueError):
            pass
        return 0

    def rss(self) -> int:
        """Resident set size in bytes."""
        return self.status_kib("VmRSS") * 1024

    def reset_peak(self) -> bool:
        """Reset VmHWM (the kernel's peak RSS) to the current RSS; False when not allowed."""
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    def peak(self) -> int:
        return self.status_kib("VmHWM") * 1024


def _server_limits() -> None:
    """In the server's process: as many open files as the hard limit allows (19,000 idle connections)."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), hard))


# -- a raw HTTP/1.1 client -------------------------------------------------------------------------
class NoAnswer(Exception):
    """The connection closed, reset or timed out before a whole answer came."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class _ResponseParser:
    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.done = False
        self.keep_alive = False
        self._name = b""
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        # read here: once the message is complete the parser has reset, and says False
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class RawHttp:
    """One keep-alive connection that sends any bytes and reads one answer at a time."""

    def __init__(self, port: int, timeout: float = 10.0, host: str = "127.0.0.1") -> None:
        self.port = port
        self.host = host
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self._rest = b""
        self.reused = False  # the last request went on a connection that answered before

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
        self._rest = b""

    def _connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.reused = False
        else:
            self.reused = True
        return self.sock

    def exchange(self, raw: bytes, head_only: bool = False) -> Answer:
        """Send ``raw`` and read one answer (NoAnswer when none comes); closes on ``Connection: close``."""
        try:
            sock = self._connect()
        except OSError as e:
            raise NoAnswer("connect", repr(e)) from None
        try:
            sock.sendall(raw)
        except OSError as e:
            # the server may have answered and closed before reading all of it: read what it said
            with contextlib.suppress(NoAnswer):
                return self._read(sock, head_only)
            self.close()
            raise NoAnswer("send", repr(e)) from None
        return self._read(sock, head_only)

    def _read(self, sock: socket.socket, head_only: bool) -> Answer:
        p = _ResponseParser()
        data = self._rest
        self._rest = b""
        try:
            while True:
                if data:
                    try:
                        p.parser.feed_data(data)
                    except httptools.HttpParserUpgrade:
                        pass
                    except httptools.HttpParserError as e:
                        self.close()
                        raise NoAnswer("malformed", repr(e)) from None
                    if p.done:
                        break
                data = sock.recv(1 << 20)
                if not data:
                    self.close()
                    raise NoAnswer("closed")
        except TimeoutError:
            self.close()
            raise NoAnswer("timeout") from None
        except OSError as e:
            self.close()
            raise NoAnswer("reset", repr(e)) from None
        keep = p.keep_alive
        if not keep:
            self.close()
        return Answer(p.parser.get_status_code(), p.headers, b"".join(p.body), keep)


def http_request(
    method: str, path: str, body: bytes = b"", headers: Sequence[tuple[str, str]] = (), length: bool = True
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


# -- judging answers ------------------------------------------------------------------------------
#: what only a bug of ours answers: the last-resort bodies, and Python's or our source's traces
_LAST_RESORT = (b'{"error":"internal server error"}',)
_BUG_MARKERS = re.compile(
    rb"Traceback \(most recent call last\)|internal error: [A-Za-z_]+(Error|Exception)|"
    rb"failed to encode the response|/inferd/[a-z_/]+\.py|site-packages/"
)


def unexpected_http(status: int, body: bytes) -> str | None:
    """Why an HTTP answer is one the reference would not give (None: an honest answer)."""
    if body.strip() in _LAST_RESORT:
        return f"{status} last-resort answer"
    m = _BUG_MARKERS.search(body)
    if m is not None:
        return f"{status} body shows {m.group(0).decode('latin-1')!r}"
    if status >= 500 and status not in (500, 501, 503):
        return f"status {status}"
    return None


def unexpected_grpc(code_name: str, details: str) -> str | None:
    """Why a gRPC status is one the reference would not give (None: an honest answer)."""
    m = _BUG_MARKERS.search(details.encode("utf-8", "replace"))
    if m is not None:
        return f"{code_name} details show {m.group(0).decode('latin-1')!r}"
    if code_name == "UNKNOWN":
        return "UNKNOWN status (an exception escaped the servicer)"
    return None


def log_tracebacks(text: str, ignore: Sequence[str] = ()) -> list[str]:
    """The last lines of each traceback in a server log (the exception), except those naming
    ``ignore`` (models that raise on purpose)."""
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            j = i + 1
            while j < len(lines) and (lines[j].startswith((" ", "\t")) or not lines[j].strip()):
                j += 1
            block = "\n".join(lines[max(0, i - 1) : j + 1])
            if not any(name in block for name in ignore):
                out.append(lines[j].strip() if j < len(lines) else "?")
    return out


# -- health and memory during an attack -----------------------------------------------------------
@dataclass
class Watch:
    """Health-check latencies (ms) and RSS samples (bytes) over one window."""

    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    idle_rss: int = 0
    kernel_peak: int = 0

    @property
    def max_ms(self) -> float:
        return max(self.latencies_ms, default=float("nan"))

    @property
    def peak_rss(self) -> int:
        return max([self.kernel_peak, *self.rss], default=0)

    @property
    def over_idle(self) -> int:
        return max(0, self.peak_rss - self.idle_rss)


class HealthWatch:
    """A health check every ``interval`` s on its own keep-alive connection (reconnecting after a
    failure) and RSS sampled every ``rss_interval`` s, from ``start()`` to ``stop()``.

    The health check runs in a process of its own: an attack that holds this process's GIL (a
    96 MiB protobuf serialised, 19,000 sockets opened) must not delay the check and be counted
    against the server."""

    def __init__(self, server: Server, interval: float = 0.1, rss_interval: float = 0.02) -> None:
        self.server = server
        self.interval = interval
        self.rss_interval = rss_interval
        self.watch = Watch()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        ctx = multiprocessing.get_context("spawn")
        self._probe_stop = ctx.Event()
        self._probe_ready = ctx.Event()
        self._results, child_end = ctx.Pipe(duplex=False)
        self._probe = ctx.Process(
            target=_health_probe,
            args=(server.http_port, interval, self._probe_ready, self._probe_stop, child_end),
            daemon=True,
        )

    def __enter__(self) -> Watch:
        # a settled baseline: the median of a few samples after a collection of ours
        samples = []
        for _ in range(5):
            samples.append(self.server.rss())
            time.sleep(0.02)
        self.watch.idle_rss = sorted(samples)[len(samples) // 2]
        self._peak_reset = self.server.reset_peak()
        self._probe.start()
        self._probe_ready.wait(30)  # connected and answered once: the attack starts after
        self._threads = [threading.Thread(target=self._memory, daemon=True)]
        for t in self._threads:
            t.start()
        return self.watch

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._probe_stop.set()
        for t in self._threads:
            t.join(10)
        if self._results.poll(30):
            latencies, failures = self._results.recv()
            self.watch.latencies_ms += latencies
            self.watch.failures += failures
        else:
            self.watch.failures.append("the health-check process sent nothing")
        self._probe.join(10)
        if self._probe.is_alive():
            self._probe.kill()
        if self._peak_reset:
            self.watch.kernel_peak = self.server.peak()

    def _memory(self) -> None:
        while not self._stop.is_set():
            rss = self.server.rss()
            if rss:
                self.watch.rss.append(rss)
            self._stop.wait(self.rss_interval)


def _health_probe(port: int, interval: float, ready: Any, stop: Any, results: Any) -> None:
    """HealthWatch's check, in its own process: latencies (ms) and failures sent back at ``stop``."""
    conn = RawHttp(port, timeout=5.0)
    req = http_request("GET", "/v2/health/ready", length=False)
    with contextlib.suppress(NoAnswer):
        conn.exchange(req)
    ready.set()
    latencies: list[float] = []
    failures: list[str] = []
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            a = conn.exchange(req)
            latencies.append((time.perf_counter() - t0) * 1000)
            if a.status != 200:
                failures.append(f"status {a.status}")
        except NoAnswer as e:
            latencies.append((time.perf_counter() - t0) * 1000)
            failures.append(e.kind)
        stop.wait(max(0.0, interval - (time.perf_counter() - t0)))
    conn.close()
    results.send((latencies, failures))


# -- the machine and the report ---------------------------------------------------------------------
def machine() -> dict[str, str]:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f"{kib / (1 << 20):.1f} GiB"
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    return {
        "cpu": cpu,
        "nproc": nproc or str(os.cpu_count()),
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def machine_lines(m: dict[str, str], load_end: str | None = None) -> list[str]:
    load = m["load"] + (f" / {load_end}" if load_end else "")
    return [
        f"- Run {m['date']} on {m['cpu']}, nproc {m['nproc']}, {m['memory']} memory, Linux {m['kernel']}, "
        f"Python {m['python']}",
        f"- Load average at start{' / end' if load_end else ''}: {load}",
    ]


_HEADER = """# Reliability: inferd under attack and under load

Written by the suites of `reliability/` (issue 10); each rewrites its own section. The short
versions run in `make test` (`tests/e2e/test_e2e_reliability.py`) and write nothing here.

Goals (issue 10): 100,000 fuzzed HTTP requests and 10,000 malformed gRPC calls with 0 crashes, 0
unhandled exceptions (no 500 the reference would not give) and the server ready afterwards; every
attack with peak RSS under 2x the configured body limit over idle and a health check under 50 ms; a
30-minute soak at concurrency 32 with 0 errors and RSS growth under 5%; SIGTERM under load losing
no accepted request and exiting within `--exit-timeout-secs`.
"""


def write_section(name: str, text: str, path: Path = REPORT) -> None:
    """Replace the section ``name`` of RELIABILITY.md (between its markers) with ``text``."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    doc = path.read_text() if path.exists() else _HEADER
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        _, tail = rest.split(end, 1)
        doc = head + block + tail
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    path.write_text(doc)


def write_json(path: Path | None, doc: Any) -> None:
    if path is not None:
        path.write_text(json.dumps(doc, indent=1, default=str))


def mib(n: float) -> str:
    return f"{n / MiB:,.1f} MiB"
