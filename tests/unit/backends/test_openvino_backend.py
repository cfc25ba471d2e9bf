"""The OpenVINO backend: auto-complete, load checks, compiled models per instance, batching, errors.

Models are built with onnx.helper in tmp_path and converted with openvino.convert_model /
openvino.save_model to model.xml + model.bin; ONNX files are also served through OpenVINO.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import openvino as ov
import pytest
from onnx import TensorProto, helper, numpy_helper

import inferd
from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.openvino.backend import OpenVinoBackend, OpenVinoModel
from inferd.backends.openvino.settings import compile_properties, default_threads
from inferd.backends.registry import get_backend
from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.core.types import BY_CONFIG_VALUE
from inferd.errors import InternalError, InvalidArgumentError, UnavailableError
from inferd.repository import autofill_backend_fields, load_model_config, normalize_config, parse_config_text

F = TensorProto.FLOAT


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] | None = None) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def add_sub(batch: Any = "N", width: int = 4) -> Any:
    """A, B [batch, width] FP32 -> SUM = A + B, DIFF = A - B."""
    shape = [batch, width] if batch is not None else [width]
    return _model(
        [helper.make_node("Add", ["A", "B"], ["SUM"]), helper.make_node("Sub", ["A", "B"], ["DIFF"])],
        [helper.make_tensor_value_info("A", F, shape), helper.make_tensor_value_info("B", F, shape)],
        [helper.make_tensor_value_info("SUM", F, shape), helper.make_tensor_value_info("DIFF", F, shape)],
    )


def pairs() -> Any:
    """X [N, L] -> Y [N, 2, L/2]: fails at run time when L is odd."""
    return _model(
        [helper.make_node("Reshape", ["X", "SHAPE"], ["Y"])],
        [helper.make_tensor_value_info("X", F, ["N", "L"])],
        [helper.make_tensor_value_info("Y", F, ["N", 2, "H"])],
        [numpy_helper.from_array(np.array([0, 2, -1], dtype=np.int64), "SHAPE")],
    )


def scaled() -> Any:
    """X [N, 3] FP32 -> Y = X @ W (weights in model.bin)."""
    w = numpy_helper.from_array(np.arange(9, dtype=np.float32).reshape(3, 3), "W")
    return _model(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])],
        [helper.make_tensor_value_info("X", F, ["N", 3])],
        [helper.make_tensor_value_info("Y", F, ["N", 3])],
        [w],
    )


def _write(root: Path, name: str, model: Any, config: str | None = None, *, as_onnx: bool = False) -> Path:
    """A model folder: ``model`` converted to 1/model.xml + model.bin (or saved as 1/model.onnx)."""
    model_dir = root / name
    version = model_dir / "1"
    version.mkdir(parents=True)
    if isinstance(model, bytes):
        (version / "model.xml").write_bytes(model)
        (version / "model.bin").write_bytes(b"")
    elif model is not None:
        onnx_path = version / "model.onnx" if as_onnx else root / f".{name}.onnx"
        onnx.save(model, str(onnx_path))
        if not as_onnx:
            ov.save_model(ov.convert_model(str(onnx_path)), str(version / "model.xml"))
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


def _load(tmp_path: Path, model: Any, config: str = "", name: str = "m") -> tuple[OpenVinoModel, Any]:
    md = _write(tmp_path, name, model, config or None)
    cfg = _completed(md)
    normalize_config(cfg, name)
    model = OpenVinoBackend().load(LoadContext(name, 1, md, md / "1", cfg))
    assert isinstance(model, OpenVinoModel)
    return model, cfg


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
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


_IO_OK = (
    'input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    "max_batch_size: 8\n"
)

# -- registry and auto-complete --------------------------------------------------------------------


def test_registered_and_found_by_model_xml(tmp_path: Path) -> None:
    assert isinstance(get_backend("openvino"), OpenVinoBackend)
    md = _write(tmp_path, "m", add_sub())
    cfg, _ = load_model_config(md)
    autofill_backend_fields(cfg, "m", md)
    assert cfg.backend == "openvino" and cfg.default_model_filename == "model.xml"


def test_auto_complete_of_a_batching_model(tmp_path: Path) -> None:
    cfg = _completed(_write(tmp_path, "m", add_sub()))
    assert cfg.max_batch_size == 4 and cfg.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in cfg.input] == [("A", [4]), ("B", [4])]
    assert [(o.name, list(o.dims)) for o in cfg.output] == [("SUM", [4]), ("DIFF", [4])]
    assert {BY_CONFIG_VALUE[i.data_type].config for i in cfg.input} == {"TYPE_FP32"}


def test_auto_complete_of_a_fixed_shape_model_keeps_max_batch_size_0(tmp_path: Path) -> None:
    cfg = _completed(_write(tmp_path, "m", add_sub(batch=2)))
    assert cfg.max_batch_size == 0
    assert list(cfg.input[0].dims) == [2, 4]


def test_auto_complete_is_skipped_when_inputs_and_outputs_are_listed(tmp_path: Path) -> None:
    cfg = _completed(_write(tmp_path, "m", add_sub(), 'backend: "openvino"\n' + _IO_OK))
    assert cfg.max_batch_size == 8 and not cfg.HasField("dynamic_batching")


def test_auto_complete_refuses_max_batch_size_for_a_model_that_does_not_batch(tmp_path: Path) -> None:
    md = _write(tmp_path, "m", add_sub(batch=2), 'backend: "openvino"\nmax_batch_size: 4\n')
    with pytest.raises(InvalidArgumentError, match="does not support batching"):
        _completed(md)


def test_served_config_is_completed(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "m", add_sub())
    cfg = serve().model_config("m")
    assert cfg["backend"] == "openvino" and cfg["default_model_filename"] == "model.xml"
    assert cfg["max_batch_size"] == 4
    assert [i["name"] for i in cfg["input"]] == ["A", "B"]


# -- infer -----------------------------------------------------------------------------------------


def test_infer_through_the_server_with_weights_from_model_bin(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "m", scaled())
    server = serve()
    x = np.array([[1, 0, 0], [0, 1, 2]], np.float32)
    w = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.testing.assert_allclose(server.infer("m", {"X": x})["Y"], x @ w)
    y = np.random.default_rng(3).random((4, 3), dtype=np.float32)
    np.testing.assert_allclose(server.infer("m", {"X": y})["Y"], y @ w, rtol=1e-6)  # f32, not bf16


def test_onnx_read_through_openvino(tmp_path: Path, serve: Any) -> None:
    config = 'backend: "openvino"\ndefault_model_filename: "model.onnx"\n'
    _write(tmp_path / "repo", "m", add_sub(), config, as_onnx=True)
    server = serve()
    cfg = server.model_config("m")
    assert cfg["backend"] == "openvino" and cfg["max_batch_size"] == 4
    a = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(server.infer("m", {"A": a, "B": 2 * a})["DIFF"], -a)


def flatten() -> Any:
    """X [N, 2, 2] -> Y [N, 4] (x2): to exercise reshape on both sides."""
    return _model(
        [helper.make_node("Flatten", ["X"], ["F"], axis=1), helper.make_node("Mul", ["F", "TWO"], ["Y"])],
        [helper.make_tensor_value_info("X", F, ["N", 2, 2])],
        [helper.make_tensor_value_info("Y", F, ["N", 4])],
        [numpy_helper.from_array(np.array(2.0, dtype=np.float32), "TWO")],
    )


def test_reshape_on_inputs_and_outputs(tmp_path: Path, serve: Any) -> None:
    config = 'max_batch_size: 4\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]\n'
    config += 'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] } } ]\n'
    _write(tmp_path / "repo", "m", flatten(), config)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(serve().infer("m", {"X": x})["Y"], 2 * x.reshape(2, 2, 2))


def test_one_compiled_model_per_instance(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, add_sub(), "instance_group [ { count: 3 kind: KIND_CPU } ]\n")
    instances = [model.create_instance(InstanceSpec(f"m_0_{i}", "CPU", 0)) for i in range(3)]
    assert model.compiled == 3
    assert len({id(i.compiled) for i in instances}) == 3
    assert len({id(i.request) for i in instances}) == 3
    assert all(i.inline_ok for i in instances)
    for i in instances:
        i.unload()


def test_kind_gpu_without_a_gpu_is_a_load_error(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, add_sub())
    if any(d.startswith("GPU") for d in model.core.available_devices):
        assert model.device_for(InstanceSpec("m_0", "GPU", 0)).startswith("GPU")
        return
    with pytest.raises(UnavailableError, match="OpenVINO finds no GPU device"):
        model.device_for(InstanceSpec("m_0", "GPU", 0))


# -- batching --------------------------------------------------------------------------------------


class CountingRequest:
    """Wraps an infer request and records the shapes of each run."""

    def __init__(self, request: Any) -> None:
        self.request = request
        self.runs: list[dict[str, tuple[int, ...]]] = []

    def infer(self, feed: dict[str, Any]) -> Any:
        self.runs.append({k: v.shape for k, v in feed.items()})
        return self.request.infer(feed)


def test_requests_are_stacked_run_once_and_split(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, add_sub(), "max_batch_size: 8\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    counting = CountingRequest(inst.request)
    inst.request = counting
    rng = np.random.default_rng(0)
    arrays = [(rng.random((n, 4), dtype=np.float32), rng.random((n, 4), dtype=np.float32)) for n in (1, 3, 2)]
    responses = inst.execute([_req(f"r{i}", a.shape[0], A=a, B=b) for i, (a, b) in enumerate(arrays)])
    assert counting.runs == [{"A": (6, 4), "B": (6, 4)}]
    assert [r.id for r in responses] == ["r0", "r1", "r2"]
    for resp, (a, b) in zip(responses, arrays, strict=True):
        assert resp.error is None
        outs = {t.name: t.array for t in resp.outputs}
        np.testing.assert_allclose(outs["SUM"], a + b, rtol=1e-3)
        np.testing.assert_allclose(outs["DIFF"], a - b, rtol=1e-3, atol=1e-3)
    assert inst.last_timings[1] > 0


def test_requests_of_different_shapes_run_in_separate_groups(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, pairs(), "max_batch_size: 8\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    counting = CountingRequest(inst.request)
    inst.request = counting
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
    assert isinstance(err, InternalError) and "openvino error running model 'm'" in err.message


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
        np.testing.assert_allclose(out["SUM"], a + b, rtol=1e-3)
    stats = server.statistics("m")["model_stats"][0]
    assert stats["inference_count"] == 4
    assert stats["execution_count"] == 1


def test_instances_answer_concurrent_requests(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "m", add_sub(), "instance_group [ { count: 2 kind: KIND_CPU } ]\n")
    server = serve()
    rng = np.random.default_rng(2)
    data = [rng.random((1, 4), dtype=np.float32) for _ in range(32)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda a: server.infer("m", {"A": a, "B": a})["SUM"], data))
    for a, out in zip(data, outs, strict=True):
        np.testing.assert_allclose(out, 2 * a, rtol=1e-3)


# -- wrong inputs and contradicting configs --------------------------------------------------------


def test_wrong_inputs_are_refused_and_the_model_keeps_serving(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "m", add_sub())
    server = serve()
    a = np.ones((1, 4), np.float32)
    with pytest.raises(
        InvalidArgumentError, match="inference input 'B' data-type is 'INT32', but model 'm' expects 'FP32'"
    ):
        server.infer("m", {"A": a, "B": np.ones((1, 4), np.int32)})
    with pytest.raises(InvalidArgumentError, match=r"unexpected shape for input 'A' for model 'm'"):
        server.infer("m", {"A": np.ones((1, 5), np.float32), "B": a})
    with pytest.raises(InvalidArgumentError, match="expected 2 inputs but got 1 inputs for model 'm'"):
        server.infer("m", {"A": a})
    with pytest.raises(InvalidArgumentError, match="inference request batch-size must be <= 4 for 'm'"):
        server.infer("m", {"A": np.ones((5, 4), np.float32), "B": np.ones((5, 4), np.float32)})
    np.testing.assert_array_equal(server.infer("m", {"A": a, "B": a})["SUM"], 2 * a)


def test_a_runtime_failure_answers_500_and_the_model_keeps_serving(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "p", pairs())
    server = serve()
    with pytest.raises(InternalError, match="openvino error running model 'p'"):
        server.infer("p", {"X": np.ones((1, 3), np.float32)})
    assert server.infer("p", {"X": np.ones((1, 4), np.float32)})["Y"].shape == (1, 2, 2)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (
            _IO_OK.replace('"B" data_type: TYPE_FP32', '"B" data_type: TYPE_INT32'),
            "expects datatype TYPE_INT32",
        ),
        (
            _IO_OK.replace('"A" data_type: TYPE_FP32 dims: [ 4 ]', '"A" data_type: TYPE_FP32 dims: [ 5 ]'),
            "[-1,5]",
        ),
        (_IO_OK.replace('name: "SUM"', 'name: "TOTAL"'), "configuration output 'TOTAL' is not an output"),
        (_IO_OK.replace(', { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }', ""), "input(s) 'B' are not in"),
    ],
)
def test_a_config_that_contradicts_the_model_leaves_it_unavailable(
    tmp_path: Path, serve: Any, config: str, reason: str
) -> None:
    _write(tmp_path / "repo", "bad", add_sub(), 'backend: "openvino"\n' + config)
    _write(tmp_path / "repo", "good", add_sub())
    server = serve()
    bad = _state(server, "bad")
    assert bad["state"] == "UNAVAILABLE"
    assert reason in bad["reason"], bad["reason"]
    assert "unable to load model 'bad'" in bad["reason"]
    assert _state(server, "good")["state"] == "READY"


# -- missing and corrupt files ---------------------------------------------------------------------


def test_corrupt_and_missing_model_files_leave_those_models_unavailable(tmp_path: Path, serve: Any) -> None:
    repo = tmp_path / "repo"
    _write(repo, "corrupt", b"garbage" * 100, 'backend: "openvino"\n' + _IO_OK)  # load fails
    _write(repo, "corrupt_auto", b"<net>not an IR")  # no config: auto-complete fails
    _write(repo, "missing", None, 'backend: "openvino"\n' + _IO_OK)
    no_bin = _write(repo, "no_bin", scaled())
    (no_bin / "1" / "model.bin").unlink()
    truncated = _write(repo, "truncated", scaled())
    xml = truncated / "1" / "model.xml"
    xml.write_text(xml.read_text()[: len(xml.read_text()) // 2])
    _write(repo, "good", add_sub())
    server = serve()
    for name in ("corrupt", "corrupt_auto", "truncated"):
        entry = _state(server, name)
        assert entry["state"] == "UNAVAILABLE", entry
        assert "is not a loadable OpenVINO IR" in entry["reason"], entry
        assert f"{name}/1/model.xml" in entry["reason"], entry
    missing = _state(server, "missing")
    assert missing["state"] == "UNAVAILABLE"
    assert "unable to find" in missing["reason"] and "missing/1/model.xml" in missing["reason"]
    entry = _state(server, "no_bin")
    assert entry["state"] == "UNAVAILABLE"
    assert "no_bin/1/model.bin" in entry["reason"] and "weights" in entry["reason"]
    assert _state(server, "good")["state"] == "READY"
    out = server.infer("good", {"A": np.ones((2, 4), np.float32), "B": np.ones((2, 4), np.float32)})
    np.testing.assert_array_equal(out["DIFF"], np.zeros((2, 4), np.float32))


# -- settings --------------------------------------------------------------------------------------


def _cfg(text: str) -> Any:
    cfg = parse_config_text(text, "x")
    cfg.name = "m"
    return cfg


def test_threads_are_shared_among_the_instances_and_parameters_pass_through() -> None:
    assert default_threads(2, cores=8) == 4 and default_threads(16, cores=8) == 1
    props = compile_properties(
        _cfg('parameters { key: "PERFORMANCE_HINT" value { string_value: "LATENCY" } }'), 1
    )
    assert props["PERFORMANCE_HINT"] == "LATENCY" and int(props["INFERENCE_NUM_THREADS"]) >= 1
    assert props["INFERENCE_PRECISION_HINT"] == "f32"  # the model's precision, not bf16 on AMX CPUs
    props = compile_properties(
        _cfg('parameters { key: "INFERENCE_NUM_THREADS" value { string_value: "3" } }'), 4
    )
    assert props["INFERENCE_NUM_THREADS"] == "3"
    with pytest.raises(InvalidArgumentError, match="INFERENCE_NUM_THREADS is 'many'"):
        compile_properties(
            _cfg('parameters { key: "INFERENCE_NUM_THREADS" value { string_value: "many" } }'), 1
        )


def test_a_bad_compile_property_is_a_load_error(tmp_path: Path, serve: Any) -> None:
    config = 'parameters { key: "PERFORMANCE_HINT" value { string_value: "FASTEST" } }\n'
    _write(tmp_path / "repo", "m", add_sub(), config)
    entry = _state(serve(), "m")
    assert entry["state"] == "UNAVAILABLE"
    assert "unable to load model 'm'" in entry["reason"], entry
