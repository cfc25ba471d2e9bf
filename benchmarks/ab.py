"""``make bench-ab BASE=<rev>``: the working tree against a base commit, in alternating rounds.

Every change to the request path is compared with its base before it lands (issue 26). This runs
bench.sh's perf_analyzer scenarios (default: add_sub HTTP and gRPC c8, ensemble_add_sub HTTP c8)
against inferd built from BASE (a ``git worktree`` of it, served with this venv and the worktree's
``src`` first on ``PYTHONPATH``) and against the working tree, optionally the reference too, one
server at a time on the same machine, the order turned round every round. Per round and scenario
it prints throughput and the server's CPU per request (its process tree's CPU over the successes
its statistics counted, benchmarks/cpu.py) with the ratios head/base, then the medians; the whole
table goes to ``benchmarks/results/ab-<UTC>/ab.md`` and ``summary.json``. For the batching rows it
also gives how busy the instance was (the executes' compute_infer over the window, from the
statistics: cpu.ExecuteMeter) and the mean batch size.

    .venv/bin/python benchmarks/ab.py --base a4de798                 # 4 rounds, the default scenarios
    .venv/bin/python benchmarks/ab.py --base HEAD --rounds 6 --reference --scenarios 'add_sub_http_c(1|8)$'
    .venv/bin/python benchmarks/ab.py --base HEAD --scenarios add_sub_http_c8 --floor --rounds 4
    .venv/bin/python benchmarks/ab.py --base HEAD --scenarios add_sub_http_c8 \
        --serve-flags '--trace-config triton,file={tmp}/t.json --trace-config level=TIMESTAMPS --trace-config rate=1'

Throughput shares the 2 cores with perf_analyzer and swings with the machine; CPU per request is the
steadier figure. Keep the rounds even, so that each tree runs first in as many rounds as the other
(with an odd count one of them has an extra first slot, and on a shared machine the slot may matter). Start on an idle machine (load under 0.5: the header says what it was).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench_paths import BENCH_SH, ROOT
from cpu import BATCHING_MODELS, CpuMeter, ExecuteMeter
from results import BENCH_SH_SCENARIOS, RESULTS_ROOT, loadavg, parse_bench_csv, scenario_model
from servers import INFERD_TEMPLATE, BenchServer, CommandServer, ReferenceServer, floor, log, run_logged

DEFAULT_SCENARIOS = r"^(add_sub_http_c8|add_sub_grpc_c8|ensemble_add_sub_http_c8)$"
MODELS = ROOT / "tests" / "fixtures" / "reference_models"


@dataclass
class Cell:
    """One scenario of one server in one round."""

    infer_per_s: float | None = None
    p99_us: float | None = None
    cpu_us: float | None = None
    status: str = "missing"
    #: the executes' compute_infer over the window (one instance: the share of it spent executing)
    busy: float | None = None
    mean_batch: float | None = None


@dataclass
class Round:
    number: int
    order: list[str]
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # server -> scenario -> cell


def base_worktree(rev: str, where: Path) -> tuple[Path, str]:
    """A detached worktree of ``rev`` in ``where``; (its path, the full commit id)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True, text=True
    )
    if sha.returncode != 0:
        raise SystemExit(f"bench-ab: '{rev}' is not a commit here: {sha.stderr.strip()}")
    path = where / f"base-{sha.stdout.strip()[:12]}"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--force", str(path), sha.stdout.strip()],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return path, sha.stdout.strip()


