"""Time to READY of ``inferd serve`` on the six reference models: from a local folder, from moto's S3
server with an empty cache (every model fetched), and from S3 with the cache warm (listed, not
fetched). Rounds alternate the three; prints the median and range of each.

    .venv/bin/python benchmarks/object_storage_bench.py [--rounds 3]

Needs the s3 extra and moto (``make install``). The S3 emulator runs on 127.0.0.1, started here.
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
from store_emulators import S3_ENV, s3_client, start_moto, upload_s3


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="inferd-s3-bench-"))
    moto = start_moto()
    try:
        upload_s3(s3_client(moto.endpoint), "models", "repo", REFERENCE_MODELS)
        env = {**S3_ENV, "AWS_ENDPOINT_URL": moto.endpoint, "PYTHONDONTWRITEBYTECODE": "1"}
        times: dict[str, list[float]] = {"local folder": [], "S3, cold cache": [], "S3, warm cache": []}
        for r in range(args.rounds):
            cache = str(work / f"cache-{r}")
            log = work / "inferd.log"
            times["local folder"].append(time_to_ready(str(REFERENCE_MODELS), env, log))
            s3_env = {**env, "INFERD_MODEL_CACHE": cache}
            times["S3, cold cache"].append(time_to_ready("s3://models/repo", s3_env, log))
            times["S3, warm cache"].append(time_to_ready("s3://models/repo", s3_env, log))
        base = statistics.median(times["local folder"])
        print(f"time to READY, six reference models, {args.rounds} rounds (median, min-max):")
        for name, values in times.items():
            med = statistics.median(values)
            print(
                f"  {name:15s} {med * 1000:7.0f} ms  ({min(values) * 1000:.0f}-{max(values) * 1000:.0f})"
                f"  x{med / base:.2f}"
            )
    finally:
        moto.stop()


if __name__ == "__main__":
    main()
