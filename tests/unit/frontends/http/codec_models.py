"""Models and tritonclient bodies for the HTTP codec tests (decode, encode, the header cache)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from tritonclient.http import InferenceServerClient, InferInput

from inferd.core.types import BY_WIRE
from inferd.engine.model import Model
from inferd.repository import parse_config_text


def model(name: str, inputs: str, max_batch_size: int = 0) -> Model:
    text = f"""
    name: "{name}"
    backend: "python"
    max_batch_size: {max_batch_size}
    input [ {inputs} ]
    output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    """
    cfg = parse_config_text(text, "config.pbtxt")
    return Model(name, 1, cfg, Path("/nonexistent"))


ADD_SUB = model(
    "add_sub",
    '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }',
    64,
)
IDENTITY_FP32 = model("identity_fp32", '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }')
IDENTITY_BYTES = model("identity_bytes", '{ name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] }')
BATCHED = model("batched_sleep", '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }', 32)
FIXED_2D = model("fixed", '{ name: "X" data_type: TYPE_INT16 dims: [ 2, 3 ] }')
VAR_2D = model("var2", '{ name: "X" data_type: TYPE_INT32 dims: [ -1, -1 ] }')
VAR_MIDDLE = model("var_mid", '{ name: "X" data_type: TYPE_UINT8 dims: [ 2, -1, 3 ] }')


def client_array(wire: str, arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """What tritonclient is handed: BF16 needs ml_dtypes.bfloat16."""
    return arr.view(ml_dtypes.bfloat16) if wire == "BF16" else arr


def client_body(
    inputs: list[tuple[str, str, np.ndarray[Any, Any]]], binary: bool, **kwargs: Any
) -> tuple[bytes, int | None]:
    """The body tritonclient.http would POST for these inputs."""
    infer_inputs = []
    for name, wire, arr in inputs:
        i = InferInput(name, list(arr.shape), wire)
        i.set_data_from_numpy(client_array(wire, arr), binary_data=binary or not BY_WIRE[wire].json_ok)
        infer_inputs.append(i)
    body, json_size = InferenceServerClient.generate_request_body(infer_inputs, **kwargs)
    return body, json_size
