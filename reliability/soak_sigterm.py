"""The SIGTERM check of ``make soak``: a fresh server under load from the soak's clients, plus two
requests that outlast ``--exit-timeout-secs``, sent SIGTERM; what every request got, and how long
the server took to exit.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

from reliability.common import Server
from reliability.soak_clients import BROKEN, Tally, clients


def sigterm_check(
    repo: Path, work: Path, exit_timeout: int, concurrency: int, load_s: float, seed: int
) -> dict[str, Any]:
    """A fresh server under load at ``concurrency`` plus two requests that outlast the exit timeout;
    SIGTERM after ``load_s`` s; what every request got, and the exit time."""
    server = Server(repo, work / "sigterm.log", ["--exit-timeout-secs", str(exit_timeout)]).start()
    long_ms = int((load_s + exit_timeout + 5) * 1000)  # still sleeping at the exit deadline
    long_outcomes: list[str] = []

    async def long_request(i: int) -> None:
        body = json.dumps(
            {"inputs": [{"name": "SLEEP_MS", "shape": [1], "datatype": "INT32", "data": [long_ms]}]}
        ).encode()
        t0 = time.monotonic()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
            writer.write(
                f"POST /v2/models/parallel_sleep/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = head.split(b" ", 2)[1].decode()
            length = int(
                next(
                    (
                        ln.split(b":")[1]
                        for ln in head.split(b"\r\n")
                        if ln.lower().startswith(b"content-length")
                    ),
                    b"0",
                )
            )
            data = await reader.readexactly(length)
            long_outcomes.append(
                f"HTTP {status} after {time.monotonic() - t0:.1f} s: {data[:120].decode('latin-1')}"
            )
            writer.close()
        except (OSError, asyncio.IncompleteReadError) as e:
            long_outcomes.append(f"empty reply after {time.monotonic() - t0:.1f} s ({type(e).__name__})")

    result: dict[str, Any] = {}

    async def main() -> Tally:
        longs = [asyncio.create_task(long_request(i)) for i in range(2)]
        load = asyncio.create_task(
            clients(
                server.http_port,
                server.grpc_port,
                concurrency,
                load_s + exit_timeout + 15,
                seed,
                sigterm=True,
            )
        )
        await asyncio.sleep(load_s)
        server.signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert server.proc is not None
        while server.proc.poll() is None and time.monotonic() - t0 < exit_timeout + 30:
            await asyncio.sleep(0.02)
        result["exit_seconds"] = round(time.monotonic() - t0, 2)
        result["exit_code"] = server.proc.poll()
        tally = await load
        await asyncio.gather(*longs)
        return tally

    try:
        tally = asyncio.run(main())
    finally:
        server.kill()
    lost = sum(v for k, v in tally.outcomes.items() if k.startswith("empty reply")) + sum(
        1 for o in long_outcomes if o.startswith("empty")
    )
    result.update(
        {
            "exit_timeout": exit_timeout,
            "concurrency": concurrency,
            "load_s": load_s,
            "outcomes": dict(tally.outcomes),
            "long_requests": long_outcomes,
            "lost": lost,
            "error_samples": [
                s for s in tally.error_samples if "no answer" in s or any(b in s for b in BROKEN)
            ][:10],
        }
    )
    return result
