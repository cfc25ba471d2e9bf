"""Answers held for clients that do not read them, across connections (issue 42): the server's one
budget for them (``--max-unsent-bytes``). Each case runs as an attack of ``attacks.py`` (a health check
every 100 ms, RSS sampled) against a model whose small requests get large answers (``big_answer``):

- ``grpc_window_zero``: one HTTP/2 connection (the ``h2`` package) that sets its window to 0 and
  opens many ModelInfer calls: none of their answers can go out;
- ``http_pipelining_many``: many HTTP connections, each pipelining a few requests without reading.

Each samples what the server says it holds (``inferd_unsent_response_bytes`` on /metrics) and its
RSS while the clients hold, checks that tritonclient's requests (HTTP and gRPC, a small answer and a
large one on connections of their own) are served meanwhile, closes the connections and checks that
the held bytes go back to 0 and the RSS to within ``RETURN_SLACK`` of idle.

``CASES`` maps a name to (what, expected, which limit the RSS goal uses, function); the functions read
their sizes from the ``AttackConfig`` when it has them (``MEMORY_DEFAULTS`` otherwise).

    python -m reliability.attacks_memory --json out.json     # each case against a fresh server
    INFERD_SRC=/path/to/older/src python -m reliability.attacks_memory   # the same against another tree
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2

from reliability.common import ROOT, HealthWatch, MiB, Server, build_repository, mib

#: the cases' sizes, where the AttackConfig does not set them (the issue's probe)
MEMORY_DEFAULTS: dict[str, Any] = {
    "memory_calls": 200,  # ModelInfer calls on the connection that opens no window
    "memory_answer_bytes": 4 * MiB,  # bytes of each of their answers
    "memory_connections": 200,  # HTTP connections pipelining without reading
    "memory_pipelined": 8,  # requests each of them sends at once
    # bytes of each of their answers (smaller: before the budget, a server held all 1,600 of them)
    "memory_http_answer_bytes": MiB,
    "unsent_limit": 64 * MiB,  # the server's --max-unsent-bytes (where the server does not say it)
}
MODEL = "big_answer"
#: where ``big_answer`` is (not in the default repositories: the fuzz adds it, ``add_model``)
MEMORY_MODELS = ROOT / "tests" / "fixtures" / "memory_models"
#: after the connections closed, the server's RSS comes back within this of its idle figure
RETURN_SLACK = 64 * MiB


def add_model(repository: Path) -> None:
    """Copy ``big_answer`` into ``repository``."""
    shutil.copytree(MEMORY_MODELS / MODEL, repository / MODEL, dirs_exist_ok=True)


def _cfg(cfg: Any, name: str) -> Any:
    return getattr(cfg, name, MEMORY_DEFAULTS[name])


def _metrics(server: Server) -> dict[str, int]:
    """The server's ``inferd_unsent_*`` figures (none from a server that has no budget)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line.startswith("inferd_unsent_"):
            name, _, value = line.partition(" ")
            out[name] = int(float(value))
    return out


