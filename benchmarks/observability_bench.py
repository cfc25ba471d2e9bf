"""What seeing inside costs (issue 13): add_sub over HTTP at concurrency 8, three ways in each round.

    .venv/bin/python benchmarks/observability_bench.py              # 3 rounds
    .venv/bin/python benchmarks/observability_bench.py --rounds 1 --count 600

- ``plain``: ``inferd serve`` as ``make bench`` starts it (tracing off, nobody scraping /metrics);
- ``traced``: the same with ``--trace-config level=TIMESTAMPS --trace-config rate=1`` and Triton's
  trace file (every request traced and written);
- ``scraped``: plain, with ``GET /metrics`` every second for the whole measurement, as Prometheus
  would scrape it.

perf_analyzer (the reference's, count windows, sync mode) drives the reference model ``add_sub``;
each configuration gets a server of its own, and the order rotates each round. Goals: tracing
TIMESTAMPS at rate 1 costs under 10% of the plain throughput, scraping under 2%. ``make bench``
runs it after its rounds; run alone it writes ``benchmarks/results/observability-<UTC>/``.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import threading
from pathlib import Path

import servers
from async_bench import perf_analyzer
from bench_paths import REFERENCE_MODELS
from side import median, run_alone

CONCURRENCY = 8
GOALS = {"traced": 0.10, "scraped": 0.02}  # the most each may cost, as a share of plain's rate


def _flags(kind: str, out: Path) -> str:
    if kind == "traced":
        trace = out / "trace.json"
        return (
            f"--trace-config triton,file={trace} --trace-config level=TIMESTAMPS --trace-config rate=1 "
            "--trace-config log_frequency=0"
        )
    return ""


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


def measure(rounds: int, out: Path, python: str, count: int) -> dict[str, list[dict[str, float]]]:
    kinds = ["plain", "traced", "scraped"]
    results: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for rnd in range(1, rounds + 1):
        shift = (rnd - 1) % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:  # the order rotates each round
            server = servers.inferd(REFERENCE_MODELS, out / f"inferd-{kind}.log", python, _flags(kind, out))
            ports = server.start()
            stop = threading.Event()
            scrapes = [0, 0]
            scraper = None
            if kind == "scraped":
                scraper = threading.Thread(target=_scrape_every_second, args=(ports.metrics, stop, scrapes))
                scraper.start()
            try:
                raw = out / f"r{rnd}-{kind}.txt"
                got = perf_analyzer(
                    "add_sub", f"localhost:{ports.http}", "http", [], count, CONCURRENCY, raw, None
                )
            finally:
                stop.set()
                if scraper is not None:
                    scraper.join()
                server.stop()
            if kind == "scraped" and got:
                got["scrapes"], got["scrape_failures"] = float(scrapes[0]), float(scrapes[1])
            if kind == "traced" and got:
                trace = out / "trace.json"
                got["trace_bytes"] = float(trace.stat().st_size) if trace.exists() else 0.0
                trace.unlink(missing_ok=True)
            results[kind].append(got)
            print(f"round {rnd} {kind:8} {got}", flush=True)
    return results


def render(results: dict[str, list[dict[str, float]]], start: str, end: str, rounds: int) -> str:
    lines = [
        "## What seeing inside costs: tracing and scraping (issue 13)",
        "",
        "`benchmarks/observability_bench.py`, run after the rounds above: `add_sub` over HTTP at concurrency "
        f"{CONCURRENCY} (perf_analyzer, sync mode, count windows), a server of its own for each way, the order "
        "rotating each round. `traced`: `--trace-config level=TIMESTAMPS --trace-config rate=1` with Triton's "
        "trace file (every request traced and written); `scraped`: `GET /metrics` every second through the "
        f"measurement. {rounds} round(s); load average at start / end: "
        f"{start} / {end}.",
        "",
        "| way | infer/s (median; rounds) | p50 / p99 (us) | cost against plain | goal |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    plain = median(results.get("plain", []))
    verdicts = []
    for kind in ("plain", "traced", "scraped"):
        runs = results.get(kind, [])
        med = median(runs)
        per = " ".join(f"{r['infer_per_s']:,.0f}" if r else "-" for r in runs)
        p50, p99 = median(runs, "p50_us"), median(runs, "p99_us")
        cost = "" if kind == "plain" or med is None or not plain else f"{(1 - med / plain) * 100:+.1f}%"
        goal = ""
        if kind in GOALS and cost:
            limit = GOALS[kind]
            ok = 1 - med / plain < limit  # type: ignore[operator]
            goal = f"under {limit * 100:g}%: {'met' if ok else 'missed'}"
            verdicts.append(
                f"{kind} costs {cost.lstrip('+')} ({'met' if ok else 'missed'}, goal under {limit * 100:g}%)"
            )
        lines.append(
            f"| `{kind}` | {f'{med:,.1f} ({per})' if med is not None else '-'} | "
            f"{f'{p50:,.0f} / {p99:,.0f}' if p50 is not None and p99 is not None else '-'} | {cost or '-'} | {goal or '-'} |"
        )
    scrapes = sum(int(r.get("scrapes", 0)) for r in results.get("scraped", []))
    failures = sum(int(r.get("scrape_failures", 0)) for r in results.get("scraped", []))
    written = [r.get("trace_bytes", 0) / 1e6 for r in results.get("traced", []) if r]
    lines += [
        "",
        f"- goals (issue 13): {'; '.join(verdicts) or 'not measured'}",
        f"- scrapes during the `scraped` measurements: {scrapes} ({failures} failed); trace file per `traced` "
        f"round: {', '.join(f'{w:,.1f} MB' for w in written) or '-'}",
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
