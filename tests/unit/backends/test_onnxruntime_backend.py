"""The ONNX Runtime backend: auto-complete, load checks, sessions, batching, BYTES, reshape, errors."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import inferd
from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.native import default_intra_op_threads
from inferd.backends.onnxruntime.backend import OnnxInstance, OnnxModel, OnnxRuntimeBackend
from inferd.backends.onnxruntime.graph import check_config_against_graph
from inferd.backends.onnxruntime.options import (
    intra_op_threads,
    session_options,
    session_settings,
)
from inferd.backends.onnxruntime.providers import execution_providers
from inferd.backends.registry import get_backend
from inferd.backends.signature import GraphTensor, complete_config
from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.errors import InternalError, InvalidArgumentError, UnavailableError
from inferd.repository import autofill_backend_fields, load_model_config, normalize_config, parse_config_text

F = TensorProto.FLOAT

# -- graphs ----------------------------------------------------------------------------------------


def _model(
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[Any],
    initializers: list[Any] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def add_sub(batch: Any = "N", width: int = 4) -> onnx.ModelProto:
    """A, B [batch, width] FP32 -> SUM = A + B, DIFF = A - B."""
    shape = [batch, width] if batch is not None else [width]
    return _model(
        [helper.make_node("Add", ["A", "B"], ["SUM"]), helper.make_node("Sub", ["A", "B"], ["DIFF"])],
        [helper.make_tensor_value_info("A", F, shape), helper.make_tensor_value_info("B", F, shape)],
        [helper.make_tensor_value_info("SUM", F, shape), helper.make_tensor_value_info("DIFF", F, shape)],
    )


def string_identity() -> onnx.ModelProto:
    """S [N, 2] STRING -> O (the same strings)."""
    return _model(
        [helper.make_node("Identity", ["S"], ["O"])],
        [helper.make_tensor_value_info("S", TensorProto.STRING, ["N", 2])],
        [helper.make_tensor_value_info("O", TensorProto.STRING, ["N", 2])],
    )


def flatten() -> onnx.ModelProto:
    """X [N, 2, 2] -> Y [N, 4] (x2): to exercise reshape on both sides."""
    return _model(
        [
            helper.make_node("Flatten", ["X"], ["F"], axis=1),
            helper.make_node("Mul", ["F", "TWO"], ["Y"]),
        ],
        [helper.make_tensor_value_info("X", F, ["N", 2, 2])],
        [helper.make_tensor_value_info("Y", F, ["N", 4])],
        [numpy_helper.from_array(np.array(2.0, dtype=np.float32), "TWO")],
    )


def pairs() -> onnx.ModelProto:
    """X [N, L] -> Y [N, 2, L/2]: fails at run time when L is odd."""
    return _model(
        [helper.make_node("Reshape", ["X", "SHAPE"], ["Y"])],
        [helper.make_tensor_value_info("X", F, ["N", "L"])],
        [helper.make_tensor_value_info("Y", F, ["N", 2, "H"])],
        [numpy_helper.from_array(np.array([0, 2, -1], dtype=np.int64), "SHAPE")],
    )


def scalar_per_item() -> onnx.ModelProto:
    """X [N] -> Y [N] = X + 1 (a scalar per batch item)."""
    return _model(
        [helper.make_node("Add", ["X", "ONE"], ["Y"])],
        [helper.make_tensor_value_info("X", F, ["N"])],
        [helper.make_tensor_value_info("Y", F, ["N"])],
        [numpy_helper.from_array(np.array(1.0, dtype=np.float32), "ONE")],
    )


def _write(root: Path, name: str, model: onnx.ModelProto | bytes | None, config: str | None = None) -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    if isinstance(model, bytes):
        (model_dir / "1" / "model.onnx").write_bytes(model)
    elif model is not None:
        onnx.save(model, str(model_dir / "1" / "model.onnx"))
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def _completed(model_dir: Path, default_mbs: int = 4) -> Any:
    cfg, _ = load_model_config(model_dir)
    autofill_backend_fields(cfg, model_dir.name, model_dir)
    get_backend(cfg.backend).auto_complete(
        cfg, model_dir, model_dir / "1", default_max_batch_size=default_mbs
    )
    return cfg


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """Start an in-process server over ``tmp_path / 'repo'`` (stopped at teardown)."""
    servers: list[inferd.Server] = []

    def start(**options: Any) -> inferd.Server:
        s = inferd.Server(model_repository=tmp_path / "repo", **options).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def _state(server: inferd.Server, name: str) -> dict[str, Any]:
    return next(e for e in server.repository_index() if e["name"] == name)


# -- registry --------------------------------------------------------------------------------------


def test_registered_by_backend_name_and_platform(tmp_path: Path) -> None:
    assert isinstance(get_backend("onnxruntime"), OnnxRuntimeBackend)
    cfg = parse_config_text('platform: "onnxruntime_onnx"', "x")
    md = _write(tmp_path, "m", add_sub())
    autofill_backend_fields(cfg, "m", md)
    assert (cfg.backend, cfg.default_model_filename) == ("onnxruntime", "model.onnx")


# -- auto-complete ---------------------------------------------------------------------------------


def test_auto_complete_of_a_batching_graph(tmp_path: Path) -> None:
    cfg = _completed(_write(tmp_path, "m", add_sub()))
    assert cfg.max_batch_size == 4
    assert cfg.HasField("dynamic_batching")
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [
        ("A", 11, [4]),
        ("B", 11, [4]),
    ]
    assert [(o.name, list(o.dims)) for o in cfg.output] == [("SUM", [4]), ("DIFF", [4])]


def test_auto_complete_uses_the_default_max_batch_size(tmp_path: Path) -> None:
    cfg = _completed(_write(tmp_path, "m", add_sub()), default_mbs=16)
    assert cfg.max_batch_size == 16


def test_auto_complete_with_default_max_batch_size_1_adds_no_dynamic_batching(tmp_path: Path) -> None:
    cfg = _completed(_write(tmp_path, "m", add_sub()), default_mbs=1)
    assert cfg.max_batch_size == 1
    assert not cfg.HasField("dynamic_batching")


def test_auto_complete_is_skipped_when_inputs_and_outputs_are_listed(tmp_path: Path) -> None:
    config = """
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1, 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
"""
    md = _write(tmp_path, "m", add_sub(), config)
    (md / "1" / "model.onnx").write_bytes(b"not opened: auto-complete must not read it")
    cfg = _completed(md)
    assert cfg.max_batch_size == 0
    assert not cfg.HasField("dynamic_batching")
    assert [o.name for o in cfg.output] == ["SUM"]


def test_auto_complete_fills_only_what_is_missing(tmp_path: Path) -> None:
    config = 'max_batch_size: 8\ninput [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    cfg = _completed(_write(tmp_path, "m", add_sub(), config))
    assert cfg.max_batch_size == 8
    assert [i.name for i in cfg.input] == ["A"]  # kept as written
    assert [o.name for o in cfg.output] == ["SUM", "DIFF"]
    assert cfg.HasField("dynamic_batching")


def test_auto_complete_keeps_another_scheduler(tmp_path: Path) -> None:
    config = "max_batch_size: 8\nsequence_batching { }\n"
    cfg = _completed(_write(tmp_path, "m", add_sub(), config))
    assert not cfg.HasField("dynamic_batching")


def test_auto_complete_of_a_fixed_shape_graph_keeps_max_batch_size_0(tmp_path: Path) -> None:
    cfg = _completed(_write(tmp_path, "m", add_sub(batch=1)))
    assert cfg.max_batch_size == 0
    assert not cfg.HasField("dynamic_batching")
    assert list(cfg.input[0].dims) == [1, 4]  # the whole shape: no batch dimension to drop


def test_auto_complete_refuses_max_batch_size_for_a_graph_that_does_not_batch(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        _completed(_write(tmp_path, "m", add_sub(batch=1), "max_batch_size: 4\n"))
    assert e.value.message.startswith(
        "autofill failed for model 'm': model does not support batching while non-zero max_batch_size "
        "is specified"
    )
    assert "'A' [1,4]" in e.value.message and "set max_batch_size to 0" in e.value.message


def test_auto_complete_gives_a_scalar_per_item_dims_1_and_an_empty_reshape(tmp_path: Path) -> None:
    cfg = _completed(_write(tmp_path, "m", scalar_per_item()))
    assert cfg.max_batch_size == 4
    assert list(cfg.input[0].dims) == [1]
    assert cfg.input[0].HasField("reshape") and list(cfg.input[0].reshape.shape) == []


def test_complete_config_skips_non_tensor_outputs(caplog: pytest.LogCaptureFixture) -> None:
    cfg = parse_config_text('name: "c"', "x")
    ins = [GraphTensor("X", "TYPE_FP32", (-1, 4))]
    outs = [
        GraphTensor("label", "TYPE_INT64", (-1,)),
        GraphTensor("probabilities", "", (), "seq(map(int64,tensor(float)))"),
    ]
    with caplog.at_level(logging.WARNING, logger="inferd.backends.some_backend"):
        complete_config(cfg, ins, outs, 4, log=logging.getLogger("inferd.backends.some_backend"))
    assert [o.name for o in cfg.output] == ["label"]
    assert list(cfg.output[0].dims) == [1] and cfg.output[0].HasField("reshape")
    # the warnings (autofilled max_batch_size, the output left out) are the calling backend's
    assert {r.name for r in caplog.records} == {"inferd.backends.some_backend"}
    assert any("'probabilities'" in r.getMessage() for r in caplog.records)


def test_auto_complete_of_a_missing_file_names_the_path(tmp_path: Path) -> None:
    md = _write(tmp_path, "m", None, 'backend: "onnxruntime"\n')
    with pytest.raises(UnavailableError, match=r"unable to find '.*/m/1/model.onnx' for model 'm'"):
        _completed(md)


def test_auto_complete_of_a_corrupt_file_says_it_is_not_a_model(tmp_path: Path) -> None:
    md = _write(tmp_path, "m", b"\x00\x01 this is not protobuf \xff" * 10)
    with pytest.raises(InvalidArgumentError, match="not a loadable ONNX model"):
        _completed(md)


def test_served_config_is_completed_and_normalised(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "m", add_sub())
    cfg = serve().model_config("m")
    assert cfg["platform"] == "onnxruntime_onnx" and cfg["backend"] == "onnxruntime"
    assert cfg["max_batch_size"] == 4
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [4]
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU" and cfg["instance_group"][0]["count"] == 2
    assert cfg["default_model_filename"] == "model.onnx"


def test_strict_config_turns_auto_complete_off(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "m", add_sub())
    server = serve(strict_model_config=True)
    entry = _state(server, "m")
    assert entry["state"] == "UNAVAILABLE"
    assert "must specify one or more 'input'" in entry["reason"]


# -- the config checked against the graph at load -------------------------------------------------

_IO_OK = """
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (
            _IO_OK.replace('"B" data_type: TYPE_FP32', '"B" data_type: TYPE_INT32'),
            "configuration expects datatype TYPE_INT32 for input 'B', model provides TYPE_FP32",
        ),
        (
            _IO_OK.replace('"A" data_type: TYPE_FP32 dims: [ 4 ]', '"A" data_type: TYPE_FP32 dims: [ 5 ]'),
            "input 'A': the model expects shape [-1,4] but the model configuration specifies [-1,5]",
        ),
        (
            _IO_OK.replace('"SUM"', '"TOTAL"'),
            "configuration output 'TOTAL' is not an output of the ONNX graph, whose outputs are: SUM, DIFF",
        ),
        (
            _IO_OK.replace(
                '{ name: "B" data_type: TYPE_FP32 dims: [ 4 ] }',
                '{ name: "C" data_type: TYPE_FP32 dims: [ 4 ] }',
            ),
            "the ONNX graph's input(s) 'B' are not in the model configuration",
        ),
        (
            _IO_OK.replace("max_batch_size: 4", "max_batch_size: 0"),
            "input 'A': the model expects shape [-1,4] but the model configuration specifies [4]",
        ),
    ],
)
def test_a_config_that_contradicts_the_graph_leaves_the_model_unavailable(
    tmp_path: Path, serve: Any, config: str, reason: str
) -> None:
    _write(tmp_path / "repo", "bad", add_sub(), config)
    _write(tmp_path / "repo", "good", add_sub(), _IO_OK)
    server = serve()
    bad = _state(server, "bad")
    assert bad["state"] == "UNAVAILABLE"
    assert reason in bad["reason"], bad["reason"]
    assert bad["reason"].startswith("Invalid argument: unable to load model 'bad'")
    # the others serve
    out = server.infer("good", {"A": np.ones((1, 4), np.float32), "B": np.ones((1, 4), np.float32)})
    np.testing.assert_array_equal(out["SUM"], np.full((1, 4), 2, np.float32))


