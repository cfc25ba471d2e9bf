"""The TensorFlow backend: SavedModel signatures, auto-complete, load checks, batching, strings, errors.

SavedModels are built once per module with tf.Module + tf.function(input_signature=...) and
tf.saved_model.save, then copied into each test's repository (importing TensorFlow takes seconds).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import inferd
from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.registry import get_backend
from inferd.backends.tensorflow import settings as tf_settings_module
from inferd.backends.tensorflow.backend import TensorFlowBackend, TensorFlowModel, _first_line, _run_error
from inferd.backends.tensorflow.settings import DEFAULT_SIGNATURE_DEF, TfSettings, apply_threads, tf_settings
from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.core.types import BY_CONFIG_VALUE
from inferd.errors import InternalError, InvalidArgumentError, UnavailableError, UnsupportedError
from inferd.repository import autofill_backend_fields, load_model_config, normalize_config, parse_config_text


class AddSub(tf.Module):
    """A, B [N, 4] FP32 -> SUM, DIFF; signature ``product`` -> PROD; ``half`` fails on odd widths."""

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 4], tf.float32)])
    def add_sub(self, A: Any, B: Any) -> Any:
        return {"SUM": A + B, "DIFF": A - B}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 4], tf.float32)])
    def product(self, A: Any, B: Any) -> Any:
        return {"PROD": A * B}


class Fixed(tf.Module):
    """X [2, 3] INT32 -> Y = X * 2 (no batch dimension), and a scalar S -> T = S + 1."""

    @tf.function(input_signature=[tf.TensorSpec([2, 3], tf.int32), tf.TensorSpec([], tf.float32)])
    def f(self, X: Any, S: Any) -> Any:
        return {"Y": X * 2, "T": S + 1.0}


class Halves(tf.Module):
    """X [N, L] -> Y [N, 2, L/2]: fails at run time (InvalidArgumentError) when L is odd."""

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32)])
    def f(self, X: Any) -> Any:
        return {"Y": tf.reshape(X, [tf.shape(X)[0], 2, -1])}


class Strings(tf.Module):
    """TEXT [N, 1] STRING -> UPPER (upper case) and LEN (byte length, INT32); a variable holds a suffix."""

    def __init__(self) -> None:
        super().__init__()
        self.suffix = tf.Variable("!")

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.string)])
    def f(self, TEXT: Any) -> Any:
        return {"UPPER": tf.strings.upper(TEXT) + self.suffix, "LEN": tf.strings.length(TEXT)}


def _save(module: tf.Module, dest: Path, signatures: Any) -> Path:
    tf.saved_model.save(module, str(dest), signatures=signatures)
    return dest


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> a SavedModel directory, built once for the module."""
    root = tmp_path_factory.mktemp("savedmodels")
    add_sub = AddSub()
    fixed, halves, strings = Fixed(), Halves(), Strings()
    return {
        "add_sub": _save(
            add_sub, root / "add_sub", {"serving_default": add_sub.add_sub, "product": add_sub.product}
        ),
        "fixed": _save(fixed, root / "fixed", {"serving_default": fixed.f}),
        "halves": _save(halves, root / "halves", {"serving_default": halves.f}),
        "strings": _save(strings, root / "strings", {"serving_default": strings.f}),
    }


def _write(root: Path, name: str, saved_model: Path | None, config: str | None = None) -> Path:
    """A model folder: ``saved_model`` copied to 1/model.savedmodel, and ``config`` as config.pbtxt."""
    model_dir = root / name
    version = model_dir / "1"
    version.mkdir(parents=True)
    if saved_model is not None:
        shutil.copytree(saved_model, version / "model.savedmodel")
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


def _load(tmp_path: Path, saved_model: Path, config: str = "", name: str = "m") -> TensorFlowModel:
    md = _write(tmp_path, name, saved_model, config or None)
    cfg = _completed(md)
    normalize_config(cfg, name)
    model = TensorFlowBackend().load(LoadContext(name, 1, md, md / "1", cfg))
    assert isinstance(model, TensorFlowModel)
    return model


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
    'platform: "tensorflow_savedmodel"\nmax_batch_size: 8\n'
    'input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)

