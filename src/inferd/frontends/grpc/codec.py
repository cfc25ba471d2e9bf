"""KServe v2 gRPC codec: ``ModelInferRequest`` -> InferRequest, InferResponse -> wire bytes.

Request semantics are the core's (``validate_request`` runs after decoding, as for HTTP); this
module does what Triton's gRPC handler does before the core sees a request, in its order and
with its texts: the version string, the request parameters (typed as gRPC types them), inputs
and outputs, their data (``raw_input_contents`` or typed ``contents``), and output parameters.

Responses are encoded by hand (protobuf's wire format is simple): outputs always travel in
``raw_output_contents``, tensors are copied once into the message, and the encoded metadata of an
output (name, datatype, shape) is cached, since a model answers with the same few every time.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import numpy as np

from inferd.core.request import SEQUENCE_END, SEQUENCE_START, InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE, BYTES, DataType
from inferd.engine.model import Model
from inferd.engine.validate import request_prefix
from inferd.errors import InvalidArgumentError, NotFoundError
from inferd.shm.system import write_to_target

if TYPE_CHECKING:
    from inferd.core.request import Target
    from inferd.frontends.grpc._pb import pb
    from inferd.shm.system import Window

#: what the reference answers a message it cannot parse (gRPC INTERNAL)
PARSE_ERROR = "Unable to parse request"
#: A datatype name Triton does not know: it reaches the core as TRITONSERVER_TYPE_INVALID.
INVALID = DataType("<invalid>", "TYPE_INVALID", 0, 0, np.dtype("V1"), 0, False)

#: The one ``triton_`` request parameter gRPC clients may set.
EMPTY_FINAL = "triton_enable_empty_final_response"
_RESERVED_TRITON = (
    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys "
    f"starting with 'triton_' are allowed: {EMPTY_FINAL}"
)
_INT64_MAX: Final = 2**63 - 1


class SharedMemory(Protocol):
    """Resolves ``shared_memory_*`` parameters (``inferd.shm.system.SharedMemoryManager``)."""

    def resolve(self, name: str, offset: int, byte_size: int | None) -> Window: ...


# -- parameters ------------------------------------------------------------------------------------
def param_value(p: pb.InferParameter) -> tuple[str | None, Any]:
    """(oneof kind, value) of an InferParameter; (None, None) when no value is set."""
    kind = p.WhichOneof("parameter_choice")
    return kind, (None if kind is None else getattr(p, kind))


def _type_error(key: str, expected: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"invalid value type for '{key}' parameter, expected {expected}.")


def apply_parameters(request: InferRequest, params: Mapping[str, Any]) -> bool:
    """Reserved parameters onto ``request``, custom ones into ``request.parameters``.

    Returns whether the client asked for the empty final response of decoupled models.
    """
    empty_final = False
    custom: dict[str, Any] = {}
    for key, p in params.items():
        kind, value = param_value(p)
        if key == "sequence_id":
            if kind not in ("int64_param", "string_param"):
                raise _type_error(key, "int64_param or string_param")
            request.correlation_id = value
        elif key in ("sequence_start", "sequence_end"):
            if kind != "bool_param":
                raise _type_error(key, "bool_param")
            if value:
                request.flags |= SEQUENCE_START if key == "sequence_start" else SEQUENCE_END
        elif key == "priority":
            if kind not in ("int64_param", "uint64_param"):
                raise _type_error(key, "int64_param or uint64_param")
            if value < 0:
                raise InvalidArgumentError("invalid value for 'priority', expected value >= 0.")
            request.priority = value
        elif key == "timeout":
            if kind != "int64_param":
                raise _type_error(key, "int64_param")
            request.timeout_us = value
        elif key == EMPTY_FINAL:
            if kind != "bool_param":
                raise _type_error(key, "bool_param")
            empty_final = value
        elif key.startswith("triton_"):
            raise InvalidArgumentError(_RESERVED_TRITON)
        else:
            # 2.51 takes double_param too, though its message does not say so
            if kind not in ("int64_param", "bool_param", "string_param", "double_param"):
                raise _type_error(key, "int64_param, bool_param, or string_param")
            custom[key] = value
    request.parameters = custom
    return empty_final


def output_targets(request: InferRequest) -> dict[str, Target] | None:
    """Shared-memory windows of the request's outputs, by name (None when it names none)."""
    if request.outputs is None:
        return None
    targets = None
    for o in request.outputs:
        if o.target is not None:
            if targets is None:
                targets = {}
            targets[o.name] = o.target
    return targets


