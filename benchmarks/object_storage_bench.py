"""Time to READY of ``inferd serve`` on the six reference models: from a local folder, from moto's S3
server and from gcp-storage-emulator (gs://), each with an empty cache (every model fetched) and with
the cache warm (listed, not fetched). Rounds alternate them; prints the median and range of each.

    .venv/bin/python benchmarks/object_storage_bench.py [--rounds 3] [--output DIR]

Needs the s3 and gcs extras, moto and gcp-storage-emulator (``make install``). The emulators run on
127.0.0.1, started here.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_paths import REFERENCE_MODELS, ROOT

sys.path.insert(0, str(ROOT / "tests"))
from store_emulators import S3_ENV, gcs_client, s3_client, start_gcs, start_moto, upload_gcs, upload_s3


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def time_to_ready(repository: str, env: dict[str, str], log: Path) -> float:
    """Seconds from starting ``inferd serve`` to /v2/health/ready answering 200."""
    http_port = _port()
    cmd = [
        sys.executable,
        "-m",
        "inferd",
        "serve",
        f"--model-repository={repository}",
        f"--http-port={http_port}",
        f"--grpc-port={_port()}",
        f"--metrics-port={_port()}",
    ]
    t0 = time.perf_counter()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=ROOT
        )
    try:
        deadline = t0 + 120
        while time.perf_counter() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"inferd exited; see {log}")
            conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=1)
            try:
                with contextlib.suppress(OSError):  # not listening yet: look again
                    conn.request("GET", "/v2/health/ready")
                    if conn.getresponse().status == 200:
                        return time.perf_counter() - t0
            finally:
                conn.close()
            time.sleep(0.01)
        raise RuntimeError(f"not ready within 120 s; see {log}")
    finally:
        proc.terminate()
        proc.wait(30)


def render(times: dict[str, list[float]], rounds: int, load: tuple[str, str]) -> str:
    base = statistics.median(times["local folder"])
    lines = [
        "## Object storage: time to READY (issues 14, 28)",
        "",
        "`benchmarks/object_storage_bench.py`: `inferd serve` on the six reference models from a local folder, "
        "from moto's S3 server and from gcp-storage-emulator (gs://; both started on 127.0.0.1), each with an "
        "empty model cache (every file fetched) and with the cache warm (listed, not fetched), in turn; "
        f"{rounds} round(s); load average at start / end: "
        f"{load[0]} / {load[1]}. Time from starting the process to `/v2/health/ready` answering 200.",
        "",
        "| repository | median (ms) | rounds (ms) | vs local folder |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, values in times.items():
        med = statistics.median(values)
        per = " ".join(f"{v * 1000:.0f}" for v in values)
        lines.append(f"| {name} | {med * 1000:,.0f} | {per} | {med / base:.2f}x |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=None, help="results folder (writes object_storage.md)")
    args = parser.parse_args()
    start = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    work = Path(tempfile.mkdtemp(prefix="inferd-s3-bench-"))
    moto = start_moto()
    gcs = start_gcs()
    try:
        upload_s3(s3_client(moto.endpoint), "models", "repo", REFERENCE_MODELS)
        upload_gcs(gcs_client(gcs), "models", "repo", REFERENCE_MODELS)
        env = {
            **S3_ENV,
            "AWS_ENDPOINT_URL": moto.endpoint,
            "STORAGE_EMULATOR_HOST": gcs.endpoint,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        times: dict[str, list[float]] = {
            "local folder": [],
            "S3, cold cache": [],
            "S3, warm cache": [],
            "gs://, cold cache": [],
            "gs://, warm cache": [],
        }
        for r in range(args.rounds):
            log = work / "inferd.log"
            times["local folder"].append(time_to_ready(str(REFERENCE_MODELS), env, log))
            for scheme, label in (("s3", "S3"), ("gs", "gs://")):
                store_env = {**env, "INFERD_MODEL_CACHE": str(work / f"cache-{scheme}-{r}")}
                times[f"{label}, cold cache"].append(time_to_ready(f"{scheme}://models/repo", store_env, log))
                times[f"{label}, warm cache"].append(time_to_ready(f"{scheme}://models/repo", store_env, log))
        end = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        text = render(times, args.rounds, (start, end))
        print(text)
        if args.output is not None:
            args.output.mkdir(parents=True, exist_ok=True)
            (args.output / "object_storage.md").write_text(text)
    finally:
        moto.stop()
        gcs.stop()


if __name__ == "__main__":
    main()
