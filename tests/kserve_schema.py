"""KServe's API types as a schema: a manifest's every field must be one KServe's Python SDK (``kserve``,
generated from the same Go types as its CRDs) or the ``kubernetes`` client has for that object, every
value of its type, the required ones given (as ``kubectl apply --validate=strict`` wants). Run as a
script by ``deploy_files.kserve_errors`` (JSON documents on stdin, a verdict each on stdout): importing
``kserve`` registers protobuf messages that clash with tritonclient's in one process.
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: KServe's kinds and their SDK model classes
KSERVE_KINDS = {
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "V1alpha1ServingRuntime",
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "V1alpha1ClusterServingRuntime",
    ("serving.kserve.io/v1beta1", "InferenceService"): "V1beta1InferenceService",
}
_PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "datetime": (str,),
    "date": (str,),
    "bytes": (str,),
    "ResourceQuantity": (str, int, float),  # "2Gi", 1, 0.5
}


class SchemaError(AssertionError):
    """A field KServe's API does not have, a value of the wrong type, or a required field missing."""


def validate(doc: dict[str, Any]) -> Any:
    """``doc`` as KServe's API reads it, or SchemaError with the field's path; the SDK's object."""
    kind = KSERVE_KINDS.get((doc.get("apiVersion", ""), doc.get("kind", "")))
    if kind is None:
        raise SchemaError(f"not a KServe kind: {doc.get('apiVersion')} {doc.get('kind')}")
    return _build(doc, kind, doc["kind"])


def _model(name: str) -> Any:
    import kserve.models
    import kubernetes.client.models

    for module in (kserve.models, kubernetes.client.models):
        if hasattr(module, name):
            return getattr(module, name)
    raise SchemaError(f"no model {name} in kserve or kubernetes")


def _build(value: Any, type_name: str, path: str) -> Any:
    # the generators' spellings: kserve's list[X] and dict(str, X), kubernetes' List[X] and Dict[str, X]
    if type_name.lower().startswith("list[") and type_name.endswith("]"):
        if not isinstance(value, list):
            raise SchemaError(f"{path}: expected a list, got {value!r}")
        return [_build(v, type_name[5:-1], f"{path}[{i}]") for i, v in enumerate(value)]
    if type_name.lower().startswith(("dict(", "dict[")) and type_name.endswith((")", "]")):
        if not isinstance(value, dict):
            raise SchemaError(f"{path}: expected a map, got {value!r}")
        item = type_name[5:-1].split(", ", 1)[1]
        return {k: _build(v, item, f"{path}.{k}") for k, v in value.items()}
    if type_name == "object":
        return value
    if type_name in _PRIMITIVES:
        kinds = _PRIMITIVES[type_name]
        if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
            raise SchemaError(f"{path}: expected {type_name}, got {value!r}")
        return value
    cls = _model(type_name)
    if not isinstance(value, dict):
        raise SchemaError(f"{path}: expected an object ({type_name}), got {value!r}")
    attribute = {json_name: attr for attr, json_name in cls.attribute_map.items()}
    unknown = sorted(set(value) - set(attribute))
    if unknown:
        raise SchemaError(f"{path}: unknown field(s) {', '.join(unknown)} ({type_name})")
    kwargs = {
        attribute[k]: _build(v, cls.openapi_types[attribute[k]], f"{path}.{k}") for k, v in value.items()
    }
    try:
        return cls(**kwargs)
    except ValueError as e:  # the SDK's checks: a required field missing, a value out of its enum
        raise SchemaError(f"{path}: {e}") from None


def main() -> None:
    verdicts: list[str | None] = []
    for doc in json.load(sys.stdin):
        try:
            validate(doc)
            verdicts.append(None)
        except SchemaError as e:
            verdicts.append(str(e))
    json.dump(verdicts, sys.stdout)


if __name__ == "__main__":
    main()
