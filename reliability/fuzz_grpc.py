"""Malformed gRPC calls with grpcio: random bytes to every RPC, messages filled by Hypothesis from
their protobuf descriptors (values of every type, real and unknown names), inference requests shaped
for real models with dishonest contents, serialized messages cut, flipped and retyped, and huge
fields. The server must answer every call with a status (never close the connection under it) and
never with a status that only a bug gives (UNKNOWN, ``internal error: <Exception>``, a traceback).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from reliability.common import Server, unexpected_grpc
from reliability.fuzz_http_spec import NUMPY, ModelMeta

SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
METHODS = {m.name: m for m in SERVICE.methods}
KINDS = {"bytes": 20, "message": 30, "infer": 30, "mutated": 15, "huge": 3, "unknown": 2}
#: client-side statuses that mean the server broke the call's connection: no answer where one is due
_DROPPED = ("Socket closed", "Connection reset", "GOAWAY", "failed to connect", "Broken pipe", "RST_STREAM")
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_INT_RANGE = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


@dataclass
class GrpcFuzzResult:
    sent: Counter[str] = field(default_factory=Counter)
    by_rpc: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    unexpected: list[dict[str, Any]] = field(default_factory=list)
    unexpected_count: int = 0
    seconds: float = 0.0
    seed: int = 0

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "sent": dict(self.sent),
            "total": self.total,
            "by_rpc": dict(sorted(self.by_rpc.items())),
            "codes": dict(sorted(self.codes.items())),
            "unexpected_count": self.unexpected_count,
            "unexpected": self.unexpected[:50],
            "seconds": round(self.seconds, 1),
            "seed": self.seed,
        }


class MessageGen:
    """Protobuf messages from their descriptors, with real names where a field asks for one."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def scalar(self, data: st.DataObject, f: FieldDescriptor) -> Any:
        t = f.type
        if t == FieldDescriptor.TYPE_STRING:
            if "name" in f.name or f.name in ("key", "region_name"):
                return data.draw(st.sampled_from(self.names) | _TEXT)
            return data.draw(_TEXT)
        if t == FieldDescriptor.TYPE_BYTES:
            return data.draw(st.binary(max_size=64))
        if t == FieldDescriptor.TYPE_BOOL:
            return data.draw(st.booleans())
        if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
            return data.draw(st.floats(width=32 if t == FieldDescriptor.TYPE_FLOAT else 64))
        if t == FieldDescriptor.TYPE_ENUM:
            return data.draw(st.sampled_from([v.number for v in f.enum_type.values]))
        lo, hi = _INT_RANGE.get(t, (0, 100))
        return data.draw(st.integers(lo, hi))

    def fill(self, data: st.DataObject, msg: Message, depth: int = 0) -> Message:
        d: Descriptor = msg.DESCRIPTOR
        for f in d.fields:
            if data.draw(st.integers(0, 2)) == 0:
                continue
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                vf = f.message_type.fields_by_name["value"]
                for _ in range(data.draw(st.integers(0, 2))):
                    key = data.draw(_TEXT)
                    target = getattr(msg, f.name)
                    if vf.message_type is not None:
                        if depth < 3:
                            self.fill(data, target[key], depth + 1)
                    else:
                        target[key] = self.scalar(data, vf)
            elif f.label == FieldDescriptor.LABEL_REPEATED:
                for _ in range(data.draw(st.integers(0, 3))):
                    if f.message_type is not None:
                        if depth < 3:
                            self.fill(data, getattr(msg, f.name).add(), depth + 1)
                    else:
                        getattr(msg, f.name).append(self.scalar(data, f))
            elif f.message_type is not None:
                if depth < 3:
                    self.fill(data, getattr(msg, f.name), depth + 1)
            else:
                setattr(msg, f.name, self.scalar(data, f))
        return msg