def _shm_params(params: Mapping[str, Any], tensor: str) -> tuple[str, int, int] | None:
    """(region, offset, byte_size) when a tensor names a shared-memory region (Triton's checks)."""
    region: str | None = None
    offset = 0
    byte_size: int | None = None
    for key in ("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"):
        if key not in params:
            continue
        kind, value = param_value(params[key])
        expected = "string_param" if key == "shared_memory_region" else "int64_param"
        if kind != expected:
            raise InvalidArgumentError(
                f"invalid value type for '{key}' parameter for tensor '{tensor}', expected {expected}."
            )
        if key == "shared_memory_region":
            region = value
        elif key == "shared_memory_offset":
            offset = value
        else:
            byte_size = value
    if region is None:
        return None
    if byte_size is None:
        raise InvalidArgumentError(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for "
            f"tensor '{tensor}'"
        )
    return region, offset, byte_size


def _shm_window(shm: SharedMemory | None, region: str, offset: int, byte_size: int) -> Window:
    if shm is None:
        raise NotFoundError(f"Unable to find shared memory region: '{region}'")
    return shm.resolve(region, offset, byte_size)


# -- typed contents --------------------------------------------------------------------------------
#: InferTensorContents fields in the order Triton checks them: (field, its own type's name,
#: {wire datatype it may carry: numpy dtype of the field's values})
_CONTENTS: tuple[tuple[str, str, dict[str, np.dtype[Any]]], ...] = (
    ("bool_contents", "BOOL", {"BOOL": np.dtype(np.bool_)}),
    ("int_contents", "INT32", {k: np.dtype(np.int32) for k in ("INT8", "INT16", "INT32")}),
    ("int64_contents", "INT64", {"INT64": np.dtype(np.int64)}),
    ("uint_contents", "UINT32", {k: np.dtype(np.uint32) for k in ("UINT8", "UINT16", "UINT32")}),
    ("uint64_contents", "UINT64", {"UINT64": np.dtype(np.uint64)}),
    ("fp32_contents", "FP32", {"FP32": np.dtype(np.float32)}),
    ("fp64_contents", "FP64", {"FP64": np.dtype(np.float64)}),
    ("bytes_contents", "BYTES", {"BYTES": np.dtype(np.object_)}),
)


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def typed_tensor(name: str, dt: DataType, shape: tuple[int, ...], contents: Any, model_name: str) -> Tensor:
    """A tensor from typed ``contents`` (narrowing INT8/16 and UINT8/16 as C++ casts do)."""
    arr: np.ndarray[Any, Any] | None = None
    for field, own, carries in _CONTENTS:
        values = getattr(contents, field)
        if not values:
            continue
        src = carries.get(dt.wire)
        if src is None:
            raise InvalidArgumentError(
                f"unexpected explicit tensor data for input tensor '{name}' for model '{model_name}' of type "
                f"'{own}', expected datatype '{dt.wire}'"
            )
        if dt is BYTES:
            arr = np.empty(len(values), dtype=np.object_)
            arr[:] = list(values)
        else:
            arr = np.array(values, dtype=src)
            if src != dt.numpy:
                arr = arr.astype(dt.numpy)  # wraps around, as the reference's static_cast
    if arr is None:  # a contents message with nothing in it: no data
        if dt is BYTES:
            return Tensor(name, dt, shape, array=np.empty(0, dtype=np.object_))
        return Tensor(name, dt, shape, raw=b"")
    if dt is not BYTES:
        return Tensor(name, dt, shape, raw=memoryview(arr).cast("B"))  # type: ignore[arg-type]
    if arr.size == _count(shape) and min(shape, default=0) >= 0:
        arr = arr.reshape(shape)
    return Tensor(name, dt, shape, array=arr)


