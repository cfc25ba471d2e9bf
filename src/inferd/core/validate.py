"""Request validation against the model: names, datatypes, shapes, batch size, byte sizes.

Texts are the reference server's, word for word (see ../shared/reference/triton-2.51.0-protocol.txt).
"""

from __future__ import annotations

from inferd.core.model import Model
from inferd.core.request import InferRequest
from inferd.core.tensor import BytesDecodeError, Tensor, deserialize_bytes
from inferd.core.types import BYTES
from inferd.errors import InvalidArgumentError

_BATCH_NOTE = (
    " NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
    "prepended to each input shape. If you want to specify the full shape including the batch dim in "
    "your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
    "more info on max_batch_size."
)


def request_prefix(request: InferRequest) -> str:
    """``[request id: <id>] `` as Triton prefixes request errors."""
    return f"[request id: {request.id or '<id_unknown>'}] "


def _shape_str(shape: list[int] | tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _names(names: list[str]) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def validate_request(request: InferRequest, model: Model) -> None:
    """Check ``request`` against ``model``; set ``request.batch_size``. Raises InvalidArgumentError."""
    name = model.name
    specs = model.inputs
    inputs = request.inputs
    for iname in inputs:
        if iname not in specs:
            raise InvalidArgumentError(f"unexpected inference input '{iname}' for model '{name}'")
    if request.outputs is not None:
        for o in request.outputs:
            if o.name not in model.outputs:
                raise InvalidArgumentError(f"unexpected inference output '{o.name}' for model '{name}'")
    required = model.required_inputs
    if len(inputs) < len(specs) and any(r not in inputs for r in required):
        missing = [r for r in required if r not in inputs]
        if len(required) == len(specs):
            expected = f"expected {len(specs)} inputs"
        else:
            expected = f"expected number of inputs between {len(required)} and {len(specs)}"
        raise InvalidArgumentError(
            f"{request_prefix(request)}{expected} but got {len(inputs)} inputs for model '{name}'. "
            f"Got input(s) {_names(list(inputs))}, but missing required input(s) {_names(missing)}. "
            "Please provide all required input(s)."
        )
    mbs = model.max_batch_size
    batch_size = 1
    if mbs > 0:
        first = True
        for t in inputs.values():
            if not t.shape:
                raise InvalidArgumentError(
                    f"{request_prefix(request)}input '{t.name}' has no shape but model requires batch "
                    f"dimension for '{name}'"
                )
            if first:
                batch_size = t.shape[0]
                first = False
            elif t.shape[0] != batch_size:
                raise InvalidArgumentError(
                    f"{request_prefix(request)}input '{t.name}' batch size does not match other inputs "
                    f"for '{name}'"
                )
        if batch_size > mbs:
            raise InvalidArgumentError(
                f"{request_prefix(request)}inference request batch-size must be <= {mbs} for '{name}'"
            )
    request.batch_size = batch_size
    for t in inputs.values():
        spec = specs[t.name]
        if t.datatype is not spec.datatype:
            raise InvalidArgumentError(
                f"{request_prefix(request)}inference input '{t.name}' data-type is '{t.datatype.wire}', "
                f"but model '{name}' expects '{spec.datatype.wire}'"
            )
        shape = t.shape[1:] if mbs > 0 else t.shape
        dims = spec.dims
        if len(shape) != len(dims) or any(d != -1 and d != s for d, s in zip(dims, shape, strict=True)):
            note = _BATCH_NOTE if mbs > 0 else ""
            raise InvalidArgumentError(
                f"{request_prefix(request)}unexpected shape for input '{t.name}' for model '{name}'. "
                f"Expected {_shape_str(spec.full_shape(mbs))}, got {_shape_str(t.shape)}. {note.lstrip()}"
                if mbs > 0
                else f"{request_prefix(request)}unexpected shape for input '{t.name}' for model '{name}'. "
                f"Expected {_shape_str(spec.full_shape(mbs))}, got {_shape_str(t.shape)}. "
            )
        if spec.datatype is BYTES:
            _check_bytes(request, model, t)
            continue
        nbytes = t.raw_byte_size()
        if nbytes >= 0:
            expected_bytes = t.element_count * spec.datatype.itemsize
            if nbytes != expected_bytes:
                raise InvalidArgumentError(
                    f"{request_prefix(request)}input byte size mismatch for input '{t.name}' for model "
                    f"'{name}'. Expected {expected_bytes}, got {nbytes}"
                )


def _check_bytes(request: InferRequest, model: Model, t: Tensor) -> None:
    """Decode a raw BYTES input now (so a bad buffer is a 400 before the model runs); check the count."""
    if t.raw is None:
        arr = t.array.reshape(-1)
    else:
        try:
            arr = deserialize_bytes(t.raw)
        except BytesDecodeError as e:
            raise InvalidArgumentError(
                f"{request_prefix(request)}element byte size indicates more data than provided for "
                f"inference input '{t.name}' for model '{model.name}'"
            ) from e
    if arr.shape[0] != t.element_count:
        raise InvalidArgumentError(
            f"{request_prefix(request)}expected {t.element_count} string elements for inference input "
            f"'{t.name}' for model '{model.name}', got {arr.shape[0]}"
        )
    t.set_array(arr.reshape(t.shape))