def infer_request(data: st.DataObject, model: ModelMeta) -> service_pb2.ModelInferRequest:
    """A ModelInferRequest for ``model``: its inputs, with raw contents of the right size or not,
    typed contents of the wrong kind, dishonest shapes."""
    req = service_pb2.ModelInferRequest(model_name=model.name)
    if data.draw(st.integers(0, 5)) == 0:
        req.model_version = data.draw(st.sampled_from(["1", "2", "x", "-1", "99999999999999999999"]))
    use_raw = data.draw(st.booleans())
    for t in model.inputs:
        if data.draw(st.integers(0, 9)) == 0:
            continue
        shape = [d if d >= 0 else data.draw(st.integers(0, 4)) for d in t.shape]
        if model.max_batch > 0:
            shape = [data.draw(st.integers(0, model.max_batch + 1)), *shape]
        if data.draw(st.integers(0, 7)) == 0:
            shape = data.draw(st.lists(st.integers(-2, 2**62), max_size=4))
        inp = req.inputs.add(name=t.name if data.draw(st.integers(0, 15)) else "nope", datatype=t.datatype)
        if data.draw(st.integers(0, 9)) == 0:
            inp.datatype = data.draw(st.sampled_from([*NUMPY, "BYTES", "FP8", ""]))
        inp.shape.extend(shape)
        count = max(0, min(int(np.prod([max(0, s) for s in shape])) if shape else 1, 4096))
        if use_raw:
            if t.datatype == "BYTES":
                items = [data.draw(st.binary(max_size=8)) for _ in range(min(count, 8))]
                raw = b"".join(len(i).to_bytes(4, "little") + i for i in items)
            else:
                raw = bytes(count * np.dtype(NUMPY.get(t.datatype, np.uint8)).itemsize)
            if data.draw(st.integers(0, 5)) == 0:
                raw = raw[: data.draw(st.integers(0, len(raw)))] + data.draw(st.binary(max_size=9))
            req.raw_input_contents.append(raw)
        else:
            c = inp.contents
            kind = data.draw(
                st.sampled_from(["fp32", "int", "int64", "uint", "bool", "bytes", "fp64", "none"])
            )
            if kind == "fp32":
                c.fp32_contents.extend([1.5] * count)
            elif kind == "int":
                c.int_contents.extend([1] * count)
            elif kind == "int64":
                c.int64_contents.extend([1] * count)
            elif kind == "uint":
                c.uint_contents.extend([1] * count)
            elif kind == "bool":
                c.bool_contents.extend([True] * count)
            elif kind == "bytes":
                c.bytes_contents.extend([b"ab"] * count)
            elif kind == "fp64":
                c.fp64_contents.extend([2.5] * count)
    if use_raw and data.draw(st.integers(0, 7)) == 0:
        req.raw_input_contents.append(data.draw(st.binary(max_size=16)))  # one more than the inputs
    for o in data.draw(st.lists(st.sampled_from(model.outputs or [None]), max_size=2)):
        if o is not None:
            out = req.outputs.add(name=o.name)
            if data.draw(st.booleans()):
                out.parameters["classification"].int64_param = data.draw(st.integers(-1, 5))
    if data.draw(st.integers(0, 4)) == 0:
        p = req.parameters[
            data.draw(st.sampled_from(["priority", "timeout", "sequence_id", "x", "binary_data_output"]))
        ]
        which = data.draw(st.integers(0, 3))
        if which == 0:
            p.int64_param = data.draw(st.integers(-(2**63), 2**63 - 1))
        elif which == 1:
            p.string_param = data.draw(_TEXT)
        elif which == 2:
            p.bool_param = data.draw(st.booleans())
        else:
            p.uint64_param = data.draw(st.integers(0, 2**64 - 1))
    return req


def mutate(data: st.DataObject, raw: bytes) -> bytes:
    """Serialized bytes cut, flipped, spliced or given a tag of the wrong wire type."""
    if not raw:
        return data.draw(st.binary(min_size=1, max_size=32))
    how = data.draw(st.integers(0, 4))
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    b = bytearray(raw)
    if how == 0:
        return bytes(b[: rng.randrange(len(b))])
    if how == 1:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if how == 2:
        i = rng.randrange(len(b) + 1)
        return bytes(b[:i]) + data.draw(st.binary(max_size=16)) + bytes(b[i:])
    if how == 3:  # the first tag with another wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32, 3/4 groups)
        b[0] = (b[0] & ~7) | rng.choice([0, 1, 2, 3, 4, 5, 6, 7])
        return bytes(b)
    # a length prefix that claims far more than follows
    return bytes([0x0A, 0xFF, 0xFF, 0xFF, 0x7F]) + bytes(b)


class _OutOfTime(Exception):
    pass


