"""Clients that stop reading (issue 25): each case runs as an attack of ``attacks.py`` (a health check
every 100 ms, RSS sampled): one connection pipelining infer requests without reading the answers,
an event stream (``generate_stream``) and a gRPC stream (ModelStreamInfer) of a decoupled model that
sends many large responses to a client that reads none for a while. Each then reads everything and
checks that every answer arrived, in order.

``CASES`` maps a name to (what, expected, which limit the RSS goal uses, function); the functions
read their sizes from the ``AttackConfig`` when it has them (``FLOW_DEFAULTS`` otherwise).

    python -m reliability.attacks_flow --hold-s 60 --json out.json   # each case against a fresh server
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httptools
from tritonclient.grpc import service_pb2

from reliability.common import DEFAULT_MODEL_DIRS, HealthWatch, MiB, Server, build_repository, mib

#: the cases' sizes, where the AttackConfig does not set them
FLOW_DEFAULTS: dict[str, Any] = {
    "flow_hold_s": 60.0,  # seconds the pipelining client reads nothing (the issue measured 60)
    # seconds a stream's client reads nothing: under the server's --stream-stall-timeout-secs (60 s by
    # default), past which the stream fails (then the client reads what waited, and the error)
    "stream_hold_s": 45.0,
    "flow_floats": 1024,  # FP32 elements in each pipelined request and its answer (4 KiB)
    "flow_batch": 50,  # requests per sendall
    "stream_responses": 400,  # responses of the decoupled model to one streamed request
    "stream_response_bytes": MiB,  # bytes of each (a BYTES element)
}
_MODEL = "identity_fp32"
_DECOUPLED = "dec_ctl"
DECOUPLED_MODEL = _DECOUPLED  # the stream cases' model, in every repository they run on
_ID = re.compile(rb'"id":"(\d+)"')


def _cfg(cfg: Any, name: str) -> Any:
    return getattr(cfg, name, FLOW_DEFAULTS[name])


def _success_count(server: Server, model: str) -> int:
    """Requests of ``model`` the server executed (its statistics)."""
    status, body = server.get(f"/v2/models/{model}/stats")
    if status != 200:
        return -1
    return int(json.loads(body)["model_stats"][0]["inference_stats"]["success"]["count"])


def _settled(read: Callable[[], int], quiet_s: float = 1.0, limit_s: float = 30.0) -> int:
    """``read()`` once it stopped changing for ``quiet_s`` (or after ``limit_s``)."""
    last, since = read(), time.monotonic()
    end = since + limit_s
    while time.monotonic() < end:
        time.sleep(0.1)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return last


def _infer_request(i: int, floats: int) -> bytes:
    header = json.dumps(
        {
            "id": str(i),
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [floats],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 4 * floats},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        },
        separators=(",", ":"),
    ).encode()
    body = header + bytes(4 * floats)
    head = (
        f"POST /v2/models/{_MODEL}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\n\r\n"
    )
    return head.encode() + body


class _Answers:
    """The answers on one connection, in order: their statuses and the ``id`` each echoes."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.statuses: dict[int, int] = {}
        self._head = b""
        self.parser = httptools.HttpResponseParser(self)

    def on_body(self, body: bytes) -> None:
        if len(self._head) < 64:
            self._head += body[:64]

    def on_message_complete(self) -> None:
        m = _ID.search(self._head)
        self.ids.append(int(m.group(1)) if m else -1)
        code = self.parser.get_status_code()
        self.statuses[code] = self.statuses.get(code, 0) + 1
        self._head = b""


