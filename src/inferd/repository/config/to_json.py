"""The normalised ModelConfig as ``GET /v2/models/{m}/config`` prints it (Triton ``ModelConfigToJson``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from inferd.repository.config.schema import ModelConfig

if TYPE_CHECKING:  # the C implementation's descriptor type (protobuf's upb, the usual runtime)
    from google._upb._message import Descriptor as UpbDescriptor
    from google._upb._message import FieldDescriptor as UpbFieldDescriptor

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)
_FLOAT_TYPES = frozenset({FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE})

#: 64-bit fields Triton 2.51's ModelConfigToJson leaves as JSON strings (it fixes a hard-coded
#: list; these are not on it, or, for initial_state, looked up in the wrong object).
_TRITON_STRING_INT64 = frozenset(
    {
        "instance_group.secondary_devices.device_id",
        "optimization.cuda.graph_spec.input.value.dim",
        "optimization.cuda.graph_spec.graph_lower_bound.input.value.dim",
        "sequence_batching.state.initial_state.dims",
    }
)

#: Fields the installed (newer) model_config.proto has that Triton 2.51's has not: printed only
#: when set, so an ordinary config prints exactly as 2.51 does.
_NEWER_THAN_2_51 = frozenset({("inference.ModelEnsembling", "max_inflight_requests")})


def _fix_value(value: Any, field: FieldDescriptor | UpbFieldDescriptor, path: str) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if isinstance(value, dict) and field.message_type is not None:
            _fix_message(value, field.message_type, f"{path}.")
        return value
    if field.type in _INT64_TYPES and isinstance(value, str) and path not in _TRITON_STRING_INT64:
        return int(value)
    if (
        field.type in _FLOAT_TYPES
        and isinstance(value, float)
        and math.isfinite(value)
        and value.is_integer()
    ):
        return int(value)  # the C++ printer writes 1.0 as 1
    return value


def _fix_message(obj: dict[str, Any], descriptor: Descriptor | UpbDescriptor, prefix: str) -> None:
    """Fix 64-bit integers and floats in place and put the keys in declaration order (as C++ does)."""
    fixed: dict[str, Any] = {}
    for field in descriptor.fields:
        key = field.name
        if key not in obj:
            continue
        path = f"{prefix}{key}"
        value = obj[key]
        if (descriptor.full_name, key) in _NEWER_THAN_2_51 and not value:
            continue
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            value_field = message_type.fields_by_name["value"]
            for map_key in list(value):
                value[map_key] = _fix_value(value[map_key], value_field, f"{path}.value")
        elif field.is_repeated:
            value[:] = [_fix_value(item, field, path) for item in value]
        else:
            value = _fix_value(value, field, path)
        fixed[key] = value
    obj.clear()
    obj.update(fixed)


def config_to_json(cfg: ModelConfig) -> dict[str, Any]:
    """The object ``GET /v2/models/{m}/config`` returns (Triton ``ModelConfigToJson``).

    All fields without presence are printed (proto field names, enums by name); 64-bit integers
    are numbers, not protobuf's strings (except where Triton 2.51 itself leaves strings).
    """
    obj: dict[str, Any] = json_format.MessageToDict(
        cfg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _fix_message(obj, cfg.DESCRIPTOR, "")
    return obj
