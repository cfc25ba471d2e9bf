"""One request path measured per request, for any source tree: calls, instructions, CPU (issue 26).

    .venv/bin/python benchmarks/calls.py --src /tmp/wt-a4de798/src --json base.json   # an older commit
    .venv/bin/python benchmarks/calls.py --json head.json                             # the working tree
    .venv/bin/python benchmarks/calls.py --diff base.json head.json      # what is new per request
    .venv/bin/python benchmarks/calls.py --proto grpc --n 1000 --instructions         # callgrind
    .venv/bin/python benchmarks/calls.py --model ensemble_add_sub --concurrency 8 --cpu
    .venv/bin/python benchmarks/calls.py --client perf_analyzer --concurrency 8 --instructions --inline
    .venv/bin/python benchmarks/calls.py --serve-flags '--trace-config level=TIMESTAMPS ...' --json t.json
    .venv/bin/python benchmarks/calls.py --floor --instructions       # the floor (floor_server.py)

Steadier measures than throughput on a shared machine. The server (``inferd serve`` from ``--src``
with this venv, serving tests/fixtures/reference_models, or seq_accumulate) runs with cProfile armed
by signals on its main thread, the event loop's (SIGUSR1 starts it, SIGUSR2 stops it and writes the
stats). ``--concurrency`` client processes (one keep-alive connection each: HTTP sends one prepared
binary request as ``lean_http.py`` does; gRPC one prepared ``ModelInferRequest``; ``seq_accumulate``
sequences of 20 over HTTP with a new request id each, as perf_analyzer sends them) send ``--warmup``
requests, then ``--n`` measured ones. Default: the Python calls per request (functions and
builtins, by name without line numbers, so that two trees compare) and the profiled time (inflated
by the profiler: compare, don't quote); ``--json`` keeps the table for ``--diff``. ``--instructions``:
user-space instructions per request under valgrind's callgrind, instrumentation on for the measured
requests only (at concurrency 1 it repeats to about 1% whatever the machine's load; at 8 the batches
the load forms move it). ``--cpu``: the loop thread's and the other threads' CPU per request (from
/proc) and the cyclic GC's collections. ``--syscalls``: strace -c's counts (strace slows the loop
enough to change the path). ``--attach 'CMD {pid}'``: any tool over the measured requests (perf
record, py-spy), ended with SIGINT. ``--client perf_analyzer``: perf_analyzer is the load instead
(``--concurrency`` requests in flight on its own connections; about ``--n`` requests, as the server's
statistics count them), for any of those measures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_paths import ROOT
from cpu import successes
from lean_http import Connection, http_request, infer_request

MODELS = ROOT / "tests" / "fixtures" / "reference_models"

#: run in the server process: cProfile on the main (loop) thread, armed and dumped by signals
BOOT = """
import cProfile, gc, json, signal, sys, time
out = sys.argv.pop(1)
prof = cProfile.Profile()
gcs = {"on": False, "t": 0.0, "n0": 0, "n1": 0, "n2": 0, "ns": 0}
def _gc(phase, info):
    if not gcs["on"]:
        return
    if phase == "start":
        gcs["t"] = time.perf_counter_ns()
    else:
        gcs["n%d" % info["generation"]] += 1
        gcs["ns"] += time.perf_counter_ns() - gcs["t"]
gc.callbacks.append(_gc)
def _on(*_):
    gcs["on"] = True
    if not out.endswith("-cpu"):
        prof.enable()
def _off(*_):
    prof.disable()
    gcs["on"] = False
    with open(out + ".gc", "w") as f:
        json.dump(gcs, f)
    if not out.endswith("-cpu"):
        prof.dump_stats(out)
