"""check/files.py: the graph read with ``onnx`` is what an ONNX Runtime session shows, and every tensor
that disagrees with the config is reported (the backend's check stops at the first)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from inferd.backends.onnxruntime.graph import check_config_against_graph, graph_signature
from inferd.check.files import Signature, collect, onnx_signature
from inferd.core.tensor import TensorSpec
from inferd.repository import ModelConfig

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
helper = onnx.helper


def _graph(path: Path) -> Path:
    """A graph with a symbolic and a fixed dim, an unknown dim, an overridable initializer (listed
    as an input) and a plain one."""
    tp = onnx.TensorProto
    x = helper.make_tensor_value_info("X", tp.FLOAT, ["batch", 4])
    bias = helper.make_tensor_value_info("BIAS", tp.FLOAT, [4])
    ids = helper.make_tensor_value_info("IDS", tp.INT64, [None, 2])
    y = helper.make_tensor_value_info("Y", tp.FLOAT, ["batch", 4])
    z = helper.make_tensor_value_info("Z", tp.INT64, [None, 2])
    scale = helper.make_tensor("SCALE", tp.FLOAT, [4], np.ones(4, np.float32))
    init_bias = helper.make_tensor("BIAS", tp.FLOAT, [4], np.zeros(4, np.float32))
    nodes = [
        helper.make_node("Add", ["X", "BIAS"], ["T"]),
        helper.make_node("Mul", ["T", "SCALE"], ["Y"]),
        helper.make_node("Identity", ["IDS"], ["Z"]),
    ]
    graph = helper.make_graph(nodes, "g", [x, bias, ids], [y, z], initializer=[scale, init_bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _config(text: str) -> ModelConfig:
    cfg = ModelConfig()
    text_format.Parse(text, cfg)
    return cfg


def test_the_onnx_package_reads_what_a_session_shows(tmp_path: Path) -> None:
    path = _graph(tmp_path / "1" / "model.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    read = onnx_signature(_config('name: "m"'), tmp_path / "1")
    assert read == graph_signature(session)
    inputs, outputs, initializers = read
    assert [(t.name, t.data_type, t.dims) for t in inputs] == [
        ("X", "TYPE_FP32", (-1, 4)),
        ("IDS", "TYPE_INT64", (-1, 2)),
    ]
    assert [t.name for t in initializers] == ["BIAS"]
    assert [t.type_name for t in outputs] == ["tensor(float)", "tensor(int64)"]


def test_collect_reports_every_tensor_that_disagrees(tmp_path: Path) -> None:
    path = _graph(tmp_path / "1" / "model.onnx")
    cfg = _config(
        'name: "m" max_batch_size: 8 '
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "EXTRA" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 5 ] }, { name: "Z" data_type: TYPE_INT64 dims: [ 2 ] } ]'
    )
    sig = onnx_signature(cfg, path.parent)
    reported: list[tuple[str, str | None]] = []
    collect(cfg, sig, _check, ([], []), set(), lambda message, tensor: reported.append((message, tensor)))
    assert [tensor for _, tensor in reported] == ["IDS", "X", "EXTRA", "Y"]
    assert "the ONNX graph's input(s) 'IDS' are not in the model configuration" in reported[0][0]
    assert "configuration expects datatype TYPE_INT32 for input 'X'" in reported[1][0]
    assert "configuration input 'EXTRA' is not an input of the ONNX graph" in reported[2][0]
    assert "output 'Y': the model expects shape [-1,4]" in reported[3][0]
    assert len(cfg.input) == 2  # the caller's config is left as it was


def test_collect_leaves_out_tensors_that_failed_validation(tmp_path: Path) -> None:
    path = _graph(tmp_path / "1" / "model.onnx")
    cfg = _config(
        'name: "m" max_batch_size: 8 '
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] }, { name: "IDS" data_type: TYPE_INT64 dims: [ 2 ] } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "Z" data_type: TYPE_INT64 dims: [ 2 ] } ]'
    )
    reported: list[tuple[str, str | None]] = []
    collect(
        cfg, onnx_signature(cfg, path.parent), _check, ([], []), {"X"}, lambda m, t: reported.append((m, t))
    )
    assert reported == []


def _check(
    config: ModelConfig, sig: Signature, seq_in: Sequence[TensorSpec], seq_out: Sequence[TensorSpec]
) -> None:
    inputs, outputs, inits = sig
    check_config_against_graph(config, inputs, outputs, inits, seq_in, seq_out)
