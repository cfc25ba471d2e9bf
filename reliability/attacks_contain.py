"""Containment (issue 42): what a model may do to the server depends on where it runs, not on how
its source spells it. Each case starts servers of its own (the ``server`` it is given only says
where to write), with models written here:

- ``crash_spellings``: four ways for a model to end its process that ``execution_mode: auto`` does not
  see in the source (``faulthandler._sigsegv()``, ``getattr(os, '_ex' + 'it')``, ``os.kill(os.getpid(),
  SIGKILL)``, ``importlib.import_module('ct' + 'ypes')``), each in ``execution_mode: process`` and each
  uploaded through the repository API (``file:`` overrides), while a client infers on another model;
- ``recursion_thread``: a thread model that raises the recursion limit to 10**7 and recurses forever,
  after warm-up executes (inline on the event loop), while a client infers on another model;
- ``upload_load_limits``: uploaded models whose ``initialize`` never returns, or allocates 3 GiB,
  under a 4 s load timeout and a 500 MB memory limit for uploads;
- ``crash_loop_latency``: an uploaded model crashing once a second for 30 s (in 5-s windows,
  alternating with 5-s windows without) while a client infers on another model one request at a
  time: that client's p50 latency with crashes against its p50 without.

``CASES`` maps a name to (what, expected, which limit the RSS goal uses, function); sizes come from
the ``AttackConfig`` when it has them (``CONTAIN_DEFAULTS`` otherwise).

    python -m reliability.attacks_contain [CASE ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reliability.attacks_lifecycle import IDENTITY, _body, _Client, _post, _repo, _wait
from reliability.common import MiB, Server

CONTAIN_DEFAULTS: dict[str, Any] = {
    "crash_loop_s": 30.0,  # how long the uploaded model crashes once a second (and each baseline)
    "crash_loop_goal": 0.10,  # the other model's p50 within this fraction of its p50 without crashes
    "recursion_goal_s": 2.0,  # the other model's slowest answer while a model recurses
}

# INPUT0 < 0: the model ends its process as CRASH says; else the identity
_CRASH_PREFIX = """
import faulthandler
import importlib
import os
import signal
import sys

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] < 0:
                {crash}
"""
_ANSWER = """
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests
        ]
"""
#: spelling -> the line that ends the process (none names ctypes or os._exit literally)
SPELLINGS = {
    "sigsegv": "faulthandler._sigsegv()",
    "getattr_exit": "getattr(os, '_ex' + 'it')(3)",
    "kill_self": "os.kill(os.getpid(), signal.SIGKILL)",
    "import_ctypes": "importlib.import_module('ct' + 'ypes').string_at(0)",
}
RECURSING = (
    """
import sys

import triton_python_backend_utils as pb_utils


def down(n):
    return down(n + 1) + 1


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] < 0:
                sys.setrecursionlimit(10**7)
                down(0)
"""
    + _ANSWER
)
# INPUT0 < 0: pure Python work that never ends (a loop); else the identity
SPINNING = (
    """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] < 0:
                n = 0
                while True:
                    n += 1
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
BALLOON_INIT = """
import numpy as np


class TritonPythonModel:
    def initialize(self, args):
        self.kept = np.ones(3 << 30, np.uint8)

    def execute(self, requests):
        return []
"""
PROCESS = 'parameters { key: "execution_mode" value: { string_value: "process" } }'
THREAD = 'parameters { key: "execution_mode" value: { string_value: "thread" } }'


def crashing(spelling: str) -> str:
    return _CRASH_PREFIX.replace("{crash}", SPELLINGS[spelling]) + _ANSWER


def _cfg(cfg: Any, name: str) -> Any:
    return getattr(cfg, name, CONTAIN_DEFAULTS[name])


def upload_body(name: str, source: str, extra: dict[str, Any] | None = None) -> bytes:
    """A repository load request uploading ``source`` as model ``name``'s 1/model.py."""
    config = {
        "name": name,
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        **(extra or {}),
    }
    params = {"config": json.dumps(config), "file:1/model.py": base64.b64encode(source.encode()).decode()}
    return json.dumps({"parameters": params}).encode()


