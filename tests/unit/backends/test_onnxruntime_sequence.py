"""A stateful ONNX model: its control and state tensors are graph inputs and outputs the config does
not list; the load-time check knows them, and the session is fed and fetched with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.onnxruntime.backend import OnnxRuntimeBackend
from inferd.backends.onnxruntime.graph import check_config_against_graph
from inferd.backends.sequence_io import sequence_tensors
from inferd.backends.signature import GraphTensor
from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE
from inferd.errors import InvalidArgumentError
from inferd.repository import normalize_config, parse_config_text

INT32 = BY_WIRE["INT32"]
CONFIG = """
name: "acc"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""


def _accumulator() -> onnx.ModelProto:
    """OUT = IN + STATE_IN * (1 - START), STATE_OUT = OUT; CORRID read (cast) into nothing else."""

    def io(name: str, t: int = TensorProto.INT32) -> Any:
        return helper.make_tensor_value_info(name, t, ["N", 1])

    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["ONE", "START"], ["KEEP"]),
            helper.make_node("Mul", ["STATE_IN", "KEEP"], ["KEPT"]),
            helper.make_node("Add", ["IN", "KEPT"], ["OUT"]),
            helper.make_node("Identity", ["OUT"], ["STATE_OUT"]),
            helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"]),
        ],
        "acc",
        [io("IN"), io("STATE_IN"), io("START"), io("CORRID", TensorProto.UINT64)],
        [io("OUT"), io("STATE_OUT"), io("CORRID_OUT", TensorProto.UINT64)],
        [helper.make_tensor("ONE", TensorProto.INT32, [], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _config(text: str = CONFIG) -> Any:
    cfg = parse_config_text(text, "test")
    normalize_config(cfg, "acc")
    return cfg


def _graph(extra_inputs: tuple[str, ...] = ()) -> tuple[list[GraphTensor], list[GraphTensor]]:
    inputs = [GraphTensor(n, "TYPE_INT32", (-1, 1)) for n in ("IN", "STATE_IN", "START", *extra_inputs)]
    inputs.append(GraphTensor("CORRID", "TYPE_UINT64", (-1, 1)))
    outputs = [GraphTensor(n, "TYPE_INT32", (-1, 1)) for n in ("OUT", "STATE_OUT")]
    return inputs, outputs


def test_sequence_tensors_are_the_controls_and_states() -> None:
    inputs, outputs = sequence_tensors(_config())
    assert [(s.name, s.datatype.wire, s.dims) for s in inputs] == [
        ("START", "INT32", (1,)),
        ("CORRID", "UINT64", (1,)),
        ("STATE_IN", "INT32", (1,)),
    ]
    assert [(s.name, s.datatype.wire) for s in outputs] == [("STATE_OUT", "INT32")]
    assert sequence_tensors(parse_config_text('name: "x"', "t")) == ([], [])


def test_the_graph_check_accepts_control_and_state_tensors() -> None:
    cfg = _config()
    check_config_against_graph(cfg, *_graph(), (), *sequence_tensors(cfg))
    with pytest.raises(
        InvalidArgumentError, match="'STATE_IN', 'START', 'CORRID' are not in the model configuration"
    ):
        check_config_against_graph(cfg, *_graph())  # without them: not in the config


def test_the_graph_check_names_a_missing_or_mistyped_sequence_tensor() -> None:
    cfg = _config()
    inputs, outputs = _graph()
    with pytest.raises(InvalidArgumentError) as e:
        check_config_against_graph(cfg, inputs, outputs[:1], (), *sequence_tensors(cfg))
    assert e.value.message == (
        "unable to load model 'acc': sequence_batching output 'STATE_OUT' (a control or implicit state tensor) "
        "is not an output of the ONNX graph, whose outputs are: OUT"
    )
    inputs = [t if t.name != "START" else GraphTensor("START", "TYPE_FP32", (-1, 1)) for t in inputs]
    with pytest.raises(InvalidArgumentError) as e:
        check_config_against_graph(cfg, inputs, outputs, (), *sequence_tensors(cfg))
    assert e.value.message == (
        "unable to load model 'acc', sequence_batching expects datatype TYPE_INT32 for input 'START', model "
        "provides TYPE_FP32"
    )


def _load(tmp_path: Path) -> Any:
    md = tmp_path / "acc"
    (md / "1").mkdir(parents=True)
    onnx.save(_accumulator(), str(md / "1" / "model.onnx"))
    return OnnxRuntimeBackend().load(LoadContext("acc", 1, md, md / "1", _config()))


def _request(value: int, state: int, start: int, outputs: list[str] | None) -> InferRequest:
    def t(name: str, v: int, dt: Any = INT32) -> Tensor:
        return Tensor(name, dt, (1, 1), array=np.full((1, 1), v, dtype=dt.numpy))

    inputs = {"IN": t("IN", value), "STATE_IN": t("STATE_IN", state), "START": t("START", start)}
    inputs["CORRID"] = t("CORRID", 9, BY_WIRE["UINT64"])
    req = InferRequest("acc", inputs)
    if outputs is not None:
        req.outputs = [RequestedOutput(n) for n in outputs]
        req.output_names = frozenset(outputs)
    return req


def test_the_session_is_fed_the_controls_and_returns_the_state(tmp_path: Path) -> None:
    model = _load(tmp_path)
    inst = model.create_instance(InstanceSpec("acc_0", "CPU", 0))
    try:
        # everything: the state output too (the sequence batcher takes it out of the response)
        (one,) = inst.execute([_request(5, 100, 1, None)])
        assert {t.name: t.array.tolist() for t in one.outputs} == {"OUT": [[5]], "STATE_OUT": [[5]]}
        # asked for by name, in a batch of two that stack (one group, one run)
        a, b = inst.execute([_request(1, 5, 0, ["OUT", "STATE_OUT"]), _request(2, 7, 0, ["OUT"])])
        assert {t.name: t.array.tolist() for t in a.outputs} == {"OUT": [[6]], "STATE_OUT": [[6]]}
        assert {t.name: t.array.tolist() for t in b.outputs} == {"OUT": [[9]]}
    finally:
        inst.unload()
