"""The server's process lifecycle (issue 25): a model that crashes, SIGTERM under way, a hung model and
a leaking one. Each case starts servers of its own (the ``server`` it is given only says where to
write), with models written here:

- ``crash_default`` / ``exit_default``: a Python model that segfaults (ctypes) or calls ``os._exit``,
  in the default configuration, while a client infers on another model in a loop;
- ``sigterm_sequences``: SIGTERM while three sequences of 50 requests (two over HTTP, one over gRPC)
  and a 32-connection keep-alive load run;
- ``hung_initialize_sigterm``: a thread model whose ``initialize`` never returns, loaded through the
  repository API (given up at the load timeout), then SIGTERM;
- ``leaky_process``: a process-mode model keeping 100 MiB more at each request, with
  ``memory_limit_bytes``.

``CASES`` maps a name to (what, expected, which limit the RSS goal uses, function); sizes come from
the ``AttackConfig`` when it has them (``LIFECYCLE_DEFAULTS`` otherwise).

    python -m reliability.attacks_lifecycle [CASE ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reliability.common import MiB, Server

LIFECYCLE_DEFAULTS: dict[str, Any] = {
    "crash_goal_s": 5.0,  # the crashed model (or the server) serves again within this
    "exit_timeout_s": 10,  # --exit-timeout-secs of the SIGTERM cases
    "sequence_length": 50,
    "keep_alive_clients": 32,
    "leak_requests": 12,  # requests of 100 MiB each to the leaking model
    "memory_limit": 500 * MiB,
}

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{extra}
"""
_ANSWER = """
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""
IDENTITY = (
    "import triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:\n    def execute(self, requests):"
    + _ANSWER
)
# INPUT0 < 0: crash (a segfault through ctypes, or os._exit(3))
CRASHING = (
    """
import ctypes
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] < 0:
                if "{how}" == "segfault":
                    ctypes.string_at(0)
                os._exit(3)
"""
    + _ANSWER
)
LEAKY = (
    """
import numpy as np
import triton_python_backend_utils as pb_utils

KEPT = []


class TritonPythonModel:
    def execute(self, requests):
        KEPT.append(np.ones(100 << 20, np.uint8))
"""
    + _ANSWER
)
HANGING_INIT = """
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(3600)

    def execute(self, requests):
        return []
"""
SEQUENCE = (
    """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.04)
"""
    + _ANSWER
)
SEQUENCE_EXTRA = """instance_group [ { count: 3 kind: KIND_CPU } ]
sequence_batching { max_sequence_idle_microseconds: 60000000 }"""


def _cfg(cfg: Any, name: str) -> Any:
    return getattr(cfg, name, LIFECYCLE_DEFAULTS[name])


def _repo(work: Path, models: dict[str, tuple[str, str]]) -> Path:
    """A fresh repository under ``work`` with ``models``: name -> (source, config extra)."""
    repo = Path(tempfile.mkdtemp(prefix="lifecycle-", dir=work))
    for name, (source, extra) in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
        (repo / name / "1" / "model.py").write_text(source)
    return repo


def _body(value: float) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [value]}]}
    ).encode()


def _post(port: int, model: str, value: float, timeout: float = 30.0) -> str:
    """One request on a new connection: its status, or the exception's name."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", _body(value))
        r = conn.getresponse()
        r.read()
        return str(r.status)
    except (OSError, http.client.HTTPException) as e:
        return type(e).__name__
    finally:
        conn.close()