def test_batching_config_on_a_graph_with_a_fixed_first_dimension(tmp_path: Path) -> None:
    cfg = parse_config_text(_IO_OK.replace("name", "name", 1), "x")
    cfg.name = "m"
    graph_in = [GraphTensor("A", "TYPE_FP32", (1, 4)), GraphTensor("B", "TYPE_FP32", (1, 4))]
    graph_out = [GraphTensor("SUM", "TYPE_FP32", (1, 4))]
    with pytest.raises(InvalidArgumentError) as e:
        check_config_against_graph(cfg, graph_in, graph_out)
    assert e.value.message == (
        "unable to load model 'm', model configuration supports batching but first dimension of tensor 'A' "
        "expected by framework is not a variable-size batch dimension: [1,4] whereas model configuration "
        "shape is: [4] (set max_batch_size to 0 and list the full shape)"
    )


def test_config_variable_dim_against_a_fixed_graph_dim_is_refused() -> None:
    cfg = parse_config_text(_IO_OK.replace("dims: [ 4 ] }, {", "dims: [ -1 ] }, {", 1), "x")
    cfg.name = "m"
    graph_in = [GraphTensor("A", "TYPE_FP32", (-1, 4)), GraphTensor("B", "TYPE_FP32", (-1, 4))]
    with pytest.raises(InvalidArgumentError, match=r"model expects shape \[-1,4\] .* specifies \[-1,-1\]"):
        check_config_against_graph(cfg, graph_in, [GraphTensor("SUM", "TYPE_FP32", (-1, 4))])


