"""``make soak``: inference at a fixed concurrency for a long time, HTTP and gRPC mixed over the
reference models, every answer checked; the server's RSS sampled every 10 s. Then SIGTERM under
load: what every request in flight got, and how long the server took to exit.

    python -m reliability.soak                     # 30 minutes at concurrency 32
    python -m reliability.soak --minutes 0.33 --concurrency 4 --no-report --json out.json

Exit status 1 when a request failed, RSS grew 5% or more after warm-up, or SIGTERM lost a request
or overran --exit-timeout-secs.

This module holds the soak itself (``soak``: client processes, RSS samples) and the command line;
the clients and their checks are in ``soak_clients``, the SIGTERM check in ``soak_sigterm`` and the
report's section in ``soak_report``.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from reliability.common import (
    DEFAULT_MODEL_DIRS,
    REPORT,
    Server,
    build_repository,
    machine,
    mib,
    write_json,
    write_section,
)
from reliability.soak_clients import MODELS, Tally, worker
from reliability.soak_report import render
from reliability.soak_sigterm import sigterm_check


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
            target=worker,
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