def upload(port: int, name: str, source: str, timeout: float = 120.0) -> tuple[int, str]:
    """Load ``source`` as model ``name`` through the repository API: (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", f"/v2/repository/models/{name}/load", upload_body(name, source))
        r = conn.getresponse()
        return r.status, r.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as e:
        return 0, type(e).__name__
    finally:
        conn.close()


def _error(body: str) -> str:
    """The error text of an answer (or the body as it is)."""
    try:
        return str(json.loads(body).get("error", body))
    except (ValueError, AttributeError):
        return body


def _infer(port: int, model: str, value: float) -> tuple[str, str]:
    """(status, body) of one request on a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", _body(value))
        r = conn.getresponse()
        return str(r.status), r.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as e:
        return type(e).__name__, ""
    finally:
        conn.close()


# -- the cases ---------------------------------------------------------------------------------------
def crash_spellings(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """Each spelling in execution_mode process (a repository model) and uploaded, another model served."""
    models = {f"p_{s}": (crashing(s), PROCESS) for s in SPELLINGS}
    models["other"] = (IDENTITY, "")
    repo = _repo(server.log_path.parent, models)
    args = ["--model-control-mode=explicit", "--load-model=*"]
    own = Server(repo, server.log_path.parent / "crash_spellings.log", args).start()
    other = _Client(own.http_port, "other")
    outcomes: list[str] = []
    ok = True
    try:
        _wait(lambda: len(other.rows) >= 20, 30)
        for spelling in SPELLINGS:
            status, body = upload(own.http_port, f"u_{spelling}", crashing(spelling))
            if status != 200:
                outcomes.append(f"upload u_{spelling}: {status} {body[:120]}")
                ok = False
                continue
            for model in (f"p_{spelling}", f"u_{spelling}"):
                got, text = _infer(own.http_port, model, -1.0)
                back = _infer(own.http_port, model, 1.0)[0]
                fine = got == "503" and f"model '{model}'" in text and back == "200" and own.alive()
                ok = ok and fine
                outcomes.append(f"{model} {got}, then {back}")
        alive = own.alive()
    finally:
        other.stop()
        own.stop()
    answers = Counter(o for _, o in other.rows)
    ok = ok and alive and set(answers) == {"200"}
    got = (
        "; ".join(outcomes)
        + f"; server {'alive' if alive else 'gone'}; other model: "
        + ", ".join(f"{n} x {o}" for o, n in sorted(answers.items()))
    )
    return got, ok, "goal: each crash fails only its request (503 naming the model), the model serves again"


def _runaway(server: Server, cfg: Any, source: str, case: str) -> tuple[str, bool, str]:
    """A thread model whose execute runs away (``source``) after short ones ran inline; another served."""
    goal = _cfg(cfg, "recursion_goal_s")
    repo = _repo(server.log_path.parent, {"recurse": (source, THREAD), "other": (IDENTITY, "")})
    own = Server(repo, server.log_path.parent / f"{case}.log").start()
    latencies: list[float] = []
    failures: Counter[str] = Counter()
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            status = _post(own.http_port, "other", 1.0, timeout=30)
            latencies.append(time.monotonic() - t0)
            if status != "200":
                failures[status] += 1

    try:
        for _ in range(10):  # short executes: the pool runs them inline on the event loop
            _post(own.http_port, "recurse", 1.0)
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        _wait(lambda: len(latencies) >= 50, 30)
        t0 = time.monotonic()
        status, body = _infer(own.http_port, "recurse", -1.0)
        took = time.monotonic() - t0
        _wait(lambda: len(latencies) >= 200, 30)
        stop.set()
        thread.join(60)
        alive, rss = own.alive(), own.rss()
    finally:
        stop.set()
        own.stop()
    worst = max(latencies) if latencies else float("inf")
    got = (
        f"runaway request: {status} after {took:.2f} s ({body[:100]}); server {'alive' if alive else 'gone'}, "
        f"RSS {rss / MiB:.0f} MiB; other model: {len(latencies)} requests, {sum(failures.values())} failed, "
        f"slowest {worst * 1000:.0f} ms"
    )
    ok = alive and not failures and worst < goal
    return got, ok, f"goal: every request of the other model answered within {goal:g} s"


def recursion_thread(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """A thread model recursing after setrecursionlimit(10**7), its executes inline."""
    return _runaway(server, cfg, RECURSING, "recursion_thread")


def spin_inline(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """A thread model looping forever in pure Python, its executes inline."""
    return _runaway(server, cfg, SPINNING, "spin_inline")


def upload_load_limits(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """Uploaded models whose initialize hangs or allocates 3 GiB: load errors, nothing left behind."""
    repo = _repo(server.log_path.parent, {"other": (IDENTITY, "")})
    args = [
        "--model-control-mode=explicit",
        "--load-model=other",
        "--model-load-timeout-secs=4",
        f"--backend-config=uploaded-memory-limit-bytes={500 * MiB}",
    ]
    own = Server(repo, server.log_path.parent / "upload_load_limits.log", args).start()
    other = _Client(own.http_port, "other")
    outcomes = []
    ok = True
    try:
        _wait(lambda: len(other.rows) >= 20, 30)
        for name, source, expect in (
            ("hangs", HANGING_INIT, "did not finish within 4 s"),
            ("balloon", BALLOON_INIT, "while it started, more than its uploaded-memory-limit-bytes"),
        ):
            t0 = time.monotonic()
            status, body = upload(own.http_port, name, source)
            took = time.monotonic() - t0
            outcomes.append(f"{name}: {status} after {took:.1f} s ({_error(body)[:160]})")
            ok = ok and status == 400 and expect in body
        left = _descendants(own.pid)
        rss = own.rss()
    finally:
        other.stop()
        own.stop()
    answers = Counter(o for _, o in other.rows)
    ok = ok and not left and set(answers) == {"200"}
    got = (
        "; ".join(outcomes)
        + f"; worker processes left: {len(left)}; server RSS {rss / MiB:.0f} MiB; other model: "
        + ", ".join(f"{n} x {o}" for o, n in sorted(answers.items()))
    )
    return got, ok, "goal: clear load errors at the limits, no process left, the other model serving"


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class _Sequential:
    """One client inferring on ``model`` one request at a time on a keep-alive connection, each
    request's latency kept with when it was sent."""

    def __init__(self, port: int, model: str) -> None:
        self.port, self.model = port, model
        self.rows: list[tuple[float, float, int]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        body = _body(1.0)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        while not self.stopped.is_set():
            t0 = time.monotonic()
            try:
                conn.request("POST", f"/v2/models/{self.model}/infer", body)
                r = conn.getresponse()
                r.read()
                self.rows.append((t0, time.monotonic() - t0, r.status))
            except (OSError, http.client.HTTPException):
                self.rows.append((t0, time.monotonic() - t0, 0))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def between(self, t0: float, t1: float) -> list[tuple[float, int]]:
        return [(lat, status) for sent, lat, status in self.rows if t0 <= sent < t1]

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(60)


def crash_loop_latency(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """An uploaded model crashing once a second: the other model's p50 against without it.

    The machine is shared, and its load drifts over a minute by more than the goal's 10%: the
    seconds with crashes come in windows of ``WINDOW_S`` alternating with windows without, and each
    side's p50 is over all its windows."""
    seconds, goal = _cfg(cfg, "crash_loop_s"), _cfg(cfg, "crash_loop_goal")
    repo = _repo(server.log_path.parent, {"other": (IDENTITY, "")})
    args = ["--model-control-mode=explicit", "--load-model=other"]
    own = Server(repo, server.log_path.parent / "crash_loop_latency.log", args).start()
    status, body = upload(own.http_port, "crashes", crashing("sigsegv"))
    if status != 200:
        own.stop()
        return f"upload failed: {status} {body[:200]}", False, ""
    client = _Sequential(own.http_port, "other")
    crashes: Counter[str] = Counter()
    quiet: list[tuple[float, float]] = []
    crashing_: list[tuple[float, float]] = []
    try:
        _wait(lambda: len(client.rows) >= 200, 30)  # warm: inline mode and caches settled
        for _ in range(max(1, round(seconds / WINDOW_S))):
            t0 = time.monotonic()
            time.sleep(WINDOW_S)
            quiet.append((t0, time.monotonic()))
            t0 = time.monotonic()
            while time.monotonic() < t0 + WINDOW_S:
                tick = time.monotonic()
                crashes[_infer(own.http_port, "crashes", -1.0)[0]] += 1
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
            crashing_.append((t0, time.monotonic()))
        alive = own.alive()
    finally:
        client.stop()
        own.stop()
    restarts = own.log().count("exited unexpectedly")

    def figures(spans: list[tuple[float, float]]) -> tuple[float, float, int, int]:
        """p50 and p99 (ms), requests and failures of the other model's requests sent in ``spans``."""
        rows = [row for span in spans for row in client.between(*span)]
        lat = sorted(lat for lat, _ in rows)
        if not lat:
            return float("inf"), float("inf"), 0, 0
        p99 = lat[int(len(lat) * 0.99)] * 1000
        return statistics.median(lat) * 1000, p99, len(rows), sum(s != 200 for _, s in rows)

    (q50, q99, nq, fq), (c50, c99, nc, fc) = figures(quiet), figures(crashing_)
    ratio = c50 / q50 if q50 else float("inf")
    got = (
        f"other model p50 {q50:.3f} ms without crashes ({nq:,} requests), {c50:.3f} ms with ({nc:,}): {ratio:.2f}x; "
        f"p99 {q99:.2f} against {c99:.2f} ms; failed {fq + fc}; crash requests: "
        + ", ".join(f"{n} x {o}" for o, n in sorted(crashes.items()))
        + f"; {restarts} worker exits logged; server {'alive' if alive else 'gone'}"
    )
    ok = alive and fq + fc == 0 and ratio <= 1 + goal and crashes.get("503", 0) >= seconds * 0.8
    return (
        got,
        ok,
        f"goal: p50 with crashes within {goal:.0%} of the p50 without ({WINDOW_S:g}-s windows, alternating)",
    )


#: the crash loop's windows: with crashes, then without, in turn
WINDOW_S = 5.0


CASES: dict[str, tuple[str, str, str, Callable[[Server, Any], tuple[str, bool, str]]]] = {
    # name: (what, expected, which limit the RSS goal uses, function)
    "crash_spellings": (
        "four process-ending spellings auto cannot read (faulthandler._sigsegv, getattr(os, '_ex'+'it'), "
        "os.kill(getpid, SIGKILL), import_module('ct'+'ypes')), each in execution_mode process and uploaded",
        "503 naming the model, the model back at its next request, the other model's client loses nothing",
        "body",
        crash_spellings,
    ),
    "recursion_thread": (
        "a thread model (inline) recursing forever after sys.setrecursionlimit(10**7), another model served",
        "the recursing request fails at once; the other model's requests answered within 2 s",
        "body",
        recursion_thread,
    ),
    "spin_inline": (
        "a thread model (inline) whose execute loops forever in pure Python, another model served",
        "the looping request fails with 503 after 1 s (interrupted); the other model's requests answered "
        "within 2 s",
        "body",
        spin_inline,
    ),
    "upload_load_limits": (
        "uploaded models whose initialize never returns or allocates 3 GiB (4 s load timeout, 500 MB limit)",
        "400 load failed with the limit that was hit; no worker left; the other model serves",
        "body",
        upload_load_limits,
    ),
    "crash_loop_latency": (
        "an uploaded model crashing once a second for {crash_loop_s} s, another model served one request at a time",
        "the other model's p50 within 10% of its p50 without the crashing model",
        "body",
        crash_loop_latency,
    ),
}


def main(argv: list[str] | None = None) -> int:
    """Each case (or those named); a line of JSON per case."""
    p = argparse.ArgumentParser(
        prog="python -m reliability.attacks_contain", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "cases", nargs="*", default=list(CASES), help=f"cases to run (default all: {', '.join(CASES)})"
    )
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--crash-loop-s", type=float, default=CONTAIN_DEFAULTS["crash_loop_s"])
    args = p.parse_args(argv)
    cfg = argparse.Namespace(**{**CONTAIN_DEFAULTS, "crash_loop_s": args.crash_loop_s})
    work = Path(tempfile.mkdtemp(prefix="inferd-contain-"))
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