def test_optional_inputs_are_refused_for_batching_models() -> None:
    cfg = parse_config_text(_IO_OK.replace("dims: [ 4 ] }, {", "dims: [ 4 ] optional: true }, {", 1), "x")
    cfg.name = "m"
    graph_in = [GraphTensor("A", "TYPE_FP32", (-1, 4)), GraphTensor("B", "TYPE_FP32", (-1, 4))]
    with pytest.raises(InvalidArgumentError, match="optional input 'A' is not supported for models that"):
        check_config_against_graph(cfg, graph_in, [GraphTensor("SUM", "TYPE_FP32", (-1, 4))])


def test_a_non_tensor_output_in_the_config_is_refused_with_advice() -> None:
    cfg = parse_config_text(
        'max_batch_size: 0 input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]'
        ' output [ { name: "P" data_type: TYPE_FP32 dims: [ 1 ] } ]',
        "x",
    )
    cfg.name = "m"
    with pytest.raises(InvalidArgumentError, match="zipmap disabled"):
        check_config_against_graph(
            cfg,
            [GraphTensor("X", "TYPE_FP32", (4,))],
            [GraphTensor("P", "", (), "seq(map(int64,tensor(float)))")],
        )


# -- missing and corrupt files ---------------------------------------------------------------------


def test_corrupt_and_missing_model_files_leave_those_models_unavailable(tmp_path: Path, serve: Any) -> None:
    repo = tmp_path / "repo"
    _write(repo, "corrupt", b"garbage" * 100, _IO_OK)  # a config: auto-complete skipped, load fails
    _write(repo, "corrupt_auto", b"garbage" * 100)  # no config: auto-complete fails
    _write(repo, "missing", None, 'platform: "onnxruntime_onnx"\n' + _IO_OK)
    truncated = add_sub().SerializeToString()
    _write(repo, "truncated", truncated[: len(truncated) // 2], _IO_OK)
    _write(repo, "good", add_sub())
    server = serve()
    for name in ("corrupt", "corrupt_auto", "truncated"):
        entry = _state(server, name)
        assert entry["state"] == "UNAVAILABLE", entry
        assert "not a loadable ONNX model" in entry["reason"], entry
        assert f"{name}/1/model.onnx" in entry["reason"], entry
    missing = _state(server, "missing")
    assert missing["state"] == "UNAVAILABLE"
    assert "unable to find" in missing["reason"] and "missing/1/model.onnx" in missing["reason"]
    assert _state(server, "good")["state"] == "READY"
    out = server.infer("good", {"A": np.ones((2, 4), np.float32), "B": np.ones((2, 4), np.float32)})
    np.testing.assert_array_equal(out["DIFF"], np.zeros((2, 4), np.float32))


# -- file layouts ----------------------------------------------------------------------------------


def test_a_model_onnx_folder_with_external_data(tmp_path: Path, serve: Any) -> None:
    weights = np.arange(16, dtype=np.float32).reshape(4, 4)
    model = _model(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        [helper.make_tensor_value_info("X", F, ["N", 4])],
        [helper.make_tensor_value_info("Y", F, ["N", 4])],
        [numpy_helper.from_array(weights, "W")],
    )
    folder = tmp_path / "repo" / "ext" / "1" / "model.onnx"
    folder.mkdir(parents=True)
    onnx.save(
        model,
        str(folder / "model.onnx"),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    assert (folder / "weights.bin").stat().st_size == weights.nbytes
    out = serve().infer("ext", {"X": np.eye(4, dtype=np.float32)[:2]})
    np.testing.assert_array_equal(out["Y"], weights[:2])


def test_default_model_filename(tmp_path: Path, serve: Any) -> None:
    md = _write(
        tmp_path / "repo", "named", None, 'backend: "onnxruntime"\ndefault_model_filename: "net.onnx"\n'
    )
    onnx.save(add_sub(), str(md / "1" / "net.onnx"))
    server = serve()
    assert server.model_config("named")["default_model_filename"] == "net.onnx"
    out = server.infer("named", {"A": np.ones((1, 4), np.float32), "B": np.ones((1, 4), np.float32)})
    assert out["SUM"].shape == (1, 4)


# -- sessions and instances ------------------------------------------------------------------------


def _load(tmp_path: Path, model: onnx.ModelProto, config: str = "", name: str = "m") -> tuple[OnnxModel, Any]:
    md = _write(tmp_path, name, model, config or None)
    cfg = _completed(md)
    normalize_config(cfg, name)
    ctx = LoadContext(name, 1, md, md / "1", cfg)
    loaded = OnnxRuntimeBackend().load(ctx)
    assert isinstance(loaded, OnnxModel)
    return loaded, cfg


def test_one_session_per_instance(tmp_path: Path) -> None:
    model, cfg = _load(tmp_path, add_sub(), "instance_group [ { count: 3 kind: KIND_CPU } ]\n")
    count = cfg.instance_group[0].count
    instances = [model.create_instance(InstanceSpec(f"m_0_{i}", "CPU", 0)) for i in range(count)]
    assert model.sessions == 3
    assert len({id(i.session) for i in instances}) == 3
    assert all(i.inline_ok for i in instances)  # the pool decides on measurement (short graphs only)
    for i in instances:
        i.unload()


def _req(
    rid: str, batch: int = 1, outputs: list[str] | None = None, **arrays: np.ndarray[Any, Any]
) -> InferRequest:
    return InferRequest(
        model_name="m",
        inputs={k: Tensor.from_array(k, v) for k, v in arrays.items()},
        id=rid,
        outputs=None if outputs is None else [RequestedOutput(o) for o in outputs],
        batch_size=batch,
    )


class CountingSession:
    """Wraps an InferenceSession and records the batch size of each run."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.runs: list[dict[str, tuple[int, ...]]] = []

    def run(self, names: Any, feed: dict[str, Any], options: Any = None) -> Any:
        self.runs.append({k: v.shape for k, v in feed.items()})
        return self.session.run(names, feed, options)


def test_requests_are_stacked_run_once_and_split(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, add_sub(), "max_batch_size: 8\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    counting = CountingSession(inst.session)
    inst.session = counting
    rng = np.random.default_rng(0)
    arrays = [(rng.random((n, 4), dtype=np.float32), rng.random((n, 4), dtype=np.float32)) for n in (1, 3, 2)]
    reqs = [_req(f"r{i}", a.shape[0], A=a, B=b) for i, (a, b) in enumerate(arrays)]
    responses = inst.execute(reqs)
    assert counting.runs == [{"A": (6, 4), "B": (6, 4)}]
    assert [r.id for r in responses] == ["r0", "r1", "r2"]
    for resp, (a, b) in zip(responses, arrays, strict=True):
        assert resp.error is None
        outs = {t.name: t.array for t in resp.outputs}
        np.testing.assert_allclose(outs["SUM"], a + b)
        np.testing.assert_allclose(outs["DIFF"], a - b)
        assert resp.outputs[0].shape == a.shape
    in_ns, infer_ns, out_ns = inst.last_timings
    assert infer_ns > 0 and in_ns >= 0 and out_ns >= 0


def test_requests_of_different_shapes_run_in_separate_groups(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, pairs(), "max_batch_size: 8\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    counting = CountingSession(inst.session)
    inst.session = counting
    x4 = np.arange(4, dtype=np.float32).reshape(1, 4)
    x6 = np.arange(12, dtype=np.float32).reshape(2, 6)
    x3 = np.arange(3, dtype=np.float32).reshape(1, 3)  # odd: this group fails at run time
    responses = inst.execute([_req("a", 1, X=x4), _req("b", 2, X=x6), _req("c", 1, X=x3), _req("d", 1, X=x4)])
    assert counting.runs == [{"X": (2, 4)}, {"X": (2, 6)}, {"X": (1, 3)}]
    assert [r.id for r in responses] == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(responses[0].outputs[0].array, x4.reshape(1, 2, 2))
    np.testing.assert_array_equal(responses[1].outputs[0].array, x6.reshape(2, 2, 3))
    np.testing.assert_array_equal(responses[3].outputs[0].array, x4.reshape(1, 2, 2))
    err = responses[2].error
    assert isinstance(err, InternalError) and "onnx runtime error running model 'm'" in err.message


def test_only_requested_outputs_are_returned(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, add_sub(), "max_batch_size: 8\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    a = np.ones((1, 4), np.float32)
    r1, r2 = inst.execute([_req("1", outputs=["DIFF"], A=a, B=a), _req("2", A=a, B=a)])
    assert [t.name for t in r1.outputs] == ["DIFF"]
    assert [t.name for t in r2.outputs] == ["SUM", "DIFF"]


def test_dynamic_batching_through_the_server(tmp_path: Path, serve: Any) -> None:
    config = "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 2000000 preferred_batch_size: [ 4 ] }\n"
    config += "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    _write(tmp_path / "repo", "m", add_sub(), config)
    server = serve()
    rng = np.random.default_rng(1)
    data = [(rng.random((1, 4), dtype=np.float32), rng.random((1, 4), dtype=np.float32)) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda ab: server.infer("m", {"A": ab[0], "B": ab[1]}), data))
    for out, (a, b) in zip(results, data, strict=True):
        np.testing.assert_allclose(out["SUM"], a + b)
    stats = server.statistics("m")["model_stats"][0]
    assert stats["inference_count"] == 4
    assert stats["execution_count"] == 1


def test_instances_answer_concurrent_requests(tmp_path: Path, serve: Any) -> None:
    """Two instances, many concurrent requests: every answer is right (sessions are not shared)."""
    _write(tmp_path / "repo", "m", add_sub(), "instance_group [ { count: 2 kind: KIND_CPU } ]\n")
    server = serve()
    rng = np.random.default_rng(2)
    data = [rng.random((1, 4), dtype=np.float32) for _ in range(32)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda a: server.infer("m", {"A": a, "B": a})["SUM"], data))
    for a, out in zip(data, outs, strict=True):
        np.testing.assert_allclose(out, 2 * a)


def test_execute_releases_the_gil(tmp_path: Path) -> None:
    """While one instance runs, Python threads go on: instances overlap in their worker threads."""
    w = numpy_helper.from_array(np.eye(256, dtype=np.float32), "W")
    nodes = [helper.make_node("MatMul", ["X" if i == 0 else f"H{i}", "W"], [f"H{i + 1}"]) for i in range(40)]
    nodes.append(helper.make_node("Identity", ["H40"], ["Y"]))
    heavy = _model(
        nodes,
        [helper.make_tensor_value_info("X", F, ["N", 256])],
        [helper.make_tensor_value_info("Y", F, ["N", 256])],
        [w],
    )
    config = 'parameters [ { key: "intra_op_thread_count" value: { string_value: "1" } } ]\n'
    model, _ = _load(tmp_path, heavy, config + "max_batch_size: 1024\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    inside = threading.Event()
    session = inst.session

    class Flagged:
        def run(self, names: Any, feed: Any, options: Any = None) -> Any:
            inside.set()
            try:
                return session.run(names, feed, options)
            finally:
                inside.clear()

    inst.session = Flagged()
    x = np.ones((1024, 256), np.float32)
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(inst.execute([_req("1", 1024, X=x)])[0]))
    worker.start()
    assert inside.wait(10)
    ticks = 0
    while inside.is_set():  # pure Python: runs only if the worker gave the GIL up inside run()
        ticks += 1
    worker.join()
    assert result[0].error is None
    np.testing.assert_array_equal(result[0].outputs[0].array, x)
    assert ticks > 100, ticks


# -- BYTES and reshape -----------------------------------------------------------------------------


def test_string_tensors(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "s", string_identity())
    server = serve()
    assert server.model_config("s")["input"][0]["data_type"] == "TYPE_STRING"
    data = np.array([[b"hello", "ünicode".encode()]], dtype=np.object_)
    out = server.infer("s", {"S": data})["O"]
    assert out.dtype == np.object_
    assert out.tolist() == [[b"hello", "ünicode".encode()]]


def test_string_tensors_are_stacked_and_split(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, string_identity(), "max_batch_size: 4\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    a = np.array([[b"a", b"b"]], dtype=np.object_)
    b = np.array([[b"c", b"d"], [b"e", b"f"]], dtype=np.object_)
    r1, r2 = inst.execute([_req("1", 1, S=a), _req("2", 2, S=b)])
    assert r1.outputs[0].array.tolist() == [[b"a", b"b"]]
    assert r2.outputs[0].array.tolist() == [[b"c", b"d"], [b"e", b"f"]]


def test_non_utf8_bytes_for_a_string_input_are_a_client_error(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "s", string_identity())
    server = serve()
    with pytest.raises(InvalidArgumentError, match="input 'S' element 1 is not UTF-8 text"):
        server.infer("s", {"S": np.array([[b"ok", b"\xff\xfe"]], dtype=np.object_)})
    assert server.infer("s", {"S": np.array([[b"x", b"y"]], dtype=np.object_)})["O"].shape == (1, 2)


def test_reshape_on_inputs_and_outputs(tmp_path: Path, serve: Any) -> None:
    config = """
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] } } ]
"""
    _write(tmp_path / "repo", "r", flatten(), config)
    server = serve()
    md = server.model_metadata("r")
    assert md["inputs"][0]["shape"] == [-1, 4] and md["outputs"][0]["shape"] == [-1, 2, 2]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    y = server.infer("r", {"X": x})["Y"]
    assert y.shape == (2, 2, 2)
    np.testing.assert_array_equal(y, (2 * x).reshape(2, 2, 2))


def test_scalar_per_item_through_dims_1_and_empty_reshape(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "sc", scalar_per_item())
    server = serve()
    y = server.infer("sc", {"X": np.array([[1.0], [5.0]], np.float32)})["Y"]
    assert y.shape == (2, 1)
    np.testing.assert_array_equal(y, [[2.0], [6.0]])


# -- request errors --------------------------------------------------------------------------------


def test_wrong_inputs_are_refused_and_the_model_keeps_serving(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "m", add_sub())
    server = serve()
    a = np.ones((1, 4), np.float32)
    with pytest.raises(
        InvalidArgumentError, match="inference input 'B' data-type is 'INT32', but model 'm' expects 'FP32'"
    ):
        server.infer("m", {"A": a, "B": np.ones((1, 4), np.int32)})
    with pytest.raises(
        InvalidArgumentError,
        match=r"unexpected shape for input 'A' for model 'm'. Expected \[-1,4\], got \[1,5\]",
    ):
        server.infer("m", {"A": np.ones((1, 5), np.float32), "B": a})
    with pytest.raises(InvalidArgumentError, match="expected 2 inputs but got 1 inputs for model 'm'"):
        server.infer("m", {"A": a})
    with pytest.raises(InvalidArgumentError, match="inference request batch-size must be <= 4 for 'm'"):
        server.infer("m", {"A": np.ones((5, 4), np.float32), "B": np.ones((5, 4), np.float32)})
    np.testing.assert_array_equal(server.infer("m", {"A": a, "B": a})["SUM"], 2 * a)


def test_a_runtime_failure_answers_500_and_the_model_keeps_serving(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "p", pairs())
    server = serve()
    with pytest.raises(InternalError, match="onnx runtime error running model 'p'"):
        server.infer("p", {"X": np.ones((1, 3), np.float32)})
    assert server.infer("p", {"X": np.ones((1, 4), np.float32)})["Y"].shape == (1, 2, 2)


# -- session options -------------------------------------------------------------------------------


def _cfg(text: str) -> Any:
    cfg = parse_config_text(text, "x")
    cfg.name = "m"
    return cfg


def test_default_threads_share_the_cores_among_the_instances() -> None:
    assert default_intra_op_threads(2, 2) == 1
    assert default_intra_op_threads(2, 1) == 2
    assert default_intra_op_threads(16, 3) == 5
    assert default_intra_op_threads(1, 4) == 1
    s = session_settings(_cfg(""), instances=2, cpus=2)
    assert (s.intra_op_threads, s.inter_op_threads, s.parallel, s.graph_level) == (1, 1, False, 0)


def test_the_first_instance_gets_every_core_without_spinning() -> None:
    s = session_settings(_cfg(""), instances=2, cpus=2)
    assert (intra_op_threads(s, True), intra_op_threads(s, False)) == (2, 1)
    first, other = session_options(s, True), session_options(s, False)
    assert (first.intra_op_num_threads, other.intra_op_num_threads) == (2, 1)
    assert first.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(RuntimeError):  # not set: ONNX Runtime's default (spinning)
        other.get_session_config_entry("session.intra_op.allow_spinning")
    s16 = session_settings(_cfg(""), instances=4, cpus=16)
    assert (intra_op_threads(s16, True), intra_op_threads(s16, False)) == (16, 4)
    # one instance already has every core, spinning as ONNX Runtime's default
    one = session_settings(_cfg(""), instances=1, cpus=2)
    assert (intra_op_threads(one, True), one.first_intra_op_threads) == (2, 0)
    # a count in the config is every instance's; so is a spinning choice
    cfg = _cfg("""parameters [ { key: "intra_op_thread_count" value: { string_value: "1" } } ]""")
    assert intra_op_threads(session_settings(cfg, instances=2, cpus=2), True) == 1
    spin = _cfg("""parameters [ { key: "session.intra_op.allow_spinning" value: { string_value: "1" } } ]""")
    opts = session_options(session_settings(spin, instances=2, cpus=2), True)
    assert (opts.intra_op_num_threads, opts.get_session_config_entry("session.intra_op.allow_spinning")) == (
        2,
        "1",
    )


def test_session_settings_from_parameters_and_optimization() -> None:
    cfg = _cfg(
        """