# -- requests --------------------------------------------------------------------------------------
def decode_infer_request(
    msg: Any, model: Model, shm: SharedMemory | None = None
) -> tuple[InferRequest, bool]:
    """A ``ModelInferRequest`` for ``model`` as an InferRequest, and whether the client asked for
    the empty final response. Raises the reference's errors in the reference's order."""
    request = InferRequest(model_name=model.name, inputs={}, model_version=model.version_str, id=msg.id)
    params = msg.parameters
    empty_final = apply_parameters(request, params) if params else False
    specs: list[tuple[str, DataType, tuple[int, ...], Any]] = []
    inputs = request.inputs
    for t in msg.inputs:
        name = t.name
        if name in inputs:
            raise InvalidArgumentError(f"{request_prefix(request)}input '{name}' already exists in request")
        dt = BY_WIRE.get(t.datatype, INVALID)
        specs.append((name, dt, tuple(t.shape), t))
        inputs[name] = None  # type: ignore[assignment]  # placeholder: order of the request kept
    outputs = None
    if msg.outputs:
        outputs = [RequestedOutput(o.name) for o in msg.outputs]
    raw = msg.raw_input_contents
    n_raw = len(raw)
    index = 0
    for name, dt, shape, t in specs:
        tparams = t.parameters
        region = _shm_params(tparams, name) if tparams else None
        if region is None and index < n_raw and not t.HasField("contents"):  # the usual case
            inputs[name] = Tensor(name, dt, shape, None, raw[index])
            index += 1
            continue
        if region is not None:
            if t.HasField("contents"):
                raise InvalidArgumentError(
                    f"unexpected 'content' provided when using shared memory for input tensor '{name}' for "
                    f"model '{msg.model_name}'"
                )
            window = _shm_window(shm, *region)
            inputs[name] = (
                Tensor(name, dt, shape, raw=window)
                if type(window) is memoryview
                else window.input_tensor(name, dt, shape)
            )
        elif t.HasField("contents"):
            if n_raw:
                raise InvalidArgumentError(
                    f"contents field must not be specified when using raw_input_contents for '{name}' for "
                    f"model '{msg.model_name}'"
                )
            inputs[name] = typed_tensor(name, dt, shape, t.contents, msg.model_name)
        elif index < n_raw:
            inputs[name] = Tensor(name, dt, shape, raw=raw[index])
            index += 1
        else:
            raise InvalidArgumentError(
                f"unable to find data for input tensor '{name}' for model '{msg.model_name}' in request."
            )
    if outputs is not None:
        for o, om in zip(outputs, msg.outputs, strict=True):
            oparams = om.parameters
            if not oparams:
                continue
            region = _shm_params(oparams, o.name)
            if "classification" in oparams:
                kind, value = param_value(oparams["classification"])
                if kind != "int64_param":
                    raise InvalidArgumentError(
                        "invalid value type for 'classification' parameter, expected int64_param"
                    )
                if value < 1:
                    raise InvalidArgumentError("invalid value for 'classification' parameter, expected >= 0")
                o.classification = value
            if region is not None:
                if o.classification:
                    raise InvalidArgumentError(
                        "output can't set both 'shared_memory_region' and 'classification'"
                    )
                o.target = _shm_window(shm, *region)
        request.outputs = outputs
        request.output_names = frozenset([o.name for o in outputs])
    return request, empty_final


def forwarded_headers(
    metadata: Iterable[tuple[str, str | bytes]], pattern: re.Pattern[str]
) -> dict[str, str]:
    """gRPC metadata whose key matches ``--grpc-header-forward-pattern``, as string parameters."""
    return {
        k: v if isinstance(v, str) else v.decode("utf-8", "replace")
        for k, v in metadata
        if pattern.search(k) and not k.endswith("-bin")
    }


