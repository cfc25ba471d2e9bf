"""What seeing inside costs (issue 13): add_sub over HTTP at concurrency 8, three ways in each round.

    .venv/bin/python benchmarks/observability_bench.py              # 3 rounds
    .venv/bin/python benchmarks/observability_bench.py --rounds 1 --count 600

One ``inferd serve`` (started as ``make bench`` starts it, with Triton's trace file named and tracing
OFF) is measured three ways in turn, switched while it runs, the order rotating each round:

- ``plain``: tracing OFF (``Tracing.on`` false: the request path of a server started without it),
  nobody scraping /metrics;
- ``traced``: ``POST /v2/trace/setting`` ``{"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}``,
  every request traced and written to the trace file (set back to OFF after the measurement);
- ``scraped``: tracing OFF, ``GET /metrics`` every second for the whole measurement, as Prometheus
  would scrape it.

perf_analyzer (the reference's, count windows, sync mode) drives the reference model ``add_sub``.
Why one server switched, not a server of its own for each way: this shared machine changes speed
for minutes at a time (the same server's throughput moves by 1.5x between runs), and three servers
started one after another landed in different phases; the ways of one round now run back to back
on one warm server. A way's cost is its round's own (1 - way / plain), the median over the rounds;
so is its CPU cost: the server's CPU per request (its process tree's CPU over the successes its
statistics counted, benchmarks/cpu.py) over plain's, less 1, the steadier figure on a shared machine.
Goals: tracing TIMESTAMPS at rate 1 costs at most 10% of the plain throughput and 10% more CPU per
request (issue 48), scraping under 2% of the throughput.
``make bench`` runs it after its rounds; run alone it writes
``benchmarks/results/observability-<UTC>/``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
from pathlib import Path

import servers
from async_bench import perf_analyzer
from bench_paths import REFERENCE_MODELS
from cpu import CpuMeter
from side import median, run_alone

CONCURRENCY = 8
KINDS = ("plain", "traced", "scraped")
GOALS = {"traced": 0.10, "scraped": 0.02}  # the most each may cost, as a share of plain's rate
CPU_GOALS = {"traced": 0.10}  # the most CPU per request each may add, as a share of plain's


def _flags(trace: Path) -> str:
    return (
        f"--trace-config triton,file={trace} --trace-config level=OFF --trace-config rate=1 "
        "--trace-config log_frequency=0"
    )


def _set_tracing(port: int, on: bool) -> None:
    """Every request traced (TIMESTAMPS, rate 1) or none, through the trace extension."""
    body = {"trace_level": ["TIMESTAMPS"] if on else ["OFF"], "trace_rate": "1"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v2/trace/setting", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        answer = r.read()
    finally:
        conn.close()
    if r.status != 200:
        raise RuntimeError(f"POST /v2/trace/setting answered {r.status}: {answer!r}")


def _scrape_every_second(port: int, stop: threading.Event, counts: list[int]) -> None:
    while not stop.wait(1.0):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            r.read()
            counts[0 if r.status == 200 else 1] += 1
        except OSError:
            counts[1] += 1
        finally:
            conn.close()


def _one_way(
    kind: str, ports: servers.Ports, pid: int | None, count: int, raw: Path, trace: Path
) -> dict[str, float]:
    """One measurement of one way on the running server."""
    stop = threading.Event()
    scrapes = [0, 0]
    scraper = None
    before = trace.stat().st_size if trace.exists() else 0
    if kind == "traced":
        _set_tracing(ports.http, True)
    if kind == "scraped":
        scraper = threading.Thread(target=_scrape_every_second, args=(ports.metrics, stop, scrapes))
        scraper.start()
    try:
        meter = CpuMeter(pid, ports.http, "add_sub")
        got = perf_analyzer("add_sub", f"localhost:{ports.http}", "http", [], count, CONCURRENCY, raw, None)
        cpu_us = meter.us_per_success()
        if got and cpu_us is not None:
            got["cpu_us"] = cpu_us
    finally:
        stop.set()
        if scraper is not None:
            scraper.join()
        if kind == "traced":
            _set_tracing(ports.http, False)
    if kind == "scraped" and got:
        got["scrapes"], got["scrape_failures"] = float(scrapes[0]), float(scrapes[1])
    if kind == "traced" and got:
        got["trace_bytes"] = float((trace.stat().st_size if trace.exists() else 0) - before)
    return got


def measure(rounds: int, out: Path, python: str, count: int) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
    trace = out / "trace.json"
    server = servers.inferd(REFERENCE_MODELS, out / "inferd.log", python, _flags(trace))
    ports = server.start()
    try:
        # a warm-up measurement, not counted (the first requests of a fresh server are slower)
        perf_analyzer(
            "add_sub", f"localhost:{ports.http}", "http", [], count, CONCURRENCY, out / "warmup.txt", None
        )
        for rnd in range(1, rounds + 1):
            shift = (rnd - 1) % len(KINDS)
            for kind in KINDS[shift:] + KINDS[:shift]:  # the order rotates each round
                got = _one_way(kind, ports, server.pid, count, out / f"r{rnd}-{kind}.txt", trace)
                results[kind].append(got)
                print(f"round {rnd} {kind:8} {got}", flush=True)
    finally:
        server.stop()
        trace.unlink(missing_ok=True)
    return results


def costs(results: dict[str, list[dict[str, float]]], kind: str) -> list[float]:
    """Each round's own cost of ``kind``: 1 - its rate / plain's rate in that round."""
    return [
        1 - w["infer_per_s"] / p["infer_per_s"]
        for w, p in zip(results.get(kind, []), results.get("plain", []), strict=False)
        if w and p and p.get("infer_per_s")
    ]


def cpu_costs(results: dict[str, list[dict[str, float]]], kind: str) -> list[float]:
    """Each round's own CPU cost of ``kind``: its CPU per request / plain's in that round, less 1."""
    return [
        w["cpu_us"] / p["cpu_us"] - 1
        for w, p in zip(results.get(kind, []), results.get("plain", []), strict=False)
        if w and p and w.get("cpu_us") and p.get("cpu_us")
    ]


def render(results: dict[str, list[dict[str, float]]], start: str, end: str, rounds: int) -> str:
    lines = [
        "## What seeing inside costs: tracing and scraping (issue 13)",
        "",
        "`benchmarks/observability_bench.py`, run after the rounds above: `add_sub` over HTTP at concurrency "
        f"{CONCURRENCY} (perf_analyzer, sync mode, count windows), one server measured three ways in turn, "
        "switched while it runs, the order rotating each round. `plain`: tracing OFF; `traced`: "
        "`POST /v2/trace/setting` TIMESTAMPS at rate 1 into Triton's trace file (every request traced and "
        "written), OFF again after; `scraped`: `GET /metrics` every second through the measurement. A way's "
        "cost is each round's own (1 - way / plain), its median over the rounds: ways measured back to back "
        "on one server share the machine's phase, which moves throughput by 1.5x from minute to minute here. "
        f"{rounds} round(s); load average at start / end: {start} / {end}.",
        "",
        "| way | infer/s (median; rounds) | p50 / p99 (us) | cost against plain (median; rounds) | goal "
        "| server CPU/request (us, median) | CPU cost against plain (median; rounds) |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    verdicts = []
    for kind in KINDS:
        runs = results.get(kind, [])
        med = median(runs)
        per = " ".join(f"{r['infer_per_s']:,.0f}" if r else "-" for r in runs)
        p50, p99 = median(runs, "p50_us"), median(runs, "p99_us")
        own = costs(results, kind) if kind != "plain" else []
        cost = statistics.median(own) if own else None
        cost_text = (
            "-" if cost is None else f"{cost * 100:+.1f}% ({' '.join(f'{c * 100:+.1f}%' for c in own)})"
        )
        goal = ""
        if kind in GOALS and cost is not None:
            limit = GOALS[kind]
            ok = cost < limit
            goal = f"under {limit * 100:g}%: {'met' if ok else 'missed'}"
            verdicts.append(
                f"{kind} costs {cost * 100:.1f}% ({'met' if ok else 'missed'}, goal under {limit * 100:g}%)"
            )
        cpu = median(runs, "cpu_us")
        own_cpu = cpu_costs(results, kind) if kind != "plain" else []
        cpu_cost = statistics.median(own_cpu) if own_cpu else None
        cpu_text = (
            "-"
            if cpu_cost is None
            else f"{cpu_cost * 100:+.1f}% ({' '.join(f'{c * 100:+.1f}%' for c in own_cpu)})"
        )
        if kind in CPU_GOALS and cpu_cost is not None:
            ok = cpu_cost <= CPU_GOALS[kind] + 1e-9  # (at most: 10.0% meets it)
            verdicts.append(
                f"{kind} adds {cpu_cost * 100:.1f}% CPU per request ({'met' if ok else 'missed'}, "
                f"goal at most {CPU_GOALS[kind] * 100:g}%)"
            )
        lines.append(
            f"| `{kind}` | {f'{med:,.1f} ({per})' if med is not None else '-'} | "
            f"{f'{p50:,.0f} / {p99:,.0f}' if p50 is not None and p99 is not None else '-'} | {cost_text} | {goal or '-'} "
            f"| {f'{cpu:,.1f}' if cpu is not None else '-'} | {cpu_text} |"
        )
    scrapes = sum(int(r.get("scrapes", 0)) for r in results.get("scraped", []))
    failures = sum(int(r.get("scrape_failures", 0)) for r in results.get("scraped", []))
    written = [r.get("trace_bytes", 0) / 1e6 for r in results.get("traced", []) if r]
    lines += [
        "",
        f"- goals (issues 13, 48): {'; '.join(verdicts) or 'not measured'}",
        f"- scrapes during the `scraped` measurements: {scrapes} ({failures} failed); trace file written per "
        f"`traced` measurement: {', '.join(f'{w:,.1f} MB' for w in written) or '-'}",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=2000, help="requests per measurement window")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs inferd")
    ap.add_argument("--output", type=Path, default=None, help="results folder (default: a new one)")
    args = ap.parse_args()
    return run_alone(
        "observability",
        args.output,
        lambda out: measure(args.rounds, out, args.python, args.count),
        lambda results, start, end: render(results, start, end, args.rounds),
    )


if __name__ == "__main__":
    sys.exit(main())