def _executed(server: Server) -> int:
    # a generous timeout: while 200 connections push answers of 1 MiB on two shared cores a new
    # connection's statistics can take seconds (make fuzz under load 10 ended this case in a
    # harness TimeoutError; this GET had the only short timeout of the case, 5 s)
    status, body = server.get(f"/v2/models/{MODEL}/stats", timeout=30.0)
    if status != 200:
        return -1
    stats = json.loads(body)["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]) + int(stats["fail"]["count"])


class _Held:
    """What the server holds, read every 100 ms while the clients hold (its most, and the last)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.most = -1  # -1: the server does not say
        self.rss_most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Held:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            held = _metrics(self.server).get("inferd_unsent_response_bytes", -1)
            self.most = max(self.most, held)
            self.rss_most = max(self.rss_most, self.server.rss())
            self._stop.wait(0.1)


def _settle(server: Server, quiet_s: float = 1.5, limit_s: float = 120.0) -> int:
    """The model's executions once they stopped growing for ``quiet_s``."""
    last, since = _executed(server), time.monotonic()
    end = since + limit_s
    while time.monotonic() < end:
        time.sleep(0.1)
        now = _executed(server)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return last


def _request(size: int) -> service_pb2.ModelInferRequest:
    req = service_pb2.ModelInferRequest(model_name=MODEL)
    req.inputs.add(name="BYTES", datatype="INT64", shape=[1])
    req.raw_input_contents.append(np.array([size], np.int64).tobytes())
    return req


def other_clients(server: Server, size: int) -> tuple[bool, str]:
    """tritonclient's HTTP and gRPC clients, each a small answer and one of ``size`` bytes, on
    connections of their own (a client that reads is served while others hold the budget)."""
    got = []
    ok = True
    for n in (16, size):
        inp = httpclient.InferInput("BYTES", [1], "INT64")
        inp.set_data_from_numpy(np.array([n], np.int64))
        t0 = time.perf_counter()
        try:
            with contextlib.closing(
                httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", network_timeout=60)
            ) as c:
                out = c.infer(MODEL, [inp]).as_numpy("OUT")
            good = out is not None and out.size == n
            got.append(
                f"HTTP {n:,} B {'ok' if good else 'WRONG'} in {(time.perf_counter() - t0) * 1000:.0f} ms"
            )
        except Exception as e:
            good = False
            got.append(f"HTTP {n:,} B: {str(e)[:120]}")
        ok = ok and (good or n > 16)  # a large answer may be refused while the budget is full
        ginp = grpcclient.InferInput("BYTES", [1], "INT64")
        ginp.set_data_from_numpy(np.array([n], np.int64))
        t0 = time.perf_counter()
        try:
            with contextlib.closing(
                grpcclient.InferenceServerClient(
                    f"127.0.0.1:{server.grpc_port}", channel_args=[("grpc.max_receive_message_length", -1)]
                )
            ) as g:
                gout = g.infer(MODEL, [ginp], client_timeout=60).as_numpy("OUT")
            good = gout is not None and gout.size == n
            got.append(
                f"gRPC {n:,} B {'ok' if good else 'WRONG'} in {(time.perf_counter() - t0) * 1000:.0f} ms"
            )
        except Exception as e:
            good = False
            got.append(f"gRPC {n:,} B: {str(e)[:120]}")
        ok = ok and (good or n > 16)
    return ok, "; ".join(got)


def _returned(server: Server, idle: int, limit_s: float = 20.0) -> tuple[int, int]:
    """(RSS, held bytes) once the RSS is back within ``RETURN_SLACK`` of ``idle`` and nothing is
    held (or after ``limit_s``)."""
    end = time.monotonic() + limit_s
    while True:
        rss = server.rss()
        held = _metrics(server).get("inferd_unsent_response_bytes", 0)
        if (rss - idle <= RETURN_SLACK and held <= 0) or time.monotonic() > end:
            return rss, held
        time.sleep(0.2)


def _limit(server: Server, cfg: Any) -> tuple[int, bool]:
    """The server's budget (from /metrics; else the configured one) and whether the server said it."""
    said = _metrics(server).get("inferd_unsent_response_bytes_limit")
    return (said, True) if said is not None else (_cfg(cfg, "unsent_limit"), False)


# -- the cases -----------------------------------------------------------------------------------
class _WindowZero:
    """An HTTP/2 client that sets SETTINGS_INITIAL_WINDOW_SIZE 0 and never opens a window: its
    calls' answers can never be sent. Reads frames in a thread (answering SETTINGS and PING, as h2
    does by itself) to count the calls that ended."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}
        )
        self.conn.initiate_connection()
        self._lock = threading.Lock()
        self.statuses: dict[str, int] = {}
        self._send()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _send(self) -> None:
        with self._lock:
            data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def _read(self) -> None:
        with contextlib.suppress(OSError, h2.exceptions.ProtocolError):
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    return
                with self._lock:
                    events = self.conn.receive_data(data)
                for e in events:
                    headers = getattr(e, "headers", None)
                    if isinstance(e, h2.events.ResponseReceived | h2.events.TrailersReceived) and headers:
                        status = dict(headers).get("grpc-status")
                        if status is not None:
                            self.statuses[status] = self.statuses.get(status, 0) + 1
                self._send()

    def calls(self, n: int, message: bytes) -> None:
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/inference.GRPCInferenceService/ModelInfer"),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        with self._lock:
            for _ in range(n):
                sid = self.conn.get_next_available_stream_id()
                self.conn.send_headers(sid, headers)
                self.conn.send_data(sid, body, end_stream=True)
        self._send()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # (shutdown: the reader's recv holds the socket open)
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        self._reader.join(10)


def grpc_window_zero(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """One connection opens ``memory_calls`` ModelInfer calls with answers of ``memory_answer_bytes``
    and no window: past the budget the server refuses them (UNAVAILABLE) instead of holding them all;
    a tritonclient meanwhile is served; closing the connection gives back what it held."""
    calls, size = _cfg(cfg, "memory_calls"), _cfg(cfg, "memory_answer_bytes")
    limit, said = _limit(server, cfg)
    idle = server.rss()
    before = _executed(server)
    t0 = time.monotonic()
    client = _WindowZero(server.grpc_port)
    with _Held(server) as held:
        client.calls(calls, _request(size).SerializeToString())
        executed = _settle(server) - before
        others_ok, others = other_clients(server, size)
    rss_held = held.rss_most - idle
    client.close()
    rss_after, held_after = _returned(server, idle)
    bound = limit + size + MiB  # the budget, one answer past it, and its frames
    refused = client.statuses.get("14", 0)
    within = held.most <= bound if held.most >= 0 else rss_held <= bound + RETURN_SLACK
    returned = rss_after - idle <= RETURN_SLACK and held_after <= 0
    got = (
        f"{executed:,} of {calls:,} calls run, {refused:,} refused UNAVAILABLE; held "
        + (f"{mib(held.most)} at most (bound {mib(bound)})" if held.most >= 0 else "(not said)")
        + f", RSS +{mib(rss_held)}; after closing: RSS +{mib(rss_after - idle)}"
        + (f", held {mib(held_after)}" if said else "")
        + f"; other clients: {others}"
    )
    note = (
        f"answers of {mib(size)}, budget {mib(limit)}{'' if said else ' (configured, not said)'}; "
        f"{time.monotonic() - t0:.0f} s"
    )
    return got, within and returned and others_ok, note


def _http_request(size: int) -> bytes:
    body = json.dumps(
        {
            "inputs": [{"name": "BYTES", "shape": [1], "datatype": "INT64", "data": [size]}],
            "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}],
        },
        separators=(",", ":"),
    ).encode()
    head = f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def http_pipelining_many(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """``memory_connections`` connections each send ``memory_pipelined`` requests for answers of
    ``memory_answer_bytes`` and read nothing: past the budget a connection that holds answers gets
    503 for the rest (and past twice it, every connection); a tritonclient meanwhile is served;
    closing the connections gives back what they held."""
    n, k = _cfg(cfg, "memory_connections"), _cfg(cfg, "memory_pipelined")
    size = _cfg(cfg, "memory_http_answer_bytes")
    limit, said = _limit(server, cfg)
    refused_before = _metrics(server).get("inferd_unsent_refusals", 0)
    idle = server.rss()
    before = _executed(server)
    t0 = time.monotonic()
    socks: list[socket.socket] = []
    payload = _http_request(size) * k
    with _Held(server) as held:
        try:
            for _ in range(n):
                s = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)  # the kernel holds little
                s.sendall(payload)
                socks.append(s)
            executed = _settle(server) - before
            others_ok, others = other_clients(server, size)
        finally:
            rss_held = held.rss_most - idle
            refused = _metrics(server).get("inferd_unsent_refusals", 0) - refused_before
            for s in socks:
                with contextlib.suppress(OSError):
                    s.close()
    rss_after, held_after = _returned(server, idle)
    bound = 2 * limit + size + MiB  # twice the budget (past it nothing large is kept), one answer more
    within = held.most <= bound if held.most >= 0 else rss_held <= bound + RETURN_SLACK
    returned = rss_after - idle <= RETURN_SLACK and held_after <= 0
    got = (
        f"{executed:,} of {n * k:,} requests run ({len(socks)} connections)"
        + (f", {refused:,} answers refused 503" if said else "")
        + "; held "
        + (f"{mib(held.most)} at most (bound {mib(bound)})" if held.most >= 0 else "(not said)")
        + f", RSS +{mib(rss_held)}; after closing: RSS +{mib(rss_after - idle)}"
        + (f", held {mib(held_after)}" if said else "")
        + f"; other clients: {others}"
    )
    note = (
        f"answers of {mib(size)}, budget {mib(limit)}{'' if said else ' (configured, not said)'}, client "
        f"receive buffers 64 KiB; {time.monotonic() - t0:.0f} s"
    )
    return got, within and returned and others_ok, note


CASES: dict[str, tuple[str, str, str, Callable[[Server, Any], tuple[str, bool, str]]]] = {
    # name: (what, expected, which limit the RSS goal uses, function)
    "grpc_window_zero": (
        "one HTTP/2 connection with window 0 opens {memory_calls} ModelInfer calls for {memory_answer_bytes} answers",
        "held within the budget and one answer; the rest UNAVAILABLE; others served; RSS back after closing",
        "unsent",
        grpc_window_zero,
    ),
    "http_pipelining_many": (
        "{memory_connections} HTTP connections pipeline {memory_pipelined} requests for {memory_http_answer_bytes} answers each, reading nothing",
        "held within twice the budget and one answer; the rest 503; others served; RSS back after closing",
        "unsent",
        http_pipelining_many,
    ),
}


def main(argv: list[str] | None = None) -> int:
    """Each case (or those named) against a fresh ``inferd serve``, with HealthWatch's figures."""
    p = argparse.ArgumentParser(
        prog="python -m reliability.attacks_memory", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "cases", nargs="*", default=list(CASES), help=f"cases to run (default all: {', '.join(CASES)})"
    )
    for name, value in MEMORY_DEFAULTS.items():
        p.add_argument("--" + name.replace("_", "-"), type=int, default=value)
    p.add_argument("--server-args", default="", help="more flags for inferd serve (one string)")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    args = p.parse_args(argv)
    cfg = argparse.Namespace(**{name: getattr(args, name) for name in MEMORY_DEFAULTS})
    work = Path(tempfile.mkdtemp(prefix="inferd-memory-"))
    repo = build_repository(work / "models", [], only=[])
    add_model(repo)
    server_args = ["--max-unsent-bytes", str(cfg.unsent_limit), *args.server_args.split()]
    results = []
    for name in args.cases:
        what, expected, _limit_kind, func = CASES[name]
        server = Server(repo, work / f"{name}.log", server_args).start()
        try:
            with HealthWatch(server) as watch:
                got, ok, note = func(server, cfg)
                time.sleep(0.3)
            row = {
                "name": name,
                "what": what.format(**{k: f"{v:,}" for k, v in vars(cfg).items()}),
                "expected": expected,
                "got": got,
                "ok": ok,
                "notes": note,
                "over_idle_mib": round(watch.over_idle / MiB, 1),
                "health_max_ms": round(watch.max_ms, 1),
                "health_failures": len(watch.failures),
            }
        finally:
            server.stop()
        results.append(row)
        print(json.dumps(row), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