def build_hotpath(src: Path) -> None:
    """Compile a base worktree's hot path as ``make install`` does here (a tree from before it has
    none to build): otherwise the base would run pure Python against a compiled head."""
    if (src / "inferd" / "hotpath_build.py").exists() and shutil.which("cc"):
        env = {**os.environ, "PYTHONPATH": str(src)}
        run = subprocess.run(
            [sys.executable, "-m", "inferd.hotpath_build"],
            cwd=src.parent,
            env=env,
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            raise SystemExit(f"bench-ab: the base's hot path did not build: {run.stderr.strip()[-500:]}")


def hotpath_state(src: Path) -> str:
    """Which request path a tree's server runs (compiled or pure, and why), as its log says it."""
    code = "import inferd.hotpath as h; print(h.describe())"
    env = {**os.environ, "PYTHONPATH": str(src)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return run.stdout.strip() if run.returncode == 0 else "pure (no inferd.hotpath: before the compiled path)"


def remove_worktree(path: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def servers(
    base_src: Path,
    with_reference: bool,
    out: Path,
    head_src: Path = ROOT / "src",
    extra: dict[str, Path] | None = None,
    serve_flags: str = "",
    with_floor: bool = False,
) -> dict[str, BenchServer]:
    cmd = INFERD_TEMPLATE.format(python=sys.executable) + (f" {serve_flags}" if serve_flags else "")
    trees = {"base": (base_src, "inferd (BASE)"), "head": (head_src, "inferd (working tree)")}
    trees.update({name: (src, f"inferd ({name})") for name, src in (extra or {}).items()})
    made = {
        name: BenchServer(
            CommandServer(name, title, f"env PYTHONPATH={src} {cmd}", models=MODELS), out / f"{name}.log"
        )
        for name, (src, title) in trees.items()
    }
    if with_reference:
        made["reference"] = BenchServer(ReferenceServer(models=MODELS), out / "reference.log")
    if with_floor:
        made["floor"] = floor(out / "floor.log")
    return made


def measure(
    server: BenchServer, ids: list[str], out: Path, tag: str, quick: bool, warmup: bool = True
) -> dict[str, Cell]:
    """bench.sh once per scenario against ``server`` (started and stopped here); first, unless
    ``warmup`` is off, the scenarios once at a third of their length, not counted: a server's first
    seconds (the first requests' imports and caches, its heap growing) are not its steady state, and
    make bench never measures them either (its matrix starts with other scenarios)."""
    cells: dict[str, Cell] = {}
    serves = server.server.serves
    ids = [i for i in ids if serves is None or serves.search(i)]  # the floor: add_sub HTTP only
    if not ids:
        return cells
    ports = server.start()
    try:
        if warmup:
            run_logged(
                ["bash", str(BENCH_SH), f"localhost:{ports.http}", f"localhost:{ports.grpc}", str(out / f"{tag}-warmup.csv")],
                out / f"{tag}-bench.log",
                env={**os.environ, "BENCH_ONLY": "^(" + "|".join(ids) + ")$", "BENCH_SCALE": "0.3"},
                echo=False,
            )  # fmt: skip
        for sid in ids:
            env = {"BENCH_ONLY": f"^{sid}$"}
            if quick:
                env["BENCH_SCALE"] = "0.3"
            csv_path = out / f"{tag}-{sid}.csv"
            meter = CpuMeter(server.pid, ports.http, scenario_model(sid))
            runs = ExecuteMeter(ports.http, scenario_model(sid))
            run_logged(
                ["bash", str(BENCH_SH), f"localhost:{ports.http}", f"localhost:{ports.grpc}", str(csv_path)],
                out / f"{tag}-bench.log",
                env={**os.environ, **env},
                echo=False,
            )
            row = parse_bench_csv(csv_path).get(sid) if csv_path.exists() else None
            runs.stop()
            cell = Cell(cpu_us=meter.us_per_success(), busy=runs.busy(), mean_batch=runs.mean_batch())
            if row is not None:
                cell.infer_per_s, cell.p99_us, cell.status = row.infer_per_s, row.p99_us, row.status
            cells[sid] = cell
    finally:
        server.stop()
    return cells


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _f(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def render(rounds: list[Round], ids: list[str], names: list[str], header: str) -> str:
    floor = "floor" in names  # then each tree's CPU over the floor's too (issue 48's goal: <= 1.3x)
    lines = [
        header,
        "",
        "| round | scenario | "
        + " | ".join(f"{n} infer/s | {n} CPU/req (us)" for n in names)
        + " | head/base infer/s | head/base CPU |"
        + (" base/floor CPU | head/floor CPU |" if floor else ""),
        "|" + "---|" * (2 + 2 * len(names) + 2 + 2 * floor),
    ]
    for r in rounds:
        for sid in ids:
            c = {n: r.cells.get(n, {}).get(sid, Cell()) for n in names}
            lines.append(
                f"| {r.number} ({'/'.join(r.order)}) | `{sid}` | "
                + " | ".join(f"{_f(c[n].infer_per_s, 1)} | {_f(c[n].cpu_us, 1)}" for n in names)
                + f" | {_f(_ratio(c['head'].infer_per_s, c['base'].infer_per_s), 3)}"
                + f" | {_f(_ratio(c['head'].cpu_us, c['base'].cpu_us), 3)} |"
                + (
                    f" {_f(_ratio(c['base'].cpu_us, c['floor'].cpu_us), 3)}"
                    f" | {_f(_ratio(c['head'].cpu_us, c['floor'].cpu_us), 3)} |"
                    if floor
                    else ""
                )
            )
    lines += ["", "Medians over the rounds (ratios of the medians):", ""]
    lines.append(
        "| scenario | "
        + " | ".join(f"{n} infer/s | {n} CPU/req (us)" for n in names)
        + " | head/base infer/s | head/base CPU | head/base infer/s per round |"
        + (" base/floor CPU | head/floor CPU |" if floor else "")
    )
    lines.append("|" + "---|" * (1 + 2 * len(names) + 3 + 2 * floor))
    for sid in ids:
        med = {
            n: (
                _median([r.cells.get(n, {}).get(sid, Cell()).infer_per_s for r in rounds]),
                _median([r.cells.get(n, {}).get(sid, Cell()).cpu_us for r in rounds]),
            )
            for n in names
        }
        per_round = [
            _ratio(r.cells["head"][sid].infer_per_s, r.cells["base"][sid].infer_per_s)
            for r in rounds
            if sid in r.cells.get("head", {}) and sid in r.cells.get("base", {})
        ]
        lines.append(
            f"| `{sid}` | "
            + " | ".join(f"{_f(med[n][0], 1)} | {_f(med[n][1], 1)}" for n in names)
            + f" | {_f(_ratio(med['head'][0], med['base'][0]), 3)}"
            + f" | {_f(_ratio(med['head'][1], med['base'][1]), 3)}"
            + f" | {' '.join(_f(v, 3) for v in per_round)} |"
            + (
                f" {_f(_ratio(med['base'][1], med['floor'][1]), 3)}"
                f" | {_f(_ratio(med['head'][1], med['floor'][1]), 3)} |"
                if floor
                else ""
            )
        )
    batching = [sid for sid in ids if scenario_model(sid) in BATCHING_MODELS]
    if batching:
        lines += [
            "",
            "Batching rows: the instance's busy share (the executes' compute_infer over the window, "
            "from the statistics) and the mean batch size, medians over the rounds:",
            "",
            "| scenario | " + " | ".join(f"{n} busy | {n} batch" for n in names) + " |",
            "|" + "---|" * (1 + 2 * len(names)),
        ]
        for sid in batching:
            cells = {n: [r.cells.get(n, {}).get(sid, Cell()) for r in rounds] for n in names}
            lines.append(
                f"| `{sid}` | "
                + " | ".join(
                    f"{_f(_median([c.busy for c in cells[n]]), 3)} | {_f(_median([c.mean_batch for c in cells[n]]), 1)}"
                    for n in names
                )
                + " |"
            )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--base", help="the commit to compare with (a revision git knows)")
    p.add_argument("--base-src", type=Path, help="or a source tree to compare with (its src folder)")
    p.add_argument("--head-src", type=Path, default=ROOT / "src", help="the tree compared (default: ./src)")
    p.add_argument(
        "--extra", action="append", default=[], metavar="NAME=SRC", help="one more source tree in every round"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="rounds; the order of the servers turns every round (an even number: each runs first as often)",
    )
    p.add_argument(
        "--scenarios",
        default=DEFAULT_SCENARIOS,
        help="regex that must match a whole scenario id of bench.sh's (add_sub_http_c8 is that row alone, "
        "not ensemble_add_sub_http_c8 too; 'add_sub_.*' for a family)",
    )
    p.add_argument("--reference", action="store_true", help="the reference in every round too")
    p.add_argument(
        "--floor",
        action="store_true",
        help="the floor (benchmarks/floor_server.py) in every round too, in its add_sub HTTP rows",
    )
    p.add_argument("--quick", action="store_true", help="shorter perf_analyzer windows (BENCH_SCALE=0.3)")
    p.add_argument(
        "--no-warmup",
        action="store_true",
        help="measure from a fresh server's first request (no warm-up pass)",
    )
    p.add_argument("--output", type=Path, help="results folder (default benchmarks/results/ab-<UTC>)")
    p.add_argument(
        "--serve-flags",
        default="",
        help="more flags for every inferd server ({tmp}: a temporary folder), e.g. to compare the traced path",
    )
    a = p.parse_args(argv)
    if (a.base is None) == (a.base_src is None):
        p.error("give --base or --base-src")
    return a


def select(scenarios: str) -> list[str]:
    """bench.sh's scenario ids the regex matches whole, in bench.sh's order."""
    return [s for s in BENCH_SH_SCENARIOS if re.fullmatch(scenarios, s)]


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    ids = select(a.scenarios)
    if not ids:
        raise SystemExit(
            f"bench-ab: no scenario matches {a.scenarios!r} (of {', '.join(BENCH_SH_SCENARIOS)})"
        )
    out = a.output or RESULTS_ROOT / time.strftime("ab-%Y%m%d-%H%M%S", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True, text=True
    )
    head_rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    head_desc = head_rev.stdout.strip() + (" + uncommitted changes in src/" if dirty.stdout.strip() else "")
    if a.head_src.resolve() != (ROOT / "src").resolve():
        head_desc = str(a.head_src)
    extra = {k: Path(v) for k, v in (e.split("=", 1) for e in a.extra)}
    load_start = loadavg()
    with tempfile.TemporaryDirectory(prefix="inferd-ab-") as tmp:
        wt: Path | None = None
        if a.base_src is not None:
            base_src, sha = a.base_src, str(a.base_src)
        else:
            wt, sha = base_worktree(a.base, Path(tmp))
            base_src = wt / "src"
            build_hotpath(base_src)
        try:
            flags = a.serve_flags.replace("{tmp}", tmp)
            made = servers(base_src, a.reference, out, a.head_src, extra, flags, a.floor)
            names = list(made)
            paths = f"hot path: base {hotpath_state(base_src)}, head {hotpath_state(a.head_src)}"
            log(
                f"bench-ab: base {sha[:12]} ({a.base or a.base_src}) against the working tree ({head_desc}); load {load_start}; {paths}"
            )
            rounds: list[Round] = []
            for n in range(1, a.rounds + 1):
                order = names if n % 2 else names[::-1]
                r = Round(n, order)
                for name in order:
                    log(f"round {n}: {name}")
                    r.cells[name] = measure(made[name], ids, out, f"r{n}-{name}", a.quick, not a.no_warmup)
                    for sid, c in r.cells[name].items():
                        busy = (
                            f", busy {_f(c.busy, 3)}, mean batch {_f(c.mean_batch, 1)}"
                            if scenario_model(sid) in BATCHING_MODELS
                            else ""
                        )
                        log(
                            f"  {sid}: {_f(c.infer_per_s, 1)} infer/s, {_f(c.cpu_us, 1)} us CPU/request{busy} ({c.status})"
                        )
                rounds.append(r)
        finally:
            if wt is not None:
                remove_worktree(wt)
    header = (
        f"# bench-ab: BASE {sha[:12]} (`{a.base or a.base_src}`) against {head_desc}\n\n"
        f"{a.rounds} rounds, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{load_start} at the start and {loadavg()} at the end; perf_analyzer shares the machine's cores. "
        "CPU/req: the server's process tree's CPU over the successes its statistics counted."
        + (" No warm-up pass." if a.no_warmup else " Each server had a warm-up pass first (not counted).")
        + (f" Every inferd server ran with `{a.serve_flags}`." if a.serve_flags else "")
        + f" The {paths}."
    )
    text = render(rounds, ids, names, header)
    (out / "ab.md").write_text(text)
    (out / "summary.json").write_text(
        json.dumps({"base": sha, "head": head_desc, "rounds": [asdict(r) for r in rounds]}, indent=1)
    )
    print(text)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
