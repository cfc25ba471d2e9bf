#!/usr/bin/env python3
"""The floor (issue 48): the least a Python KServe v2 server does to serve add_sub over HTTP.

    .venv/bin/python benchmarks/floor_server.py --http-port 8000      # prints "floor: listening on ..."

What inferd's HTTP add_sub path is judged against: uvloop and httptools (keep-alive, one parser per
connection), the JSON header parsed with orjson, the two input tensors read with numpy (the KServe v2
binary tensor extension: ``Inference-Header-Content-Length``, ``binary_data_size``; JSON ``data``
too), ``OUTPUT0 = INPUT0 + INPUT1`` and ``OUTPUT1 = INPUT0 - INPUT1`` as
tests/fixtures/reference_models/add_sub computes them, and the answer's JSON header and binary
outputs written in one piece. No validation, statistics, scheduling, limits or timeouts: a request
that is not what add_sub takes gets a 400 with the exception's text, and the connection goes on.

Besides infer, the few GETs that perf_analyzer (and bench.sh, cpu.py, calls.py) send first, answered
from constants built once from the model's config: server and model ready/live, server metadata,
model metadata and config, and the statistics extension with one counter (the successes: cpu.py's
denominator, and perf_analyzer reads the statistics before and after each window). The other
statistics are zero.

``--onnx-model DIR`` serves one ONNX model instead (OnnxFloor, issue 48's densenet_onnx row): the session
inferd's onnxruntime backend gives the model's first instance, opened by the backend's own code.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import httptools
import numpy as np
import orjson

MODEL = "add_sub"
VERSION = "1"
#: tests/fixtures/reference_models/add_sub/config.pbtxt, as the KServe config endpoint gives it
CONFIG: dict[str, Any] = {
    "name": MODEL,
    "platform": "",
    "backend": "python",
    "version_policy": {"latest": {"num_versions": 1}},
    "max_batch_size": 64,
    "input": [
        {"name": n, "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [16]}
        for n in ("INPUT0", "INPUT1")
    ],
    "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")],
    "dynamic_batching": {},
    "instance_group": [{"name": f"{MODEL}_0", "kind": "KIND_CPU", "count": 1}],
}
METADATA: dict[str, Any] = {
    "name": MODEL,
    "versions": [VERSION],
    "platform": "python",
    "inputs": [{"name": n, "datatype": "FP32", "shape": [-1, 16]} for n in ("INPUT0", "INPUT1")],
    "outputs": [{"name": n, "datatype": "FP32", "shape": [-1, 16]} for n in ("OUTPUT0", "OUTPUT1")],
}
SERVER_METADATA = {"name": "floor", "version": "0", "extensions": ["binary_tensor_data", "statistics"]}

_JSON = b"application/json"
_BINARY = b"application/octet-stream"
_ZERO = {"count": 0, "ns": 0}


def _head(status: bytes, content_type: bytes, length: int, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type + b"\r\n" + extra
        + b"Content-Length: " + str(length).encode() + b"\r\n\r\n"
    )  # fmt: skip


def _json_answer(status: bytes, doc: object) -> bytes:
    body = orjson.dumps(doc)
    return _head(status, _JSON, len(body)) + body


def _paths(tail: str, model: str = MODEL, version: str = VERSION) -> list[bytes]:
    """The model's path with and without its version, ending in ``tail``."""
    return [f"/v2/models/{model}{v}{tail}".encode() for v in ("", f"/versions/{version}")]


