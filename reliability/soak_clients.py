"""The soak's load: the requests (``make_case``: inputs and the answers the model's arithmetic gives),
sent and checked over HTTP/JSON on keep-alive connections and over gRPC on grpc.aio channels, and
the ``Tally`` of what they got (answers, errors, latency histogram, outcomes under SIGTERM); ``worker``
runs ``clients`` in a client process of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import struct
import time
from collections import Counter
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

MODELS = ("add_sub", "mul_fp32", "ensemble_add_sub", "identity_fp32", "identity_bytes", "batched_sleep")
SERVICE = "/inference.GRPCInferenceService/"
_BUCKET = math.log(1.05)  # latency histogram: 5% wide buckets


# -- one request and its check ----------------------------------------------------------------------
def make_case(
    model: str, rng: random.Random
) -> tuple[list[tuple[str, str, list[int], np.ndarray]], dict[str, np.ndarray]]:
    """(inputs as (name, datatype, shape, array), expected outputs) of one request to ``model``."""
    if model in ("add_sub", "mul_fp32", "ensemble_add_sub"):
        a = np.array([rng.uniform(-10, 10) for _ in range(16)], np.float32).reshape(1, 16)
        b = np.array([rng.uniform(-10, 10) for _ in range(16)], np.float32).reshape(1, 16)
        ins = [("INPUT0", "FP32", [1, 16], a), ("INPUT1", "FP32", [1, 16], b)]
        if model == "add_sub":
            return ins, {"OUTPUT0": a + b, "OUTPUT1": a - b}
        if model == "mul_fp32":
            return ins, {"OUTPUT0": a * b}
        return ins, {"OUTPUT0": (a + b) * (a - b), "OUTPUT1": a - b}
    if model == "identity_fp32":
        n = rng.randint(1, 64)
        x = np.arange(n, dtype=np.float32) * rng.random()
        return [("INPUT0", "FP32", [n], x)], {"OUTPUT0": x}
    if model == "identity_bytes":
        n = rng.randint(1, 8)
        x = np.array([f"s{rng.randrange(10**6)}-{i}".encode() for i in range(n)], dtype=np.object_)
        return [("INPUT0", "BYTES", [n], x)], {"OUTPUT0": x}
    x = np.arange(4, dtype=np.float32).reshape(1, 4) + rng.random()  # batched_sleep
    return [("INPUT0", "FP32", [1, 4], x)], {"OUTPUT0": x}


def http_body(model: str, inputs: list[tuple[str, str, list[int], np.ndarray]]) -> bytes:
    doc = {
        "inputs": [
            {"name": n, "datatype": dt, "shape": s, "data": [v.decode() for v in a.reshape(-1)] if dt == "BYTES" else a.reshape(-1).tolist()}
            for n, dt, s, a in inputs
        ]
    }  # fmt: skip
    if model == "batched_sleep":
        doc["outputs"] = [{"name": "OUTPUT0"}]
    return json.dumps(doc).encode()


def check_http(body: bytes, expected: dict[str, np.ndarray]) -> str | None:
    doc = json.loads(body)
    got = {o["name"]: o for o in doc.get("outputs", [])}
    for name, want in expected.items():
        if name not in got:
            return f"output {name} missing"
        data = got[name]["data"]
        if want.dtype == np.object_:
            if [w.decode() for w in want.reshape(-1)] != data:
                return f"{name} differs"
        elif not np.allclose(np.array(data, np.float32), want.reshape(-1), rtol=1e-5, atol=1e-5):
            return f"{name} differs"
    return None


def grpc_request(model: str, inputs: list[tuple[str, str, list[int], np.ndarray]]) -> bytes:
    req = service_pb2.ModelInferRequest(model_name=model)
    for n, dt, s, a in inputs:
        req.inputs.add(name=n, datatype=dt, shape=s)
        if dt == "BYTES":
            req.raw_input_contents.append(b"".join(struct.pack("<I", len(v)) + v for v in a.reshape(-1)))
        else:
            req.raw_input_contents.append(a.tobytes())
    if model == "batched_sleep":
        req.outputs.add(name="OUTPUT0")
    return req.SerializeToString()


def check_grpc(raw: bytes, expected: dict[str, np.ndarray]) -> str | None:
    resp = service_pb2.ModelInferResponse.FromString(raw)
    contents = dict(zip([o.name for o in resp.outputs], resp.raw_output_contents, strict=False))
    for name, want in expected.items():
        if name not in contents:
            return f"output {name} missing"
        buf = contents[name]
        if want.dtype == np.object_:
            items, i = [], 0
            while i < len(buf):
                n = struct.unpack_from("<I", buf, i)[0]
                items.append(buf[i + 4 : i + 4 + n])
                i += 4 + n
            if items != list(want.reshape(-1)):
                return f"{name} differs"
        elif not np.allclose(np.frombuffer(buf, np.float32), want.reshape(-1), rtol=1e-5, atol=1e-5):
            return f"{name} differs"
    return None


# -- clients ----------------------------------------------------------------------------------------
class Tally:
    def __init__(self) -> None:
        self.ok = 0
        self.errors: Counter[str] = Counter()
        self.error_samples: list[str] = []
        self.latency: Counter[int] = Counter()  # histogram bucket -> count
        self.by_protocol: Counter[str] = Counter()
        # SIGTERM check: what each request got
        self.outcomes: Counter[str] = Counter()

    def error(self, why: str) -> None:
        key = why.split(":", 1)[0][:80]
        self.errors[key] += 1
        if len(self.error_samples) < 20:
            self.error_samples.append(why[:300])

    def merge(self, other: dict[str, Any]) -> None:
        self.ok += other["ok"]
        self.errors.update(other["errors"])
        self.error_samples += other["error_samples"][: max(0, 20 - len(self.error_samples))]
        self.latency.update({int(k): v for k, v in other["latency"].items()})
        self.by_protocol.update(other["by_protocol"])
        self.outcomes.update(other["outcomes"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": dict(self.errors),
            "error_samples": self.error_samples,
            "latency": dict(self.latency),
            "by_protocol": dict(self.by_protocol),
            "outcomes": dict(self.outcomes),
        }

    def percentile(self, q: float) -> float:
        """Latency in ms at quantile ``q`` (from the histogram)."""
        total = sum(self.latency.values())
        if not total:
            return float("nan")
        seen = 0
        for b in sorted(self.latency):
            seen += self.latency[b]
            if seen >= q * total:
                return math.exp((b + 0.5) * _BUCKET) / 1000
        return float("nan")


async def _http_client(port: int, stop: float, tally: Tally, rng: random.Random, sigterm: bool) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    refused = 0
    while time.monotonic() < stop:
        model = rng.choice(MODELS)
        inputs, expected = make_case(model, rng)
        body = http_body(model, inputs)
        req = (
            f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        fresh = writer is None
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if not sigterm:
                    tally.error("connect refused")
                tally.outcomes["not accepted (connect refused)"] += 1
                refused += 1
                if sigterm and refused > 3:
                    return
                await asyncio.sleep(0.05)
                continue
        assert reader is not None
        t0 = time.perf_counter()
        try:
            writer.write(req)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            close = False
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                k = k.strip().lower()
                if k == b"content-length":
                    length = int(v)
                elif k == b"connection" and v.strip().lower() == b"close":
                    close = True
            data = await reader.readexactly(length)
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            where = "a fresh connection" if fresh else "a keep-alive connection"
            tally.outcomes[f"empty reply on {where}"] += 1
            tally.error(f"HTTP {model}: no answer on {where} ({type(e).__name__})")
            writer.close()
            writer = None
            continue
        tally.latency[int(math.log(max(1.0, (time.perf_counter() - t0) * 1e6)) / _BUCKET)] += 1
        tally.by_protocol["http"] += 1
        if status != 200:
            tally.outcomes[f"answered {status}"] += 1
            tally.error(f"HTTP {model} {status}: {data[:200].decode('latin-1')}")
        else:
            why = check_http(data, expected)
            if why:
                tally.error(f"HTTP {model} wrong answer: {why}")
            else:
                tally.ok += 1
            tally.outcomes["answered 200"] += 1
        if close:
            writer.close()
            writer = None
    if writer is not None:
        writer.close()


#: client-side statuses of a call whose connection broke under it, and of one never accepted
BROKEN = (
    "Socket closed",
    "Connection reset",
    "GOAWAY",
    "Broken pipe",
    "Stream removed",
    "RST_STREAM",
    "EOF",
)
_NOT_ACCEPTED = ("failed to connect", "Connection refused", "connections to all backends failing")


async def _grpc_client(port: int, stop: float, tally: Tally, rng: random.Random, sigterm: bool) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(
            SERVICE + "ModelInfer", request_serializer=None, response_deserializer=None
        )
        refused = 0
        while time.monotonic() < stop:
            model = rng.choice(MODELS)
            inputs, expected = make_case(model, rng)
            t0 = time.perf_counter()
            try:
                raw = await call(grpc_request(model, inputs), timeout=60)
            except grpc.aio.AioRpcError as e:
                details = e.details() or ""
                if any(d in details for d in _NOT_ACCEPTED):
                    tally.outcomes["not accepted (connect refused)"] += 1
                    refused += 1
                    if not sigterm:
                        tally.error(f"gRPC {model} {e.code().name}: {details}")
                    if sigterm and refused > 3:
                        return
                    await asyncio.sleep(0.05)
                elif any(d in details for d in BROKEN):
                    tally.outcomes["empty reply (connection broke under the call)"] += 1
                    tally.error(f"gRPC {model} {e.code().name}: {details}")
                else:
                    tally.outcomes[f"answered {e.code().name}"] += 1
                    tally.error(f"gRPC {model} {e.code().name}: {details}")
                continue
            tally.latency[int(math.log(max(1.0, (time.perf_counter() - t0) * 1e6)) / _BUCKET)] += 1
            tally.by_protocol["grpc"] += 1
            why = check_grpc(raw, expected)
            if why:
                tally.error(f"gRPC {model} wrong answer: {why}")
            else:
                tally.ok += 1
            tally.outcomes["answered OK"] += 1


async def clients(
    http_port: int, grpc_port: int, n: int, seconds: float, seed: int, sigterm: bool = False
) -> Tally:
    tally = Tally()
    stop = time.monotonic() + seconds
    tasks = []
    for i in range(n):
        rng = random.Random(seed * 1000 + i)
        if i % 2 == 0:
            tasks.append(_http_client(http_port, stop, tally, rng, sigterm))
        else:
            tasks.append(_grpc_client(grpc_port, stop, tally, rng, sigterm))
    await asyncio.gather(*tasks)
    return tally


def worker(http_port: int, grpc_port: int, n: int, seconds: float, seed: int, queue: Any) -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    tally = asyncio.run(clients(http_port, grpc_port, n, seconds, seed))
    queue.put(tally.to_dict())
