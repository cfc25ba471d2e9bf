"""The GPU rows of issue 27, against the same model in a plain torch loop on the same GPU.

    python benchmarks/gpu_bench.py --output DIR           # on a GPU (scripts/gpu_check.sh runs it)
    python benchmarks/gpu_bench.py --cpu --output DIR     # the dry run's CPU variant: a small net, seconds

Rows (models: gpu_models.py, in a temporary repository; the server is ``python -m inferd serve``):

(a) ``resnet`` (ResNet-50-sized, TorchScript, KIND_GPU gpus [0]) over HTTP with binary tensors at
    concurrency 1 against the same TorchScript file in a plain loop in this process (the same input
    shape, host tensor to the GPU and the output back to the host each time, so synchronised). Goal
    >= 0.9x.
(b) ``resnet_dyn`` (the same with dynamic batching) at concurrency 16 against the plain loop's
    single-request rate. Goal >= 2x.
(c) ``sum_input``: a 16 MiB FP32 input through CUDA shared memory (tritonclient's
    ``cuda_shared_memory``, registered once) against the same requests over binary HTTP, one client
    at a time. Where the server refuses the registration (today it answers as a server without a
    GPU), the row says "not built yet" with its answer and only the binary half is measured.
(d) four Python models with weights on GPU 0 (``execution_mode: thread``): the GPU memory of the
    server's processes (NVML's per-process figures; the device's used memory before and after as a
    check) against the ~900 MB per stub process the reference's users report (server#4457).

The served rows are measured by perf_analyzer when ``--perf-analyzer`` (or ``$PERF_ANALYZER``) names
one that runs (time windows of ``seconds``, stability 25% over up to 6 windows, one looser retry, as
bench.sh), else by a Python client (tritonclient HTTP, one process per concurrent request), after
a few unmeasured seconds of each served model (the first executes of each batch size pick kernels).
Rounds alternate which side goes first; the tables give medians with each round's figure. Everything is
written to ``DIR/gpu_bench.md`` (GPU.md-ready) and ``DIR/gpu_bench.json`` after each measurement, so
a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gpu_models
import numpy as np
import servers
from cpu import process_tree
from gpu_models import MIB, PYTHON_MODELS, Profile
from onnx_bench import parse_perf

#: the reference's GPU memory per Python-backend stub process, as its users report it (server#4457)
REFERENCE_STUB_MB = 900
Result = dict[str, Any]


# -- clients -------------------------------------------------------------------------------------
def _client_worker(
    url: str, model: str, shape: tuple[int, ...], seconds: float, barrier: Any, out: Any
) -> None:
    """One concurrent request stream: tritonclient HTTP, binary input and output, after a warm-up;
    puts (rate, latencies) or ("error", text), and breaks the barrier when it cannot start."""
    try:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(url, connection_timeout=60, network_timeout=300)
        inp = httpclient.InferInput("INPUT__0", [1, *shape], "FP32")
        inp.set_data_from_numpy(
            np.random.default_rng().random((1, *shape), dtype=np.float32), binary_data=True
        )
        wanted = [httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True)]
        for _ in range(5):
            client.infer(model, [inp], outputs=wanted)
    except Exception as e:
        out.put(("error", f"{type(e).__name__}: {e}"))
        barrier.abort()
        return
    barrier.wait(timeout=120)
    try:
        lat: list[float] = []
        begun = time.perf_counter()
        end = begun + seconds
        while True:
            t0 = time.perf_counter()
            client.infer(model, [inp], outputs=wanted)
            t1 = time.perf_counter()
            lat.append(t1 - t0)
            if t1 >= end:
                break
        out.put((len(lat) / (t1 - begun), lat))
    except Exception as e:
        out.put(("error", f"{type(e).__name__}: {e}"))
    finally:
        client.close()


def python_client(url: str, model: str, shape: tuple[int, ...], concurrency: int, seconds: float) -> Result:
    """``concurrency`` request streams, a process each, started together and measured for ``seconds``."""
    ctx = mp.get_context("spawn")  # this process may hold a CUDA context: never fork it
    barrier, out = ctx.Barrier(concurrency + 1), ctx.Queue()
    procs = [
        ctx.Process(target=_client_worker, args=(url, model, shape, seconds, barrier, out), daemon=True)
        for _ in range(concurrency)
    ]
    for p in procs:
        p.start()
    try:
        try:
            barrier.wait(timeout=180)
        except threading.BrokenBarrierError:
            raise RuntimeError(f"a client did not start: {out.get(timeout=10)[1]}") from None
        got = [out.get(timeout=seconds + 300) for _ in procs]
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    errors = [text for rate, text in got if rate == "error"]
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]}")
    lat = sorted(x for _, ls in got for x in ls)
    return {"infer_per_s": sum(rate for rate, _ in got), **_quantiles(lat), "client": "python"}


def perf_analyzer(
    pa: str, url: str, model: str, shape: tuple[int, ...], concurrency: int, seconds: float, raw: Path
) -> Result:
    """bench.sh's settings with time windows of ``seconds``; {} when no stable measurement came."""
    csv_path = raw.with_suffix(".csv")
    for stability, trials in (("25", "6"), ("100", "4")):
        csv_path.unlink(missing_ok=True)
        cmd = [pa, "-v", "-m", model, "-i", "http", "-u", url, "--concurrency-range", str(concurrency),
               "-b", "1", "--shape", "INPUT__0:" + ",".join(map(str, shape)),
               "--measurement-mode", "time_windows", "--measurement-interval", str(int(seconds * 1000)),
               "-s", stability, "-r", trials, "-f", str(csv_path)]  # fmt: skip
        with open(raw, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n")
            f.flush()
            try:
                rc = subprocess.run(
                    cmd, stdout=f, stderr=subprocess.STDOUT, timeout=60 + 12 * seconds
                ).returncode
            except subprocess.TimeoutExpired:
                rc = -1
        if rc == 0 and csv_path.exists() and csv_path.stat().st_size > 0:
            got = parse_perf(csv_path, raw)
            return {k: got[k] for k in ("infer_per_s", "p50_us", "p99_us", "spread_pct")} | {
                "client": "perf_analyzer",
                "status": "stable" if stability == "25" else "loose",
            }
    return {}


def runs(pa: str | None) -> bool:
    if not pa:
        return False
    try:
        return subprocess.run([pa, "--version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _quantiles(lat_s: list[float]) -> Result:
    if not lat_s:
        return {"p50_us": None, "p99_us": None}
    return {
        "p50_us": round(lat_s[len(lat_s) // 2] * 1e6, 1),
        "p99_us": round(lat_s[min(len(lat_s) - 1, int(len(lat_s) * 0.99))] * 1e6, 1),
    }


# -- the plain loop ------------------------------------------------------------------------------
def plain_loop(torch: Any, model_path: Path, device: str, shape: tuple[int, ...], seconds: float) -> Result:
    """The TorchScript file in a loop here: host tensor to ``device``, forward, output to the host."""
    module = torch.jit.load(str(model_path), map_location=device).eval()
    x = torch.from_numpy(np.random.default_rng(0).random((1, *shape), dtype=np.float32))
    lat: list[float] = []
    with torch.inference_mode():
        for _ in range(10):
            module(x.to(device)).cpu()
        begun = time.perf_counter()
        end = begun + seconds
        while True:
            t0 = time.perf_counter()
            module(x.to(device)).cpu()  # .cpu() waits for the GPU
            t1 = time.perf_counter()
            lat.append(t1 - t0)
            if t1 >= end:
                break
    return {"infer_per_s": len(lat) / (t1 - begun), **_quantiles(sorted(lat)), "client": "torch loop"}


# -- NVML ---------------------------------------------------------------------------------------
def _nvml() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def device_used_bytes(index: int = 0) -> int | None:
    nvml = _nvml()
    if nvml is None:
        return None
    return int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index)).used)


def process_gpu_bytes(index: int = 0) -> dict[int, int | None]:
    """pid -> GPU memory of every process with a CUDA context on GPU ``index`` (None: not reported)."""
    nvml = _nvml()
    if nvml is None:
        return {}
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    return {int(p.pid): (int(p.usedGpuMemory) if p.usedGpuMemory else None)
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)}  # fmt: skip


def rss_bytes(pids: set[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/statm") as f:  # (a process gone meanwhile)
            total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return total


# -- the rows ------------------------------------------------------------------------------------
class Bench:
    """The measurements of one run, written out after each one."""

    def __init__(self, p: Profile, out: Path, python: str, pa: str | None, gpu: bool) -> None:
        self.p, self.out, self.python, self.pa, self.gpu = p, out, python, pa, gpu
        self.results: dict[str, Any] = {"profile": p.name, "rounds": {}, "notes": [], "started": time.time()}

    def add(self, row: str, side: str, got: Result) -> None:
        self.results["rounds"].setdefault(row, {}).setdefault(side, []).append(got)
        servers.log(f"{row:24} {side:10} {got}")
        self.save()

    def note(self, key: str, value: Any) -> None:
        self.results[key] = value
        self.save()

    def save(self) -> None:
        (self.out / "gpu_bench.json").write_text(json.dumps(self.results, indent=1, default=str))
        (self.out / "gpu_bench.md").write_text(render(self.results))

    def served(self, url: str, model: str, concurrency: int, raw: Path) -> Result:
        shape = self.p.input_shape
        if self.pa:
            got = perf_analyzer(self.pa, url, model, shape, concurrency, self.p.seconds, raw)
            if got:
                return got
            self.results["notes"].append(f"perf_analyzer found no measurement ({raw.name}): Python client")
        return python_client(url, model, shape, concurrency, self.p.seconds)

    def torch_rows(self, torch: Any, device: str) -> None:
        """(a) and (b) and the binary half of (c) on one server; then (c)'s shared-memory half."""
        repo = self.out / "models"
        model_pt = gpu_models.write_torch_models(torch, repo, self.p)
        server = servers.inferd(repo, self.out / "inferd.log", self.python)
        ports = server.start()
        url = f"localhost:{ports.http}"
        try:
            # unmeasured: the first executes of each batch size pick kernels (TorchScript's profiling
            # runs, cuDNN's algorithms), and dynamic batching meets batch sizes 1 to 16
            python_client(url, "resnet", self.p.input_shape, 1, self.p.seconds)
            python_client(url, "resnet_dyn", self.p.input_shape, self.p.concurrency, 2 * self.p.seconds)
            for rnd in range(1, self.p.rounds + 1):  # who goes first flips each round
                loop = functools.partial(self._loop_round, torch, model_pt, device)
                served = functools.partial(self._served_round, url, rnd)
                for run in (loop, served) if rnd % 2 else (served, loop):
                    run()
            try:
                self.shm_rows(url)
            except Exception as e:  # (a) and (b) are kept; the report says what failed
                self.results["notes"].append(
                    f"the shared-memory row failed: {type(e).__name__}: {str(e)[:500]}"
                )
        finally:
            server.stop()

    def _loop_round(self, torch: Any, model_pt: Path, device: str) -> None:
        self.add(
            "plain_loop", "torch", plain_loop(torch, model_pt, device, self.p.input_shape, self.p.seconds)
        )

    def _served_round(self, url: str, rnd: int) -> None:
        self.add("resnet_http_c1", "inferd", self.served(url, "resnet", 1, self.out / f"pa-r{rnd}-c1.txt"))
        c = self.p.concurrency
        raw = self.out / f"pa-r{rnd}-c{c}.txt"
        self.add(f"resnet_dyn_http_c{c}", "inferd", self.served(url, "resnet_dyn", c, raw))

    def shm_rows(self, url: str) -> None:
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        nbytes = self.p.shm_mib * MIB
        data = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
        client = httpclient.InferenceServerClient(url, network_timeout=300)
        wanted = [httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True)]
        binary = httpclient.InferInput("INPUT__0", [nbytes // 4], "FP32")
        binary.set_data_from_numpy(data, binary_data=True)
        region, handle = "inferd_gpu_bench", None
        try:
            if self.gpu:
                import tritonclient.utils.cuda_shared_memory as cudashm

                handle = cudashm.create_shared_memory_region(region, nbytes, 0)
                cudashm.set_shared_memory_region(handle, [data])
                raw_handle = cudashm.get_raw_handle(handle)
            else:  # no GPU: only the server's answer to a registration is read
                raw_handle = base64.b64encode(bytes(64))
            try:
                client.register_cuda_shared_memory(region, raw_handle, 0, nbytes)
                registered = True
            except InferenceServerException as e:
                registered = False
                self.note("cuda_shm", f"not built yet: the server refuses the registration ({e.message()})")
            shm = httpclient.InferInput("INPUT__0", [nbytes // 4], "FP32")
            shm.set_shared_memory(region, nbytes)
            for rnd in range(1, self.p.rounds + 1):
                sides = [("binary_http", binary), *([("cuda_shm", shm)] if registered and self.gpu else [])]
                for side, inp in sides if rnd % 2 else reversed(sides):
                    self.add(
                        f"sum_{self.p.shm_mib}MiB_c1",
                        side,
                        _loop(client, "sum_input", inp, wanted, self.p.seconds),
                    )
            if registered:
                client.unregister_cuda_shared_memory(region)
                self.note("cuda_shm", "measured" if self.gpu else "the server accepted a dummy handle")
        finally:
            if handle is not None:
                cudashm.destroy_shared_memory_region(handle)
            client.close()

    def python_models_row(self) -> None:
        """(d): the server's GPU memory with the four Python models loaded and run once each."""
        import tritonclient.http as httpclient

        repo = self.out / "python_models"
        kind = self.p.kind
        gpu_models.write_python_models(repo, self.p)
        before = device_used_bytes() if self.gpu else None
        server = servers.inferd(repo, self.out / "inferd-python.log", self.python)
        try:
            ports = server.start()
        except servers.StartError as e:
            if kind != "KIND_GPU":
                raise
            kind = "KIND_CPU"  # a server that places no Python instance on a GPU: the models pick cuda:0
            self.results["notes"].append(f"Python models on KIND_GPU did not load ({str(e)[:300]}): KIND_CPU")
            gpu_models.write_python_models(repo, self.p, kind)
            ports = server.start()
        try:
            client = httpclient.InferenceServerClient(f"localhost:{ports.http}", network_timeout=300)
            inp = httpclient.InferInput("INPUT0", [1, 1024], "FP32")
            inp.set_data_from_numpy(np.ones((1, 1024), dtype=np.float32))
            for name in PYTHON_MODELS:
                client.infer(name, [inp])
            client.close()
            time.sleep(1.0)
            assert server.pid is not None
            tree = process_tree(server.pid)
            procs = process_gpu_bytes() if self.gpu else {}
            mine = {pid: b for pid, b in procs.items() if pid in tree}
            after = device_used_bytes() if self.gpu else None
            self.note(
                "python_models",
                {
                    "kind": kind,
                    "gpu": self.gpu,
                    "processes_with_cuda": len(mine),
                    "process_bytes": sum(b or 0 for b in mine.values()) if mine else None,
                    "per_process_reported": all(b is not None for b in mine.values()) if mine else None,
                    "device_used_delta_bytes": after - before
                    if after is not None and before is not None
                    else None,
                    "server_rss_bytes": rss_bytes(tree),
                    "server_processes": len(tree),
                },
            )
        finally:
            server.stop()


def _loop(client: Any, model: str, inp: Any, wanted: list[Any], seconds: float) -> Result:
    for _ in range(3):
        client.infer(model, [inp], outputs=wanted)
    lat: list[float] = []
    begun = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        client.infer(model, [inp], outputs=wanted)
        t1 = time.perf_counter()
        lat.append(t1 - t0)
        if t1 >= begun + seconds:
            break
    return {"infer_per_s": len(lat) / (t1 - begun), **_quantiles(sorted(lat)), "client": "python"}


# -- the report ----------------------------------------------------------------------------------
def _median(runs: list[Result], key: str = "infer_per_s") -> float | None:
    vals = [r[key] for r in runs if r and r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _rate(runs: list[Result]) -> str:
    m = _median(runs)
    if m is None:
        return "-"
    per = ", ".join(f"{r['infer_per_s']:,.1f}" if r and r.get("infer_per_s") else "-" for r in runs)
    return f"{m:,.1f} ({per})"


def _latency(runs: list[Result]) -> str:
    p50, p99 = _median(runs, "p50_us"), _median(runs, "p99_us")
    return f"{p50:,.0f} / {p99:,.0f}" if p50 is not None and p99 is not None else "-"


def _ratio(top: float | None, bottom: float | None, goal: float) -> tuple[str, str]:
    if not top or not bottom:
        return "-", f">= {goal:g}x"
    x = top / bottom
    return f"{x:.2f}x", f">= {goal:g}x: {'met' if x >= goal else 'not met'}"


def _memory_row(pm: dict[str, Any]) -> str:
    """(d) in words: what the server's processes hold on the GPU against the reference's figure."""
    four = 4 * REFERENCE_STUB_MB
    mem, delta = pm.get("process_bytes"), pm.get("device_used_delta_bytes")
    text = f"(d) 4 Python models ({pm['kind']}, execution_mode thread, 4 MiB of weights each): "
    if not pm.get("gpu"):
        return (
            text + f"no GPU here, no GPU memory to state (the server's RSS was "
            f"{pm['server_rss_bytes'] / 1e6:,.0f} MB; the reference: ~{REFERENCE_STUB_MB} MB of GPU memory per "
            "stub process, server#4457)."
        )
    if mem:
        text += (
            f"the server holds {mem / 1e6:,.0f} MB of GPU memory in {pm['processes_with_cuda']} "
            f"process(es) with a CUDA context (NVML, per process; {mem / 1e6 / four:.2f}x of"
        )
    else:
        text += "NVML reported no per-process GPU memory for the server (against"
    text += f" the reference's ~{REFERENCE_STUB_MB} MB per stub process, server#4457: ~{four:,} MB for four)"
    if delta is not None:
        text += f"; the device's used memory grew {delta / 1e6:,.0f} MB"
    return text + "."


def render(res: dict[str, Any]) -> str:
    """The GPU.md-ready summary: a header, the rows table, the memory row in words, the notes."""
    rounds: dict[str, dict[str, list[Result]]] = res.get("rounds", {})
    loop = rounds.get("plain_loop", {}).get("torch", [])
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(res.get("started", time.time())))
    lines = [
        f"{started}, {res.get('profile', '?')} profile on {res.get('device', '?')} (torch {res.get('torch', '?')}); "
        f"served rows measured by {res.get('client', '?')}; medians of the rounds (each round's figure in "
        "brackets), infer/s, latency in us.",
        "",
        "| row | inferd (infer/s) | inferd p50 / p99 | baseline (infer/s) | baseline p50 / p99 | ratio | goal |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    c1 = rounds.get("resnet_http_c1", {}).get("inferd", [])
    ratio, goal = _ratio(_median(c1), _median(loop), 0.9)
    lines.append(f"| (a) `resnet_http_c1` vs plain torch loop | {_rate(c1)} | {_latency(c1)} | {_rate(loop)} "
                 f"| {_latency(loop)} | {ratio} | {goal} |")  # fmt: skip
    for row, sides in rounds.items():
        if row.startswith("resnet_dyn_http_c"):
            got = sides.get("inferd", [])
            ratio, goal = _ratio(_median(got), _median(loop), 2.0)
            lines.append(f"| (b) `{row}` (dynamic batching) vs the plain loop's single-request rate | "
                         f"{_rate(got)} | {_latency(got)} | {_rate(loop)} | {_latency(loop)} | {ratio} | {goal} |")  # fmt: skip
        if row.startswith("sum_"):
            shm, binary = sides.get("cuda_shm", []), sides.get("binary_http", [])
            ratio, goal = _ratio(_median(shm), _median(binary), 3.0)
            state = res.get("cuda_shm", "")
            shm_cell = _rate(shm) if shm else (state or "not measured")
            lines.append(f"| (c) `{row}`: CUDA shared memory vs binary HTTP | {shm_cell} | {_latency(shm)} | "
                         f"{_rate(binary)} | {_latency(binary)} | {ratio} | {goal} |")  # fmt: skip
    pm = res.get("python_models")
    if pm:
        lines += ["", _memory_row(pm)]
    if res.get("notes"):
        lines += ["", "Notes:", *(f"- {n}" for n in res["notes"])]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--cpu", action="store_true", help="the CPU variant (also chosen where torch sees no GPU)"
    )
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=None, help="one measurement's length")
    ap.add_argument("--output", type=Path, default=None, help="results folder (default: a new one)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs inferd")
    ap.add_argument("--perf-analyzer", default=os.environ.get("PERF_ANALYZER"), help="perf_analyzer to use")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, servers.on_sigterm)  # a timeout's SIGTERM still stops the servers
    import dataclasses

    import torch

    gpu = bool(torch.cuda.is_available()) and not args.cpu
    p = gpu_models.GPU if gpu else gpu_models.CPU
    p = dataclasses.replace(p, rounds=args.rounds or p.rounds, seconds=args.seconds or p.seconds)
    out = args.output or servers.ROOT / "benchmarks" / "results" / time.strftime(
        "gpu-%Y%m%d-%H%M%S", time.gmtime()
    )
    out.mkdir(parents=True, exist_ok=True)
    pa = args.perf_analyzer if runs(args.perf_analyzer) else None
    bench = Bench(p, out, args.python, pa, gpu)
    if args.perf_analyzer and not pa:
        bench.results["notes"].append(f"perf_analyzer {args.perf_analyzer} does not run: Python client")
    bench.note("device", torch.cuda.get_device_name(0) if gpu else "the CPU (no GPU)")
    bench.note("torch", torch.__version__)
    bench.note(
        "client",
        "perf_analyzer" if pa else "a Python client (tritonclient HTTP, a process per request stream)",
    )
    failed = 0
    steps: list[tuple[str, Callable[[], None]]] = [
        ("the torch rows", lambda: bench.torch_rows(torch, "cuda:0" if gpu else "cpu")),
        ("the Python models' memory row", bench.python_models_row),
    ]
    for what, step in steps:
        try:
            step()
        except Exception as e:  # the other rows still run; the report says what failed
            failed += 1
            bench.results["notes"].append(f"{what} failed: {type(e).__name__}: {str(e)[:500]}")
            import traceback

            traceback.print_exc()
    bench.save()
    print(render(bench.results))
    print(f"results: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
