"""KServe v2 HTTP responses: an InferResponse as a JSON body, or a JSON header and binary tensors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import BYTES
from inferd.errors import InvalidArgumentError
from inferd.shm.system import write_to_target

if TYPE_CHECKING:
    from inferd.core.request import Target


@dataclass(slots=True)
class OutputEncoding:
    """How the response should be encoded: which outputs go binary."""

    default_binary: bool = False
    binary: dict[str, bool] = field(default_factory=dict)
    #: tensors travel through shared memory (such requests are never cached by header)
    shm: bool = False

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


def _json_data(t: Tensor) -> Any:
    arr = t.array
    if t.datatype is BYTES:
        return [
            v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)
            for v in arr.reshape(-1)
        ]
    flat = arr.reshape(-1)
    if flat.dtype.kind == "f" and flat.dtype.itemsize < 8:
        # the reference prints FP32 through a double: 0.1f is 0.10000000149011612 there
        return flat.astype(np.float64)
    if not (flat.flags.c_contiguous and flat.dtype.isnative):  # orjson serialises only these
        flat = np.ascontiguousarray(flat, dtype=flat.dtype.newbyteorder("="))
    return flat


#: a body smaller than this is joined into one buffer (larger ones keep their parts: not copied)
JOIN_UNDER = 65536


def encode_infer_response(
    resp: InferResponse, enc: OutputEncoding, request: InferRequest | None = None
) -> tuple[bytes, list[bytes | memoryview], int]:
    """(JSON header, binary parts, header length or -1 when the body is pure JSON).

    Outputs the request asked for in shared memory are written there and listed without data.
    """
    head, parts, hlen, _ = _encode(resp, enc, request)
    return head, parts, hlen


def encode_infer_body(
    resp: InferResponse, enc: OutputEncoding, request: InferRequest | None = None
) -> tuple[bytes | list[bytes | memoryview], int]:
    """``encode_infer_response`` as the body to send: one buffer under ``JOIN_UNDER`` bytes (the
    copy a write makes anyway), else the header and the tensors' own buffers; and the header length."""
    head, parts, hlen, binary_bytes = _encode(resp, enc, request)
    if not parts:
        return head, hlen
    if len(head) + binary_bytes < JOIN_UNDER:
        return b"".join((head, *parts)), hlen
    return [head, *parts], hlen


def _encode(
    resp: InferResponse, enc: OutputEncoding, request: InferRequest | None
) -> tuple[bytes, list[bytes | memoryview], int, int]:
    """(JSON header, binary parts, header length or -1, binary bytes)."""
    outputs = []
    parts: list[bytes | memoryview] = []
    binary_bytes = 0
    targets: dict[str, Target] | None = None
    if enc.shm and request is not None and request.outputs is not None:
        targets = {o.name: o.target for o in request.outputs if o.target is not None}
    binary, default_binary = enc.binary, enc.default_binary
    for t in resp.outputs:
        name = t.name
        o: dict[str, Any] = {"name": name, "datatype": t.datatype.wire, "shape": list(t.shape)}
        target = None if targets is None else targets.get(name)
        if target is not None:
            write_to_target(t, target)
        elif binary.get(name, default_binary):
            data = t.to_bytes(JOIN_UNDER)
            size = len(data) if isinstance(data, bytes) else data.nbytes
            o["parameters"] = {"binary_data_size": size}
            parts.append(data)
            binary_bytes += size
        elif not t.datatype.json_ok:
            raise InvalidArgumentError(
                f"sending {t.datatype.wire} data via JSON is not supported. Please use the binary data format "
                "for output"
            )
        else:
            o["data"] = _json_data(t)
        outputs.append(o)
    doc: dict[str, Any] = {}
    if resp.id:
        doc["id"] = resp.id
    doc["model_name"] = resp.model_name
    doc["model_version"] = resp.model_version
    if resp.parameters:
        doc["parameters"] = resp.parameters
    doc["outputs"] = outputs
    head = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    # no binary bytes at all (empty binary outputs included): a plain JSON answer, as the reference gives
    return head, parts, (len(head) if binary_bytes else -1), binary_bytes
