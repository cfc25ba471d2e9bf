"""``make fuzz``: a real ``inferd serve`` on free ports of 127.0.0.1, fuzzed (HTTP from the OpenAPI
description, malformed gRPC, raw HTTP/2) and attacked (the attacks of issue 10), then checked
(alive, ready, tracebacks in its log); the figures go to RELIABILITY.md's fuzz section.

    python -m reliability.fuzz                       # the default run: 100,000 HTTP, 10,000 gRPC
    python -m reliability.fuzz --http-requests 300 --grpc-calls 100 --h2-attacks 30 \\
        --http-max-input-size 1000000 --http-header-timeout-secs 2 --no-report --json out.json

Exit status 1 when the server crashed, was not ready afterwards, or gave an unexpected answer.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from reliability import attacks as attacks_mod
from reliability import attacks_flow, attacks_memory, fuzz_grpc, fuzz_h2, fuzz_http, fuzz_http_spec
from reliability.common import (
    DEFAULT_MODEL_DIRS,
    MiB,
    Server,
    build_repository,
    log_tracebacks,
    machine,
    machine_lines,
    mib,
    write_json,
    write_section,
)

#: models whose errors are on purpose (their tracebacks in the log are not ours)
RAISING_MODELS = ("raise_error",)
#: AttackConfig's fields that are the server's flags (set from them, not flags of their own)
_SERVER_LIMITS = (
    "body_limit",
    "grpc_limit",
    "header_timeout_s",
    "max_connections",
    "max_streams",
    "unsent_limit",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reliability.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=Path, action="append", help="a model repository folder to copy models from (repeatable; default: tests/fixtures/models and the reference models)")  # fmt: skip
    p.add_argument(
        "--http-requests", type=int, default=100_000, help="fuzzed HTTP requests (default 100,000)"
    )
    p.add_argument("--grpc-calls", type=int, default=10_000, help="malformed gRPC calls (default 10,000)")
    p.add_argument("--h2-attacks", type=int, default=1_000, help="raw HTTP/2 scenarios (default 1,000)")
    p.add_argument("--minutes", type=float, default=60.0, help="a bound on the whole run's fuzzing time")
    p.add_argument("--seed", type=int, default=0, help="Hypothesis seed (default: from the clock)")
    p.add_argument("--attacks", default="all", help="comma-separated attack names, 'all' or 'none' ({})".format(", ".join(attacks_mod.ATTACKS)))  # fmt: skip
    # the server's limits (passed to inferd serve, and what the goals are measured against)
    p.add_argument("--http-max-input-size", type=int, default=64 * MiB)
    p.add_argument("--grpc-max-message-size", type=int, default=64 * MiB)
    p.add_argument("--http-header-timeout-secs", type=float, default=30.0)
    p.add_argument("--max-connections", type=int, default=10_000)
    p.add_argument("--grpc-max-concurrent-streams", type=int, default=256)
    p.add_argument("--max-unsent-bytes", type=int, default=attacks_memory.MEMORY_DEFAULTS["unsent_limit"])
    p.add_argument("--server-args", default="", help="more flags for inferd serve (one string)")
    # the attacks' sizes (the issue's by default)
    defaults = attacks_mod.AttackConfig()
    for f in fields(attacks_mod.AttackConfig):
        if f.name in _SERVER_LIMITS:
            continue
        p.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(defaults, f.name)), default=getattr(defaults, f.name))  # fmt: skip
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    p.add_argument("--no-report", action="store_true", help="do not rewrite RELIABILITY.md")
    p.add_argument("--report", type=Path, default=None, help="the report to rewrite (default RELIABILITY.md)")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed or int(time.time()) % 1_000_000
    progress = not args.quiet
    m = machine()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="inferd-fuzz-"))
    sources = args.models or list(DEFAULT_MODEL_DIRS)
    # the fuzzed models, and those the attacks use: slow_model's, and the stream cases' decoupled model
    attack_models = ("parallel_sleep", attacks_flow.DECOUPLED_MODEL)
    repo = build_repository(work / "models", sources, (*fuzz_http_spec.FUZZ_MODELS, *attack_models))
    # a stream's model waits for its client far longer than slow_model's watchdog: its own limit is off
    with (repo / attacks_flow.DECOUPLED_MODEL / "config.pbtxt").open("a") as f:
        f.write('\nparameters { key: "execute_timeout_secs" value: { string_value: "0" } }\n')
    attacks_memory.add_model(repo)  # the memory cases' model: small requests, large answers
    server_args = [
        "--http-max-input-size", str(args.http_max_input_size),
        "--grpc-max-message-size", str(args.grpc_max_message_size),
        "--http-header-timeout-secs", f"{args.http_header_timeout_secs:g}",
        "--max-connections", str(args.max_connections),
        "--grpc-max-concurrent-streams", str(args.grpc_max_concurrent_streams),
        "--max-unsent-bytes", str(args.max_unsent_bytes),  # the memory cases' budget
        "--model-execute-timeout-secs", f"{args.slow_timeout_s:g}",  # the slow_model attack's watchdog
        *shlex.split(args.server_args),
    ]  # fmt: skip
    server = Server(repo, work / "server.log", server_args).start()
    budget = args.minutes * 60
    out: dict[str, Any] = {"machine": m, "seed": seed, "command": _command(argv), "server": server.command}
    try:
        idle = server.rss()
        out["idle_rss_start"] = idle
        models = fuzz_http_spec.model_metadata(server)
        if args.http_requests:
            _say(progress, f"HTTP fuzz: {args.http_requests:,} requests (seed {seed})")
            r = fuzz_http.run(server, args.http_requests, budget, seed, progress=progress)
            out["http"] = r.to_json()
        if args.grpc_calls and server.alive():
            _say(progress, f"gRPC fuzz: {args.grpc_calls:,} calls")
            left = max(30.0, budget - (time.monotonic() - started))
            g = fuzz_grpc.run(server, models, args.grpc_calls, left, seed, huge_bytes=args.grpc_max_message_size + MiB, progress=progress)  # fmt: skip
            out["grpc"] = g.to_json()
        if args.h2_attacks and server.alive():
            _say(progress, f"raw HTTP/2: {args.h2_attacks:,} scenarios")
            left = max(30.0, budget - (time.monotonic() - started))
            h = fuzz_h2.run(server, args.h2_attacks, left, seed, max_streams=args.grpc_max_concurrent_streams, flood_bytes=args.flood_bytes)  # fmt: skip
            out["h2"] = h.to_json()
        out["rss_after_fuzz"] = server.rss()
        names = list(attacks_mod.ATTACKS) if args.attacks == "all" else [] if args.attacks == "none" else args.attacks.split(",")  # fmt: skip
        if names and server.alive():
            _say(progress, f"attacks: {', '.join(names)}")
            cfg = attacks_mod.AttackConfig(
                body_limit=args.http_max_input_size,
                grpc_limit=args.grpc_max_message_size,
                header_timeout_s=args.http_header_timeout_secs,
                max_connections=args.max_connections,
                max_streams=args.grpc_max_concurrent_streams,
                unsent_limit=args.max_unsent_bytes,
                **{
                    f.name: getattr(args, f.name)
                    for f in fields(attacks_mod.AttackConfig)
                    if hasattr(args, f.name) and f.name not in _SERVER_LIMITS
                },
            )
            out["attacks"] = [a.to_json() for a in attacks_mod.run(server, cfg, names, work, progress)]
        out["alive_after"] = server.alive()
        out["ready_after"] = server.wait_ready(30.0) if server.alive() else False
        out["rss_end"] = server.rss()
    finally:
        code, secs = server.stop(60.0)
        out["exit_code"] = code
        out["exit_seconds"] = round(secs, 2)
        text = server.log()
        out["log_tracebacks"] = log_tracebacks(text, RAISING_MODELS)
        out["log_errors"] = sum(1 for line in text.splitlines() if line.startswith("E"))
        out["minutes"] = round((time.monotonic() - started) / 60, 1)
        out["load_end"] = " ".join(f"{x:.2f}" for x in __import__("os").getloadavg())
        out["crashed"] = not out.get("alive_after", False)
        out["workdir"] = str(work)
    write_json(args.json, out)
    if not args.no_report:
        write_section("fuzz", render(out), args.report or __import__("reliability.common").common.REPORT)
    ok = _summary(out, progress)
    return 0 if ok else 1


def _say(progress: bool, text: str) -> None:
    if progress:
        print(text, flush=True)


def _command(argv: list[str] | None) -> str:
    return "python -m reliability.fuzz " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )


def unexpected_total(out: dict[str, Any]) -> int:
    return sum(out.get(k, {}).get("unexpected_count", 0) for k in ("http", "grpc")) + len(out.get("h2", {}).get("unexpected", []))  # fmt: skip


def _summary(out: dict[str, Any], progress: bool) -> bool:
    unexpected = unexpected_total(out)
    tracebacks = len(out["log_tracebacks"])
    ok = not out["crashed"] and out.get("ready_after") and unexpected == 0 and tracebacks == 0
    if progress:
        print(
            f"fuzz: crashed {out['crashed']}, ready after {out.get('ready_after')}, unexpected {unexpected}, "
            f"tracebacks in the log {tracebacks}, exit code {out['exit_code']} in {out['exit_seconds']} s"
        )
        for a in out.get("attacks", []):
            print(
                f"  {a['name']:20} {'ok' if a['ok'] else 'MISS':4} health max {a['health_max_ms']:7.1f} ms "
                f"RSS +{a['over_idle'] / MiB:7.1f} MiB (goal < {2 * a['limit'] / MiB:.1f})  {a['got'][:90]}"
            )
    return bool(ok)


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def render(out: dict[str, Any]) -> str:
    m = out["machine"]
    lines = ["## Fuzz and attacks (`make fuzz`)", "", *machine_lines(m, out.get("load_end")), ""]
    lines += [
        f"- Command: `{out['command']}` ({out['minutes']} min), Hypothesis seed {out['seed']}",
        "- Server: `" + " ".join(["inferd serve", *out["server"][4:]]).replace(out["workdir"], "<tmp>") + "`",
        "",
    ]
    http, grpc_, h2 = out.get("http", {}), out.get("grpc", {}), out.get("h2", {})
    unexpected = unexpected_total(out)
    lines += [
        "| | result |",
        "| --- | --- |",
        f"| HTTP requests (OpenAPI + model metadata, Hypothesis) | {http.get('total', 0):,} in {http.get('seconds', 0):,.0f} s |",
        f"| malformed gRPC calls | {grpc_.get('total', 0):,} in {grpc_.get('seconds', 0):,.0f} s |",
        f"| raw HTTP/2 scenarios | {h2.get('total', 0):,} in {h2.get('seconds', 0):,.0f} s |",
        f"| crashes (the server process died) | {'**1**' if out['crashed'] else 0} |",
        f"| unexpected answers (500s the reference would not give, tracebacks, no answer where one was due) | {unexpected if not unexpected else f'**{unexpected}**'} |",
        f"| tracebacks in the server's log | {len(out['log_tracebacks']) or 0} |",
        f"| ready afterwards | {_yes(bool(out.get('ready_after')))} |",
        f"| SIGTERM at the end | exit code {out['exit_code']} in {out['exit_seconds']} s |",
        f"| RSS idle at start / after the fuzz / at the end | {mib(out.get('idle_rss_start', 0))} / {mib(out.get('rss_after_fuzz', 0))} / {mib(out.get('rss_end', 0))} |",
        "",
    ]  # fmt: skip
    if http:
        lines += [
            "HTTP requests by kind: " + ", ".join(f"{k} {v:,}" for k, v in sorted(http["sent"].items())) + "."
        ]
        lines += ["HTTP statuses: " + ", ".join(f"{k}: {v:,}" for k, v in http["by_status"].items()) + "."]
        if http.get("no_answer_where_none_due"):
            lines += ["Closed without an answer where none was due (garbage, dishonest framing): " + ", ".join(f"{k} {v:,}" for k, v in http["no_answer_where_none_due"].items()) + "."]  # fmt: skip
    if grpc_:
        lines += ["gRPC calls by kind: " + ", ".join(f"{k} {v:,}" for k, v in sorted(grpc_["sent"].items())) + "; every RPC of GRPCInferenceService, grpc.health.v1 and an unknown method."]  # fmt: skip
        lines += ["gRPC statuses: " + ", ".join(f"{k}: {v:,}" for k, v in grpc_["codes"].items()) + "."]
    if h2:
        parts = []
        for name, outcomes in h2["outcomes"].items():
            parts.append(
                f"{name} {h2['sent'][name]:,} ({'; '.join(f'{k}: {v}' for k, v in outcomes.items())})"
            )
        lines += ["Raw HTTP/2: " + ", ".join(parts) + "."]
    lines.append("")
    found = [*http.get("unexpected", []), *grpc_.get("unexpected", []), *h2.get("unexpected", [])]
    if found or out["log_tracebacks"]:
        lines += ["### What the fuzz found", ""]
        for u in found[:15]:
            what = u.get("label") or u.get("rpc") or u.get("scenario")
            lines.append(f"- {u.get('kind', u.get('scenario'))} `{what}`: {u['why']}" + (f" — answer `{u['answer'][:160]}`" if u.get("answer") else ""))  # fmt: skip
        for t in sorted(set(out["log_tracebacks"]))[:10]:
            lines.append(f"- traceback in the log: `{t[:200]}`")
        lines.append("")
    if out.get("attacks"):
        lines += [
            "### Attacks",
            "",
            "Each with a health check (`GET /v2/health/ready` on a keep-alive connection, from a process of its own so that the attacker cannot delay it) every 100 ms and the server's RSS sampled every 20 ms and read from the kernel's peak (VmHWM, reset before each attack). Goals: health check under 50 ms, peak RSS over idle under 2x the configured limit (`--http-max-input-size`, or `--grpc-max-message-size` for gRPC, or twice `--max-unsent-bytes` for the held answers).",
            "",
            "| attack | expected | got | answer as expected | health check max (ms) | peak RSS over idle (goal) | goals met |",
            "| --- | --- | --- | --- | ---: | ---: | --- |",
        ]
        for a in out["attacks"]:
            goals = a["rss_ok"] and a["health_ok"]
            got = a["got"].replace("|", "\\|").replace("\n", " ")[:220]
            note = f" ({a['notes']})" if a["notes"] else ""
            lines.append(
                f"| `{a['name']}`: {a['what']}{note} | {a['expected']} | {got} | {_yes(a['ok'])} | "
                f"{a['health_max_ms']:,.1f}{'' if a['health_ok'] else ' **miss**'} | "
                f"{mib(a['over_idle'])} ({mib(2 * a['limit'])}){'' if a['rss_ok'] else ' **miss**'} | {_yes(goals)} |"
            )
        lines.append("")
        lines.append(f"Idle RSS before the attacks: {mib(out['attacks'][0]['idle_rss'])}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
