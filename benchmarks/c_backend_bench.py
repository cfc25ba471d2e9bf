"""The C/C++ backend row (issue 44): a C identity backend (``libtriton_identity.so`` from
tests/fixtures/c_backends, built here with the system compiler) against inferd's own Python identity, both
add_sub-sized (two FP32 [16] inputs, batching up to 64, dynamic batching), in one inferd, and the same
``.so`` under the reference (``--reference``: Triton 2.51 from scripts/reference).

    .venv/bin/python benchmarks/c_backend_bench.py                 # 3 rounds, perf_analyzer c8 over HTTP
    .venv/bin/python benchmarks/c_backend_bench.py --rounds 1 --seconds 3 --reference

Each round runs perf_analyzer on each model in turn (alternating, so that the machine's load is
shared alike), reading the server's CPU per success around it (``cpu.CpuMeter``: the server's process
tree, perf_analyzer's own CPU left out) and its successes per second (the statistics' count over the
run: perf_analyzer's own figure is refused on a machine too loaded to stabilize it). Prints a Markdown
table of medians over the rounds. The steady figure on a shared machine is ``calls.py --instructions``
on the repository ``--write DIR`` writes (``--repository DIR/models --model c_identity`` and
``py_identity``, with ``--serve-flags '--backend-directory DIR/backends'``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import servers
from bench_paths import COMMON_SH, ROOT
from cpu import CpuMeter, successes

sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

IO = """max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

PY_IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()),
                pb_utils.Tensor("OUTPUT1", pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()),
            ])
            for r in requests
        ]
"""


def write_repository(dest: Path, python_models: bool = True) -> tuple[Path, Path]:
    """(repository, backend directory): c_identity (C) and, with ``python_models``, py_identity."""
    import c_backends

    repo, backends = dest / "models", dest / "backends"
    (repo / "c_identity" / "1").mkdir(parents=True, exist_ok=True)
    (repo / "c_identity" / "config.pbtxt").write_text(f'name: "c_identity"\nbackend: "identity"\n{IO}')
    c_backends.install("identity", backends / "identity")
    if python_models:
        (repo / "py_identity" / "1").mkdir(parents=True, exist_ok=True)
        (repo / "py_identity" / "config.pbtxt").write_text(f'name: "py_identity"\nbackend: "python"\n{IO}')
        (repo / "py_identity" / "1" / "model.py").write_text(PY_IDENTITY)
    return repo, backends


def perf(url: str, model: str, seconds: float, out: Path) -> float | None:
    """perf_analyzer at concurrency 8 over HTTP for about ``seconds``; its infer/s, None if it failed."""
    csv_path = out / f"{model}-{time.monotonic_ns()}.csv"
    script = (
        f"source {shlex.quote(str(COMMON_SH))}; anchor_paths || exit 1; "
        'LD_LIBRARY_PATH=$(pa_ld_path) exec timeout 120 "$PERF_ANALYZER" "$@"'
    )
    args = ["-m", model, "-u", url, "-b", "1", "--concurrency-range", "8"]
    args += ["--measurement-interval", str(int(seconds * 1000)), "-s", "50", "-r", "3"]
    args += ["-f", str(csv_path)]
    rc = subprocess.run(["bash", "-c", script, "perf_analyzer", *args], capture_output=True, text=True)
    if rc.returncode != 0 or not csv_path.exists():
        print(rc.stdout[-2000:], rc.stderr[-2000:], file=sys.stderr)
        return None
    import csv

    with csv_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return float(rows[0]["Inferences/Second"]) if rows else None


def measure(
    name: str, server: servers.BenchServer, models: list[str], args: Any, out: Path
) -> list[dict[str, Any]]:
    ports = server.start()
    rows: list[dict[str, Any]] = []
    try:
        url = f"127.0.0.1:{ports.http}"
        for model in models:  # warm-up: first requests, batcher, inline mode's measurements
            perf(url, model, 1.0, out)
        for r in range(args.rounds):
            for model in models if r % 2 == 0 else list(reversed(models)):
                meter = CpuMeter(server.pid, ports.http, model)
                t0 = time.monotonic()
                perf(
                    url, model, args.seconds, out
                )  # its own figure needs a stable machine: ours is the count
                us = meter.us_per_success()
                n1 = successes(ports.http, model)
                ips = (
                    (n1 - meter.n0) / (time.monotonic() - t0)
                    if n1 is not None and meter.n0 is not None
                    else None
                )
                rows.append({"server": name, "model": model, "round": r, "infer_per_s": ips, "cpu_us": us})
                print(f"{name} {model} round {r}: {ips} infer/s, {us} us CPU/request", flush=True)
    finally:
        server.stop()
    return rows


def write_only(dest: Path) -> None:
    """``--write DIR``: the repository and backend directory alone (for calls.py --repository)."""
    repo, backends = write_repository(dest)
    print(f"repository {repo}\nbackend directory {backends}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--reference", action="store_true", help="also the reference serving the same .so")
    p.add_argument(
        "--write", metavar="DIR", help="only write the repository (and backend directory) into DIR"
    )
    args = p.parse_args()
    if args.write:
        write_only(Path(args.write))
        return
    from inferd.backends.tritonc import build

    os.environ.setdefault(build.ENV, str(build.build(Path(tempfile.mkdtemp()) / "host", quiet=True)))
    out = Path(tempfile.mkdtemp(prefix="c-backend-bench-"))
    repo, backends = write_repository(out)
    rows = measure(
        "inferd",
        servers.inferd(repo, out / "inferd.log", extra=f"--backend-directory {backends}"),
        ["c_identity", "py_identity"],
        args,
        out,
    )
    if args.reference:
        rows += measure("reference", reference_server(out), ["c_identity"], args, out)
    print("\n| server | model | infer/s (median) | server CPU us/request (median) |\n|---|---|---|---|")
    for server, model in dict.fromkeys((r["server"], r["model"]) for r in rows):
        got = [r for r in rows if r["server"] == server and r["model"] == model]
        ips = [r["infer_per_s"] for r in got if r["infer_per_s"]]
        us = [r["cpu_us"] for r in got if r["cpu_us"]]
        print(
            f"| {server} | {model} | {statistics.median(ips) if ips else '-':.0f} | "
            f"{statistics.median(us) if us else '-':.0f} |"
        )
    shutil.rmtree(out, ignore_errors=True)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def reference_server(out: Path) -> servers.BenchServer:
    """Triton 2.51 serving the same C identity: its backend directory holds the .so, and the name the
    .so links against (libtritonserver.so) resolves to the reference's core by LD_LIBRARY_PATH."""
    repo, backends = write_repository(out / "reference", python_models=False)
    alias = out / "reference" / "alias"
    alias.mkdir(exist_ok=True)
    core = next((ROOT_SITE() / "nvidia_pytriton.libs").glob("libtritonserver-*.so"))
    (alias / "libtritonserver.so").symlink_to(core)
    os.environ["LD_LIBRARY_PATH"] = f"{alias}:{os.environ.get('LD_LIBRARY_PATH', '')}"
    os.environ["TRITON_EXTRA_ARGS"] = f"--backend-directory={backends}"
    return servers.reference(repo, out / "reference.log")


def ROOT_SITE() -> Path:
    venv = Path(os.environ.get("TRITON_VENV", "/tmp/inferd-reference/venv-triton"))
    return next(venv.glob("lib/python3*/site-packages"))


if __name__ == "__main__":
    main()
