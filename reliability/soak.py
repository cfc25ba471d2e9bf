"""``make soak``: inference at a fixed concurrency for a long time, HTTP and gRPC mixed over the
reference models, every answer checked; the server's RSS sampled every 10 s. Then SIGTERM under
load: what every request in flight got, and how long the server took to exit.

    python -m reliability.soak                     # 30 minutes at concurrency 32
    python -m reliability.soak --minutes 0.33 --concurrency 4 --no-report --json out.json

Exit status 1 when a request failed, RSS grew 5% or more after warm-up, or SIGTERM lost a request
or overran --exit-timeout-secs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import random
import shlex
import signal
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

from reliability.common import (
    DEFAULT_MODEL_DIRS,
    REPORT,
    Server,
    build_repository,
    machine,
    machine_lines,
    mib,
    write_json,
    write_section,
)

MODELS = ("add_sub", "mul_fp32", "ensemble_add_sub", "identity_fp32", "identity_bytes", "batched_sleep")
SERVICE = "/inference.GRPCInferenceService/"
_BUCKET = math.log(1.05)  # latency histogram: 5% wide buckets


# -- one request and its check ----------------------------------------------------------------------
def make_case(
    model: str, rng: random.Random
) -> tuple[list[tuple[str, str, list[int], np.ndarray]], dict[str, np.ndarray]]:
    """(inputs as (name, datatype, shape, array), expected outputs) of one request to ``model``."""
    if model in ("add_sub", "mul_fp32", "ensemble_add_sub"):
        a = np.array([rng.uniform(-10, 10) for _ in range(16)], np.float32).reshape(1, 16)
        b = np.array([rng.uniform(-10, 10) for _ in range(16)], np.float32).reshape(1, 16)
        ins = [("INPUT0", "FP32", [1, 16], a), ("INPUT1", "FP32", [1, 16], b)]
        if model == "add_sub":
            return ins, {"OUTPUT0": a + b, "OUTPUT1": a - b}
        if model == "mul_fp32":
            return ins, {"OUTPUT0": a * b}
        return ins, {"OUTPUT0": (a + b) * (a - b), "OUTPUT1": a - b}
    if model == "identity_fp32":
        n = rng.randint(1, 64)
        x = np.arange(n, dtype=np.float32) * rng.random()
        return [("INPUT0", "FP32", [n], x)], {"OUTPUT0": x}
    if model == "identity_bytes":
        n = rng.randint(1, 8)
        x = np.array([f"s{rng.randrange(10**6)}-{i}".encode() for i in range(n)], dtype=np.object_)
        return [("INPUT0", "BYTES", [n], x)], {"OUTPUT0": x}
    x = np.arange(4, dtype=np.float32).reshape(1, 4) + rng.random()  # batched_sleep
    return [("INPUT0", "FP32", [1, 4], x)], {"OUTPUT0": x}


def http_body(model: str, inputs: list[tuple[str, str, list[int], np.ndarray]]) -> bytes:
    doc = {
        "inputs": [
            {"name": n, "datatype": dt, "shape": s, "data": [v.decode() for v in a.reshape(-1)] if dt == "BYTES" else a.reshape(-1).tolist()}
            for n, dt, s, a in inputs
        ]
    }  # fmt: skip
    if model == "batched_sleep":
        doc["outputs"] = [{"name": "OUTPUT0"}]
    return json.dumps(doc).encode()


def check_http(body: bytes, expected: dict[str, np.ndarray]) -> str | None:
    doc = json.loads(body)
    got = {o["name"]: o for o in doc.get("outputs", [])}
    for name, want in expected.items():
        if name not in got:
            return f"output {name} missing"
        data = got[name]["data"]
        if want.dtype == np.object_:
            if [w.decode() for w in want.reshape(-1)] != data:
                return f"{name} differs"
        elif not np.allclose(np.array(data, np.float32), want.reshape(-1), rtol=1e-5, atol=1e-5):
            return f"{name} differs"
    return None


def grpc_request(model: str, inputs: list[tuple[str, str, list[int], np.ndarray]]) -> bytes:
    req = service_pb2.ModelInferRequest(model_name=model)
    for n, dt, s, a in inputs:
        req.inputs.add(name=n, datatype=dt, shape=s)
        if dt == "BYTES":
            req.raw_input_contents.append(b"".join(struct.pack("<I", len(v)) + v for v in a.reshape(-1)))
        else:
            req.raw_input_contents.append(a.tobytes())
    if model == "batched_sleep":
        req.outputs.add(name="OUTPUT0")
    return req.SerializeToString()


def check_grpc(raw: bytes, expected: dict[str, np.ndarray]) -> str | None:
    resp = service_pb2.ModelInferResponse.FromString(raw)
    contents = dict(zip([o.name for o in resp.outputs], resp.raw_output_contents, strict=False))
    for name, want in expected.items():
        if name not in contents:
            return f"output {name} missing"
        buf = contents[name]
        if want.dtype == np.object_:
            items, i = [], 0
            while i < len(buf):
                n = struct.unpack_from("<I", buf, i)[0]
                items.append(buf[i + 4 : i + 4 + n])
                i += 4 + n
            if items != list(want.reshape(-1)):
                return f"{name} differs"
        elif not np.allclose(np.frombuffer(buf, np.float32), want.reshape(-1), rtol=1e-5, atol=1e-5):
            return f"{name} differs"
    return None


# -- clients ----------------------------------------------------------------------------------------
class Tally:
    def __init__(self) -> None:
        self.ok = 0
        self.errors: Counter[str] = Counter()
        self.error_samples: list[str] = []
        self.latency: Counter[int] = Counter()  # histogram bucket -> count
        self.by_protocol: Counter[str] = Counter()
        # SIGTERM check: what each request got
        self.outcomes: Counter[str] = Counter()

    def error(self, why: str) -> None:
        key = why.split(":", 1)[0][:80]
        self.errors[key] += 1
        if len(self.error_samples) < 20:
            self.error_samples.append(why[:300])

    def merge(self, other: dict[str, Any]) -> None:
        self.ok += other["ok"]
        self.errors.update(other["errors"])
        self.error_samples += other["error_samples"][: max(0, 20 - len(self.error_samples))]
        self.latency.update({int(k): v for k, v in other["latency"].items()})
        self.by_protocol.update(other["by_protocol"])
        self.outcomes.update(other["outcomes"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": dict(self.errors),
            "error_samples": self.error_samples,
            "latency": dict(self.latency),
            "by_protocol": dict(self.by_protocol),
            "outcomes": dict(self.outcomes),
        }

    def percentile(self, q: float) -> float:
        """Latency in ms at quantile ``q`` (from the histogram)."""
        total = sum(self.latency.values())
        if not total:
            return float("nan")
        seen = 0
        for b in sorted(self.latency):
            seen += self.latency[b]
            if seen >= q * total:
                return math.exp((b + 0.5) * _BUCKET) / 1000
        return float("nan")


async def _http_client(port: int, stop: float, tally: Tally, rng: random.Random, sigterm: bool) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    refused = 0
    while time.monotonic() < stop:
        model = rng.choice(MODELS)
        inputs, expected = make_case(model, rng)
        body = http_body(model, inputs)
        req = (
            f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        fresh = writer is None
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if not sigterm:
                    tally.error("connect refused")
                tally.outcomes["not accepted (connect refused)"] += 1
                refused += 1
                if sigterm and refused > 3:
                    return
                await asyncio.sleep(0.05)
                continue
        assert reader is not None
        t0 = time.perf_counter()
        try:
            writer.write(req)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            close = False
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                k = k.strip().lower()
                if k == b"content-length":
                    length = int(v)
                elif k == b"connection" and v.strip().lower() == b"close":
                    close = True
            data = await reader.readexactly(length)
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            where = "a fresh connection" if fresh else "a keep-alive connection"
            tally.outcomes[f"empty reply on {where}"] += 1
            tally.error(f"HTTP {model}: no answer on {where} ({type(e).__name__})")
            writer.close()
            writer = None
            continue
        tally.latency[int(math.log(max(1.0, (time.perf_counter() - t0) * 1e6)) / _BUCKET)] += 1
        tally.by_protocol["http"] += 1
        if status != 200:
            tally.outcomes[f"answered {status}"] += 1
            tally.error(f"HTTP {model} {status}: {data[:200].decode('latin-1')}")
        else:
            why = check_http(data, expected)
            if why:
                tally.error(f"HTTP {model} wrong answer: {why}")
            else:
                tally.ok += 1
            tally.outcomes["answered 200"] += 1
        if close:
            writer.close()
            writer = None
    if writer is not None:
        writer.close()


#: client-side statuses of a call whose connection broke under it, and of one never accepted
_BROKEN = (
    "Socket closed",
    "Connection reset",
    "GOAWAY",
    "Broken pipe",
    "Stream removed",
    "RST_STREAM",
    "EOF",
)
_NOT_ACCEPTED = ("failed to connect", "Connection refused", "connections to all backends failing")


async def _grpc_client(port: int, stop: float, tally: Tally, rng: random.Random, sigterm: bool) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(
            SERVICE + "ModelInfer", request_serializer=None, response_deserializer=None
        )
        refused = 0
        while time.monotonic() < stop:
            model = rng.choice(MODELS)
            inputs, expected = make_case(model, rng)
            t0 = time.perf_counter()
            try:
                raw = await call(grpc_request(model, inputs), timeout=60)
            except grpc.aio.AioRpcError as e:
                details = e.details() or ""
                if any(d in details for d in _NOT_ACCEPTED):
                    tally.outcomes["not accepted (connect refused)"] += 1
                    refused += 1
                    if not sigterm:
                        tally.error(f"gRPC {model} {e.code().name}: {details}")
                    if sigterm and refused > 3:
                        return
                    await asyncio.sleep(0.05)
                elif any(d in details for d in _BROKEN):
                    tally.outcomes["empty reply (connection broke under the call)"] += 1
                    tally.error(f"gRPC {model} {e.code().name}: {details}")
                else:
                    tally.outcomes[f"answered {e.code().name}"] += 1
                    tally.error(f"gRPC {model} {e.code().name}: {details}")
                continue
            tally.latency[int(math.log(max(1.0, (time.perf_counter() - t0) * 1e6)) / _BUCKET)] += 1
            tally.by_protocol["grpc"] += 1
            why = check_grpc(raw, expected)
            if why:
                tally.error(f"gRPC {model} wrong answer: {why}")
            else:
                tally.ok += 1
            tally.outcomes["answered OK"] += 1


async def _clients(
    http_port: int, grpc_port: int, n: int, seconds: float, seed: int, sigterm: bool = False
) -> Tally:
    tally = Tally()
    stop = time.monotonic() + seconds
    tasks = []
    for i in range(n):
        rng = random.Random(seed * 1000 + i)
        if i % 2 == 0:
            tasks.append(_http_client(http_port, stop, tally, rng, sigterm))
        else:
            tasks.append(_grpc_client(grpc_port, stop, tally, rng, sigterm))
    await asyncio.gather(*tasks)
    return tally


def _worker(http_port: int, grpc_port: int, n: int, seconds: float, seed: int, queue: Any) -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    tally = asyncio.run(_clients(http_port, grpc_port, n, seconds, seed))
    queue.put(tally.to_dict())


# -- the soak ---------------------------------------------------------------------------------------
def soak(
    server: Server,
    minutes: float,
    concurrency: int,
    processes: int,
    warmup_s: float,
    seed: int,
    progress: bool,
) -> dict[str, Any]:
    seconds = minutes * 60
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    per = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    rss_start = server.rss()
    procs = [
        ctx.Process(
            target=_worker,
            args=(server.http_port, server.grpc_port, n, seconds, seed + i, queue),
            daemon=True,
        )
        for i, n in enumerate(per)
        if n
    ]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    samples: list[tuple[float, int]] = [(0.0, rss_start)]
    rss_warm = 0
    next_sample = 10.0
    results: list[dict[str, Any]] = []
    while len(results) < len(procs):
        with contextlib.suppress(Exception):
            results.append(queue.get(timeout=1.0))
            continue
        now = time.monotonic() - t0
        if now >= next_sample and now < seconds + 1:
            samples.append((round(now, 1), server.rss()))
            next_sample += 10.0
            if progress and len(samples) % 6 == 0:
                print(f"  soak: {now / 60:.1f} min, RSS {mib(samples[-1][1])}", flush=True)
        if not rss_warm and now >= warmup_s:
            rss_warm = server.rss()
        if not server.alive() or now > seconds + 120:
            break
    rss_end = server.rss()
    for p in procs:
        p.join(10)
    tally = Tally()
    for r in results:
        tally.merge(r)
    elapsed = time.monotonic() - t0
    warm = rss_warm or samples[min(1, len(samples) - 1)][1]
    total = tally.ok + sum(tally.errors.values())
    return {
        "minutes": minutes,
        "concurrency": concurrency,
        "processes": len(procs),
        "seconds": round(elapsed, 1),
        "requests": total,
        "ok": tally.ok,
        "errors": dict(tally.errors),
        "error_samples": tally.error_samples,
        "by_protocol": dict(tally.by_protocol),
        "throughput": round(total / max(1e-9, seconds), 1),
        "p50_ms": round(tally.percentile(0.50), 2),
        "p99_ms": round(tally.percentile(0.99), 2),
        "rss_start": rss_start,
        "rss_warm": warm,
        "warmup_s": warmup_s,
        "rss_end": rss_end,
        "rss_max": max(s[1] for s in samples),
        "growth_pct": round(100.0 * (rss_end - warm) / max(1, warm), 2),
        "samples": samples,
        "alive": server.alive(),
    }


def sigterm_check(
    repo: Path, work: Path, exit_timeout: int, concurrency: int, load_s: float, seed: int
) -> dict[str, Any]:
    """A fresh server under load at ``concurrency`` plus two requests that outlast the exit timeout;
    SIGTERM after ``load_s`` s; what every request got, and the exit time."""
    server = Server(repo, work / "sigterm.log", ["--exit-timeout-secs", str(exit_timeout)]).start()
    long_ms = int((load_s + exit_timeout + 5) * 1000)  # still sleeping at the exit deadline
    long_outcomes: list[str] = []

    async def long_request(i: int) -> None:
        body = json.dumps(
            {"inputs": [{"name": "SLEEP_MS", "shape": [1], "datatype": "INT32", "data": [long_ms]}]}
        ).encode()
        t0 = time.monotonic()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
            writer.write(
                f"POST /v2/models/parallel_sleep/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = head.split(b" ", 2)[1].decode()
            length = int(
                next(
                    (
                        ln.split(b":")[1]
                        for ln in head.split(b"\r\n")
                        if ln.lower().startswith(b"content-length")
                    ),
                    b"0",
                )
            )
            data = await reader.readexactly(length)
            long_outcomes.append(
                f"HTTP {status} after {time.monotonic() - t0:.1f} s: {data[:120].decode('latin-1')}"
            )
            writer.close()
        except (OSError, asyncio.IncompleteReadError) as e:
            long_outcomes.append(f"empty reply after {time.monotonic() - t0:.1f} s ({type(e).__name__})")

    result: dict[str, Any] = {}

    async def main() -> Tally:
        longs = [asyncio.create_task(long_request(i)) for i in range(2)]
        load = asyncio.create_task(
            _clients(
                server.http_port,
                server.grpc_port,
                concurrency,
                load_s + exit_timeout + 15,
                seed,
                sigterm=True,
            )
        )
        await asyncio.sleep(load_s)
        server.signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert server.proc is not None
        while server.proc.poll() is None and time.monotonic() - t0 < exit_timeout + 30:
            await asyncio.sleep(0.02)
        result["exit_seconds"] = round(time.monotonic() - t0, 2)
        result["exit_code"] = server.proc.poll()
        tally = await load
        await asyncio.gather(*longs)
        return tally

    try:
        tally = asyncio.run(main())
    finally:
        server.kill()
    lost = sum(v for k, v in tally.outcomes.items() if k.startswith("empty reply")) + sum(
        1 for o in long_outcomes if o.startswith("empty")
    )
    result.update(
        {
            "exit_timeout": exit_timeout,
            "concurrency": concurrency,
            "load_s": load_s,
            "outcomes": dict(tally.outcomes),
            "long_requests": long_outcomes,
            "lost": lost,
            "error_samples": [s for s in tally.error_samples if "no answer" in s or "Socket" in s][:10],
        }
    )
    return result


# -- the report -------------------------------------------------------------------------------------
def render(out: dict[str, Any]) -> str:
    m = out["machine"]
    lines = ["## Soak and SIGTERM under load (`make soak`)", "", *machine_lines(m, out.get("load_end")), ""]
    lines.append(f"- Command: `{out['command']}`")
    lines.append("")
    s = out.get("soak")
    if s:
        errors = sum(s["errors"].values())
        lines += [
            f"{s['minutes']:g} minutes at concurrency {s['concurrency']} (half HTTP/JSON on keep-alive connections, half gRPC on grpc.aio channels, "
            f"from {s['processes']} client processes on the same machine), every answer checked against the model's arithmetic; models: "
            + ", ".join(f"`{x}`" for x in MODELS) + ".",
            "",
            "| | result | goal |",
            "| --- | --- | --- |",
            f"| requests | {s['requests']:,} ({s['by_protocol'].get('http', 0):,} HTTP, {s['by_protocol'].get('grpc', 0):,} gRPC), {s['throughput']:,.0f}/s | |",
            f"| errors (failed, wrong or missing answers) | {errors:,}{' **miss**' if errors else ''} | 0 |",
            f"| latency p50 / p99 | {s['p50_ms']:.2f} / {s['p99_ms']:.2f} ms | |",
            f"| RSS at start / after warm-up ({s['warmup_s']:.0f} s) / at the end (max) | {mib(s['rss_start'])} / {mib(s['rss_warm'])} / {mib(s['rss_end'])} ({mib(s['rss_max'])}) | |",
            f"| RSS growth after warm-up | {s['growth_pct']:+.2f}%{' **miss**' if s['growth_pct'] >= 5 else ''} | under 5% |",
            f"| server alive at the end | {'yes' if s['alive'] else '**no**'} | |",
            "",
            "RSS every minute (MiB): " + ", ".join(f"{v / (1 << 20):.0f}" for t, v in s["samples"] if int(t) % 60 < 10) + ".",
            "",
        ]  # fmt: skip
        if errors:
            lines += ["Errors: " + "; ".join(f"{k} x{v}" for k, v in s["errors"].items()) + ".", ""]
    t = out.get("sigterm")
    if t:
        within = t["exit_seconds"] is not None and t["exit_seconds"] <= t["exit_timeout"] + 0.5
        lines += [
            f"SIGTERM after {t['load_s']:g} s of load at concurrency {t['concurrency']} (clients keep sending until the port refuses them), "
            f"with two HTTP requests in flight to `parallel_sleep` that sleep {t['load_s'] + t['exit_timeout'] + 5:g} s, past the deadline of `--exit-timeout-secs {t['exit_timeout']}`:",
            "",
            "| | result | goal |",
            "| --- | --- | --- |",
            "| what the loaded requests got | " + ", ".join(f"{k}: {v:,}" for k, v in sorted(t["outcomes"].items())) + " | |",
            "| the two long requests | " + "; ".join(x.replace("|", "\\|") for x in t["long_requests"]) + " | an error answer |",
            f"| accepted requests lost or answered with an empty reply | {t['lost']}{' **miss**' if t['lost'] else ''} | 0 |",
            f"| exit | code {t['exit_code']} after {t['exit_seconds']} s{'' if within else ' **miss**'} | within {t['exit_timeout']} s |",
            "",
        ]  # fmt: skip
        if t["lost"]:
            lines += [
                "An empty reply on a keep-alive connection is a request written just as the server closed that "
                "connection as idle (HTTP/1.1 clients may retry those); one on a fresh connection, or a gRPC call "
                "whose connection broke under it, was accepted and lost.",
                "",
            ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reliability.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=Path, action="append", help="model repository folders (default: the reference models and tests/fixtures/models)")  # fmt: skip
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--processes", type=int, default=min(4, os.cpu_count() or 1), help="client processes")
    p.add_argument("--warmup-secs", type=float, default=None, help="RSS growth is measured from here (default: 10%% of the run, at least 10 s)")  # fmt: skip
    p.add_argument("--exit-timeout-secs", type=int, default=5, help="for the SIGTERM check")
    p.add_argument("--sigterm-load-secs", type=float, default=5.0)
    p.add_argument("--no-sigterm", action="store_true")
    p.add_argument("--no-soak", action="store_true")
    p.add_argument("--server-args", default="")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path)
    p.add_argument("--no-report", action="store_true")
    p.add_argument("--report", type=Path, default=REPORT)
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    progress = not args.quiet
    work = Path(tempfile.mkdtemp(prefix="inferd-soak-"))
    repo = build_repository(
        work / "models", args.models or list(DEFAULT_MODEL_DIRS), (*MODELS, "parallel_sleep")
    )
    out: dict[str, Any] = {"machine": machine(), "command": "python -m reliability.soak " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))}  # fmt: skip
    ok = True
    if not args.no_soak:
        server = Server(repo, work / "soak.log", shlex.split(args.server_args)).start()
        try:
            warmup = args.warmup_secs if args.warmup_secs is not None else max(10.0, args.minutes * 6)
            if progress:
                print(f"soak: {args.minutes:g} min at concurrency {args.concurrency}", flush=True)
            s = soak(server, args.minutes, args.concurrency, args.processes, warmup, args.seed, progress)
            out["soak"] = s
        finally:
            code, secs = server.stop(60)
            out["soak_exit"] = [code, round(secs, 2)]
        ok = not s["errors"] and s["growth_pct"] < 5 and s["alive"]
        if progress:
            print(f"soak: {s['requests']:,} requests, errors {sum(s['errors'].values())}, p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms, RSS growth {s['growth_pct']}%", flush=True)  # fmt: skip
    if not args.no_sigterm:
        if progress:
            print("SIGTERM under load", flush=True)
        t = sigterm_check(
            repo, work, args.exit_timeout_secs, args.concurrency, args.sigterm_load_secs, args.seed
        )
        out["sigterm"] = t
        ok = ok and t["lost"] == 0 and t["exit_seconds"] <= args.exit_timeout_secs + 0.5
        if progress:
            print(f"SIGTERM: exit {t['exit_code']} after {t['exit_seconds']} s; {t['outcomes']}; long: {t['long_requests']}", flush=True)  # fmt: skip
    out["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    out["workdir"] = str(work)
    write_json(args.json, out)
    if not args.no_report:
        write_section("soak", render(out), args.report)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
