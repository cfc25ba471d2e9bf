"""The ONNX Runtime rows of one `make bench` round (run.py's onnx part): bare ONNX Runtime in-process,
inferd and the floor server with the same session (issue 48) under perf_analyzer, the lean client,
the order turned round every other round."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import onnx_bench  # benchmarks/onnx_bench.py: the scenarios and each side's measure
from servers import FLOOR_SCRIPT, CommandServer, Ports, StartError, free_ports, log, rel, run_logged


def onnx_round(
    rnd: int, outdir: Path, template: str, ready_timeout: float, quick: bool
) -> list[dict[str, Any]]:
    """The ONNX rows of one round: bare ONNX Runtime in-process, and perf_analyzer against inferd."""
    repo = outdir / "onnx-models"
    if not repo.exists():
        log(f"round {rnd}: onnx: building {', '.join(onnx_bench.MODELS)} into {rel(repo)}")
        onnx_bench.build_repository(repo, outdir / "onnx-build.log", run_logged)
    scale = 0.3 if quick else float(os.environ.get("BENCH_SCALE", "1.0"))
    tag = f"r{rnd}"
    server = CommandServer("inferd-onnx", "inferd", template, ready_timeout, models=repo)
    ports = free_ports()
    log(f"round {rnd}: onnx: inferd on {ports}; each scenario bare ONNX Runtime and perf_analyzer in turn")
    try:
        server.start(ports, outdir / f"{tag}-onnx-server.log")
    except StartError as e:
        log(f"round {rnd}: onnx: {e}")
        return [
            {"round": rnd, "side": "inferd", "scenario": s.id, "status": "no server"}
            for s in onnx_bench.SCENARIOS
        ]
    floors = onnx_floors(rnd, outdir, tag, ready_timeout)
    rows: list[dict[str, Any]] = []
    try:
        for s in onnx_bench.SCENARIOS:
            sides = (
                ("bare", "floor", "inferd", "lean") if rnd % 2 == 1 else ("lean", "inferd", "floor", "bare")
            )
            for side in sides:
                if side == "bare":
                    for layout in s.layouts:
                        row = onnx_bench.measure_bare(repo, s, outdir, tag, run_logged, layout)
                        rows.append(row)
                        log(f"round {rnd}: onnx: {s.id} bare ({layout} layout): {row['status']}")
                    row = onnx_bench.measure_bare(repo, s, outdir, tag, run_logged)
                elif side == "inferd":
                    row = onnx_bench.measure_served(
                        ports.http, s, outdir, tag, scale, run_logged, pid=server.pid
                    )
                elif side == "floor":
                    if not s.floor:
                        continue
                    floor, floor_ports = floors.get(s.model, (None, None))
                    if floor is None or floor_ports is None:
                        row = {"side": "floor", "scenario": s.id, "status": "no server"}
                    else:
                        row = onnx_bench.measure_served(
                            floor_ports.http, s, outdir, tag, scale, run_logged, "floor", floor.pid
                        )
                elif s.lean:
                    row = onnx_bench.measure_lean(ports.http, s, outdir, tag, run_logged)
                else:
                    continue
                rows.append(row)
                log(f"round {rnd}: onnx: {s.id} {side}: {row['status']}")
    finally:
        server.stop()
        for floor, _ in floors.values():
            floor.stop()
    for row in rows:
        row["round"] = rnd
    return rows


def onnx_floors(
    rnd: int, outdir: Path, tag: str, ready_timeout: float
) -> dict[str, tuple[CommandServer, Ports]]:
    """The floor servers of the ONNX scenarios that have one (floor_server.py --onnx-model, issue 48),
    started for the round: idle, their sessions' threads do not spin."""
    repo = outdir / "onnx-models"
    out: dict[str, tuple[CommandServer, Ports]] = {}
    for model in sorted({s.model for s in onnx_bench.SCENARIOS if s.floor}):
        template = f"{onnx_bench.venv_python()} {FLOOR_SCRIPT} --http-port {{http}} --onnx-model {{models}}"
        floor = CommandServer(f"floor-{model}", "floor", template, ready_timeout, models=repo / model)
        ports = free_ports()
        try:
            floor.start(ports, outdir / f"{tag}-onnx-floor-{model}.log")
        except StartError as e:
            log(f"round {rnd}: onnx: {e}")
            continue
        out[model] = (floor, ports)
    return out
