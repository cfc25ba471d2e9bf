#!/usr/bin/env python3
"""Bare ONNX Runtime, in-process: the baseline the served ONNX models are compared with.

    .venv/bin/python benchmarks/bare_onnxruntime.py examples/models/densenet_onnx --concurrency 1,4

Opens the model as inferd would serve it: the same config (auto-completed and normalised the way
inferd does), the same number of sessions (one per instance) and the same session options
(``inferd.backends.onnxruntime.options.session_settings``: threads, graph level, providers). Then
``--concurrency`` client threads each call ``session.run`` in a loop, on random inputs of the
config's shape with batch 1 (what perf_analyzer sends), borrowing an idle session for each call
as the server's instances are shared. Prints one JSON line per concurrency:
``{"model", "concurrency", "infer_per_s", "p50_us", "p99_us", "count", "threads"}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import queue
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import InstanceSpec
from inferd.backends.onnxruntime.backend import OnnxRuntimeBackend, model_path
from inferd.backends.onnxruntime.options import intra_op_threads, session_options, session_settings
from inferd.backends.onnxruntime.providers import execution_providers
from inferd.core.types import BY_CONFIG_VALUE
from inferd.repository import autofill_backend_fields, load_model_config, normalize_config


def load_config(model_dir: Path, default_max_batch_size: int = 4) -> tuple[Any, Path]:
    """The normalised config of ``model_dir`` (as inferd makes it) and its highest version folder."""
    versions = sorted(
        (p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
    )
    if not versions:
        raise SystemExit(f"{model_dir}: no version folder")
    cfg, _ = load_model_config(model_dir)
    autofill_backend_fields(cfg, model_dir.name, model_dir, version_dirs=versions)
    OnnxRuntimeBackend().auto_complete(
        cfg, model_dir, versions[0], default_max_batch_size=default_max_batch_size
    )
    normalize_config(cfg, model_dir.name)
    return cfg, versions[-1]


def make_feed(cfg: Any, rng: np.random.Generator) -> dict[str, Any]:
    """Random inputs of batch 1 in the framework's shape (config dims, reshape applied)."""
    feed = {}
    for io in cfg.input:
        dims = [d if d > 0 else 1 for d in (io.reshape.shape if io.HasField("reshape") else io.dims)]
        shape = ([1] if cfg.max_batch_size > 0 else []) + dims
        dt = BY_CONFIG_VALUE[io.data_type]
        if dt.wire == "BYTES":
            feed[io.name] = np.array(["x"] * int(np.prod(shape)), dtype=object).reshape(shape)
        elif dt.numpy.kind == "f":
            feed[io.name] = rng.random(shape).astype(dt.numpy)
        else:
            feed[io.name] = rng.integers(0, 2, shape).astype(dt.numpy)
    return feed


def measure(
    sessions: list[Any], feed: dict[str, Any], concurrency: int, seconds: float, warmup_s: float
) -> dict[str, Any]:
    # the lowest idle session first, as inferd's instance pool hands work to its lowest idle instance
    idle: queue.PriorityQueue[tuple[int, Any]] = queue.PriorityQueue()
    for i, s in enumerate(sessions):
        idle.put((i, s))
    names = [o.name for o in sessions[0].get_outputs()]
    stop_warm = time.monotonic() + warmup_s
    stop = stop_warm + seconds
    lat: list[list[int]] = [[] for _ in range(concurrency)]

    def client(i: int) -> None:
        out = lat[i]
        clock = time.perf_counter_ns
        only = sessions[0] if concurrency == 1 else None  # alone: no need to borrow
        while True:
            t0 = clock()
            if only is not None:
                only.run(names, feed)
            else:
                i, s = idle.get()
                s.run(names, feed)
                idle.put((i, s))
            t1 = clock()
            now = time.monotonic()
            if now >= stop:
                return
            if now >= stop_warm:
                out.append(t1 - t0)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ns = sorted(x for per in lat for x in per)
    n = len(all_ns)
    return {
        "concurrency": concurrency,
        "count": n,
        "infer_per_s": n / seconds if n else 0.0,
        "p50_us": statistics.median(all_ns) / 1000 if n else None,
        "p99_us": all_ns[min(n - 1, int(n * 0.99))] / 1000 if n else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--concurrency", default="1,4", help="comma-separated client thread counts")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per concurrency")
    ap.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    ap.add_argument("--intra-op-threads", type=int, default=0, help="override (0: as inferd would)")
    ap.add_argument("--instances", type=int, default=0, help="override the session count (0: the config's)")
    ap.add_argument(
        "--layout",
        choices=("inferd", "default", "shared"),
        default="inferd",
        help="inferd: the sessions inferd makes (the first with every core); default: one InferenceSession "
        "with ONNX Runtime's default options; shared: the cores shared out evenly among the sessions",
    )
    ap.add_argument("--output", type=Path, default=None, help="also append the JSON lines to this file")
    a = ap.parse_args(argv)
    cfg, version_dir = load_config(a.model_dir)
    count = a.instances or sum(max(1, g.count) for g in cfg.instance_group) or 1
    if a.intra_op_threads:
        cfg.parameters["intra_op_thread_count"].string_value = str(a.intra_op_threads)
    settings = session_settings(cfg, count)
    import onnxruntime as ort

    available = ort.get_available_providers()
    path = model_path(cfg, version_dir)
    if a.layout == "shared":
        settings = dataclasses.replace(settings, first_intra_op_threads=0)
    sessions = []
    threads = []
    if a.layout == "default":
        sessions.append(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))
        threads.append(0)  # ONNX Runtime's choice: every core
    else:
        for i in range(count):
            spec = InstanceSpec(f"{cfg.name}_{i}", "CPU", 0)
            providers = execution_providers(settings, spec, available)
            options = session_options(settings, i == 0)
            sessions.append(ort.InferenceSession(str(path), options, providers=providers))
            threads.append(intra_op_threads(settings, i == 0))
    feed = make_feed(cfg, np.random.default_rng(0))
    for c in (int(x) for x in a.concurrency.split(",") if x.strip()):
        row = measure(sessions, feed, c, a.seconds, a.warmup)
        row.update(
            model=cfg.name,
            layout=a.layout,
            sessions=len(sessions),
            threads={"intra_op": threads, "inter_op": settings.inter_op_threads},
        )
        line = json.dumps(row)
        print(line, flush=True)
        if a.output is not None:
            with open(a.output, "a") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
