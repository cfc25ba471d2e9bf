"""``/generate`` and ``/generate_stream`` and decoupled models, end to end: curl, raw sockets, tritonclient.

Expected answers are the 2.51 reference's, observed with the same fixture models (gen_echo,
gen_echo_b, dec_ctl, dec_cancel in tests/fixtures/models).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from waiting import wait_for_file, wait_for_text, wait_until

if TYPE_CHECKING:
    from conftest import InferdProcess

FIXTURE_MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
SSE = "text/event-stream; charset=utf-8"
NOT_ONE = (
    '{"error":"generate expects model to produce exactly 1 response, use generate stream for model that '
    'generates various number of responses"}'
)


# -- raw HTTP ------------------------------------------------------------------------------------


def _connect(server: InferdProcess, timeout: float = 10) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def _post(path: str, body: bytes | str | dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    if isinstance(body, dict):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    for k, v in (headers or {}).items():
        head += f"{k}: {v}\r\n"
    return head.encode() + b"\r\n" + body


class Reader:
    """Reads HTTP/1.1 responses (Content-Length or chunked) off one socket, chunk by chunk."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        self.buf += data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def head(self) -> tuple[int, dict[str, str]]:
        status = int(self._line().split()[1])
        headers = {}
        while line := self._line():
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        return status, headers

    def chunk(self) -> bytes:
        """The next chunk's data (b"" for the last chunk)."""
        size = int(self._line(), 16)
        data = self._exact(size)
        assert self._exact(2) == b"\r\n"
        return data

    def response(self) -> tuple[int, dict[str, str], list[bytes]]:
        """A whole response: status, headers and its chunks (one part when not chunked)."""
        status, headers = self.head()
        if headers.get("transfer-encoding") == "chunked":
            chunks = []
            while data := self.chunk():
                chunks.append(data)
            return status, headers, chunks
        return status, headers, [self._exact(int(headers["content-length"]))]


def _ask(
    server: InferdProcess,
    path: str,
    body: bytes | str | dict[str, Any],
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], list[bytes]]:
    with _connect(server) as s:
        s.sendall(_post(path, body, headers))
        return Reader(s).response()


def _events(chunks: list[bytes]) -> list[Any]:
    """The JSON of server-sent events (one event a chunk, as the reference writes them)."""
    out = []
    for c in chunks:
        assert c.startswith(b"data: ") and c.endswith(b"\n\n"), c
        out.append(json.loads(c[6:]))
    return out


def _generate(server: InferdProcess, model: str, body: Any, stream: bool = False) -> tuple[int, str, Any]:
    """(status, content type, JSON answer or the list of events)."""
    path = f"/v2/models/{model}/generate" + ("_stream" if stream else "")
    status, headers, chunks = _ask(server, path, body)
    if stream and headers["content-type"] == SSE:
        return status, headers["content-type"], _events(chunks)
    return status, headers["content-type"], json.loads(b"".join(chunks))


def _desc(answer: dict[str, Any]) -> dict[str, Any]:
    desc: dict[str, Any] = json.loads(answer["DESC"])
    return desc


def _stats(server: InferdProcess, model: str) -> dict[str, Any]:
    doc: dict[str, Any] = server.request("GET", f"/v2/models/{model}/stats").json()["model_stats"][0]
    return doc


# -- curl ------------------------------------------------------------------------------------------


def _curl(server: InferdProcess, path: str, body: str, *flags: str) -> str:
    out = subprocess.run(
        ["curl", "-s", "-i", *flags, "-X", "POST", "--data-binary", body, f"{server.base_url}{path}"],
        capture_output=True,
        check=True,
        timeout=30,
    )
    return out.stdout.decode()


def test_curl_generate(server: InferdProcess) -> None:
    out = _curl(
        server,
        "/v2/models/gen_echo/generate",
        '{"text_input":"hi","parameters":{"stream":false,"temperature":0}}',
    )
    head, _, body = out.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200 OK")
    assert "Content-Type: application/json" in head and "Transfer-Encoding: chunked" in head
    answer = json.loads(body)
    assert list(answer) == ["DESC", "model_name", "model_version", "text_output"]
    assert (answer["text_output"], answer["model_name"], answer["model_version"]) == ("HI", "gen_echo", "1")
    assert _desc(answer) == {
        "id": "",
        "inputs": {"text_input": ["object", [1], ["hi"]]},
        "params": {"stream": False, "temperature": 0},
    }
    out = _curl(server, "/v2/models/dec_ctl/generate", '{"IN":1}')
    assert out.endswith('\r\n\r\n{"OUT":0,"model_name":"dec_ctl","model_version":"1"}')


