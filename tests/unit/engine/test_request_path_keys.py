"""Issue 26: what lets the request path skip work keeps answers as they were.

``validation_key`` stands for everything validation reads (so a request validated once per key
and model version is validated as often as it needs to be), and the bytes a response is sent as
do not depend on whether its tensors travel as one joined buffer, as copies or as views.
"""

from __future__ import annotations

import numpy as np
import pytest

from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor, serialize_bytes
from inferd.core.types import BY_WIRE, BYTES
from inferd.engine.validate import validation_key
from inferd.frontends.grpc.codec import ResponseEncoder
from inferd.frontends.http.encode import JOIN_UNDER, OutputEncoding, encode_infer_body, encode_infer_response

FP32 = BY_WIRE["FP32"]
INT64 = BY_WIRE["INT64"]


def request(*tensors: Tensor, outputs: list[str] | None = None) -> InferRequest:
    wanted = None if outputs is None else [RequestedOutput(n) for n in outputs]
    return InferRequest("m", {t.name: t for t in tensors}, outputs=wanted)


def raw(name: str, shape: tuple[int, ...], size: int, dt: object = FP32) -> Tensor:
    return Tensor(name, dt, shape, raw=memoryview(bytes(size)))  # type: ignore[arg-type]


def test_the_key_holds_what_validation_reads() -> None:
    a = validation_key(request(raw("A", (1, 4), 16), raw("B", (1, 4), 16), outputs=["X"]))
    assert a == validation_key(request(raw("A", (1, 4), 16), raw("B", (1, 4), 16), outputs=["X"]))
    others = [
        request(raw("A", (1, 4), 16), raw("B", (1, 4), 12), outputs=["X"]),  # a byte size
        request(raw("A", (2, 2), 16), raw("B", (1, 4), 16), outputs=["X"]),  # a shape
        request(raw("A", (1, 4), 16), raw("C", (1, 4), 16), outputs=["X"]),  # a name
        request(raw("A", (1, 4), 16, INT64), raw("B", (1, 4), 16), outputs=["X"]),  # a datatype
        request(raw("A", (1, 4), 16), raw("B", (1, 4), 16), outputs=["Y"]),  # an output
        request(raw("A", (1, 4), 16), raw("B", (1, 4), 16)),  # every output
        request(raw("A", (1, 4), 16), outputs=["X"]),  # an input fewer
    ]
    keys = {validation_key(r) for r in others}
    assert None not in keys and a not in keys and len(keys) == len(others)
    array = Tensor.from_array("A", np.zeros((1, 4), np.float32))
    assert validation_key(request(array)) == validation_key(request(raw("A", (1, 4), 16)))


def test_bytes_inputs_have_no_key() -> None:
    """Validation decodes BYTES elements (and refuses bad ones): it runs for every such request."""
    t = Tensor("S", BYTES, (1,), raw=serialize_bytes(np.array([b"x"], dtype=np.object_)))
    assert validation_key(request(t)) is None


def _response(*outputs: Tensor) -> InferResponse:
    return InferResponse("m", "1", "id-1", outputs=list(outputs))


@pytest.mark.parametrize("elements", [4, JOIN_UNDER // 4 + 1])
def test_a_joined_body_is_the_parts_joined(elements: int) -> None:
    outs = [
        Tensor.from_array("OUT0", np.arange(elements, dtype=np.float32)),
        Tensor.from_array("OUT1", np.arange(2 * elements, dtype=np.float32).reshape(2, -1)[:, ::2]),
        Tensor.from_array("OUT2", np.arange(elements, dtype=np.dtype(">i8"))),
        Tensor.from_array("OUT3", np.array([b"a", b"bc"], dtype=np.object_)),
    ]
    enc = OutputEncoding(default_binary=True)
    head, parts, hlen = encode_infer_response(_response(*outs), enc)
    body, hlen2 = encode_infer_body(_response(*outs), enc)
    joined = body if isinstance(body, bytes) else b"".join(body)
    assert hlen == hlen2 and joined == b"".join([head, *parts])
    assert isinstance(body, bytes) == (len(joined) < JOIN_UNDER)


def test_copies_and_views_are_the_same_bytes() -> None:
    for arr in (
        np.arange(12, dtype=np.float32).reshape(3, 4).T,  # not contiguous
        np.arange(5, dtype=np.dtype(">f8")),  # big-endian
        np.zeros((0, 3), dtype=np.int32),
        np.arange(6, dtype=np.uint8),
    ):
        t = Tensor.from_array("T", arr)
        assert bytes(t.to_bytes(1 << 20)) == bytes(t.to_bytes())
    from tritonclient.grpc import service_pb2

    small, large = np.arange(300, dtype=np.float32), np.arange(20_000, dtype=np.float32)
    msg = service_pb2.ModelInferResponse.FromString(
        ResponseEncoder().encode(
            _response(Tensor.from_array("OUT0", small), Tensor.from_array("OUT1", large.reshape(2, -1)))
        )
    )
    assert list(msg.raw_output_contents) == [small.tobytes(), large.tobytes()]