class _Client:
    """Requests one after the other on a keep-alive connection (a new one after ``Connection: close``
    or an error), each recorded as (sent at, outcome)."""

    def __init__(self, port: int, model: str) -> None:
        self.port, self.model = port, model
        self.rows: list[tuple[float, str]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn: http.client.HTTPConnection | None = None
        body = _body(1.0)
        while not self.stopped.is_set():
            sent = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("POST", f"/v2/models/{self.model}/infer", body)
                r = conn.getresponse()
                r.read()
                self.rows.append((sent, str(r.status)))
                if r.getheader("Connection") == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                self.rows.append((sent, type(e).__name__))
                conn = None
                time.sleep(0.01)  # a refused connection: not a busy loop

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(60)


def _wait(cond: Callable[[], bool], limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


# -- the cases ---------------------------------------------------------------------------------------
def _crash(server: Server, cfg: Any, how: str) -> tuple[str, bool, str]:
    """A model crashing (``how``) in the default configuration while another one is served."""
    goal = _cfg(cfg, "crash_goal_s")
    repo = _repo(
        server.log_path.parent, {"crashes": (CRASHING.replace("{how}", how), ""), "other": (IDENTITY, "")}
    )
    own = Server(repo, server.log_path.parent / f"{how}_default.log").start()
    other = _Client(own.http_port, "other")
    try:
        _wait(lambda: len(other.rows) >= 20, 30)
        crashed_at = time.monotonic()
        crash = _post(own.http_port, "crashes", -1.0)
        alive = own.alive()
        back = None
        while time.monotonic() - crashed_at < 30:  # the crashed model (or the restarted server)
            if _post(own.http_port, "crashes", 1.0, timeout=5) == "200":
                back = time.monotonic() - crashed_at
                break
            time.sleep(0.05)
        _wait(lambda: sum(1 for t, _ in other.rows if t > crashed_at) >= 100, 10)
    finally:
        other.stop()
        own.stop()
    after = Counter(o for t, o in other.rows if t >= crashed_at)
    failed = sum(n for o, n in after.items() if o != "200")
    got = (
        f"crashing request: {crash}; server {'alive' if alive else 'gone'}; other model after the crash: "
        + ", ".join(f"{n} x {o}" for o, n in sorted(after.items()))
        + ("; crashed model never back" if back is None else f"; crashed model back in {back:.1f} s")
    )
    ok = alive and failed <= 1 and back is not None and back < goal
    return got, ok, f"goal: at most the in-flight request of the other client fails, back within {goal:g} s"


def crash_default(server: Server, cfg: Any) -> tuple[str, bool, str]:
    return _crash(server, cfg, "segfault")


def exit_default(server: Server, cfg: Any) -> tuple[str, bool, str]:
    return _crash(server, cfg, "exit")


def sigterm_sequences(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """SIGTERM while three sequences and a keep-alive load run."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    timeout, length = _cfg(cfg, "exit_timeout_s"), _cfg(cfg, "sequence_length")
    repo = _repo(server.log_path.parent, {"seq": (SEQUENCE, SEQUENCE_EXTRA), "other": (IDENTITY, "")})
    own = Server(
        repo, server.log_path.parent / "sigterm_sequences.log", [f"--exit-timeout-secs={timeout}"]
    ).start()
    progress = [0, 0, 0]
    seq_rows: list[tuple[float, str]] = []

    def sequence(i: int) -> None:
        grpc = i == 2
        mod: Any = grpcclient if grpc else httpclient
        client: Any = mod.InferenceServerClient(f"127.0.0.1:{own.grpc_port if grpc else own.http_port}")
        try:
            for k in range(length):
                x = mod.InferInput("INPUT0", [1], "FP32")
                x.set_data_from_numpy(np.array([k], np.float32))
                sent = time.monotonic()
                try:
                    r = client.infer(
                        "seq", [x], sequence_id=50 + i, sequence_start=k == 0, sequence_end=k == length - 1
                    )
                    seq_rows.append((sent, "ok" if r.as_numpy("OUTPUT0")[0] == k else "wrong"))
                except Exception as e:
                    seq_rows.append((sent, type(e).__name__))
                    return
                progress[i] += 1
        finally:
            client.close()

    seqs = [threading.Thread(target=sequence, args=(i,), daemon=True) for i in range(3)]
    for t in seqs:
        t.start()
    load = [_Client(own.http_port, "other") for _ in range(_cfg(cfg, "keep_alive_clients"))]
    _wait(lambda: min(progress) >= 10, 60)
    signalled = time.monotonic()
    own.signal(signal.SIGTERM)
    assert own.proc is not None
    try:
        own.proc.wait(timeout + 30)
    except Exception:
        own.kill()
    exited = time.monotonic() - signalled
    for t in seqs:
        t.join(30)
    for c in load:
        c.stop()
    code = own.proc.returncode
    own.kill()
    seq = Counter(o for _, o in seq_rows)
    before = Counter(o for c in load for t, o in c.rows if t < signalled)
    after = Counter(o for c in load for t, o in c.rows if t >= signalled)
    got = (
        f"sequences: {', '.join(f'{n} x {o}' for o, n in seq.items())} of {3 * length}; keep-alive load "
        f"sent before the signal: {', '.join(f'{n} x {o}' for o, n in before.items())}; after: "
        f"{', '.join(f'{n} x {o}' for o, n in after.items())}; exited {code} after {exited:.2f} s"
    )
    ok = seq == Counter({"ok": 3 * length}) and set(before) == {"200"} and exited < timeout + 1
    return (
        got,
        ok,
        f"--exit-timeout-secs {timeout}; goal: none sent before the signal fails, gone by the timeout + 1 s",
    )


def hung_initialize_sigterm(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """A thread model whose initialize never returns, given up at the load timeout; then SIGTERM."""
    timeout = _cfg(cfg, "exit_timeout_s")
    repo = _repo(server.log_path.parent, {"hangs": (HANGING_INIT, ""), "other": (IDENTITY, "")})
    args = [
        "--model-control-mode=explicit",
        "--load-model=other",
        "--model-load-timeout-secs=2",
        f"--exit-timeout-secs={timeout}",
    ]
    own = Server(repo, server.log_path.parent / "hung_initialize.log", args).start()
    conn = http.client.HTTPConnection("127.0.0.1", own.http_port, timeout=30)
    conn.request("POST", "/v2/repository/models/hangs/load", b"{}")
    r = conn.getresponse()
    load = f"{r.status} {r.read()[:80].decode(errors='replace')}"
    conn.close()
    signalled = time.monotonic()
    own.signal(signal.SIGTERM)
    assert own.proc is not None
    try:
        own.proc.wait(timeout + 60)
        code: int | None = own.proc.returncode
    except Exception:
        code = None
    exited = time.monotonic() - signalled
    own.kill()
    how = "still running" if code is None else f"exited {code}"
    got = f"load: {load}; after SIGTERM: {how} after {exited:.1f} s"
    return (
        got,
        code is not None and exited < timeout + 1,
        f"--exit-timeout-secs {timeout}; goal: gone by the timeout + 1 s",
    )


def _worker_rss(pid: int) -> int:
    """Resident memory of ``pid``'s child processes (the model's workers)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) == pid:
                total += int(Path(f"/proc/{entry}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return total


def leaky_process(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """A process-mode model keeping 100 MiB more at each request, with a memory limit."""
    limit, n = _cfg(cfg, "memory_limit"), _cfg(cfg, "leak_requests")
    extra = (
        'parameters [ { key: "execution_mode" value: { string_value: "process" } }, '
        f'{{ key: "memory_limit_bytes" value: {{ string_value: "{limit}" }} }} ]'
    )
    repo = _repo(server.log_path.parent, {"leaky": (LEAKY, extra), "other": (IDENTITY, "")})
    own = Server(repo, server.log_path.parent / "leaky_process.log").start()
    other = _Client(own.http_port, "other")
    peak = 0
    answers: Counter[str] = Counter()
    try:
        for _ in range(n):
            answers[_post(own.http_port, "leaky", 1.0)] += 1
            peak = max(peak, _worker_rss(own.pid))
        back = _post(own.http_port, "leaky", 1.0)
    finally:
        other.stop()
        own.stop()
    log = own.log()
    restarts = log.count("more than its memory_limit_bytes")
    failed_other = sum(1 for _, o in other.rows if o != "200")
    got = (
        f"{n} requests: {', '.join(f'{c} x {o}' for o, c in answers.items())}; worker RSS peak {peak / MiB:.0f} MiB; "
        f"{restarts} restart(s) past the limit; then {back}; other model: {len(other.rows)} requests, {failed_other} failed"
    )
    ok = peak < limit + 150 * MiB and restarts >= 1 and back == "200" and failed_other == 0
    return (
        got,
        ok,
        f"memory_limit_bytes {limit / MiB:.0f} MiB; goal: the worker restarted past it, the others serving",
    )


CASES: dict[str, tuple[str, str, str, Callable[[Server, Any], tuple[str, bool, str]]]] = {
    # name: (what, expected, which limit the RSS goal uses, function)
    "crash_default": (
        "a Python model that segfaults (ctypes), default configuration, another model served in a loop",
        "the other model's client loses at most its request in flight; the model serves again within 5 s",
        "body",
        crash_default,
    ),
    "exit_default": (
        "a Python model that calls os._exit, default configuration, another model served in a loop",
        "the other model's client loses at most its request in flight; the model serves again within 5 s",
        "body",
        exit_default,
    ),
    "sigterm_sequences": (
        "SIGTERM during 3 sequences of {sequence_length} requests and a {keep_alive_clients}-connection keep-alive load",
        "every sequence ends; no request sent before the signal fails; gone by the exit timeout + 1 s",
        "body",
        sigterm_sequences,
    ),
    "hung_initialize_sigterm": (
        "a thread model whose initialize never returns, loaded through the repository API; then SIGTERM",
        "the load fails at its timeout; the process is gone by the exit timeout + 1 s",
        "body",
        hung_initialize_sigterm,
    ),
    "leaky_process": (
        "a process-mode model keeping 100 MiB more at each of {leak_requests} requests",
        "its worker restarted past memory_limit_bytes with a clear error; the other models serve",
        "body",
        leaky_process,
    ),
}


def main(argv: list[str] | None = None) -> int:
    """Each case (or those named); a line of JSON per case."""
    p = argparse.ArgumentParser(
        prog="python -m reliability.attacks_lifecycle", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "cases", nargs="*", default=list(CASES), help=f"cases to run (default all: {', '.join(CASES)})"
    )
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    args = p.parse_args(argv)
    cfg = argparse.Namespace(**LIFECYCLE_DEFAULTS)
    work = Path(tempfile.mkdtemp(prefix="inferd-lifecycle-"))
    anchor = Server(work, work / "anchor.log")  # not started: says where the cases write
    results = []
    for name in args.cases:
        what, expected, _limit, func = CASES[name]
        t0 = time.monotonic()
        try:
            got, ok, note = func(anchor, cfg)
        except Exception as e:  # the harness's own failure: recorded, the run goes on
            got, ok, note = f"harness error {type(e).__name__}: {e}", False, ""
        row = {
            "name": name,
            "what": what.format(**vars(cfg)),
            "expected": expected,
            "got": got,
            "ok": ok,
            "notes": note,
            "seconds": round(time.monotonic() - t0, 1),
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
