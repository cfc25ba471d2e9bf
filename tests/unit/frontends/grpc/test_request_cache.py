"""The gRPC request cache: every hit decodes to what the full decoding makes of the same message;
messages it cannot take apart plainly, and requests no template can stand for, go the full way."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.grpc import _utils as client_utils
from tritonclient.grpc import service_pb2 as pb

from inferd.core.request import InferRequest, parse_version
from inferd.engine.model import Model
from inferd.errors import InvalidArgumentError
from inferd.frontends.grpc._pb import pb as inferd_pb
from inferd.frontends.grpc.codec import decode_infer_request, varint
from inferd.frontends.grpc.infer_call import InferCall
from inferd.frontends.grpc.request_cache import RequestCache, split
from inferd.repository import parse_config_text


def _model(name: str = "add_sub") -> Model:
    text = f"""
    name: "{name}"
    backend: "python"
    max_batch_size: 8
    input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
            {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }},
             {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    """
    return Model(name, 1, parse_config_text(text, "config.pbtxt"), Path("/nonexistent"))


MODEL = _model()


def _field(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + varint(len(payload)) + payload


def client_message(
    a: np.ndarray[Any, Any] | None = None,
    b: np.ndarray[Any, Any] | None = None,
    outputs: tuple[str, ...] = (),
    classification: int = 0,
    **kwargs: Any,
) -> bytes:
    """The ModelInferRequest bytes tritonclient.grpc sends for add_sub."""
    a = np.arange(16, dtype=np.float32).reshape(1, 16) if a is None else a
    b = np.ones((1, 16), dtype=np.float32) if b is None else b
    inputs = []
    for name, arr in (("INPUT0", a), ("INPUT1", b)):
        i = InferInput(name, list(arr.shape), "FP32")
        i.set_data_from_numpy(arr)
        inputs.append(i)
    outs = [InferRequestedOutput(o, class_count=classification) for o in outputs] or None
    args: dict[str, Any] = {
        "model_version": "",
        "request_id": "",
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
        "priority": 0,
        "timeout": None,
        "parameters": None,
    }
    args.update(kwargs)
    req = client_utils._get_inference_request("add_sub", inputs, outputs=outs, **args)
    return bytes(req.SerializeToString())


def perf_analyzer_message(data: bytes = bytes(range(64))) -> bytes:
    """perf_analyzer's add_sub request, as it sends it (recorded): the empty-final parameter, two
    inputs, two requested outputs, then the tensor data."""
    req = pb.ModelInferRequest(model_name="add_sub")
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="FP32", shape=[1, 16])
    for name in ("OUTPUT0", "OUTPUT1"):
        req.outputs.add(name=name)
    req.raw_input_contents.extend([data, data[::-1]])
    return bytes(req.SerializeToString())


def perf_sequence_message(sequence_id: int, start: bytes = b"\x08\x00", rid: str = "3") -> bytes:
    """perf_analyzer's sequence request, as it sends it (recorded): an id, then sequence_end,
    sequence_start, the empty-final parameter and sequence_id as map entries, one INT32 input."""
    req = pb.ModelInferRequest(model_name="add_sub", id=rid)
    head = req.SerializeToString()

    def entry(key: str, value: bytes) -> bytes:
        return _field(0x22, _field(0x0A, key.encode()) + _field(0x12, value))

    body = (
        entry("sequence_end", b"\x08\x00")
        + entry("sequence_start", start)
        + entry("triton_enable_empty_final_response", b"\x08\x01")
        + entry("sequence_id", b"\x10" + varint(sequence_id))
    )
    tail = pb.ModelInferRequest()
    for name in ("INPUT0", "INPUT1"):
        tail.inputs.add(name=name, datatype="FP32", shape=[1, 16])
    tail.raw_input_contents.extend([bytes(64), bytes(range(64))])
    return bytes(head + body + tail.SerializeToString())


def full(payload: bytes, model: Model = MODEL) -> tuple[InferRequest, bool]:
    return decode_infer_request(inferd_pb.ModelInferRequest.FromString(payload), model)


def through(cache: RequestCache, payload: bytes, model: Model = MODEL) -> tuple[InferRequest, bool] | None:
    """The request a hit makes of ``payload`` (None: no template, or none that fits)."""
    s = cache.split(payload)
    assert s is not None
    tpl = cache.get(s)
    return None if tpl is None else cache.request(tpl, s, model, "" if s.rid is None else s.rid.decode())


def learn(cache: RequestCache, payload: bytes, model: Model = MODEL) -> None:
    s = cache.split(payload)
    assert s is not None
    msg = inferd_pb.ModelInferRequest.FromString(payload)
    request, empty_final = decode_infer_request(msg, model)
    cache.remember(s, model, parse_version(msg.model_version), request, empty_final)


def same(a: InferRequest, b: InferRequest) -> None:
    """Every field a decoder sets, tensors by name, datatype, shape and bytes."""
    for attr in (
        "model_name",
        "model_version",
        "id",
        "parameters",
        "correlation_id",
        "flags",
        "priority",
        "timeout_us",
        "output_names",
    ):
        assert getattr(a, attr) == getattr(b, attr), attr
    assert list(a.inputs) == list(b.inputs)
    for name, t in a.inputs.items():
        u = b.inputs[name]
        assert (t.name, t.datatype, t.shape) == (u.name, u.datatype, u.shape)
        assert t.raw is not None and u.raw is not None
        assert bytes(t.raw) == bytes(u.raw)
    if a.outputs is None:
        assert b.outputs is None
    else:
        assert b.outputs is not None
        assert [(o.name, o.classification, o.target) for o in a.outputs] == [
            (o.name, o.classification, o.target) for o in b.outputs
        ]


VARIANTS: dict[str, tuple[bytes, bytes]] = {
    # (the message a template is made from, another message with the same key)
    "perf_analyzer": (perf_analyzer_message(), perf_analyzer_message(bytes(64 * [7]))),
    "plain": (client_message(), client_message(np.zeros((1, 16), np.float32))),
    "ids": (client_message(request_id="first"), client_message(request_id="second-é")),
    "id and no id": (client_message(request_id="x"), client_message()),
    "outputs": (
        client_message(outputs=("OUTPUT1",), request_id="1"),
        client_message(np.full((1, 16), 3, np.float32), outputs=("OUTPUT1",), request_id="2"),
    ),
    "classification": (
        client_message(outputs=("OUTPUT0",), classification=3),
        client_message(np.ones((1, 16), np.float32), outputs=("OUTPUT0",), classification=3),
    ),
    "sequence": (
        client_message(sequence_id=42, sequence_start=True, priority=2, timeout=1000),
        client_message(
            np.ones((1, 16), np.float32), sequence_id=42, sequence_start=True, priority=2, timeout=1000
        ),
    ),
    "sequence ids": (
        client_message(sequence_id=5, sequence_start=True, request_id="0"),
        client_message(
            np.ones((1, 16), np.float32), sequence_id=2**63 - 1, sequence_start=True, request_id="1"
        ),
    ),
    "perf_analyzer sequence": (
        perf_sequence_message(1, b"\x08\x01"),
        perf_sequence_message(300, b"\x08\x01"),
    ),
    "sequence id 0": (client_message(sequence_id=0), client_message(sequence_id=0, request_id="z")),
    "string sequence id": (
        client_message(sequence_id="abc", sequence_end=True),
        client_message(request_id="7", sequence_id="abc", sequence_end=True),
    ),
    "custom parameters": (
        client_message(parameters={"k": "v", "n": 3, "f": True}),
        client_message(np.ones((1, 16), np.float32), parameters={"k": "v", "n": 3, "f": True}),
    ),
    "version": (client_message(model_version="1"), client_message(model_version="1", request_id="9")),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_hit_decodes_as_the_full_way(variant: str) -> None:
    first, second = VARIANTS[variant]
    cache = RequestCache()
    assert through(cache, first) is None  # nothing known yet
    learn(cache, first)
    for payload in (first, second):
        hit = through(cache, payload)
        assert hit is not None, "the key was remembered"
        request, empty_final = hit
        expected, expected_final = full(payload)
        same(request, expected)
        assert empty_final == expected_final
        assert request.validation_key is not None
    # the template's own parameters are not the ones a request hands on (forwarded headers add to them)
    r1, _ = through(cache, first) or pytest.fail("hit")
    r1.parameters["added"] = "x"
    r2, _ = through(cache, first) or pytest.fail("hit")
    assert "added" not in r2.parameters


def test_other_metadata_is_another_key() -> None:
    cache = RequestCache()
    learn(cache, client_message())
    for other in (
        client_message(np.ones((1, 8), np.float32), np.ones((1, 8), np.float32)),  # shapes
        client_message(outputs=("OUTPUT0",)),
        client_message(priority=1),
        client_message(model_version="1"),
        client_message(parameters={"k": "v"}),
    ):
        assert through(cache, other) is None


def test_only_a_plain_sequence_id_number_is_taken_out() -> None:
    cache = RequestCache()
    learn(cache, perf_sequence_message(1))
    hit = through(cache, perf_sequence_message(77, rid="9"))
    assert hit is not None and hit[0].correlation_id == 77 and hit[0].id == "9"
    # the same header with START set is another template; without a sequence id, another key
    assert through(cache, perf_sequence_message(77, b"\x08\x01")) is None
    assert through(cache, client_message()) is None
    # a negative sequence id (a 10-byte varint the decoder reads as negative): never a template
    negative = client_message(sequence_id=-5)
    s = split(negative)
    assert s is not None and s.cid == 2**64 - 5
    learn(cache, negative)
    assert cache.get(s) is None
    assert full(negative)[0].correlation_id == -5
    # another sequence_id entry, in the message's parameters or an input's: no template
    twice = perf_sequence_message(4)
    twice = twice.replace(
        b"\x22\x12\x0a\x0csequence_end",
        _field(0x22, b"\x0a\x0bsequence_id\x12\x02\x10\x04") + b"\x22\x12\x0a\x0csequence_end",
    )
    s = split(twice)
    assert s is not None and s.cid == 4
    learn(cache, twice)
    assert cache.get(s) is None
    in_input = inferd_pb.ModelInferRequest.FromString(perf_sequence_message(6))
    in_input.inputs[0].parameters["sequence_id"].int64_param = 6
    learn(cache, in_input.SerializeToString())
    assert cache.get(split(in_input.SerializeToString()) or pytest.fail("split")) is None
    # the same message without its sequence id: not the sequenced template (its number is not this one's)
    learn(cache, perf_sequence_message(8))
    plain = perf_sequence_message(8).replace(_field(0x22, b"\x0a\x0bsequence_id\x12\x02\x10\x08"), b"")
    assert split(plain) is not None and through(cache, plain) is None
    # an entry whose value holds more than the one number (the last one wins): not taken out
    again = perf_sequence_message(8).replace(
        _field(0x22, b"\x0a\x0bsequence_id\x12\x02\x10\x08"),
        _field(0x22, b"\x0a\x0bsequence_id\x12\x04\x10\x08\x10\x09"),
    )
    s = split(again)
    assert s is not None and s.cid is None and full(again)[0].correlation_id == 9
    # a string sequence id stays in the key
    s = split(client_message(sequence_id="5"))
    assert s is not None and s.cid is None


def test_a_template_that_does_not_fit_is_not_used() -> None:
    cache = RequestCache()
    payload = perf_analyzer_message()
    learn(cache, payload)
    # other tensor sizes under the same key (what validation would refuse): the full way
    assert through(cache, perf_analyzer_message(bytes(60))) is None
    # another object for the model (reloaded)
    assert through(cache, payload, _model()) is None


def test_a_call_is_read_from_its_template_or_parsed() -> None:
    cache = RequestCache()
    servicer: Any = SimpleNamespace(requests=cache)
    learn(cache, client_message(request_id="x", model_version="1"))
    call = InferCall.read(servicer, client_message(request_id="y", model_version="1"), None)
    assert call.msg is None and call.template is not None  # nothing parsed
    assert (call.model_name, call.model_version, call.rid) == ("add_sub", "1", "y")
    call = InferCall.read(servicer, client_message(priority=3), None)  # an unknown key: parsed
    assert call.msg is not None and call.template is None
    assert (call.model_name, call.model_version, call.rid) == ("add_sub", "", "")
    # an id that is not UTF-8 under a known key: the parser's refusal, as for any other message
    bad_id = client_message(request_id="x", model_version="1").replace(b"\x1a\x01x", b"\x1a\x01\xff")
    assert cache.get(split(bad_id) or pytest.fail("split")) is not None
    with pytest.raises(DecodeError):
        InferCall.read(servicer, bad_id, None)
    with pytest.raises(DecodeError):
        InferCall.read(servicer, b"\xff", None)


def test_the_validation_key_holds_the_sizes() -> None:
    """Two templates of one key but other sizes never share a validation key."""
    a, b = RequestCache(), RequestCache()
    learn(a, perf_analyzer_message())
    learn(b, perf_analyzer_message(bytes(60)))
    ra = through(a, perf_analyzer_message())
    rb = through(b, perf_analyzer_message(bytes(60)))
    assert ra is not None and rb is not None
    assert ra[0].validation_key != rb[0].validation_key


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(perf_analyzer_message() + _field(0x0A, b"late"), id="a field after the tensor data"),
        pytest.param(_field(0x1A, b"a") + _field(0x1A, b"b") + _field(0x3A, b"x"), id="two ids"),
        pytest.param(b"\x82\x01\x00" + _field(0x3A, b"x"), id="field number 16"),
        pytest.param(b"\x08\x01" + _field(0x3A, b"x"), id="a varint field"),
        pytest.param(perf_analyzer_message()[:-3], id="truncated data"),
        pytest.param(b"\x3a", id="no size"),
        pytest.param(b"\x3a\xff\xff\xff\xff\xff\x01", id="a size too long"),
        pytest.param(_field(0x0A, b"m"), id="no tensor data"),
        pytest.param(b"", id="empty"),
    ],
)
def test_messages_that_are_not_plain_are_not_split(payload: bytes) -> None:
    assert split(payload) is None


def test_a_key_past_the_bound_is_not_split() -> None:
    big = client_message(parameters={"k": "v" * 5000})
    assert split(big) is None
    assert split(big, max_key=1 << 20) is not None
    assert split(bytearray(client_message())) is None


def test_requests_no_template_stands_for_are_not_kept() -> None:
    cache = RequestCache()
    # typed contents
    typed = pb.ModelInferRequest(model_name="add_sub")
    t0 = typed.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
    t0.contents.fp32_contents.append(1.0)
    typed.raw_input_contents.append(b"\0" * 4)  # a split finds data, the full way refuses the mix
    with pytest.raises(InvalidArgumentError, match="contents field must not be specified"):
        learn(cache, typed.SerializeToString())
    # an input in shared memory: the window is resolved per request
    shm = pb.ModelInferRequest(model_name="add_sub")
    i0 = shm.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    i0.parameters["shared_memory_region"].string_param = "r"
    i0.parameters["shared_memory_byte_size"].int64_param = 64
    shm.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    shm.raw_input_contents.append(b"\0" * 64)
    s = cache.split(shm.SerializeToString())
    assert s is not None

    class Window:
        def resolve(self, name: str, offset: int, byte_size: int | None) -> memoryview:
            return memoryview(b"\0" * 64)

    request, final = decode_infer_request(inferd_pb.ModelInferRequest.FromString(s.payload), MODEL, Window())
    cache.remember(s, MODEL, "", request, final)
    assert cache.get(s) is None
    shm.raw_input_contents.append(b"\0" * 64)  # as many data fields as inputs: still not kept
    s = cache.split(shm.SerializeToString())
    assert s is not None
    request, final = decode_infer_request(inferd_pb.ModelInferRequest.FromString(s.payload), MODEL, Window())
    cache.remember(s, MODEL, "", request, final)
    assert cache.get(s) is None
    # an output written to shared memory
    out = inferd_pb.ModelInferRequest.FromString(perf_analyzer_message())
    out.outputs[0].parameters["shared_memory_region"].string_param = "r"
    out.outputs[0].parameters["shared_memory_byte_size"].int64_param = 64
    s = cache.split(out.SerializeToString())
    assert s is not None
    request, final = decode_infer_request(inferd_pb.ModelInferRequest.FromString(s.payload), MODEL, Window())
    cache.remember(s, MODEL, "", request, final)
    assert cache.get(s) is None
    # BYTES inputs
    b = pb.ModelInferRequest(model_name="add_sub")
    b.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 1])
    b.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 1])
    b.raw_input_contents.extend([b"\x01\0\0\0a", b"\0" * 4])
    s = cache.split(b.SerializeToString())
    assert s is not None
    request, final = decode_infer_request(inferd_pb.ModelInferRequest.FromString(s.payload), MODEL)
    cache.remember(s, MODEL, "", request, final)
    assert cache.get(s) is None


def test_the_cache_is_bounded() -> None:
    cache = RequestCache(capacity=4)
    payloads = [client_message(priority=p) for p in range(1, 7)]
    for p in payloads:
        learn(cache, p)
    assert len(cache._cache) == 4
    assert through(cache, payloads[0]) is None  # the oldest went first
    assert through(cache, payloads[-1]) is not None
