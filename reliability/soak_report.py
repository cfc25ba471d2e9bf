"""The soak's section of RELIABILITY.md: the soak's and the SIGTERM check's results against
their goals, rendered from the JSON that ``python -m reliability.soak`` writes.
"""

from __future__ import annotations

from typing import Any

from reliability.common import machine_lines, mib
from reliability.soak_clients import MODELS


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