signal.signal(signal.SIGUSR1, _on)
signal.signal(signal.SIGUSR2, _off)
if out.endswith("-inline"):  # --inline: executes stay on the loop however slow valgrind makes them
    import importlib.util
    # (older trees: one module; execute.py holds its own binding of SMALL_NS)
    for name in ("inferd.scheduling.inline", "inferd.scheduling.instances", "inferd.scheduling.execute"):
        module = importlib.import_module(name) if importlib.util.find_spec(name) else None
        for constant in ("INLINE_MAX_NS", "SMALL_NS"):
            if hasattr(module, constant):
                setattr(module, constant, 10**12)
    # and the trace writer's flushes take as many traces as at full speed (valgrind: ~50x slower)
    if importlib.util.find_spec("inferd.trace") and importlib.util.find_spec("inferd.trace.sink"):  # (older trees: none)
        sink = importlib.import_module("inferd.trace.sink")
        sink.FLUSH_S *= 50
if sys.argv[1].endswith(".py"):  # --floor: benchmarks/floor_server.py in inferd's place
    import runpy
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
else:
    from inferd.cli import main
    sys.exit(main(sys.argv[1:]))
"""
FLOOR = ROOT / "benchmarks" / "floor_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    src: Path,
    repo: Path,
    stats_out: Path,
    log: Path,
    valgrind: bool = False,
    flags: str = "",
    floor: bool = False,
) -> tuple[subprocess.Popen[bytes], int, int]:
    http, grpc, metrics = free_port(), free_port(), free_port()
    cmd = [sys.executable, "-c", BOOT, str(stats_out), "serve", "--model-repository", str(repo)]
    if floor:
        cmd[4:] = [str(FLOOR), "--http-port", str(http)]
    if valgrind:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--trace-children=no",
            f"--callgrind-out-file={stats_out}.cg",
            *cmd,
        ]
    if not floor:
        cmd += ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
        cmd += shlex.split(flags.replace("{tmp}", str(log.parent)))
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.Popen(
        cmd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + (600 if valgrind else 60)
    while time.monotonic() < deadline:
        try:
            conn = Connection("127.0.0.1", http)
            status, _ = conn.roundtrip(http_request("GET", "/v2/health/ready", "localhost"))
            conn.close()
            if status == 200:
                return proc, http, grpc
        except OSError:
            pass
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"calls: the server exited ({log}):\n{tail}")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("calls: the server was not ready in 60 s")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of ``pid``'s main thread (the event loop's) and of its other threads."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue
        name = "loop (main)" if task.name == str(pid) else "other threads"
        fields = text.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def model_config(http: int, model: str) -> dict[str, Any]:
    conn = Connection("127.0.0.1", http)
    status, body = conn.roundtrip(http_request("GET", f"/v2/models/{model}/config", "localhost"))
    conn.close()
    if status != 200:
        raise SystemExit(f"calls: {model}'s config: HTTP {status} {body[:200]!r}")
    doc: dict[str, Any] = json.loads(body)
    return doc


class HttpClient:
    def __init__(self, http: int, model: str) -> None:
        import random

        self.conn = Connection("127.0.0.1", http)
        self.request = infer_request(model_config(http, model), "localhost", random.Random(1))

    def one(self) -> None:
        status, body = self.conn.roundtrip(self.request)
        if status != 200:
            raise SystemExit(f"calls: HTTP {status}: {body[:300]!r}")


class SequenceClient:
    """seq_accumulate over HTTP: sequences of 20, a new request id each, perf_analyzer's header."""

    def __init__(self, http: int, model: str) -> None:
        self.conn = Connection("127.0.0.1", http)
        self.model = model
        self.n = 0

    def one(self) -> None:
        import struct

        i, self.n = self.n, self.n + 1
        seq = 1 + i // 20  # each client its own ids (see _client_process)
        # perf_analyzer's header: its parameters right after the id, both flags spelled out
        params = {"sequence_id": seq, "sequence_start": i % 20 == 0, "sequence_end": i % 20 == 19}
        header = json.dumps(
            {
                "id": str(i),
                "parameters": params,
                "inputs": [
                    {
                        "name": "IN",
                        "datatype": "INT32",
                        "shape": [1, 1],
                        "parameters": {"binary_data_size": 4},
                    }
                ],
                "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}],
            },
            separators=(",", ":"),
        ).encode()
        req = http_request(
            "POST",
            f"/v2/models/{self.model}/infer",
            "localhost",
            header + struct.pack("<i", i),
            f"Inference-Header-Content-Length: {len(header)}\r\nContent-Type: application/octet-stream\r\n",
        )
        status, body = self.conn.roundtrip(req)
        if status != 200:
            raise SystemExit(f"calls: HTTP {status}: {body[:300]!r}")