def pipelining_no_read(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """One connection sends infer requests back to back for ``flow_hold_s`` without reading a byte;
    the server should stop reading it (its executions stop growing), then, once the client reads,
    answer every request, in order."""
    hold, floats, batch = _cfg(cfg, "flow_hold_s"), _cfg(cfg, "flow_floats"), _cfg(cfg, "flow_batch")
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=600)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    before = _success_count(server, _MODEL)
    idle = server.rss()
    stop = threading.Event()
    sent = [0]
    error: list[str] = []

    def sender() -> None:
        i = 0
        try:
            while not stop.is_set():
                sock.sendall(b"".join(_infer_request(i + k, floats) for k in range(batch)))
                i += batch
                sent[0] = i
        except OSError as e:
            error.append(type(e).__name__)

    t = threading.Thread(target=sender, daemon=True)
    t0 = time.monotonic()
    t.start()
    time.sleep(hold)
    stop.set()
    executed = _settled(lambda: _success_count(server, _MODEL)) - before
    held = server.rss()
    sent_then = sent[0]
    answers = _Answers()
    try:
        while True:
            if not t.is_alive() and len(answers.ids) >= sent[0]:
                break
            data = sock.recv(1 << 20)
            if not data:
                error.append("closed")
                break
            answers.parser.feed_data(data)
    except (OSError, httptools.HttpParserError) as e:
        error.append(type(e).__name__)
    t.join(30)
    with contextlib.suppress(OSError):
        sock.close()
    total = sent[0]
    in_order = answers.ids == list(range(total))
    statuses = ", ".join(f"{n:,} x {s}" for s, n in sorted(answers.statuses.items()))
    got = (
        f"the server executed {executed:,} requests while the client read nothing for {hold:g} s "
        f"({sent_then:,} sent by then); after reading: {len(answers.ids):,} answers of {total:,} "
        f"({statuses}){', in order' if in_order else ', NOT in order'}"
        + (f"; client errors: {', '.join(error)}" if error else "")
    )
    ok = in_order and answers.statuses.get(200, 0) == total and executed < total and not error
    note = (
        f"{4 * floats:,} bytes a request and answer; RSS +{mib(held - idle)} at the end of the hold, "
        f"+{mib(server.rss() - idle)} after reading; {time.monotonic() - t0:.0f} s"
    )
    return got, ok, note


