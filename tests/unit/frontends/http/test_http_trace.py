"""The trace extension on HttpApp over a fake core: the settings routes and a sampled /infer (its
request carries the trace, its answer is stamped and still sent)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from http_wire import Client, request

from inferd.frontends.http.app import HttpApp
from inferd.trace import NewSetting, Tracing, parse_trace_config

JSON_BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
).encode()


def run(app: HttpApp, *raw: bytes) -> list[tuple[int, str, bytes]]:
    async def main() -> list[tuple[int, str, bytes]]:
        client = Client(app)
        for r in raw:
            client.send(r)
        return [(a.status, a.headers.get("content-type", ""), a.body) for a in await client.answers()]

    return asyncio.run(main())


def test_settings_routes(core: Any, tmp_path: Path) -> None:
    app = HttpApp(core, tracing=Tracing(parse_trace_config([f"triton,file={tmp_path / 't.json'}"])))
    got = run(
        app,
        request("GET", "/v2/trace/setting"),
        request("POST", "/v2/models/identity_fp32/trace/setting", b'{"trace_level":["TIMESTAMPS"]}'),
        request("GET", "/v2/models/nope/trace/setting"),
        request("GET", "/v2/models/identity_fp32/versions/1/trace/setting"),
        request("PUT", "/v2/trace/setting", b"{}"),
        request("POST", "/v2/trace/setting", b'{"trace_file":"x"}'),
    )
    assert got[0][:2] == (200, "application/json") and json.loads(got[0][2])["trace_level"] == ["OFF"]
    assert json.loads(got[1][2])["trace_level"] == ["TIMESTAMPS"] and app.tracing.on
    assert got[2] == (400, "application/json", b'{"error":"Request for unknown model : nope"}')
    assert got[3] == (404, "text/plain", b'{"error":"Not Found"}')
    assert got[4] == (405, "application/json", b'{"error":"Method Not Allowed"}')
    assert got[5][0] == 501


def test_a_sampled_infer_carries_its_trace_and_is_answered(core: Any, tmp_path: Path) -> None:
    flags = [f"triton,file={tmp_path / 't.json'}", "level=TIMESTAMPS", "rate=1", "count=5"]
    app = HttpApp(core, tracing=Tracing(parse_trace_config(flags)))
    [(status, _, body)] = run(
        app, request("POST", "/v2/models/identity_fp32/infer", JSON_BODY, {"traceparent": "ignored"})
    )
    assert status == 200 and json.loads(body)["outputs"][0]["data"] == [1, 2]
    trace = core.requests[0].trace
    assert trace is not None and trace.finish_ns  # sampled, answered, ended
    names = [n for n, _ in trace.pairs()]
    assert names[:2] == ["HTTP_RECV_START", "HTTP_RECV_END"] and names[-2:] == [
        "HTTP_SEND_START",
        "HTTP_SEND_END",
    ]
    stamps = [ns for _, ns in trace.pairs()]
    assert stamps == sorted(stamps)
    assert dict(app.tracing.describe())["trace_count"] == "4"
    # off again: requests are not sampled
    app.tracing.update("", NewSetting(level=0))
    run(app, request("POST", "/v2/models/identity_fp32/infer", JSON_BODY))
    assert core.requests[1].trace is None