def run(
    server: Server,
    models: dict[str, ModelMeta],
    count: int,
    seconds: float,
    seed: int,
    batch: int = 1000,
    huge_bytes: int | None = None,
    progress: bool = False,
) -> GrpcFuzzResult:
    """``count`` malformed calls (or as many as ``seconds`` allow). ``huge_bytes``: the size of the
    huge fields (default: the server's message limit + 1 MiB, in at most 3 calls; then 1-4 MiB)."""
    result = GrpcFuzzResult(seed=seed)
    channel = grpc.insecure_channel(
        f"127.0.0.1:{server.grpc_port}",
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    )
    names = sorted(models) + sorted({t.name for m in models.values() for t in m.inputs + m.outputs})
    gen = MessageGen(names)
    model_names = sorted(models)
    unary = {
        name: channel.unary_unary(
            f"/{SERVICE.full_name}/{name}", request_serializer=None, response_deserializer=None
        )
        for name, m in METHODS.items()
        if not m.client_streaming
    }
    stream = channel.stream_stream(
        f"/{SERVICE.full_name}/ModelStreamInfer", request_serializer=None, response_deserializer=None
    )
    health = channel.unary_unary(
        "/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None
    )
    huge_left = 3
    t0 = time.monotonic()
    deadline = t0 + seconds
    rpcs = sorted(METHODS)

    def call(kind: str, rpc: str, payloads: list[bytes]) -> None:
        result.sent[kind] += 1
        result.by_rpc[rpc] += 1
        try:
            if rpc == "ModelStreamInfer":
                for _ in stream(iter(payloads), timeout=15):
                    pass
            elif rpc == "Health/Check":
                health(payloads[0], timeout=15)
            elif rpc == "Nope":
                channel.unary_unary(f"/{SERVICE.full_name}/Nope")(payloads[0], timeout=15)
            else:
                unary[rpc](payloads[0], timeout=15)
            result.codes["OK"] += 1
        except grpc.RpcError as e:
            code = e.code().name if e.code() is not None else "?"
            details = e.details() or ""
            result.codes[code] += 1
            why = unexpected_grpc(code, details)
            if why is None and code == "UNAVAILABLE" and any(d in details for d in _DROPPED):
                why = f"connection dropped under the call: {details}"
            if why is None and code == "DEADLINE_EXCEEDED":
                why = "no answer within 15 s"
            if why is not None:
                result.unexpected_count += 1
                if len(result.unexpected) < 200:
                    result.unexpected.append(
                        {"kind": kind, "rpc": rpc, "why": why, "code": code, "details": details[:400],
                         "request": payloads[0][:600].hex(), "request_bytes": sum(map(len, payloads))}
                    )  # fmt: skip

    def one_call(data: st.DataObject) -> None:
        nonlocal huge_left
        if time.monotonic() > deadline:
            raise _OutOfTime
        kind = data.draw(st.sampled_from([k for k, w in KINDS.items() for _ in range(w)]))
        rpc = data.draw(st.sampled_from([*rpcs, "Health/Check"]))
        if kind == "bytes":
            payloads = [data.draw(st.binary(max_size=256))]
        elif kind == "message":
            if rpc == "Health/Check":
                payloads = [data.draw(st.binary(max_size=16))]
            else:
                payloads = [gen.fill(data, METHODS[rpc].input_type._concrete_class()).SerializeToString()]
        elif kind == "infer":
            rpc = data.draw(st.sampled_from(["ModelInfer", "ModelInfer", "ModelStreamInfer"]))
            n = data.draw(st.integers(1, 3)) if rpc == "ModelStreamInfer" else 1
            payloads = [
                infer_request(data, models[data.draw(st.sampled_from(model_names))]).SerializeToString()
                for _ in range(n)
            ]
        elif kind == "mutated":
            rpc = data.draw(st.sampled_from(["ModelInfer", "ModelMetadata", "ModelConfig", "SystemSharedMemoryRegister", "LogSettings"]))  # fmt: skip
            if rpc == "ModelInfer":
                msg: Message = infer_request(data, models[data.draw(st.sampled_from(model_names))])
            else:
                msg = gen.fill(data, METHODS[rpc].input_type._concrete_class())
            payloads = [mutate(data, msg.SerializeToString())]
        elif kind == "huge":
            rpc = data.draw(st.sampled_from(["ModelInfer", "ModelMetadata", "SystemSharedMemoryRegister"]))
            if huge_left > 0 and huge_bytes is not None:
                size = huge_bytes
                huge_left -= 1
            else:
                size = data.draw(st.integers(1 << 20, 4 << 20))
            if rpc == "ModelInfer":
                req = service_pb2.ModelInferRequest(model_name="identity_fp32")
                req.inputs.add(name="INPUT0", datatype="FP32", shape=[size // 4])
                req.raw_input_contents.append(bytes(size))
                payloads = [req.SerializeToString()]
            elif rpc == "ModelMetadata":
                payloads = [service_pb2.ModelMetadataRequest(name="m" * size).SerializeToString()]
            else:
                payloads = [
                    service_pb2.SystemSharedMemoryRegisterRequest(
                        name="r", key="k" * size
                    ).SerializeToString()
                ]
        else:
            rpc = "Nope"
            payloads = [b""]
        call(kind, rpc, payloads)

    batches = 0
    try:
        while result.total < count and time.monotonic() < deadline and server.alive():
            n = min(batch, count - result.total)

            @settings(max_examples=n, phases=[Phase.generate], database=None, deadline=None,
                      suppress_health_check=list(HealthCheck))  # fmt: skip
            @hypothesis_seed(seed * 1_000_003 + batches)
            @given(st.data())
            def many(data: st.DataObject) -> None:
                one_call(data)

            before = result.total
            try:
                many()
            except _OutOfTime:
                break
            except Exception as e:
                result.unexpected.append({"kind": "harness", "why": repr(e)[:500]})
            batches += 1
            if progress:
                print(f"  grpc: {result.total:,} calls, {result.unexpected_count} unexpected", flush=True)
            if result.total == before:
                break
    finally:
        channel.close()
    result.seconds = time.monotonic() - t0
    return result