# -- responses -------------------------------------------------------------------------------------
_DOUBLE: Final = struct.Struct("<d")


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of ``n`` (negative int64 as its 10-byte two's complement)."""
    if n < 0:
        n += 1 << 64
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: the one-byte varints
_VARINT1: Final = [bytes((n,)) for n in range(0x80)]

#: an output under this many bytes is copied out (the message is joined into one buffer anyway)
SMALL_OUTPUT: Final = 65536


def field(tag: int, payload: bytes | bytearray | memoryview) -> bytes:
    """A length-delimited field (``tag`` is the whole key byte: field number << 3 | 2)."""
    size = len(payload) if not isinstance(payload, memoryview) else payload.nbytes
    return b"".join((bytes((tag,)), varint(size), payload))


def _parameter(value: Any) -> bytes:
    """An InferParameter holding ``value`` (bool, int, str or float)."""
    if value is True or value is False:
        return b"\x08" + varint(int(value))
    if isinstance(value, int):
        if value > _INT64_MAX:
            return b"\x28" + varint(value)
        return b"\x10" + varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    return field(0x1A, str(value).encode())


def encode_parameters(tag: int, params: Mapping[str, Any]) -> bytes:
    """A ``map<string, InferParameter>`` field."""
    return b"".join(
        field(tag, field(0x0A, k.encode()) + field(0x12, _parameter(v))) for k, v in params.items()
    )


FINAL_TRUE = encode_parameters(0x22, {"triton_final_response": True})
FINAL_FALSE = encode_parameters(0x22, {"triton_final_response": False})


class ResponseEncoder:
    """Encodes InferResponses as ``ModelInferResponse`` bytes; caches output metadata."""

    def __init__(self, capacity: int = 1024) -> None:
        self._outputs: dict[tuple[str, str, tuple[int, ...]], bytes] = {}
        #: model name -> (version, the two fields encoded)
        self._models: dict[str, tuple[str, bytes]] = {}
        self._capacity = capacity

    def _model(self, name: str, version: str) -> bytes:
        """The ``model_name`` and ``model_version`` fields (the last version seen of each model kept)."""
        known = self._models.get(name)
        if known is not None and known[0] == version:
            return known[1]
        enc = (field(0x0A, name.encode()) if name else b"") + (
            field(0x12, version.encode()) if version else b""
        )
        if len(self._models) >= self._capacity:
            self._models.clear()
        self._models[name] = (version, enc)
        return enc

    def _output(self, t: Tensor) -> bytes:
        key = (t.name, t.datatype.wire, t.shape)
        enc = self._outputs.get(key)
        if enc is None:
            shape = b"".join(varint(d) for d in t.shape)
            body = field(0x0A, t.name.encode()) + field(0x12, t.datatype.wire.encode())
            if t.shape:
                body += field(0x1A, shape)
            enc = field(0x2A, body)
            if len(self._outputs) >= self._capacity:
                self._outputs.clear()
            self._outputs[key] = enc
        return enc

    def encode(
        self, resp: InferResponse, final: bytes = b"", targets: Mapping[str, Target] | None = None
    ) -> bytes:
        """The response's ``ModelInferResponse`` (``final``: the encoded triton_final_response).

        Outputs with a shared-memory ``targets`` window are written there; their entry in
        ``raw_output_contents`` stays empty, as the reference keeps the list aligned with ``outputs``.
        """
        parts: list[bytes | memoryview] = [self._model(resp.model_name, resp.model_version)]
        if resp.id:
            parts.append(field(0x1A, resp.id.encode()))
        if final:
            parts.append(final)
        if resp.parameters:
            parts.append(encode_parameters(0x22, resp.parameters))
        outputs = resp.outputs
        for t in outputs:
            parts.append(self._output(t))
        for t in outputs:
            if targets is not None and t.name in targets:
                write_to_target(t, targets[t.name])
                parts.append(b"\x32\x00")
                continue
            data = t.to_bytes(SMALL_OUTPUT)
            size = len(data) if isinstance(data, bytes) else data.nbytes
            parts.append(b"\x32" + (_VARINT1[size] if size < 0x80 else varint(size)))
            parts.append(data)
        return b"".join(parts)


def stream_response(infer_response: bytes, error: str = "") -> bytes:
    """A ``ModelStreamInferResponse`` around encoded ``ModelInferResponse`` bytes."""
    if error:
        return field(0x0A, error.encode()) + field(0x12, infer_response)
    return field(0x12, infer_response)


def stream_error(message: str, rid: str, model_name: str = "", final: bytes = b"") -> bytes:
    """An error on a stream: ``error_message`` and the request's id (and model, once it ran)."""
    inner = b""
    if model_name:
        inner += field(0x0A, model_name.encode())
    if rid:
        inner += field(0x1A, rid.encode())
    return stream_response(inner + final, message)


# -- well-formedness of messages we do not parse otherwise ---------------------------------------------
def well_formed(data: bytes) -> bool:
    """Whether ``data`` is a well-formed protobuf message (any fields): for the health service."""
    i, n = 0, len(data)

    def read_varint() -> int:
        nonlocal i
        shift = result = 0
        while True:
            if i >= n or shift > 63:
                raise ValueError
            b = data[i]
            i += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    try:
        while i < n:
            key = read_varint()
            wire = key & 7
            if key >> 3 == 0:
                return False
            if wire == 0:
                read_varint()
            elif wire == 1:
                i += 8
            elif wire == 2:
                size = read_varint()  # (``i += read_varint()`` would add to i as it was before the call)
                i += size
            elif wire == 5:
                i += 4
            else:
                return False
            if i > n:
                return False
    except ValueError:
        return False
    return True