def test_curl_generate_stream(server: InferdProcess) -> None:
    out = _curl(server, "/v2/models/dec_ctl/generate_stream", '{"IN":3,"id":"s1"}', "-N")
    head, _, body = out.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 200 OK")
    assert f"Content-Type: {SSE}" in head and "Transfer-Encoding: chunked" in head
    assert body == "".join(
        f'data: {{"OUT":{i},"id":"s1","model_name":"dec_ctl","model_version":"1"}}\n\n' for i in range(3)
    )


# -- decoupled models: 0, 1, many responses, errors --------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "events"),
    [
        ({"IN": 0}, 200, []),
        ({"IN": 1}, 200, [{"OUT": 0}]),
        ({"IN": 5}, 200, [{"OUT": i} for i in range(5)]),
        ({"IN": 3, "final_alone": True}, 200, [{"OUT": i} for i in range(3)]),
        ({"IN": 3, "thread": True}, 200, [{"OUT": i} for i in range(3)]),
        # an error mid-stream is an event; the stream goes on
        ({"IN": 3, "error_at": 1, "code": 4}, 200, [{"OUT": 0}, {"error": "custom failure"}, {"OUT": 2}]),
        ({"IN": 3, "error_at": 2, "code": 4}, 200, [{"OUT": 0}, {"OUT": 1}, {"error": "custom failure"}]),
        # a first error fixes the status at 400, whatever its code
        *(
            (
                {"IN": 3, "error_at": 0, "code": code},
                400,
                [{"error": "custom failure"}, {"OUT": 1}, {"OUT": 2}],
            )
            for code in (2, 4, 5)
        ),
    ],
)
def test_generate_stream_decoupled(
    server: InferdProcess, body: dict[str, Any], status: int, events: list[Any]
) -> None:
    got_status, ctype, got = _generate(server, "dec_ctl", body, stream=True)
    assert (got_status, ctype) == (status, SSE)
    for e in got:
        if "error" not in e:
            assert e.pop("model_name") == "dec_ctl" and e.pop("model_version") == "1"
    assert got == events


