"""C/C++ backends under misuse and churn (issue 44): ``python -m reliability.c_backends``.

Serves the test backends of tests/fixtures/c_backends (built here with the system compiler, as the
tests build them) and measures:

1. ``--cycles`` load/infer/unload cycles of the C identity and of the decoupled repeat backend, in
   explicit mode: the server's RSS after cycle ``--cycles // 10`` and at the end (the host's C memory:
   requests, responses, models, instances and their queues, all freed);
2. ``--requests`` requests at concurrency 8 to each misbehaving backend (an exception out of execute,
   a request released unanswered, a response after the final one, an execute that fails) while a
   client of the C identity runs beside: every misbehaving request answered (an error, or OK for the
   late send), no request of the identity's failed, RSS growth.

The reference's behaviour for the same libraries is recorded in tests/fixtures/reference_observed_c_backends.json
(it crashes on the exception and the late send and never answers the unanswered request). Writes the
``c_backends`` section of RELIABILITY.md (``--no-report``: not).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from reliability.common import ROOT, Server, machine, machine_lines, mib, write_section

sys.path.insert(0, str(ROOT / "tests"))

IDENTITY = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
).encode()
REPEAT = json.dumps({"inputs": [{"name": "IN", "shape": [2], "datatype": "INT32", "data": [5, 6]}]}).encode()
#: misbehaving model -> (what it does, the status its requests must get)
MISBEHAVING = {
    "c_throw": ("lets a C++ exception out of execute", 500),
    "c_no_final": ("releases its requests unanswered", 500),
    "c_late_send": ("sends a response after the final one", 200),
    "c_fail_execute": ("returns an error from execute", 503),
}


def _load(server: Server, name: str, unload: bool = False) -> None:
    status, body = server.post(f"/v2/repository/models/{name}/{'unload' if unload else 'load'}", b"{}")
    if status != 200:
        raise RuntimeError(f"{'unload' if unload else 'load'} of {name}: {status} {body[:300]!r}")


def cycles(server: Server, name: str, body: bytes, count: int, generate: bool) -> dict[str, Any]:
    base = max(1, count // 10)
    rss_base = 0
    t0 = time.monotonic()
    for i in range(1, count + 1):
        _load(server, name)
        path = f"/v2/models/{name}/generate_stream" if generate else f"/v2/models/{name}/infer"
        status, answer = server.post(path, body if not generate else json.dumps({"IN": [5, 6]}).encode())
        if status != 200:
            raise RuntimeError(f"{name} answered {status} {answer[:300]!r} in cycle {i}")
        _load(server, name, unload=True)
        if i == base:
            rss_base = server.rss()
    rss_end = server.rss()
    growth = 100.0 * (rss_end - rss_base) / rss_base if rss_base else 0.0
    return {"model": name, "cycles": count, "rss_after_base": rss_base, "rss_end": rss_end, "growth_pct": round(growth, 2), "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip


def _beside(server: Server, stop: threading.Event, side: dict[str, int]) -> None:
    """A client of the C identity, one request after another until ``stop``."""
    while not stop.is_set():
        status, _ = server.post("/v2/models/c_identity/infer", IDENTITY)
        side["ok" if status == 200 else "failed"] += 1


def one_misbehaving(server: Server, name: str, what: str, want: int, requests: int) -> dict[str, Any]:
    rss0 = server.rss()
    stop = threading.Event()
    side = {"ok": 0, "failed": 0}
    t = threading.Thread(target=_beside, args=(server, stop, side))
    t.start()
    t0 = time.monotonic()
    path = f"/v2/models/{name}/infer"
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda _: server.post(path, IDENTITY)[0], range(requests)))
    seconds = time.monotonic() - t0
    stop.set()
    t.join()
    return {
        "model": name,
        "what": what,
        "requests": requests,
        "as_expected": sum(s == want for s in statuses),
        "statuses": sorted(set(statuses)),
        "want": want,
        "beside_ok": side["ok"],
        "beside_failed": side["failed"],
        "rss_growth": server.rss() - rss0,
        "seconds": round(seconds, 1),
        "live": server.get("/v2/health/live")[0] == 200,
    }


def misbehaving(server: Server, requests: int) -> list[dict[str, Any]]:
    for name in MISBEHAVING:
        _load(server, name)
    _load(server, "c_identity")
    return [one_misbehaving(server, name, what, want, requests) for name, (what, want) in MISBEHAVING.items()]


def render(out: dict[str, Any]) -> str:
    lines = [
        "## C/C++ backends (issue 44: `python -m reliability.c_backends`)",
        "",
        *machine_lines(out["machine"], out.get("load_end")),
        f"- Command: `{out['command']}`",
        "",
        "Goals: load/unload cycles of C backends leave RSS within 5% of its value after the first 10%;",
        "a backend that misbehaves gets its requests answered (the reference crashes or hangs on these:",
        "tests/fixtures/reference_observed_c_backends.json) and every other model serves on.",
        "",
        "| what | cycles | RSS after the first 10% / at the end | growth | time |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for c in out["cycles"]:
        lines.append(
            f"| load, infer, unload of {c['model']} | {c['cycles']:,} | {mib(c['rss_after_base'])} / "
            f"{mib(c['rss_end'])} | {c['growth_pct']:+.2f}% | {c['seconds']} s |"
        )
    lines += [
        "",
        "| backend | requests (concurrency 8) | answered as expected | c_identity beside: ok / failed | RSS growth | live after |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in out["misbehaving"]:
        lines.append(
            f"| `{r['model']}` ({r['what']}; expected {r['want']}) | {r['requests']:,} | {r['as_expected']:,} | "
            f"{r['beside_ok']:,} / {r['beside_failed']:,} | {mib(r['rss_growth'])} | {'yes' if r['live'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cycles", type=int, default=1000)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--no-report", action="store_true")
    args = p.parse_args(argv)
    import c_backends

    work = Path(tempfile.mkdtemp(prefix="inferd-c-backends-"))
    repo, backends = c_backends.repository(work)
    out: dict[str, Any] = {"machine": machine(), "command": "python -m reliability.c_backends " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))}  # fmt: skip
    server = Server(
        repo,
        work / "server.log",
        ["--model-control-mode=explicit", "--backend-directory", str(backends)],
        env=c_backends.server_env(),
    ).start()
    try:
        out["cycles"] = [
            cycles(server, "c_identity", IDENTITY, args.cycles, generate=False),
            cycles(server, "c_repeat", REPEAT, args.cycles, generate=True),
        ]
        out["misbehaving"] = misbehaving(server, args.requests)
    finally:
        server.stop(60)
    import os

    out["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=1))
    if not args.no_report:
        write_section("c_backends", render(out))
    ok = all(c["growth_pct"] < 5 for c in out["cycles"])
    ok = ok and all(
        r["as_expected"] == r["requests"] and r["beside_failed"] == 0 and r["live"]
        for r in out["misbehaving"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