parameters [
  { key: "intra_op_thread_count" value: { string_value: "3" } },
  { key: "inter_op_thread_count" value: { string_value: "2" } },
  { key: "execution_mode" value: { string_value: "1" } },
  { key: "enable_mem_arena" value: { string_value: "false" } },
  { key: "enable_mem_pattern" value: { string_value: "1" } },
  { key: "session.intra_op.allow_spinning" value: { string_value: "0" } },
  { key: "memory.enable_memory_arena_shrinkage" value: { string_value: "cpu:0" } }
]
optimization { graph { level: 2 } }
"""
    )
    s = session_settings(cfg, instances=2, cpus=2)
    assert (s.intra_op_threads, s.inter_op_threads, s.parallel, s.graph_level) == (3, 2, True, 2)
    assert (s.mem_arena, s.mem_pattern) == (False, True)
    assert s.config_entries == (("session.intra_op.allow_spinning", "0"),)
    assert s.run_entries == (("memory.enable_memory_arena_shrinkage", "cpu:0"),)


def test_session_options_reach_the_session(tmp_path: Path) -> None:
    config = """
parameters [ { key: "intra_op_thread_count" value: { string_value: "1" } },
             { key: "memory.enable_memory_arena_shrinkage" value: { string_value: "cpu:0" } } ]
