"""One budget for the answers a server holds for clients that do not read them (issue 42), against
``inferd serve --max-unsent-bytes 8 MiB`` and a model whose small requests get 1 MiB answers:

- one HTTP/2 connection that sets its window to 0 and opens 100 ModelInfer calls (before: the server
  held all 100 answers, and a connection could do that 256 times);
- 24 HTTP connections pipelining 8 requests each without reading (before: nothing bounded the sum).

Each measures the server's RSS (psutil) before, while the clients hold and after they close, and what
the server says it holds (``inferd_unsent_response_bytes``); tritonclient's requests are served
meanwhile; once the connections close, the held bytes go back to 0 and the RSS to within 64 MiB of idle.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from typing import cast

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess, grpc_client, http_client, serving
from tritonclient.grpc import service_pb2

from repo_paths import FIXTURES
from waiting import wait_until

#: how long the memory held for clients may take to go back (a loaded machine)
WAIT_S = 60.0

MiB = 1 << 20
BUDGET = 8 * MiB
ANSWER = MiB
#: what else moves the RSS while clients hold: the answers being computed and encoded, allocator slack
RSS_SLACK = 40 * MiB
#: after the connections closed, the RSS is back within this of idle
RETURN_SLACK = 64 * MiB
MODEL = "big_answer"


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    repo = tmp_path_factory.mktemp("memory") / "models"
    shutil.copytree(FIXTURES / "memory_models" / MODEL, repo / MODEL)
    with serving(repo, repo.parent / "inferd.log", f"--max-unsent-bytes={BUDGET}") as proc:
        yield proc


def _rss(server: InferdProcess) -> int:
    assert server.proc is not None
    return int(psutil.Process(server.proc.pid).memory_info().rss)


def _metric(server: InferdProcess, name: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return next(int(float(line.split()[1])) for line in text.splitlines() if line.startswith(name + " "))


def _held(server: InferdProcess) -> int:
    return _metric(server, "inferd_unsent_response_bytes")


def _executed(server: InferdProcess) -> int:
    stats = server.request("GET", f"/v2/models/{MODEL}/stats").json()["model_stats"][0]["inference_stats"]
    return int(stats["success"]["count"]) + int(stats["fail"]["count"])


def _others_served(server: InferdProcess) -> None:
    """tritonclient (HTTP and gRPC, connections of their own that read) gets its answers."""
    with http_client(server) as c:
        inp = httpclient.InferInput("BYTES", [1], "INT64")
        inp.set_data_from_numpy(np.array([16], np.int64))
        assert c.infer(MODEL, [inp]).as_numpy("OUT").tolist() == [7] * 16
    with grpc_client(server) as g:
        ginp = grpcclient.InferInput("BYTES", [1], "INT64")
        ginp.set_data_from_numpy(np.array([16], np.int64))
        assert g.infer(MODEL, [ginp]).as_numpy("OUT").tolist() == [7] * 16


def _returns(server: InferdProcess, idle: int) -> None:
    wait_until(lambda: _held(server) == 0, "the closed connections' answers to be let go", WAIT_S)
    wait_until(
        lambda: _rss(server) - idle <= RETURN_SLACK,
        "RSS back to idle after closing",
        WAIT_S,
        detail=lambda: f"RSS {_rss(server) - idle:,} over idle",
    )


class WindowZero:
    """An HTTP/2 client (the h2 package) whose SETTINGS_INITIAL_WINDOW_SIZE is 0 and that never opens
    a window; a thread reads what comes (answering SETTINGS and PING) and counts the grpc-status values."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.h2.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}
        )
        self.h2.initiate_connection()
        self.lock = threading.Lock()
        self.statuses: dict[str, int] = {}
        self.messages: list[str] = []
        self.flush()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def flush(self) -> None:
        with self.lock:
            data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def _read(self) -> None:
        with contextlib.suppress(OSError, h2.exceptions.ProtocolError):
            while data := self.sock.recv(1 << 16):
                with self.lock:
                    events = self.h2.receive_data(data)
                for e in events:
                    if isinstance(e, h2.events.ResponseReceived | h2.events.TrailersReceived):
                        headers = cast("dict[str, str]", dict(e.headers))  # str: header_encoding
                        if "grpc-status" in headers:
                            with self.lock:
                                status = headers["grpc-status"]
                                self.statuses[status] = self.statuses.get(status, 0) + 1
                                self.messages.append(headers.get("grpc-message", ""))
                self.flush()

    def ended(self) -> dict[str, int]:
        """The calls ended so far, by grpc-status."""
        with self.lock:
            return dict(self.statuses)

    def model_infer(self, n: int, size: int) -> None:
        req = service_pb2.ModelInferRequest(model_name=MODEL)
        req.inputs.add(name="BYTES", datatype="INT64", shape=[1])
        req.raw_input_contents.append(np.array([size], np.int64).tobytes())
        msg = req.SerializeToString()
        body = b"\x00" + len(msg).to_bytes(4, "big") + msg
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/inference.GRPCInferenceService/ModelInfer"),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        with self.lock:
            for _ in range(n):
                sid = self.h2.get_next_available_stream_id()
                self.h2.send_headers(sid, headers)
                self.h2.send_data(sid, body, end_stream=True)
        self.flush()

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)  # (the reader's recv keeps a plain close from closing)
        self.sock.close()
        self.reader.join(10)