def sse_no_read(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """``generate_stream`` of a decoupled model sending ``stream_responses`` responses of
    ``stream_response_bytes`` each, read only after ``stream_hold_s``."""
    hold, n, size = (
        _cfg(cfg, "stream_hold_s"),
        _cfg(cfg, "stream_responses"),
        _cfg(cfg, "stream_response_bytes"),
    )
    body = json.dumps({"IN": 0, "n": n, "size": size}).encode()
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=120)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    idle = server.rss()
    t0 = time.monotonic()
    sock.sendall(
        f"POST /v2/models/{_DECOUPLED}/generate_stream HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    time.sleep(hold)
    held = server.rss()
    events = errors = 0
    status = 0
    tail = b""
    problem = ""

    class _Sse:
        done = False

        def on_body(self, chunk: bytes) -> None:
            nonlocal events, errors, tail
            parts = (tail + chunk).split(b"\n\n")
            tail = parts.pop()
            for part in parts:
                if part.startswith(b"data: "):
                    events += 1
                    errors += part.startswith(b'data: {"error"')

        def on_message_complete(self) -> None:
            self.done = True

    sse = _Sse()
    parser = httptools.HttpResponseParser(sse)
    try:
        while not sse.done:
            data = sock.recv(1 << 20)
            if not data:
                break
            parser.feed_data(data)
            status = parser.get_status_code()
    except (OSError, httptools.HttpParserError) as e:
        problem = type(e).__name__
    with contextlib.suppress(OSError):
        sock.close()
    got = (
        f"{status} with {events:,} events of {n:,} ({errors} errors) after reading nothing for {hold:g} s"
        + (f"; {problem}" if problem else "")
    )
    note = (
        f"{n:,} responses of {size / MiB:g} MiB; RSS +{mib(held - idle)} at the end of the hold, "
        f"+{mib(server.rss() - idle)} after reading; {time.monotonic() - t0:.0f} s"
    )
    return got, status == 200 and events == n and not errors and not problem, note


def grpc_stream_no_read(server: Server, cfg: Any) -> tuple[str, bool, str]:
    """ModelStreamInfer (grpcio's stub) to the same decoupled model, its responses read only after
    ``stream_hold_s``."""
    hold, n, size = (
        _cfg(cfg, "stream_hold_s"),
        _cfg(cfg, "stream_responses"),
        _cfg(cfg, "stream_response_bytes"),
    )
    req = service_pb2.ModelInferRequest(model_name=_DECOUPLED, id="flow")
    req.inputs.add(name="IN", datatype="INT32", shape=[1])
    req.raw_input_contents.append(bytes(4))
    req.parameters["n"].int64_param = n
    req.parameters["size"].int64_param = size
    channel = grpc.insecure_channel(
        f"127.0.0.1:{server.grpc_port}", options=[("grpc.max_receive_message_length", -1)]
    )
    call = channel.stream_stream(
        "/inference.GRPCInferenceService/ModelStreamInfer",
        request_serializer=None,
        response_deserializer=service_pb2.ModelStreamInferResponse.FromString,
    )
    idle = server.rss()
    t0 = time.monotonic()
    sent, read = threading.Event(), threading.Event()

    def requests() -> Any:
        yield req.SerializeToString()
        sent.set()
        read.wait(hold + 600)  # the stream stays open until the responses were read

    responses = call(iter(requests()))
    sent.wait(30)
    time.sleep(hold)
    held = server.rss()
    count = errors = 0
    problem = ""
    try:
        for r in responses:
            if r.error_message:
                errors += 1
                problem = f"error response: {r.error_message[:120]}"
                break  # the stream failed: nothing follows
            if r.infer_response.outputs:
                count += 1
            if count >= n:
                break
    except grpc.RpcError as e:
        problem = f"{e.code().name}: {(e.details() or '')[:100]}"
    read.set()
    responses.cancel()
    channel.close()
    got = f"{count:,} responses of {n:,} ({errors} errors) after reading nothing for {hold:g} s" + (
        f"; {problem}" if problem else ""
    )
    note = (
        f"{n:,} responses of {size / MiB:g} MiB; RSS +{mib(held - idle)} at the end of the hold, "
        f"+{mib(server.rss() - idle)} after reading; {time.monotonic() - t0:.0f} s"
    )
    return got, count == n and not errors and not problem, note


CASES: dict[str, tuple[str, str, str, Callable[[Server, Any], tuple[str, bool, str]]]] = {
    # name: (what, expected, which limit the RSS goal uses, function)
    "pipelining_no_read": (
        "one connection pipelining 4 KiB infer requests for {flow_hold_s} s without reading the answers",
        "the server stops reading the connection; every answer, in order, once the client reads",
        "body",
        pipelining_no_read,
    ),
    "sse_no_read": (
        "generate_stream of {stream_responses} responses of {stream_response_bytes}, read after {stream_hold_s} s",
        "the model waits for the client; every event once it reads",
        "body",
        sse_no_read,
    ),
    "grpc_stream_no_read": (
        "ModelStreamInfer of {stream_responses} responses of {stream_response_bytes}, read after {stream_hold_s} s",
        "the model waits for the client; every response once it reads",
        "grpc",
        grpc_stream_no_read,
    ),
}


def main(argv: list[str] | None = None) -> int:
    """Each case (or those named) against a fresh ``inferd serve``, with HealthWatch's figures."""
    p = argparse.ArgumentParser(
        prog="python -m reliability.attacks_flow", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "cases", nargs="*", default=list(CASES), help=f"cases to run (default all: {', '.join(CASES)})"
    )
    p.add_argument("--hold-s", type=float, default=FLOW_DEFAULTS["flow_hold_s"])
    p.add_argument("--stream-hold-s", type=float, default=FLOW_DEFAULTS["stream_hold_s"])
    p.add_argument("--responses", type=int, default=FLOW_DEFAULTS["stream_responses"])
    p.add_argument("--server-args", default="", help="more flags for inferd serve (one string)")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    args = p.parse_args(argv)
    cfg = argparse.Namespace(
        **{
            **FLOW_DEFAULTS,
            "flow_hold_s": args.hold_s,
            "stream_hold_s": args.stream_hold_s,
            "stream_responses": args.responses,
        }
    )
    work = Path(tempfile.mkdtemp(prefix="inferd-flow-"))
    repo = build_repository(work / "models", DEFAULT_MODEL_DIRS, only=[_MODEL, _DECOUPLED])
    results = []
    for name in args.cases:
        what, expected, _limit, func = CASES[name]
        server = Server(repo, work / f"{name}.log", args.server_args.split()).start()
        try:
            with HealthWatch(server) as watch:
                got, ok, note = func(server, cfg)
                time.sleep(0.3)
            row = {
                "name": name,
                "what": what.format(
                    **{k: f"{v:g}" if isinstance(v, float) else v for k, v in vars(cfg).items()}
                ),
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