class Floor:
    """The server's state: its answers to the GETs (built once) and the success counter."""

    def __init__(
        self,
        model: str = MODEL,
        version: str = VERSION,
        config: dict[str, Any] = CONFIG,
        metadata: dict[str, Any] = METADATA,
    ) -> None:
        self.model, self.version = model, version
        self.successes = 0
        empty = _head(b"200 OK", _JSON, 0)
        self.fixed: dict[bytes, bytes] = {
            b"/v2/health/ready": empty,
            b"/v2/health/live": empty,
            b"/v2": _json_answer(b"200 OK", SERVER_METADATA),
        }
        for path in _paths("/ready", model, version):
            self.fixed[path] = empty
        for path in _paths("", model, version):
            self.fixed[path] = _json_answer(b"200 OK", metadata)
        for path in _paths("/config", model, version):
            self.fixed[path] = _json_answer(b"200 OK", config)
        self.stats_paths = {b"/v2/models/stats", *_paths("/stats", model, version)}

    def get(self, path: bytes) -> bytes:
        answer = self.fixed.get(path)
        if answer is not None:
            return answer
        if path in self.stats_paths:
            return _json_answer(b"200 OK", self.statistics())
        return _json_answer(b"404 Not Found", {"error": f"no such path: {path.decode(errors='replace')}"})

    def statistics(self) -> dict[str, Any]:
        n = self.successes
        done = {"count": n, "ns": 0}
        stats = {
            k: done if k in ("success", "queue", "compute_input", "compute_infer", "compute_output") else _ZERO
            for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
        }  # fmt: skip
        return {
            "model_stats": [
                {
                    "name": self.model,
                    "version": self.version,
                    "last_inference": 0,
                    "inference_count": n,
                    "execution_count": n,
                    "inference_stats": stats,
                    "batch_stats": [],
                    "memory_usage": [],
                }
            ]
        }

    def _answer(self, request: dict[str, Any], outputs: list[dict[str, Any]], raw: list[bytes]) -> bytes:
        """The response: the JSON header, then the binary outputs (``raw``) when any were asked for."""
        answer: dict[str, Any] = {"model_name": self.model, "model_version": self.version, "outputs": outputs}
        if "id" in request:
            answer["id"] = request["id"]
        header = orjson.dumps(answer)
        self.successes += 1
        if not raw:
            return _head(b"200 OK", _JSON, len(header)) + header
        extra = b"Inference-Header-Content-Length: " + str(len(header)).encode() + b"\r\n"
        length = len(header) + sum(len(r) for r in raw)
        return b"".join([_head(b"200 OK", _BINARY, length, extra), header, *raw])

    def infer(self, body: bytes, header_length: int | None) -> bytes:
        """add_sub on one request's body: the whole HTTP answer."""
        if header_length is None:
            header_length = len(body)
        request = orjson.loads(memoryview(body)[:header_length])
        offset = header_length
        tensors = {}
        for i in request["inputs"]:
            params = i.get("parameters")
            size = params.get("binary_data_size") if params else None
            if size is None:
                tensors[i["name"]] = np.asarray(i["data"], np.float32).reshape(i["shape"])
            else:
                count = size // 4
                tensors[i["name"]] = np.frombuffer(body, np.float32, count, offset).reshape(i["shape"])
                offset += size
        a, b = tensors["INPUT0"], tensors["INPUT1"]
        results = {"OUTPUT0": a + b, "OUTPUT1": a - b}
        default_binary = bool((request.get("parameters") or {}).get("binary_data_output", False))
        wanted = request.get("outputs") or [{"name": n} for n in results]
        outputs, raw = [], []
        for o in wanted:
            value = results[o["name"]]
            params = o.get("parameters")
            out: dict[str, Any] = {"name": o["name"], "datatype": "FP32", "shape": list(value.shape)}
            if params.get("binary_data", default_binary) if params else default_binary:
                data = value.tobytes()
                out["parameters"] = {"binary_data_size": len(data)}
                raw.append(data)
            else:
                out["data"] = value.ravel().tolist()
            outputs.append(out)
        return self._answer(request, outputs, raw)


