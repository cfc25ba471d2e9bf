"""Reloads and load/unload cycles (issue 11's goals), run by ``make soak`` after the soak.

1. Explicit mode: ``--reloads`` loads of ``identity_fp32`` (a Python model) while
   ``--concurrency`` clients infer on it without pause; every answer must be right.
2. Poll mode: the same number of reloads made by rewriting the model's config.pbtxt and waiting
   for the server to pick it up (``--repository-poll-secs 1``), under the same load.
3. ``--cycles`` load/unload cycles of a Python model and of an ONNX model (built here with
   ``onnx.helper``); the server's RSS after cycle ``--cycles // 10`` and at the end.

Writes the ``reload`` section of RELIABILITY.md (``--no-report``: not) and ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from reliability.common import (
    REFERENCE_MODELS,
    REPORT,
    Server,
    machine,
    machine_lines,
    mib,
    write_json,
    write_section,
)

BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
).encode()


def onnx_model(folder: Path) -> None:
    """``onnx_add``: OUT = IN + 1 (FP32 [4]), written with onnx.helper."""
    import onnx
    from onnx import TensorProto, helper

    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    graph = helper.make_graph(
        [helper.make_node("Add", ["IN", "one"], ["OUT"])],
        "add_one",
        [helper.make_tensor_value_info("IN", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("OUT", TensorProto.FLOAT, [4])],
        [one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (folder / "1").mkdir(parents=True)
    onnx.save(model, str(folder / "1" / "model.onnx"))
    (folder / "config.pbtxt").write_text('name: "onnx_add"\nbackend: "onnxruntime"\nmax_batch_size: 0\n')


class Load:
    """``concurrency`` threads inferring on identity_fp32 until stopped; answers checked."""

    def __init__(self, server: Server, concurrency: int) -> None:
        self.server = server
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(concurrency)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            status, body = self.server.post("/v2/models/identity_fp32/infer", BODY)
            good = status == 200 and json.loads(body)["outputs"][0]["data"] == [1, 2, 3, 4]
            with self._lock:
                if good:
                    self.ok += 1
                elif len(self.failures) < 20:
                    self.failures.append(f"{status} {body[:200]!r}")
                else:
                    self.failures.append("")


def _load(server: Server, name: str) -> None:
    status, body = server.post(f"/v2/repository/models/{name}/load", b"")
    if status != 200:
        raise RuntimeError(f"load {name}: {status} {body[:300]!r}")


def _unload(server: Server, name: str) -> None:
    status, body = server.post(f"/v2/repository/models/{name}/unload", b"")
    if status != 200:
        raise RuntimeError(f"unload {name}: {status} {body[:300]!r}")


def explicit_reloads(server: Server, reloads: int, concurrency: int) -> dict[str, Any]:
    t0 = time.monotonic()
    with Load(server, concurrency) as load:
        for _ in range(reloads):
            _load(server, "identity_fp32")
    return {"reloads": reloads, "requests": load.ok, "failed": len(load.failures), "samples": load.failures[:5], "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip


def poll_reloads(server: Server, repo: Path, reloads: int, concurrency: int) -> dict[str, Any]:
    config = repo / "identity_fp32" / "config.pbtxt"
    text = config.read_text()
    t0 = time.monotonic()
    with Load(server, concurrency) as load:
        for i in range(reloads):
            config.write_text(text + f'\nparameters {{ key: "reload" value: {{ string_value: "{i}" }} }}\n')
            deadline = time.monotonic() + 30
            while True:
                status, body = server.get("/v2/models/identity_fp32/config")
                if status == 200 and json.loads(body).get("parameters", {}).get("reload", {}).get(
                    "string_value"
                ) == str(i):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"poll reload {i} was not picked up within 30 s")
                time.sleep(0.05)
    return {"reloads": reloads, "requests": load.ok, "failed": len(load.failures), "samples": load.failures[:5], "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip


def cycles(server: Server, name: str, count: int) -> dict[str, Any]:
    base = max(1, count // 10)
    rss_base = 0
    t0 = time.monotonic()
    for i in range(1, count + 1):
        _load(server, name)
        _unload(server, name)
        if i == base:
            rss_base = server.rss()
    rss_end = server.rss()
    growth = 100.0 * (rss_end - rss_base) / rss_base if rss_base else 0.0
    return {"model": name, "cycles": count, "rss_after_base": rss_base, "base_cycle": base, "rss_end": rss_end, "growth_pct": round(growth, 2), "seconds": round(time.monotonic() - t0, 1)}  # fmt: skip


def render(out: dict[str, Any]) -> str:
    lines = [
        "## Reloads and load/unload cycles (`make soak`, `python -m reliability.reload`)",
        "",
        *machine_lines(out["machine"], out.get("load_end")),
        f"- Command: `{out['command']}`",
        "",
        "Goals (issue 11): reloads under load at concurrency 8 fail zero requests, in explicit and poll mode;",
        "1,000 load/unload cycles leave RSS within 5% of its value after the first 100.",
        "",
        "| what | reloads or cycles | requests during it | failed | RSS after the first 10% / at the end | growth | time |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for key, label in (("explicit", "explicit-mode reloads of identity_fp32 (Python)"), ("poll", "poll-mode reloads (config.pbtxt rewritten)")):  # fmt: skip
        r = out.get(key)
        if r:
            lines.append(
                f"| {label} | {r['reloads']:,} | {r['requests']:,} | {r['failed']} | | | {r['seconds']} s |"
            )
    for c in out.get("cycles", []):
        lines.append(
            f"| load/unload cycles of {c['model']} | {c['cycles']:,} | | | {mib(c['rss_after_base'])} / {mib(c['rss_end'])} | {c['growth_pct']:+.2f}% | {c['seconds']} s |"
        )
    samples = [s for k in ("explicit", "poll") for s in (out.get(k) or {}).get("samples", []) if s]
    if samples:
        lines += ["", "Failed answers (first few): " + "; ".join(samples)]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m reliability.reload", description=__doc__.split("\n\n")[0] if __doc__ else None)  # fmt: skip
    p.add_argument("--reloads", type=int, default=100)
    p.add_argument("--cycles", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--no-poll", action="store_true")
    p.add_argument("--json", type=Path)
    p.add_argument("--no-report", action="store_true")
    p.add_argument("--report", type=Path, default=REPORT)
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    work = Path(tempfile.mkdtemp(prefix="inferd-reload-"))
    repo = work / "models"
    shutil.copytree(REFERENCE_MODELS / "identity_fp32", repo / "identity_fp32")
    onnx_model(repo / "onnx_add")
    out: dict[str, Any] = {"machine": machine(), "command": "python -m reliability.reload " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))}  # fmt: skip
    server = Server(
        repo, work / "explicit.log", ["--model-control-mode=explicit", "--load-model=identity_fp32"]
    ).start()
    try:
        say(f"reload: {args.reloads} explicit reloads at concurrency {args.concurrency}")
        out["explicit"] = explicit_reloads(server, args.reloads, args.concurrency)
        out["cycles"] = []
        for name in ("identity_fp32", "onnx_add"):
            say(f"reload: {args.cycles} load/unload cycles of {name}")
            out["cycles"].append(cycles(server, name, args.cycles))
    finally:
        server.stop(60)
    if not args.no_poll:
        server = Server(
            repo, work / "poll.log", ["--model-control-mode=poll", "--repository-poll-secs=1"]
        ).start()
        try:
            say(f"reload: {args.reloads} poll-mode reloads")
            out["poll"] = poll_reloads(server, repo, args.reloads, args.concurrency)
        finally:
            server.stop(60)
    out["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    say(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=1))
    write_json(args.json, out)
    if not args.no_report:
        write_section("reload", render(out), args.report)
    ok = all(out[k]["failed"] == 0 for k in ("explicit", "poll") if k in out)
    ok = ok and all(c["growth_pct"] < 5 for c in out["cycles"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