class GrpcClient:
    def __init__(self, grpc_port: int, http: int, model: str) -> None:
        import grpc
        import numpy as np
        from tritonclient.grpc import service_pb2

        config = model_config(http, model)
        req = service_pb2.ModelInferRequest(model_name=model)
        for io in config["input"]:
            dims = [1] + [int(d) for d in io["dims"]]
            t = req.inputs.add(name=io["name"], datatype=io["data_type"].removeprefix("TYPE_"), shape=dims)
            del t
            req.raw_input_contents.append(np.ones(dims, dtype=np.float32).tobytes())
        for o in config["output"]:
            req.outputs.add(name=o["name"])
        self.body = req.SerializeToString()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        self.call = self.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")

    def one(self) -> None:
        self.call(self.body)


def make_client(args: argparse.Namespace, http: int, grpc_port: int) -> Any:
    if args.model == "seq_accumulate":
        return SequenceClient(http, args.model)
    if args.proto == "grpc":
        return GrpcClient(grpc_port, http, args.model)
    return HttpClient(http, args.model)


def _client_process(
    args: argparse.Namespace, http: int, grpc_port: int, go: Any, done: Any, index: int
) -> None:
    """One of ``--concurrency`` clients: warm up, wait for ``go``, send its share, say ``done``."""
    client = make_client(args, http, grpc_port)
    if isinstance(client, SequenceClient):
        client.n = index * 20_000  # its own sequence ids
    for _ in range(args.warmup // args.concurrency):
        client.one()
    done.release()
    go.wait()
    for _ in range(args.n // args.concurrency):
        client.one()
    done.release()


def success_count(http: int, model: str) -> int:
    """The model's successful requests (cpu.py's reading of the statistics extension)."""
    n = successes(http, model)
    if n is None:
        raise SystemExit(f"calls: no statistics for {model}")
    return n


def run_perf_analyzer(
    args: argparse.Namespace, http: int, grpc_port: int, armed: Any, disarm: Any
) -> tuple[float, int]:
    """perf_analyzer as the load (its libcurl or gRPC client, ``--concurrency`` requests in flight):
    the warm-up, then ``armed()``, about ``--n`` requests (counted by the server's statistics), then
    ``disarm()``; perf_analyzer is stopped after."""
    pa = subprocess.run(
        ["bash", str(ROOT / "scripts" / "get_perf_analyzer.sh")], capture_output=True, text=True, check=True
    ).stdout.strip()
    url = f"127.0.0.1:{grpc_port if args.proto == 'grpc' else http}"
    cmd = [pa, "-m", args.model, "-i", args.proto, "-u", url, "--concurrency-range", str(args.concurrency)]
    cmd += ["--measurement-interval", "600000", "-r", "3"]  # runs until stopped
    load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while success_count(http, args.model) < args.warmup:
            if load.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"calls: perf_analyzer did not load the server (exit {load.poll()})")
            time.sleep(0.2)
        armed()
        t0 = time.perf_counter()
        first = success_count(http, args.model)
        while (done := success_count(http, args.model) - first) < args.n:  # a few polls, no more
            rate = max(done, 1) / max(time.perf_counter() - t0, 1e-3)
            time.sleep(min(2.0, max(0.05, (args.n - done) / rate / 2)))
        wall = time.perf_counter() - t0
        disarm()
        return wall, done
    finally:
        os.killpg(load.pid, signal.SIGKILL)  # (SIGINT waits for its window to end)
        load.wait(30)


def run_clients(
    args: argparse.Namespace, http: int, grpc_port: int, armed: Any, disarm: Any
) -> tuple[float, int]:
    """The warm-up, then ``armed()``, the measured requests (wall seconds, how many), then
    ``disarm()``."""
    if args.client == "perf_analyzer":
        return run_perf_analyzer(args, http, grpc_port, armed, disarm)
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    go, done = ctx.Event(), ctx.Semaphore(0)
    procs = [
        ctx.Process(target=_client_process, args=(args, http, grpc_port, go, done, i))
        for i in range(args.concurrency)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        done.acquire()
    armed()
    t0 = time.perf_counter()
    go.set()
    for _ in procs:
        done.acquire()
    wall = time.perf_counter() - t0
    disarm()
    for p in procs:
        p.join()
    return wall, args.n // args.concurrency * args.concurrency


def measure(args: argparse.Namespace) -> dict[str, Any]:
    src = Path(args.src).resolve()
    with tempfile.TemporaryDirectory(prefix="inferd-calls-") as tmp:
        repo = Path(args.repository) if args.repository else MODELS
        if args.model == "seq_accumulate":
            from sequence_bench import write_repository

            repo = write_repository(Path(tmp) / "models", sys.executable, onnx=False)
        stats = Path(tmp) / ("prof.out-cpu" if args.cpu else "prof.out-inline" if args.inline else "prof.out")
        proc, http, grpc_port = start_server(
            src, repo, stats, Path(tmp) / "server.log", args.instructions, args.serve_flags, args.floor
        )
        n = args.n // args.concurrency * args.concurrency
        where = "floor" if args.floor else str(src)
        doc: dict[str, Any] = {"src": where, "proto": args.proto, "model": args.model, "n": n}
        doc["concurrency"] = args.concurrency
        try:
            if args.instructions:  # callgrind: instructions executed per request (deterministic)

                def cg(what: str) -> None:
                    subprocess.run(
                        ["callgrind_control", what, str(proc.pid)], capture_output=True, check=True
                    )

                wall, n = run_clients(
                    args, http, grpc_port, lambda: cg("--instr=on"), lambda: cg("--instr=off")
                )
                doc["wall_us_per_request"] = wall / n * 1e6
                cg("--dump")
                time.sleep(1.0)
                total = 0
                for f in Path(tmp).glob(f"{stats.name}.cg*"):
                    for line in f.read_text().splitlines():
                        if line.startswith("totals:") or line.startswith("summary:"):
                            total = max(total, int(line.split()[1]))
                doc["instructions_per_request"] = total / n
                if args.keep:  # for callgrind_annotate: where the instructions go, by C function
                    for f in Path(tmp).glob(f"{stats.name}.cg*"):
                        shutil.copy(f, f"{args.keep}{f.name.removeprefix(f'{stats.name}.cg')}")
                return doc
            if args.attach:
                attached: list[subprocess.Popen[bytes]] = []

                def start_tool() -> None:
                    attached.append(subprocess.Popen(shlex.split(args.attach.format(pid=proc.pid))))
                    time.sleep(1.0)

                def stop_tool() -> None:
                    attached[0].send_signal(signal.SIGINT)
                    attached[0].wait(60)

                wall, n = run_clients(args, http, grpc_port, start_tool, stop_tool)
                doc["wall_us_per_request"] = wall / n * 1e6
                print(f"{args.attach}: done, round trip {doc['wall_us_per_request']:.0f} us")
                return doc
            if args.syscalls:
                tracer: list[subprocess.Popen[bytes]] = []
                out = Path(tmp) / "strace.txt"

                def attach() -> None:
                    cmd = ["strace", "-c", "-f", "-o", str(out), "-p", str(proc.pid)]
                    tracer.append(subprocess.Popen(cmd, stderr=subprocess.DEVNULL))
                    time.sleep(1.0)

                def detach() -> None:
                    tracer[0].send_signal(signal.SIGINT)
                    tracer[0].wait(20)

                _, n = run_clients(args, http, grpc_port, attach, detach)
                doc["syscalls"] = _syscalls(out.read_text(), n)
                return doc
            if args.cpu:
                cpu: list[dict[str, float]] = []
                wall, n = run_clients(
                    args,
                    http,
                    grpc_port,
                    lambda: (os.kill(proc.pid, signal.SIGUSR1), cpu.append(thread_cpu(proc.pid))),
                    lambda: (cpu.append(thread_cpu(proc.pid)), os.kill(proc.pid, signal.SIGUSR2)),
                )
                doc["wall_us_per_request"], doc["n"] = wall / n * 1e6, n
                doc["cpu_us_per_request"] = {k: (v - cpu[0].get(k, 0.0)) / n * 1e6 for k, v in cpu[1].items()}
                doc["gc"] = _gc_figures(Path(str(stats) + ".gc"), n)
                return doc

            def arm() -> None:
                os.kill(proc.pid, signal.SIGUSR1)
                time.sleep(0.3)

            wall, n = run_clients(args, http, grpc_port, arm, lambda: os.kill(proc.pid, signal.SIGUSR2))
            doc["n"] = n
            doc["wall_us_per_request"] = wall / n * 1e6
            deadline = time.monotonic() + 20
            while not stats.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            import pstats

            st = pstats.Stats(str(stats))
            doc["gc"] = _gc_figures(Path(str(stats) + ".gc"), n)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    rows: dict[str, list[float]] = {}
    for (file, _line, fn), (_cc, nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        # no line numbers: the same function at two commits is one row (a file's genexprs add up)
        name = re.sub(r" at 0x[0-9a-f]+", "", fn) if file == "~" else f"{_short(file)}({fn})"
        row = rows.setdefault(name, [0.0, 0.0])
        row[0] += nc / n
        row[1] += tt / n * 1e6
    doc["rows"] = rows
    return doc


def _gc_figures(path: Path, n: int) -> dict[str, float]:
    """The cyclic GC's collections per 1,000 requests (by generation) and its time per request."""
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)
    g = json.loads(path.read_text())
    return {
        "gen0_per_1000": g["n0"] * 1000 / n,
        "gen1_per_1000": g["n1"] * 1000 / n,
        "gen2_per_1000": g["n2"] * 1000 / n,
        "us_per_request": g["ns"] / n / 1000,
    }


def _syscalls(text: str, n: int) -> dict[str, float]:
    """strace -c's table as calls per request."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            out[f[-1]] = int(f[3]) / n
    return out


def _short(file: str) -> str:
    for marker in ("/src/inferd/", "/site-packages/", "/lib/python3"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def _totals(doc: dict[str, Any]) -> tuple[float, float]:
    rows = doc["rows"].values()
    return sum(r[0] for r in rows), sum(r[1] for r in rows)


def show(doc: dict[str, Any], top: int) -> None:
    calls, us = _totals(doc)
    print(
        f"{doc['model']} {doc['proto']} ({doc['src']}): {calls:.1f} calls/request, {us:.0f} us profiled/request"
    )
    rows = sorted(doc["rows"].items(), key=lambda kv: -kv[1][0])
    for name, (n, t) in rows[:top]:
        print(f"  {n:7.2f}  {t:7.2f} us  {name}")


def diff(a: dict[str, Any], b: dict[str, Any], top: int) -> None:
    (ca, ua), (cb, ub) = _totals(a), _totals(b)
    print(f"calls/request {ca:.1f} -> {cb:.1f} ({cb - ca:+.1f}); profiled us/request {ua:.0f} -> {ub:.0f}")
    names = set(a["rows"]) | set(b["rows"])
    deltas = []
    for name in names:
        na = a["rows"].get(name, [0.0, 0.0])
        nb = b["rows"].get(name, [0.0, 0.0])
        if abs(nb[0] - na[0]) >= 0.01:
            deltas.append((nb[0] - na[0], na[0], nb[0], name))
    deltas.sort(key=lambda d: -abs(d[0]))
    for d, na, nb, name in deltas[:top]:
        print(f"  {d:+7.2f}  ({na:6.2f} -> {nb:6.2f})  {name}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", default=str(ROOT / "src"), help="the inferd source to serve (PYTHONPATH)")
    p.add_argument("--proto", choices=("http", "grpc"), default="http")
    p.add_argument(
        "--floor", action="store_true", help="serve benchmarks/floor_server.py (add_sub HTTP only)"
    )
    p.add_argument("--model", default="add_sub", help="add_sub, ensemble_add_sub or seq_accumulate (HTTP)")
    p.add_argument(
        "--repository", help="serve this repository instead (its --model), e.g. c_backend_bench.py's"
    )
    p.add_argument("--n", type=int, default=2000, help="profiled requests")
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=1, help="client processes (above 1: batches form)")
    p.add_argument("--top", type=int, default=40)
    p.add_argument(
        "--client",
        choices=("lean", "perf_analyzer"),
        default="lean",
        help="the load: lean clients (a prepared request each) or perf_analyzer (libcurl, gRPC C++)",
    )
    p.add_argument(
        "--serve-flags",
        default="",
        help="more flags for inferd serve ({tmp}: the run's temporary folder), e.g. tracing: "
        "'--trace-config triton,file={tmp}/t.json --trace-config level=TIMESTAMPS --trace-config rate=1'",
    )
    p.add_argument("--cpu", action="store_true", help="no profiler: the server's CPU per request, per thread")
    p.add_argument(
        "--attach", help="a command run during the measured requests, ended by SIGINT ({pid}: the server's)"
    )
    p.add_argument(
        "--instructions", action="store_true", help="instructions per request (valgrind callgrind)"
    )
    p.add_argument(
        "--inline",
        action="store_true",
        help="keep inline-eligible pools on the loop whatever the slowdown (valgrind makes every execute "
        "look long, and the pools go back to threads: what a server at full speed does not); the trace "
        "writer's flush interval 50 times as long (as many traces to a flush as at full speed)",
    )
    p.add_argument("--keep", help="--instructions: copy callgrind's output file(s) to this path")
    p.add_argument("--syscalls", action="store_true", help="system calls per request (strace -c)")
    p.add_argument("--json", help="write the per-function table here")
    p.add_argument("--diff", nargs=2, metavar=("BASE", "HEAD"), help="compare two --json tables")
    args = p.parse_args()
    if args.diff:
        a, b = (json.loads(Path(x).read_text()) for x in args.diff)
        diff(a, b, args.top)
        return
    doc = measure(args)
    if args.instructions:
        print(
            f"{doc['model']} {doc['proto']} ({doc['src']}): {doc['instructions_per_request']:,.0f} "
            "instructions/request (user space, every thread of the server)"
        )
    elif args.attach:
        pass
    elif args.syscalls:
        calls = doc["syscalls"]
        print(f"{doc['model']} {doc['proto']} ({doc['src']}): {sum(calls.values()):.2f} system calls/request")
        for name, k in sorted(calls.items(), key=lambda kv: -kv[1]):
            print(f"  {k:7.3f}  {name}")
    elif args.cpu:
        total = sum(doc["cpu_us_per_request"].values())
        print(
            f"{doc['model']} {doc['proto']} ({doc['src']}): server CPU {total:.1f} us/request, "
            f"round trip {doc['wall_us_per_request']:.0f} us"
        )
        for name, us in sorted(doc["cpu_us_per_request"].items(), key=lambda kv: -kv[1]):
            if us >= 0.05:
                print(f"  {us:7.1f} us  {name}")
        print("  gc: " + ", ".join(f"{k} {v:.2f}" for k, v in doc["gc"].items()))
    else:
        show(doc, args.top)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