class OnnxFloor(Floor):
    """One ONNX model behind the floor: the session inferd's onnxruntime backend gives the model's
    first instance (the one a lone request runs on), run on the loop, nothing else.

    The config is read, auto-completed and normalised as inferd does (bare_onnxruntime.load_config)
    and the session opened by inferd's own ``open_instance_session`` (options.py's threads, spinning,
    graph level and execution mode; providers.py's providers), so the floor row times the very session
    inferd serves. Per request: the inputs as numpy views over the body (JSON ``data`` too) in the
    config's ``reshape``, the binding's ``run`` (as OnnxInstance calls it), the outputs back in the
    config's dims, binary or JSON as asked. Numeric tensors only; ``classification`` is not supported.
    """

    def __init__(self, model_dir: Path) -> None:
        # inferd's own code, imported here: the add_sub floor needs no more than httptools and numpy
        import onnxruntime as ort
        from bare_onnxruntime import load_config

        from inferd.backends.base import InstanceSpec
        from inferd.backends.onnxruntime.backend import model_path, open_instance_session
        from inferd.backends.onnxruntime.options import session_settings
        from inferd.core.types import BY_CONFIG_VALUE
        from inferd.repository.config.to_json import config_to_json

        cfg, version_dir = load_config(model_dir)
        instances = sum(max(1, g.count) for g in cfg.instance_group) or 1
        settings = session_settings(cfg, instances)
        spec = InstanceSpec(f"{cfg.name}_0", "CPU", 0)
        self.session, _ = open_instance_session(
            settings, model_path(cfg, version_dir), spec, True, ort.get_available_providers(), cfg.name
        )
        inner = getattr(self.session, "_sess", None)
        self._run: Any = getattr(inner, "run", None) or self.session.run
        self.batching = cfg.max_batch_size > 0
        lead = [-1] if self.batching else []

        def io(t: Any) -> tuple[np.dtype[Any], str, list[int] | None, list[int]]:
            dt = BY_CONFIG_VALUE[t.data_type]
            reshape = list(t.reshape.shape) if t.HasField("reshape") else None
            return np.dtype(dt.numpy), dt.wire, reshape, list(t.dims)

        self.inputs = {t.name: io(t) for t in cfg.input}
        self.outputs = {t.name: io(t) for t in cfg.output}
        metadata = {
            "name": cfg.name,
            "versions": [version_dir.name],
            "platform": cfg.platform or "onnxruntime_onnx",
            "inputs": [{"name": n, "datatype": w, "shape": lead + d} for n, (_, w, _, d) in self.inputs.items()],
            "outputs": [{"name": n, "datatype": w, "shape": lead + d} for n, (_, w, _, d) in self.outputs.items()],
        }  # fmt: skip
        super().__init__(cfg.name, version_dir.name, config_to_json(cfg), metadata)

    def infer(self, body: bytes, header_length: int | None) -> bytes:
        """The model on one request's body: the whole HTTP answer."""
        if header_length is None:
            header_length = len(body)
        request = orjson.loads(memoryview(body)[:header_length])
        offset = header_length
        feed = {}
        batch: list[int] = []
        for i in request["inputs"]:
            dtype, _, reshape, _ = self.inputs[i["name"]]
            params = i.get("parameters")
            size = params.get("binary_data_size") if params else None
            if size is None:
                arr = np.asarray(i["data"], dtype)
            else:
                arr = np.frombuffer(body, dtype, size // dtype.itemsize, offset)
                offset += size
            shape = i["shape"]
            if self.batching:
                batch = shape[:1]
            feed[i["name"]] = arr.reshape(shape if reshape is None else batch + reshape)
        wanted = request.get("outputs") or [{"name": n} for n in self.outputs]
        names = [o["name"] for o in wanted]
        results = self._run(names, feed, None)
        default_binary = bool((request.get("parameters") or {}).get("binary_data_output", False))
        outputs, raw = [], []
        for o, value in zip(wanted, results, strict=True):
            _, wire, reshape, dims = self.outputs[o["name"]]
            if reshape is not None:
                value = value.reshape((value.shape[:1] if self.batching else ()) + tuple(dims))
            params = o.get("parameters")
            out: dict[str, Any] = {"name": o["name"], "datatype": wire, "shape": list(value.shape)}
            if params.get("binary_data", default_binary) if params else default_binary:
                data = value.tobytes()
                out["parameters"] = {"binary_data_size": len(data)}
                raw.append(data)
            else:
                out["data"] = value.ravel().tolist()
            outputs.append(out)
        return self._answer(request, outputs, raw)


class Connection(asyncio.Protocol):
    """One keep-alive connection: httptools calls back as a request arrives; answered in order."""

    def __init__(self, floor: Floor) -> None:
        self.floor = floor
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.header_length: int | None = None
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.write(_json_answer(b"400 Bad Request", {"error": "malformed HTTP request"}))
                self.transport.close()

    # -- httptools' callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.url, self.header_length, self.body = b"", None, []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 31 and name.lower() == b"inference-header-content-length":
            self.header_length = int(value)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        transport = self.transport
        if transport is None:
            return
        path = self.url.partition(b"?")[0]
        if self.parser.get_method() == b"POST" and path.endswith(b"/infer"):
            body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
            try:
                answer = self.floor.infer(body, self.header_length)
            except Exception as e:  # not what add_sub takes: say so, keep serving
                answer = _json_answer(b"400 Bad Request", {"error": f"{type(e).__name__}: {e}"})
        else:
            answer = self.floor.get(path)
        transport.write(answer)
        if not self.parser.should_keep_alive():
            transport.close()


async def serve(host: str, port: int, floor: Floor) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(floor), host, port, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"floor: listening on {host}:{bound}", flush=True)
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    await stop
    server.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--http-port", type=int, default=8000, help="0: a free port (printed)")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument(
        "--onnx-model",
        type=Path,
        default=None,
        help="serve this ONNX model folder (config.pbtxt, <version>/model.onnx) instead of add_sub, "
        "with the session inferd gives its first instance (OnnxFloor)",
    )
    a = p.parse_args(argv)
    import uvloop

    floor = Floor() if a.onnx_model is None else OnnxFloor(a.onnx_model)
    uvloop.run(serve(a.host, a.http_port, floor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