optimization { graph { level: -1 } }
"""
    model, _ = _load(tmp_path, add_sub(), config)
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    opts = inst.session.get_session_options()
    assert opts.intra_op_num_threads == 1
    assert str(opts.graph_optimization_level).endswith("ORT_ENABLE_BASIC")
    assert inst.session.get_providers() == ["CPUExecutionProvider"]
    a = np.ones((1, 4), np.float32)
    assert inst.execute([_req("1", A=a, B=a)])[0].error is None  # run options accepted


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ('{ key: "execution_mode" value: { string_value: "2" } }', "execution_mode are 0 or 1 but got 2"),
        ('{ key: "intra_op_thread_count" value: { string_value: "many" } }', "failed to convert 'many'"),
        ('{ key: "enable_mem_arena" value: { string_value: "maybe" } }', "to a boolean for parameter"),
    ],
)
def test_bad_parameters_are_load_errors(params: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        session_settings(_cfg(f"parameters [ {params} ]"), instances=1, cpus=2)


def test_execution_accelerators() -> None:
    cpu = InstanceSpec("m_0", "CPU", 0)
    ov = session_settings(
        _cfg(
            'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }'
        ),
        1,
        2,
    )
    assert execution_providers(ov, cpu, ["OpenVINOExecutionProvider", "CPUExecutionProvider"]) == [
        ("OpenVINOExecutionProvider", {"device_type": "CPU"}),
        "CPUExecutionProvider",
    ]
    with pytest.raises(UnavailableError, match="install onnxruntime-openvino"):
        execution_providers(ov, cpu, ["CPUExecutionProvider"])
    unknown = session_settings(
        _cfg('optimization { execution_accelerators { cpu_execution_accelerator [ { name: "magic" } ] } }'),
        1,
        2,
    )
    with pytest.raises(InvalidArgumentError, match="unknown Execution Accelerator 'magic' is requested"):
        execution_providers(unknown, cpu, ["CPUExecutionProvider"])
    # a KIND_GPU instance's providers: test_onnxruntime_providers.py


def test_instance_type_is_the_backend_instance() -> None:
    assert OnnxInstance.inline_ok is True
    assert json.dumps(GraphTensor("x", "TYPE_FP32", (1,)).is_tensor) == "true"