# -- registry, platform and auto-complete ----------------------------------------------------------


def test_registered_and_found_by_model_savedmodel(tmp_path: Path, saved: dict[str, Path]) -> None:
    assert isinstance(get_backend("tensorflow"), TensorFlowBackend)
    md = _write(tmp_path, "m", saved["add_sub"])
    cfg, _ = load_model_config(md)
    autofill_backend_fields(cfg, "m", md)
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == (
        "tensorflow",
        "tensorflow_savedmodel",
        "model.savedmodel",
    )
    named = parse_config_text('platform: "tensorflow_savedmodel"\n', "config.pbtxt")
    autofill_backend_fields(named, "m", md)
    assert named.backend == "tensorflow"


def test_auto_complete_of_a_batching_signature(tmp_path: Path, saved: dict[str, Path]) -> None:
    cfg = _completed(_write(tmp_path, "m", saved["add_sub"]))
    assert cfg.max_batch_size == 4 and cfg.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in cfg.input] == [("A", [4]), ("B", [4])]
    assert [(o.name, list(o.dims)) for o in cfg.output] == [("DIFF", [4]), ("SUM", [4])]
    assert {BY_CONFIG_VALUE[i.data_type].config for i in cfg.input} == {"TYPE_FP32"}


def test_auto_complete_uses_default_max_batch_size_and_tf_signature_def(
    tmp_path: Path, saved: dict[str, Path]
) -> None:
    config = 'parameters { key: "TF_SIGNATURE_DEF" value { string_value: "product" } }\n'
    cfg = _completed(_write(tmp_path, "m", saved["add_sub"], config), default_mbs=16)
    assert cfg.max_batch_size == 16
    assert [o.name for o in cfg.output] == ["PROD"]


def test_auto_complete_of_a_fixed_shape_signature_keeps_max_batch_size_0(
    tmp_path: Path, saved: dict[str, Path]
) -> None:
    cfg = _completed(_write(tmp_path, "m", saved["fixed"]))
    assert cfg.max_batch_size == 0 and not cfg.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in cfg.input] == [("S", [1]), ("X", [2, 3])]
    assert BY_CONFIG_VALUE[cfg.input[1].data_type].config == "TYPE_INT32"


def test_auto_complete_of_strings(tmp_path: Path, saved: dict[str, Path]) -> None:
    cfg = _completed(_write(tmp_path, "m", saved["strings"]))
    assert [(i.name, BY_CONFIG_VALUE[i.data_type].config) for i in cfg.input] == [("TEXT", "TYPE_STRING")]
    assert [(o.name, BY_CONFIG_VALUE[o.data_type].config) for o in cfg.output] == [
        ("LEN", "TYPE_INT32"),
        ("UPPER", "TYPE_STRING"),
    ]


def test_auto_complete_is_skipped_when_inputs_and_outputs_are_listed(
    tmp_path: Path, saved: dict[str, Path]
) -> None:
    cfg = _completed(_write(tmp_path, "m", saved["add_sub"], _IO_OK))
    assert cfg.max_batch_size == 8 and not cfg.HasField("dynamic_batching")


def test_auto_complete_refuses_max_batch_size_for_a_signature_that_does_not_batch(
    tmp_path: Path, saved: dict[str, Path]
) -> None:
    md = _write(tmp_path, "m", saved["fixed"], "max_batch_size: 4\n")
    with pytest.raises(InvalidArgumentError, match="does not support batching"):
        _completed(md)


def test_served_config_is_completed(tmp_path: Path, saved: dict[str, Path], serve: Any) -> None:
    _write(tmp_path / "repo", "m", saved["add_sub"])
    cfg = serve().model_config("m")
    assert cfg["backend"] == "tensorflow" and cfg["platform"] == "tensorflow_savedmodel"
    assert cfg["default_model_filename"] == "model.savedmodel"
    assert cfg["max_batch_size"] == 4
    assert [i["name"] for i in cfg["input"]] == ["A", "B"]
    assert [g["count"] for g in cfg["instance_group"]] == [2]  # Triton's CPU default for tensorflow


# -- settings --------------------------------------------------------------------------------------


def _params(text: str) -> Any:
    return parse_config_text('name: "m"\n' + text, "config.pbtxt")