def test_a_grpc_connection_with_no_window_holds_the_budget_and_one_answer(
    memory_server: InferdProcess,
) -> None:
    server = memory_server
    calls = 100
    idle, before = _rss(server), _executed(server)
    client = WindowZero(server.grpc_port)
    try:
        client.model_infer(calls, ANSWER)
        wait_until(lambda: _executed(server) - before == calls, "every call to run", WAIT_S)
        # every call ended but those whose answers wait for the window
        wait_until(
            lambda: sum(client.ended().values()) == calls - _held(server) // ANSWER,
            "the calls to end",
            WAIT_S,
        )
        held, rss = _held(server), _rss(server)
        assert BUDGET < held <= BUDGET + ANSWER + 4096  # (before: all 100 answers, 100 MiB)
        assert rss - idle <= BUDGET + ANSWER + RSS_SLACK, f"RSS +{(rss - idle) / MiB:.0f} MiB while held"
        refused = calls - held // ANSWER
        assert client.ended() == {"14": refused}  # UNAVAILABLE, with why
        assert "--max-unsent-bytes (8,388,608)" in client.messages[0]
        assert "this answer was not kept" in client.messages[0]
        _others_served(server)
    finally:
        client.close()
    _returns(server, idle)


def _pipelined(size: int, k: int) -> bytes:
    body = json.dumps(
        {
            "inputs": [{"name": "BYTES", "shape": [1], "datatype": "INT64", "data": [size]}],
            "outputs": [{"name": "OUT", "parameters": {"binary_data": True}}],
        }
    ).encode()
    head = f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    return (head.encode() + body) * k


def test_http_connections_pipelining_without_reading_hold_twice_the_budget_at_most(
    memory_server: InferdProcess,
) -> None:
    server = memory_server
    connections, k = 24, 8
    idle, before = _rss(server), _executed(server)
    refused = _metric(server, "inferd_unsent_refusals")
    socks = []
    try:
        for _ in range(connections):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)  # the kernel keeps little of it
            s.sendall(_pipelined(ANSWER, k))
            socks.append(s)
        wait_until(lambda: _executed(server) - before == connections * k, "every request to run", WAIT_S)
        held, rss = _held(server), _rss(server)
        # twice the budget (past it no large answer is kept), and the answer that passed it
        assert BUDGET < held <= 2 * BUDGET + ANSWER + 4096, held  # (before: unbounded)
        assert rss - idle <= 2 * BUDGET + ANSWER + RSS_SLACK, f"RSS +{(rss - idle) / MiB:.0f} MiB while held"
        assert _metric(server, "inferd_unsent_refusals") > refused  # the rest: 503
        _others_served(server)
    finally:
        for s in socks:
            s.close()
    _returns(server, idle)