def test_generate_stream_model_exceptions(server: InferdProcess) -> None:
    source = (FIXTURE_MODELS / "dec_ctl" / "1" / "model.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if '"raised in execute"' in text)
    status, _, events = _generate(server, "dec_ctl", {"IN": 1, "raise": True}, stream=True)
    assert status == 400
    assert events == [
        {
            "error": "Failed to process the request(s) for model 'dec_ctl_0_0', message: TritonModelException: raised "
            f"in execute\n\nAt:\n  dec_ctl/1/model.py({line}): execute\n"  # from the repository's root
        }
    ]
    status, _, events = _generate(server, "dec_ctl", {"IN": 1, "raise_after": True}, stream=True)
    assert status == 200
    assert events[0] == {"OUT": 7, "model_name": "dec_ctl", "model_version": "1"}
    assert events[1]["error"].startswith(
        "Failed to process the request(s) for model 'dec_ctl_0_0', message: TritonModelException: raised after one"
    )
    status, _, events = _generate(server, "dec_ctl", {"IN": 1, "return_list": True}, stream=True)
    assert (status, events) == (
        400,
        [
            {
                "error": "Failed to process the request(s) for model 'dec_ctl_0_0', message: Python model 'dec_ctl_0_0' is "
                "using the decoupled mode and the execute function must return None."
            }
        ],
    )


def test_generate_needs_exactly_one_response(server: InferdProcess) -> None:
    for body in ({"IN": 0}, {"IN": 3}, {"IN": 1, "raise_after": True}):
        status, headers, chunks = _ask(server, "/v2/models/dec_ctl/generate", body)
        assert (status, headers["content-type"], b"".join(chunks).decode()) == (
            200,
            "application/json",
            NOT_ONE,
        )
    # the first response an error: 400
    status, _, chunks = _ask(server, "/v2/models/dec_ctl/generate", {"IN": 2, "error_at": 0, "code": 4})
    assert (status, b"".join(chunks).decode()) == (400, NOT_ONE)
    # the one response an error
    status, ctype, answer = _generate(server, "dec_ctl", {"IN": 1, "error_at": 0, "code": 4})
    assert (status, ctype, answer) == (400, "application/json", {"error": "custom failure"})
    status, _, answer = _generate(server, "gen_echo", {"err": 4})
    assert (status, answer) == (400, {"error": "model said no"})
    status, _, answer = _generate(server, "dec_ctl", {"IN": 1, "thread": True, "final_alone": True})
    assert (status, answer) == (200, {"OUT": 0, "model_name": "dec_ctl", "model_version": "1"})


def test_sender_misuse_is_the_models_exception(server: InferdProcess) -> None:
    for misuse, text in [
        (
            "none_nonfinal",
            "TritonModelException: Inference Response object must be provided when the response flags is set to zero.",
        ),
        ("bad_flags", "TritonModelException: Unable to send response. Unsupported flag provided."),
    ]:
        status, _, events = _generate(server, "dec_ctl", {"IN": 1, "misuse": misuse}, stream=True)
        assert (status, events) == (200, [{"MSG": text, "model_name": "dec_ctl", "model_version": "1"}])
    # a second final flag raises "closed" in the model: the stream ended with the first
    status, _, events = _generate(server, "dec_ctl", {"IN": 1, "misuse": "double_final"}, stream=True)
    assert (status, events) == (200, [{"OUT": 1, "model_name": "dec_ctl", "model_version": "1"}])


def test_a_request_the_model_drops_without_final_is_closed(server: InferdProcess) -> None:
    # the reference leaves such a client waiting forever; inferd ends the stream with an error
    status, _, events = _generate(server, "dec_ctl", {"IN": 2, "no_final": True}, stream=True)
    assert status == 200
    assert [e.get("OUT") for e in events[:2]] == [0, 1]
    assert events[2:] == [
        {
            "error": "Python model 'dec_ctl_0_0' released the request without sending the final response "
            "(TRITONSERVER_RESPONSE_COMPLETE_FINAL)"
        }
    ]


def test_infer_still_refuses_decoupled_models(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    try:
        inp = httpclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([1], np.int32))
        with pytest.raises(InferenceServerException) as info:
            client.infer("dec_ctl", [inp])
        assert "HTTP end point doesn't support models with decoupled transaction policy" in str(info.value)
        assert client.get_model_config("dec_ctl")["model_transaction_policy"] == {"decoupled": True}
    finally:
        client.close()


# -- generate: inputs, parameters, outputs ---------------------------------------------------------------


def test_generate_inputs_and_parameters(server: InferdProcess) -> None:
    status, _, answer = _generate(
        server,
        "gen_echo",
        '{"text_input":["a","b"],"id":"g1","f":[1,2.5],"i":7,"b":[true,false],"u8":[1,2],"foo":"bar","n":3,'
        '"fl":1.5,"bo":true,"i8":300}',
    )
    assert status == 200
    assert answer["id"] == "g1" and answer["text_output"] == ["A", "B"]
    assert _desc(answer) == {
        "id": "g1",
        "inputs": {
            "b": ["bool", [2], [True, False]],
            "f": ["float32", [2], [1.0, 2.5]],
            "i": ["int64", [1], [7]],
            "i8": ["int8", [1], [44]],
            "text_input": ["object", [2], ["a", "b"]],
            "u8": ["uint8", [2], [1, 2]],
        },
        "params": {"bo": True, "fl": 1.5, "foo": "bar", "id": "g1", "n": 3},
    }
    # a batching model: the batch dimension is added; the metadata shape spreads the elements
    for body, shape in [
        ({"f": [1, 2, 3]}, [1, 3]),
        ({"fixed4": list(range(8))}, [2, 4]),
        ({"mat": [1, 2, 3, 4]}, [1, 2, 2]),
    ]:
        status, _, answer = _generate(server, "gen_echo_b", body)
        assert status == 200
        assert [v[1] for v in _desc(answer)["inputs"].values()] == [shape]
    status, _, answer = _generate(server, "gen_echo", {"parameters": {"f": [1, 2], "id": "b"}})
    assert _desc(answer) == {"id": "", "inputs": {"f": ["float32", [2], [1.0, 2.0]]}, "params": {"id": "b"}}


def test_generate_outputs(server: InferdProcess) -> None:
    status, _, chunks = _ask(server, "/v2/models/gen_echo/generate", {"text_input": "x", "extra": "multi"})
    body = b"".join(chunks)
    assert status == 200
    assert body.startswith(b'{"Am":true,"Bm":["x","y"],"DESC":')
    assert body.endswith(
        b'"Zm":[1.5,2.0,3.0,4.0],"model_name":"gen_echo","model_version":"1","text_output":"X"}'
    )
    for extra, key, value in [("empty", "EMPTY", []), ("u64", "U", 2**63 + 5)]:
        assert _generate(server, "gen_echo", {"extra": extra})[2][key] == value
    status, _, chunks = _ask(server, "/v2/models/gen_echo/generate", {"extra": "keys", "id": "zz"})
    assert list(json.loads(b"".join(chunks))) == ["DESC", "Zz", "aaa", "id", "model_name", "model_version"]
    status, _, chunks = _ask(server, "/v2/models/gen_echo/generate", {"extra": "floats"})
    assert b'"F":[0.10000000149011612,9.99999993922529e-9,NaN,Infinity,-Infinity]' in b"".join(chunks)
    # what JSON cannot carry fails the response
    assert _generate(server, "gen_echo", {"extra": "fp16"})[:3:2] == (
        400,
        {
            "error": "sending FP16 data via JSON is not supported. Please use the binary data format for output"
        },
    )


@pytest.mark.parametrize(
    ("model", "body", "status", "error"),
    [
        ("nope", "{}", 404, "Request for unknown model: 'nope' is not found"),
        ("gen_echo/versions/2", "{}", 404, "Request for unknown model: 'gen_echo' version 2 is not found"),
        (
            "gen_echo/versions/99999999999999999999",
            "{}",
            400,
            "failed to get model version from specified version string '99999999999999999999' (details: stol), "
            "version should be an integral value > 0",
        ),
        ("gen_echo", "", 500, "failed to parse the request JSON buffer: The document is empty. at 0"),
        (
            "gen_echo",
            "{bad",
            500,
            "failed to parse the request JSON buffer: Missing a name for object member. at 1",
        ),
        ("gen_echo", "[1,2]", 500, "attempt to get members for non-object"),
        ("gen_echo", '"text"', 500, "attempt to get members for non-object"),
        ("gen_echo", '{"id":5}', 500, "Unable to parse 'id': attempt to access JSON non-string as string"),
        (
            "gen_echo",
            '{"parameters":5}',
            500,
            "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object",
        ),
        (
            "gen_echo",
            '{"a":{"b":1}}',
            400,
            "parameter 'a' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        (
            "gen_echo",
            '{"parameters":{"a":null}}',
            400,
            "Converting keyword: 'parameters': parameter 'a' has invalid type. It should be either 'int', 'bool', or "
            "'string'.",
        ),
        (
            "gen_echo",
            '{"fixed4":[1,2]}',
            400,
            "The schema can not convert input 'fixed4' to tensor with proper shape",
        ),
        ("gen_echo", '{"f":"x"}', 500, "Unable to parse 'data': attempt to access JSON non-number as double"),
        (
            "gen_echo",
            '{"i":1.5}',
            500,
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        ("gen_echo", '{"b":1}', 500, "Unable to parse 'data': attempt to access JSON non-boolean as boolean"),
        (
            "gen_echo",
            '{"text_input":5}',
            500,
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        (
            "gen_echo",
            '{"f":[[1,2],[3,4]]}',
            500,
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            "gen_echo",
            '{"h":[1.5]}',
            400,
            "receiving FP16 data via JSON is not supported. Please use the binary data format for input h",
        ),
        ("gen_echo", '{"f":1,"f":2}', 400, "[request id: <id_unknown>] input 'f' already exists in request"),
        (
            "gen_echo",
            '{"text_input":[["a","b"],["c"]]}',
            400,
            "[request id: <id_unknown>] unexpected number of string elements 3 for inference input 'text_input' for "
            "model 'gen_echo', expecting 2",
        ),
        (
            "dec_ctl",
            '{"id":"q"}',
            400,
            "[request id: q] expected 1 inputs but got 0 inputs for model 'dec_ctl'. Got input(s) [], but missing "
            "required input(s) ['IN']. Please provide all required input(s).",
        ),
    ],
)
@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_errors_before_inference(
    server: InferdProcess, model: str, body: str, status: int, error: str, endpoint: str
) -> None:
    got_status, headers, chunks = _ask(server, f"/v2/models/{model}/{endpoint}", body)
    assert (got_status, headers["content-type"], "transfer-encoding" in headers) == (
        status,
        "application/json",
        False,
    )
    assert json.loads(chunks[0]) == {"error": error}


def test_method_and_encoding_errors(server: InferdProcess) -> None:
    for endpoint in ("generate", "generate_stream"):
        r = server.request("GET", f"/v2/models/gen_echo/{endpoint}")
        assert (r.status, r.content_type, r.error) == (405, "application/json", "Method Not Allowed")
    status, _, chunks = _ask(
        server, "/v2/models/gen_echo/generate", '{"text_input":"x"}', {"Content-Encoding": "gzip"}
    )
    assert (status, json.loads(chunks[0])) == (
        400,
        {"error": "Unsupported content-encoding, only 'identity' is supported."},
    )


def test_unknown_keys_become_parameters(server: InferdProcess) -> None:
    status, _, answer = _generate(
        server,
        "gen_echo",
        '{"triton_x":1,"sequence_id":1,"priority":3,"big":18446744073709551615,"a":1,"a":2}',
    )
    assert status == 200
    assert _desc(answer)["params"] == {
        "a": 1,
        "big": 1.8446744073709552e19,
        "priority": 3,
        "sequence_id": 1,
        "triton_x": 1,
    }


# -- one connection: pipelining, chunk framing -----------------------------------------------------------


def test_pipelined_requests_answer_in_order(server: InferdProcess) -> None:
    with _connect(server) as s:
        s.sendall(
            _post("/v2/models/dec_ctl/generate_stream", {"IN": 3, "thread": True, "delay": 0.05})
            + _post(
                "/v2/models/identity_fp32/infer",
                {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [5]}]},
            )
            + _post("/v2/models/dec_ctl/generate", {"IN": 1})
            + _post("/v2/models/dec_ctl/generate_stream", {"IN": 2})
        )
        reader = Reader(s)
        status, headers, chunks = reader.response()
        assert (status, headers["content-type"]) == (200, SSE)
        assert [e["OUT"] for e in _events(chunks)] == [0, 1, 2]
        status, _, (body,) = reader.response()
        assert json.loads(body)["outputs"][0]["data"] == [5.0]
        status, _, chunks = reader.response()
        assert json.loads(b"".join(chunks))["OUT"] == 0
        status, _, chunks = reader.response()
        assert [e["OUT"] for e in _events(chunks)] == [0, 1]


def test_a_slow_reader_gets_every_event_in_order(server: InferdProcess) -> None:
    """400 events of 64 KiB (more than the kernel's socket buffers hold) while the client does not
    read: the server stops writing (the transport's buffer is full) and sends them all in order
    once the client reads."""
    n, size = 400, 65536
    with _connect(server, timeout=30) as s:
        s.sendall(_post("/v2/models/dec_ctl/generate_stream", {"IN": n, "size": size, "thread": True}))
        time.sleep(1.0)
        server.assert_serving()  # meanwhile the server serves others
        reader = Reader(s)
        status, _ = reader.head()
        assert status == 200
        count = 0
        while data := reader.chunk():
            (event,) = _events([data])
            assert event["MSG"] == "x" * size
            count += 1
        assert count == n


# -- cancellation ---------------------------------------------------------------------------------------


def test_client_disconnect_reaches_the_model(server: InferdProcess, tmp_path: Path) -> None:
    log = tmp_path / "wait.log"
    before = _stats(server, "dec_cancel")
    s = _connect(server)
    s.sendall(_post("/v2/models/dec_cancel/generate_stream", {"IN": 1, "mode": "wait", "log": str(log)}))
    reader = Reader(s)
    assert reader.head()[0] == 200
    assert _events([reader.chunk()])[0]["OUT"] == 0
    s.close()  # mid-stream
    wait_for_text(log, "cancelled", 10)
    assert log.read_text().splitlines() == ["executed", "cancelled request=True sender=True"]
    server.assert_serving()
    status, _, events = _generate(server, "dec_ctl", {"IN": 2}, stream=True)
    assert (status, len(events)) == (200, 2)
    wait_until(
        lambda: (
            _stats(server, "dec_cancel")["inference_stats"]["success"]["count"]
            > before["inference_stats"]["success"]["count"]
        ),
        "dec_cancel's success count to move",
        10,
    )


def test_a_request_cancelled_while_queued_never_executes(server: InferdProcess, tmp_path: Path) -> None:
    release = tmp_path / "release"
    held_log, queued_log = tmp_path / "held.log", tmp_path / "queued.log"
    before = _stats(server, "dec_cancel")
    holder = _connect(server)
    holder.sendall(
        _post(
            "/v2/models/dec_cancel/generate_stream",
            {"IN": 1, "mode": "hold", "release": str(release), "log": str(held_log)},
        )
    )
    wait_for_file(held_log, 10)  # the one instance is busy
    queued = _connect(server)
    queued.sendall(_post("/v2/models/dec_cancel/generate_stream", {"IN": 1, "log": str(queued_log)}))
    time.sleep(0.3)
    queued.close()  # gone while it waits in the queue
    time.sleep(0.3)
    release.touch()
    status, _, chunks = Reader(holder).response()
    holder.close()
    assert (status, [e["OUT"] for e in _events(chunks)]) == (200, [0])
    wait_until(
        lambda: (
            _stats(server, "dec_cancel")["inference_stats"]["fail"]["count"]
            > before["inference_stats"]["fail"]["count"]
        ),
        "dec_cancel's failure count to move",
        10,
    )
    assert not queued_log.exists()
    after = _stats(server, "dec_cancel")
    assert after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"] + 1
    assert after["execution_count"] == before["execution_count"] + 1
    server.assert_serving()


def test_statistics_of_decoupled_requests(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    try:
        before = client.get_inference_statistics("dec_ctl")["model_stats"][0]
        _generate(server, "dec_ctl", {"IN": 3}, stream=True)
        _generate(
            server, "dec_ctl", {"IN": 2, "error_at": 0}, stream=True
        )  # error responses: still a success
        _generate(server, "dec_ctl", {"IN": 1, "raise": True}, stream=True)  # an exception: a failure
        after = client.get_inference_statistics("dec_ctl")["model_stats"][0]
    finally:
        client.close()
    count = lambda doc, key: int(doc["inference_stats"][key]["count"])  # noqa: E731
    assert count(after, "success") - count(before, "success") == 2
    assert count(after, "fail") - count(before, "fail") == 1
    assert int(after["inference_count"]) - int(before["inference_count"]) == 2
    assert int(after["execution_count"]) - int(before["execution_count"]) == 3
    assert after["response_stats"] == {}  # the 2.51 Python backend reports none


# -- shutdown --------------------------------------------------------------------------------------------


def test_stop_closes_open_streams(start_server: Any) -> None:
    # a held stream is in flight: the server waits the exit timeout for it, then answers it
    srv: InferdProcess = start_server("--exit-timeout-secs=1")
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
    s.sendall(_post("/v2/models/dec_ctl/generate_stream", {"IN": 1, "held": True}))
    reader = Reader(s)
    assert reader.head()[0] == 200
    assert _events([reader.chunk()])[0]["OUT"] == 0
    code = srv.stop()
    events = []
    while data := reader.chunk():
        events.extend(_events([data]))
    s.close()
    assert events == [{"error": "the server is shutting down: the request did not finish within 1 s"}]
    assert code == 0