def test_settings_from_parameters() -> None:
    assert tf_settings(_params("")) == TfSettings(DEFAULT_SIGNATURE_DEF, None, None, None)
    cfg = _params(
        'parameters { key: "TF_SIGNATURE_DEF" value { string_value: "s2" } }\n'
        'parameters { key: "TF_GRAPH_TAG" value { string_value: "serve" } }\n'
        'parameters { key: "TF_NUM_INTRA_THREADS" value { string_value: "2" } }\n'
        'parameters { key: "TF_NUM_INTER_THREADS" value { string_value: "0" } }\n'
    )
    assert tf_settings(cfg) == TfSettings("s2", "serve", 2, None)
    bad = _params('parameters { key: "TF_NUM_INTRA_THREADS" value { string_value: "many" } }\n')
    with pytest.raises(InvalidArgumentError, match="parameter TF_NUM_INTRA_THREADS is 'many'"):
        tf_settings(bad)


class FakeThreading:
    """Records thread settings; refuses them once the runtime has started, as TensorFlow does."""

    def __init__(self, started: bool) -> None:
        self.started = started
        self.calls: list[tuple[str, int]] = []

    def set_intra_op_parallelism_threads(self, n: int) -> None:
        if self.started:
            raise RuntimeError("Intra op parallelism cannot be modified after initialization.")
        self.calls.append(("intra", n))

    def set_inter_op_parallelism_threads(self, n: int) -> None:
        self.calls.append(("inter", n))


class FakeTf:
    def __init__(self, started: bool) -> None:
        self.config = type("Config", (), {"threading": FakeThreading(started)})()


def test_thread_settings_are_applied_once_per_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tf_settings_module, "_threads_applied", None)
    fake = FakeTf(started=False)
    apply_threads(fake, TfSettings(intra_op_threads=1, inter_op_threads=2), "a")
    assert fake.config.threading.calls == [("intra", 1), ("inter", 2)]
    with caplog.at_level(logging.WARNING, logger="inferd.backends.tensorflow"):
        apply_threads(fake, TfSettings(intra_op_threads=1, inter_op_threads=2), "b")  # same: nothing to say
        apply_threads(fake, TfSettings(intra_op_threads=3), "c")
    assert fake.config.threading.calls == [("intra", 1), ("inter", 2)]
    assert [r.getMessage() for r in caplog.records if "model 'c'" in r.getMessage()]
    assert not [r for r in caplog.records if "model 'b'" in r.getMessage()]
    monkeypatch.setattr(tf_settings_module, "_threads_applied", None)
    started = FakeTf(started=True)
    with caplog.at_level(logging.WARNING, logger="inferd.backends.tensorflow"):
        apply_threads(started, TfSettings(intra_op_threads=1), "d")  # logged, not raised
    assert any("model 'd'" in r.getMessage() and "not applied" in r.getMessage() for r in caplog.records)


# -- infer -----------------------------------------------------------------------------------------


def test_add_sub_through_the_server(tmp_path: Path, saved: dict[str, Path], serve: Any) -> None:
    _write(tmp_path / "repo", "m", saved["add_sub"])
    server = serve()
    rng = np.random.default_rng(0)
    a, b = rng.random((3, 4), dtype=np.float32), rng.random((3, 4), dtype=np.float32)
    out = server.infer("m", {"A": a, "B": b})
    np.testing.assert_allclose(out["SUM"], a + b, rtol=1e-6)
    np.testing.assert_allclose(out["DIFF"], a - b, rtol=1e-6)


def test_tf_signature_def_selects_another_signature(
    tmp_path: Path, saved: dict[str, Path], serve: Any
) -> None:
    config = 'parameters { key: "TF_SIGNATURE_DEF" value { string_value: "product" } }\n'
    _write(tmp_path / "repo", "m", saved["add_sub"], config)
    a = np.full((1, 4), 3.0, np.float32)
    out = serve().infer("m", {"A": a, "B": a})
    assert set(out) == {"PROD"}
    np.testing.assert_array_equal(out["PROD"], a * a)


