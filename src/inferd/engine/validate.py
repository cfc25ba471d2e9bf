"""Request validation against the model: names, datatypes, shapes, batch size, byte sizes.

Texts are the reference server's, word for word (see tests/fixtures/triton-2.51.0-protocol.txt).
"""

from __future__ import annotations

import struct
from collections.abc import Hashable

import numpy as np

from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor
from inferd.core.types import BYTES
from inferd.engine.model import Model
from inferd.errors import InvalidArgumentError

_BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)


_LEN = struct.Struct("<I")
_INT64_MAX = 2**63 - 1


def request_prefix(request: InferRequest) -> str:
    """``[request id: <id>] `` as Triton prefixes request errors."""
    return f"[request id: {request.id or '<id_unknown>'}] "


def _shape_str(shape: list[int] | tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _names(names: list[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _missing_inputs_error(request: InferRequest, model: Model, order: list[Tensor]) -> InvalidArgumentError:
    """Triton's wrong-input-count message (its "missing ... ]" quirk included when none is missing)."""
    specs, required = model.inputs, model.required_inputs
    inputs = request.inputs
    missing = [r for r in required if r not in inputs]
    missing_str = _names(missing) if missing else "]"
    if len(required) == len(specs):
        expected = f"expected {len(specs)} inputs"
    else:
        expected = f"expected number of inputs between {len(required)} and {len(specs)}"
    return InvalidArgumentError(
        f"{request_prefix(request)}{expected} but got {len(inputs)} inputs for model '{model.name}'. "
        f"Got input(s) {_names([t.name for t in order])}, but missing required input(s) {missing_str}. "
        "Please provide all required input(s)."
    )


def validation_key(request: InferRequest) -> Hashable | None:
    """Everything ``validate_request`` reads of ``request``, as a key: the core validates a key
    once per model version (``ServerCore``). Input names in order, datatypes, shapes and byte
    sizes, and the requested output names; None when a key cannot stand for the request (BYTES
    inputs, whose elements validation decodes)."""
    key: list[Hashable] = []
    for t in request.inputs.values():
        dt = t.datatype
        shape = t.shape
        if dt is BYTES or type(shape) is not tuple:
            return None
        raw = t.raw
        if raw is None:
            size = t.array.nbytes if t.device is None else t.device.nbytes  # no host copy for a key
        else:
            size = raw.nbytes if type(raw) is memoryview else len(raw)
        key.append((t.name, dt.wire, shape, size))
    outputs = request.outputs
    if outputs is not None:
        names = request.output_names
        key.append(names if names is not None else frozenset([o.name for o in outputs]))
    return tuple(key)


def validate_request(request: InferRequest, model: Model) -> None:
    """Check ``request`` against ``model``; set ``request.batch_size``. Raises InvalidArgumentError.

    The checks run in the reference's order: requested outputs (sorted, as Triton keeps them in a
    set), the input count, then the inputs in reverse request order (Triton's hash map of a request's
    few inputs iterates that way) for the batch dimension, datatypes and shapes, and byte sizes.
    """
    name = model.name
    specs = model.inputs
    inputs = request.inputs
    if request.outputs is not None:
        for oname in sorted({o.name for o in request.outputs}):
            if oname not in model.outputs:
                raise InvalidArgumentError(f"unexpected inference output '{oname}' for model '{name}'")
    order = list(inputs.values())
    order.reverse()
    if len(inputs) > len(specs) or len(inputs) < len(model.required_inputs):
        raise _missing_inputs_error(request, model, order)
    mbs = model.max_batch_size
    batch_size = 0
    if mbs > 0:
        for t in order:
            if t.name not in specs:
                raise InvalidArgumentError(f"unexpected inference input '{t.name}' for model '{name}'")
            if not t.shape:
                raise InvalidArgumentError(
                    f"{request_prefix(request)}input '{t.name}' has no shape but model requires batch "
                    f"dimension for '{name}'"
                )
            if batch_size == 0:  # 0 means "not set yet" to Triton, even when a request says 0
                batch_size = t.shape[0]
            elif t.shape[0] != batch_size:
                raise InvalidArgumentError(
                    f"{request_prefix(request)}input '{t.name}' batch size does not match other inputs "
                    f"for '{name}'"
                )
        if batch_size > mbs:
            raise InvalidArgumentError(
                f"{request_prefix(request)}inference request batch-size must be <= {mbs} for '{name}'"
            )
    for t in order:
        spec = specs.get(t.name)
        if spec is None:
            raise InvalidArgumentError(f"unexpected inference input '{t.name}' for model '{name}'")
        if t.datatype is not spec.datatype:
            raise InvalidArgumentError(
                f"{request_prefix(request)}inference input '{t.name}' data-type is '{t.datatype.wire}', "
                f"but model '{name}' expects '{spec.datatype.wire}'"
            )
        shape = t.shape[1:] if mbs > 0 else t.shape
        dims = spec.dims
        if len(shape) != len(dims) or any(d != -1 and d != s for d, s in zip(dims, shape, strict=True)):
            note = _BATCH_NOTE.lstrip() if mbs > 0 else ""
            raise InvalidArgumentError(
                f"{request_prefix(request)}unexpected shape for input '{t.name}' for model '{name}'. "
                f"Expected {_shape_str(spec.full_shape(mbs))}, got {_shape_str(t.shape)}. {note}"
            )
        if min(shape, default=0) < 0:  # a wildcard in the request itself (gRPC shapes are signed)
            raise InvalidArgumentError(
                f"{request_prefix(request)}All input dimensions should be specified for input '{t.name}' for "
                f"model '{name}', got {_shape_str(t.shape)}"
            )
        count = 1
        for d in t.shape:
            count *= d
        if count * t.datatype.itemsize > _INT64_MAX or max(t.shape, default=0) > _INT64_MAX:
            raise InvalidArgumentError(
                f"byte size overflow for input '{t.name}': element count ({count}) * data type size "
                f"({t.datatype.itemsize}) exceeds maximum allowed size ({_INT64_MAX})"
            )
    if any(r not in inputs for r in model.required_inputs):
        raise _missing_inputs_error(request, model, order)
    request.batch_size = batch_size if mbs > 0 else 1
    for t in order:
        # elements Triton expects: the request's batch size times the rest of the shape (a batch
        # size of 0 leaves the batch dimension out altogether)
        count = (batch_size or 1) if mbs > 0 else 1
        for d in t.shape[1:] if mbs > 0 else t.shape:
            count *= d
        if t.datatype is BYTES:
            _check_bytes(request, model, t, count)
            continue
        nbytes = t.raw_byte_size()
        if nbytes < 0:
            nbytes = t.array.nbytes
        expected_bytes = count * t.datatype.itemsize
        if nbytes != expected_bytes:
            raise InvalidArgumentError(
                f"{request_prefix(request)}input byte size mismatch for input '{t.name}' for model "
                f"'{name}'. Expected {expected_bytes}, got {nbytes}"
            )
        if mbs > 0 and t.shape[0] != (batch_size or t.shape[0]):
            # the reference lets a batch dimension of 0 pass beside a batch size set by another input;
            # its data then fits no array of its own shape, and the model would fail on it
            raise InvalidArgumentError(
                f"{request_prefix(request)}input '{t.name}' has shape {_shape_str(t.shape)} for model "
                f"'{name}', which holds no data, but {nbytes} bytes were sent"
            )


def _check_bytes(request: InferRequest, model: Model, t: Tensor, count: int) -> None:
    """Walk a BYTES input's length-prefixed elements as Triton does; decode it (400 before the model runs)."""
    where = f"for inference input '{t.name}' for model '{model.name}'"
    if t.raw is None:
        n = t.array.size
        if n > count:
            raise InvalidArgumentError(
                f"{request_prefix(request)}unexpected number of string elements {count + 1} {where}, "
                f"expecting {count}"
            )
        if n != count:
            raise InvalidArgumentError(
                f"{request_prefix(request)}expected {count} string elements {where}, got {n}"
            )
        t.set_array(t.array.reshape(t.shape))
        return
    mv = memoryview(t.raw).cast("B")
    size = mv.nbytes
    out: list[bytes] = []
    off = 0
    cut: tuple[int, int] | None = None
    while off < size:
        if size - off < 4:
            raise InvalidArgumentError(
                f"{request_prefix(request)}incomplete string length indicator {where}, expecting 4 bytes but "
                f"only {size - off} bytes available. Please make sure the string length indicator is in one "
                "buffer."
            )
        (length,) = _LEN.unpack_from(mv, off)
        off += 4
        if len(out) + 1 > count:
            raise InvalidArgumentError(
                f"{request_prefix(request)}unexpected number of string elements {len(out) + 1} {where}, "
                f"expecting {count}"
            )
        if size - off >= length:
            out.append(bytes(mv[off : off + length]))
            off += length
        else:
            cut = (length, size - off)
            off = size
    found = len(out) + (cut is not None)
    if found != count:
        raise InvalidArgumentError(
            f"{request_prefix(request)}expected {count} string elements {where}, got {found}"
        )
    if cut is not None:
        # Triton's core lets this through and its Python backend refuses it (no request id prefix)
        raise InvalidArgumentError(
            f"incomplete string data for inference input '{t.name}', expecting string of length {cut[0]} "
            f"but only {cut[1]} bytes available"
        )
    arr = np.empty(len(out), dtype=np.object_)
    arr[:] = out
    t.set_array(arr.reshape(t.shape))