def test_fixed_shape_and_scalar_without_batching(tmp_path: Path, saved: dict[str, Path], serve: Any) -> None:
    _write(tmp_path / "repo", "m", saved["fixed"])
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = serve().infer("m", {"X": x, "S": np.array([1.5], np.float32)})
    np.testing.assert_array_equal(out["Y"], x * 2)
    np.testing.assert_array_equal(out["T"], np.array([2.5], np.float32))


def test_strings_both_ways(tmp_path: Path, saved: dict[str, Path], serve: Any) -> None:
    _write(tmp_path / "repo", "m", saved["strings"])
    text = np.array([[b"abc"], ["d\u00e9f".encode()], [b"\xff\x00z"]], dtype=np.object_)
    out = serve().infer("m", {"TEXT": text})
    assert out["UPPER"].tolist() == [[b"ABC!"], ["D\u00e9F!".encode()], [b"\xff\x00Z!"]]
    np.testing.assert_array_equal(out["LEN"], np.array([[3], [4], [3]], np.int32))


def test_reshape_on_inputs_and_outputs(tmp_path: Path, saved: dict[str, Path], serve: Any) -> None:
    config = 'platform: "tensorflow_savedmodel"\nmax_batch_size: 4\n'
    config += 'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] } } ]\n'
    config += 'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } } ]\n'
    _write(tmp_path / "repo", "m", saved["halves"], config)
    x = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    np.testing.assert_array_equal(serve().infer("m", {"X": x})["Y"], x.reshape(2, 4))


def test_one_signature_shared_by_the_instances(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _load(tmp_path, saved["add_sub"], "instance_group [ { count: 3 kind: KIND_CPU } ]\n")
    instances = [model.create_instance(InstanceSpec(f"m_0_{i}", "CPU", 0)) for i in range(3)]
    assert {id(i.fn) for i in instances} == {id(model.fn)}
    assert {i.device for i in instances} == {"/CPU:0"}
    for i in instances:
        i.unload()
    model.unload()


def test_kind_gpu_without_a_gpu_is_a_load_error(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _load(tmp_path, saved["add_sub"])
    if tf.config.list_physical_devices("GPU"):
        assert model.device_for(InstanceSpec("m_0", "GPU", 1)) == "/GPU:1"
        return
    with pytest.raises(UnavailableError, match="TensorFlow finds no GPU"):
        model.device_for(InstanceSpec("m_0", "GPU", 0))


# -- batching --------------------------------------------------------------------------------------


class CountingFunction:
    """Wraps a signature and records the shapes of each call."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.runs: list[dict[str, tuple[int, ...]]] = []

    def __call__(self, **feed: Any) -> Any:
        self.runs.append({k: tuple(v.shape) for k, v in feed.items()})
        return self.fn(**feed)


def test_requests_are_stacked_run_once_and_split(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _load(tmp_path, saved["add_sub"], "max_batch_size: 8\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    counting = CountingFunction(inst.fn)
    inst.fn = counting
    rng = np.random.default_rng(1)
    arrays = [(rng.random((n, 4), dtype=np.float32), rng.random((n, 4), dtype=np.float32)) for n in (1, 3, 2)]
    responses = inst.execute([_req(f"r{i}", a.shape[0], A=a, B=b) for i, (a, b) in enumerate(arrays)])
    assert counting.runs == [{"A": (6, 4), "B": (6, 4)}]
    assert [r.id for r in responses] == ["r0", "r1", "r2"]
    for resp, (a, b) in zip(responses, arrays, strict=True):
        assert resp.error is None
        outs = {t.name: t.array for t in resp.outputs}
        np.testing.assert_allclose(outs["SUM"], a + b, rtol=1e-6)
        np.testing.assert_allclose(outs["DIFF"], a - b, rtol=1e-6)
    assert inst.last_timings[1] > 0


def test_requests_of_different_shapes_run_in_separate_groups(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _load(tmp_path, saved["halves"], "max_batch_size: 8\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    counting = CountingFunction(inst.fn)
    inst.fn = counting
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
    assert isinstance(err, InvalidArgumentError), err
    assert "tensorflow error running model 'm'" in err.message and "reshape" in err.message.lower()
    assert "Graph execution error" not in err.message and "[Op:" not in err.message


def test_only_requested_outputs_are_returned(tmp_path: Path, saved: dict[str, Path]) -> None:
    model = _load(tmp_path, saved["add_sub"], "max_batch_size: 8\n")
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    a = np.ones((1, 4), np.float32)
    r1, r2 = inst.execute([_req("1", outputs=["DIFF"], A=a, B=a), _req("2", A=a, B=a)])
    assert [t.name for t in r1.outputs] == ["DIFF"]
    assert sorted(t.name for t in r2.outputs) == ["DIFF", "SUM"]


def test_dynamic_batching_through_the_server(tmp_path: Path, saved: dict[str, Path], serve: Any) -> None:
    config = "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 2000000 preferred_batch_size: [ 4 ] }\n"
    config += "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    _write(tmp_path / "repo", "m", saved["add_sub"], config)
    server = serve()
    rng = np.random.default_rng(2)
    data = [(rng.random((1, 4), dtype=np.float32), rng.random((1, 4), dtype=np.float32)) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda ab: server.infer("m", {"A": ab[0], "B": ab[1]}), data))
    for out, (a, b) in zip(results, data, strict=True):
        np.testing.assert_allclose(out["SUM"], a + b, rtol=1e-6)
    stats = server.statistics("m")["model_stats"][0]
    assert stats["inference_count"] == 4
    assert stats["execution_count"] == 1


def test_instances_answer_concurrent_requests(tmp_path: Path, saved: dict[str, Path], serve: Any) -> None:
    _write(tmp_path / "repo", "m", saved["strings"])
    server = serve()
    words = [f"w{i}".encode() for i in range(24)]
    with ThreadPoolExecutor(6) as pool:
        outs = list(pool.map(lambda w: server.infer("m", {"TEXT": np.array([[w]], np.object_)}), words))
    for w, out in zip(words, outs, strict=True):
        assert out["UPPER"].tolist() == [[w.upper() + b"!"]]


# -- errors ----------------------------------------------------------------------------------------


def test_wrong_inputs_are_refused_and_the_model_keeps_serving(
    tmp_path: Path, saved: dict[str, Path], serve: Any
) -> None:
    _write(tmp_path / "repo", "m", saved["add_sub"])
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


def test_a_runtime_failure_is_invalid_argument_and_the_model_keeps_serving(
    tmp_path: Path, saved: dict[str, Path], serve: Any
) -> None:
    _write(tmp_path / "repo", "h", saved["halves"])
    server = serve()
    with pytest.raises(InvalidArgumentError, match="tensorflow error running model 'h'"):
        server.infer("h", {"X": np.ones((1, 3), np.float32)})
    assert server.infer("h", {"X": np.ones((1, 4), np.float32)})["Y"].shape == (1, 2, 2)


def test_tensorflow_errors_are_translated() -> None:
    def raised(fn: Any) -> Exception:
        try:
            fn()
        except Exception as e:
            return e
        raise AssertionError("nothing raised")

    bad_shape = raised(lambda: tf.reshape(tf.zeros([3]), [2, -1]))
    err = _run_error(bad_shape, "m")
    assert isinstance(err, InvalidArgumentError) and err.message.startswith(
        "tensorflow error running model 'm'"
    )
    assert "[Op:" not in err.message
    assert isinstance(_run_error(tf.errors.UnimplementedError(None, None, "no"), "m"), UnsupportedError)
    assert isinstance(_run_error(tf.errors.UnavailableError(None, None, "gone"), "m"), UnavailableError)
    assert isinstance(_run_error(tf.errors.ResourceExhaustedError(None, None, "oom"), "m"), InternalError)
    assert _first_line(RuntimeError("")) == "RuntimeError"


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
        (
            _IO_OK.replace('name: "SUM"', 'name: "TOTAL"'),
            "configuration output 'TOTAL' is not an output of the SavedModel signature 'serving_default'",
        ),
        (
            _IO_OK.replace(', { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }', ""),
            "input(s) 'B' of the SavedModel",
        ),
        (
            _IO_OK + 'parameters { key: "TF_SIGNATURE_DEF" value { string_value: "nope" } }\n',
            "has no signature 'nope' (its signatures: product, serving_default)",
        ),
        (
            _IO_OK + 'parameters { key: "TF_GRAPH_TAG" value { string_value: "train" } }\n',
            "parameter TF_GRAPH_TAG is 'train'",
        ),
        (
            _IO_OK.replace("max_batch_size: 8", "max_batch_size: 0"),
            "the model expects shape [-1,4] but the model configuration specifies [4]",
        ),
    ],
)
def test_a_config_that_contradicts_the_signature_leaves_it_unavailable(
    tmp_path: Path, saved: dict[str, Path], serve: Any, config: str, reason: str
) -> None:
    _write(tmp_path / "repo", "bad", saved["add_sub"], config)
    _write(tmp_path / "repo", "good", saved["add_sub"])
    server = serve()
    bad = _state(server, "bad")
    assert bad["state"] == "UNAVAILABLE"
    assert reason in bad["reason"], bad["reason"]
    assert "unable to load model 'bad'" in bad["reason"]
    assert _state(server, "good")["state"] == "READY"


def test_a_batching_config_on_a_fixed_signature_is_refused(tmp_path: Path, saved: dict[str, Path]) -> None:
    config = 'platform: "tensorflow_savedmodel"\nmax_batch_size: 2\n'
    config += 'input [ { name: "X" data_type: TYPE_INT32 dims: [ 3 ] }, { name: "S" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    config += 'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 3 ] } ]\n'
    with pytest.raises(InvalidArgumentError, match="not a variable-size batch dimension: \\[2,3\\]"):
        _load(tmp_path, saved["fixed"], config)


def test_corrupt_and_missing_savedmodels_leave_those_models_unavailable(
    tmp_path: Path, saved: dict[str, Path], serve: Any
) -> None:
    repo = tmp_path / "repo"
    corrupt = _write(repo, "corrupt", None, _IO_OK)
    (corrupt / "1" / "model.savedmodel").mkdir()
    (corrupt / "1" / "model.savedmodel" / "saved_model.pb").write_bytes(b"garbage" * 50)
    corrupt_auto = _write(repo, "corrupt_auto", None)  # no config: auto-complete fails
    (corrupt_auto / "1" / "model.savedmodel").mkdir()
    (corrupt_auto / "1" / "model.savedmodel" / "saved_model.pb").write_bytes(b"\x08\x01garbage")
    no_pb = _write(repo, "no_pb", saved["add_sub"], _IO_OK)
    (no_pb / "1" / "model.savedmodel" / "saved_model.pb").unlink()
    no_variables = _write(repo, "no_variables", saved["strings"], 'platform: "tensorflow_savedmodel"\n')
    shutil.rmtree(no_variables / "1" / "model.savedmodel" / "variables")
    _write(repo, "missing", None, _IO_OK)
    _write(repo, "good", saved["add_sub"])
    server = serve()
    for name in ("corrupt", "corrupt_auto", "no_variables"):
        entry = _state(server, name)
        assert entry["state"] == "UNAVAILABLE", entry
        assert "is not a loadable SavedModel" in entry["reason"], entry
        assert f"{name}/1/model.savedmodel" in entry["reason"], entry
    entry = _state(server, "no_pb")
    assert entry["state"] == "UNAVAILABLE"
    assert "is not a SavedModel (it holds no saved_model.pb)" in entry["reason"], entry
    missing = _state(server, "missing")
    assert missing["state"] == "UNAVAILABLE"
    assert "unable to find" in missing["reason"] and "missing/1/model.savedmodel" in missing["reason"]
    assert _state(server, "good")["state"] == "READY"
    out = server.infer("good", {"A": np.ones((2, 4), np.float32), "B": np.ones((2, 4), np.float32)})
    np.testing.assert_array_equal(out["DIFF"], np.zeros((2, 4), np.float32))


def test_graphdef_is_refused_with_a_reason(tmp_path: Path, serve: Any) -> None:
    md = _write(tmp_path / "repo", "g", None, 'platform: "tensorflow_graphdef"\n' + _IO_OK.split("\n", 1)[1])
    (md / "1" / "model.graphdef").write_bytes(b"\x0a\x00")
    entry = _state(serve(), "g")
    assert entry["state"] == "UNAVAILABLE"
    assert "tensorflow_graphdef is not served" in entry["reason"], entry
