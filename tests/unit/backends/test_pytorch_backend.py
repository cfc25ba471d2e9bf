"""The PyTorch backend: naming rules, batching, dtypes, dict/tuple/list outputs, load checks, model.pt2."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import inferd
from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.pytorch.backend import PyTorchBackend, TorchModel
from inferd.backends.pytorch.naming import (
    FORWARD_ARGUMENT,
    NAMED_INDEX,
    STRICT_CONFIG_ORDERING,
    index_suffix,
    plan_inputs,
    plan_outputs,
)
from inferd.backends.pytorch.settings import torch_settings
from inferd.backends.registry import get_backend
from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.core.types import BF16
from inferd.errors import InferdError, InvalidArgumentError
from inferd.repository import autofill_backend_fields, load_model_config, normalize_config, parse_config_text

# -- modules ---------------------------------------------------------------------------------------


class AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class Minus(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a - b


class DictInOut(torch.nn.Module):
    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {"DOUBLE": inputs["X"] * 2}
        if "BIAS" in inputs:
            out["SHIFTED"] = inputs["X"] + inputs["BIAS"]
        else:
            out["SHIFTED"] = inputs["X"]
        return out


class ListOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x + 1, x * 3]


class Dtypes(torch.nn.Module):
    def forward(
        self, i: torch.Tensor, h: torch.Tensor, z: torch.Tensor, bf: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return i * 2, h + 1, ~z, bf * 2


class Shout(torch.nn.Module):
    def forward(self, words: list[str]) -> list[str]:
        return [w.upper() + "!" for w in words]


class Doubler(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Pairs(torch.nn.Module):
    """X [N, L] -> Y [N, 2, L/2]: fails at run time when L is odd."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], 2, -1)


def _save_script(module: torch.nn.Module, path: Path) -> None:
    torch.jit.save(torch.jit.script(module), str(path))


def _write(
    root: Path, name: str, module: torch.nn.Module | bytes | None, config: str, filename: str = "model.pt"
) -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    if isinstance(module, bytes):
        (model_dir / "1" / filename).write_bytes(module)
    elif module is not None:
        _save_script(module, model_dir / "1" / filename)
    (model_dir / "config.pbtxt").write_text('backend: "pytorch"\n' + config)
    return model_dir


def _io(kind: str, names: list[str], dtype: str = "TYPE_FP32", dims: str = "[ 4 ]") -> str:
    items = ", ".join(f'{{ name: "{n}" data_type: {dtype} dims: {dims} }}' for n in names)
    return f"{kind} [ {items} ]\n"


ADD_SUB_CONFIG = (
    "max_batch_size: 8\n" + _io("input", ["INPUT__0", "INPUT__1"]) + _io("output", ["OUTPUT__0", "OUTPUT__1"])
)


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


def _load(model_dir: Path) -> TorchModel:
    cfg, _ = load_model_config(model_dir)
    autofill_backend_fields(cfg, model_dir.name, model_dir)
    normalize_config(cfg, model_dir.name)
    ctx = LoadContext(model_dir.name, 1, model_dir, model_dir / "1", cfg)
    model = PyTorchBackend().load(ctx)
    assert isinstance(model, TorchModel)
    return model


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


# -- registry and naming rules ---------------------------------------------------------------------


def test_registered_by_backend_name_and_platform(tmp_path: Path) -> None:
    assert isinstance(get_backend("pytorch"), PyTorchBackend)
    md = tmp_path / "m"
    (md / "1").mkdir(parents=True)
    _save_script(AddSub(), md / "1" / "model.pt")
    cfg = parse_config_text('platform: "pytorch_libtorch"', "x")
    autofill_backend_fields(cfg, "m", md)
    assert (cfg.backend, cfg.default_model_filename) == ("pytorch", "model.pt")
    found = parse_config_text("", "x")  # no backend, no platform: found from 1/model.pt
    autofill_backend_fields(found, "m", md)
    assert found.backend == "pytorch"


def test_index_suffix() -> None:
    assert index_suffix("INPUT__0") == 0
    assert index_suffix("my__name__12") == 12
    assert index_suffix("INPUT_0") is None
    assert index_suffix("__3") is None
    assert index_suffix("X__") is None


def test_input_naming_rules() -> None:
    by_name = plan_inputs("m", ["b", "a"], ["a", "b"], False)
    assert (by_name.convention, by_name.index) == (FORWARD_ARGUMENT, {"b": 1, "a": 0})
    by_index = plan_inputs("m", ["IN__1", "IN__0"], ["a", "b"], False)
    assert (by_index.convention, by_index.index) == (NAMED_INDEX, {"IN__1": 1, "IN__0": 0})
    ordered = plan_inputs("m", ["P", "Q"], ["a", "b"], False)
    assert (ordered.convention, ordered.index) == (STRICT_CONFIG_ORDERING, {"P": 0, "Q": 1})
    as_dict = plan_inputs("m", ["X", "Y", "Z"], ["inputs"], True)
    assert as_dict.as_dict and as_dict.arity == 1


@pytest.mark.parametrize(
    ("names", "args", "message"),
    [
        (["a"], ["a", "b"], "lists 1 input(s) (a), but forward() takes 2 (a, b)"),
        (["IN__0", "X__0"], ["a", "b"], "inputs 'IN__0' and 'X__0' both name index 0"),
        (["IN__0", "IN__2"], ["a", "b"], "input 'IN__2' is index 2, but forward() takes 2 argument(s)"),
    ],
)
def test_input_naming_errors(names: list[str], args: list[str], message: str) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        plan_inputs("m", names, args, False)
    assert message in e.value.message
    assert e.value.message.startswith("unable to load model 'm'")


def test_output_naming_rules() -> None:
    assert plan_outputs("m", ["OUTPUT__1", "OUTPUT__0"], 2) == {"OUTPUT__1": 1, "OUTPUT__0": 0}
    assert plan_outputs("m", ["SUM", "DIFF"], None) == {"SUM": 0, "DIFF": 1}
    with pytest.raises(
        InvalidArgumentError, match="'OUTPUT__1' is index 1, but forward\\(\\) returns a single"
    ):
        plan_outputs("m", ["OUTPUT__1"], 1)
    with pytest.raises(InvalidArgumentError, match="'C' is index 2, but forward\\(\\) returns 2 tensors"):
        plan_outputs("m", ["A", "B", "C"], 2)


# -- serving ---------------------------------------------------------------------------------------


def test_index_naming_with_a_tuple_return(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "m", AddSub(), ADD_SUB_CONFIG)
    server = serve()
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), np.float32)
    out = server.infer("m", {"INPUT__0": a, "INPUT__1": b})
    np.testing.assert_allclose(out["OUTPUT__0"], a + b)
    np.testing.assert_allclose(out["OUTPUT__1"], a - b)
    cfg = server.model_config("m")
    assert cfg["platform"] == "pytorch_libtorch" and cfg["backend"] == "pytorch"


def test_forward_argument_names_in_any_config_order(tmp_path: Path, serve: Any) -> None:
    config = "max_batch_size: 0\n" + _io("input", ["b", "a"]) + _io("output", ["DIFF"])
    _write(tmp_path / "repo", "m", Minus(), config)
    server = serve()
    a = np.full(4, 10, np.float32)
    b = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(server.infer("m", {"a": a, "b": b})["DIFF"], a - b)


def test_config_order_when_names_follow_no_rule(tmp_path: Path, serve: Any) -> None:
    config = "max_batch_size: 0\n" + _io("input", ["FIRST", "SECOND"]) + _io("output", ["DIFF"])
    _write(tmp_path / "repo", "m", Minus(), config)
    server = serve()
    a = np.full(4, 10, np.float32)
    b = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(server.infer("m", {"FIRST": a, "SECOND": b})["DIFF"], a - b)


def test_dict_input_and_dict_output(tmp_path: Path, serve: Any) -> None:
    config = "max_batch_size: 4\n"
    config += 'input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] }, '
    config += '{ name: "BIAS" data_type: TYPE_FP32 dims: [ 3 ] optional: true } ]\n'
    config += _io("output", ["SHIFTED", "DOUBLE"], dims="[ 3 ]")
    _write(tmp_path / "repo", "m", DictInOut(), config)
    server = serve()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    bias = np.full((2, 3), 0.5, np.float32)
    out = server.infer("m", {"X": x, "BIAS": bias})
    np.testing.assert_allclose(out["DOUBLE"], 2 * x)
    np.testing.assert_allclose(out["SHIFTED"], x + bias)
    np.testing.assert_allclose(server.infer("m", {"X": x})["SHIFTED"], x)  # the optional input left out


def test_list_output_and_a_traced_module(tmp_path: Path, serve: Any) -> None:
    config = (
        "max_batch_size: 0\n"
        + _io("input", ["x"], dims="[ 2 ]")
        + _io("output", ["Y__0", "Y__1"], dims="[ 2 ]")
    )
    _write(tmp_path / "repo", "listed", ListOut(), config)
    traced = tmp_path / "repo" / "traced"
    (traced / "1").mkdir(parents=True)
    module = torch.jit.trace(Doubler(), torch.ones(1, 3))
    torch.jit.save(module, str(traced / "1" / "model.pt"))
    (traced / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\nmax_batch_size: 4\n'
        + _io("input", ["INPUT__0"], dims="[ 3 ]")
        + _io("output", ["OUTPUT__0"], dims="[ 3 ]")
    )
    server = serve()
    x = np.array([1.0, 2.0], np.float32)
    out = server.infer("listed", {"x": x})
    np.testing.assert_allclose(out["Y__0"], x + 1)
    np.testing.assert_allclose(out["Y__1"], x * 3)
    t = np.arange(6, dtype=np.float32).reshape(2, 3)  # a batch of 2 through a module traced with 1
    np.testing.assert_allclose(server.infer("traced", {"INPUT__0": t})["OUTPUT__0"], 2 * t)


def test_config_dtypes(tmp_path: Path, serve: Any) -> None:
    config = """max_batch_size: 0
input [
  { name: "i" data_type: TYPE_INT64 dims: [ 3 ] },
  { name: "h" data_type: TYPE_FP16 dims: [ 3 ] },
  { name: "z" data_type: TYPE_BOOL dims: [ 3 ] },
  { name: "bf" data_type: TYPE_BF16 dims: [ 3 ] }
]
output [
  { name: "O__0" data_type: TYPE_INT64 dims: [ 3 ] },
  { name: "O__1" data_type: TYPE_FP16 dims: [ 3 ] },
  { name: "O__2" data_type: TYPE_BOOL dims: [ 3 ] },
  { name: "O__3" data_type: TYPE_BF16 dims: [ 3 ] }
]
"""
    _write(tmp_path / "repo", "m", Dtypes(), config)
    server = serve()
    i = np.array([1, -2, 2**40], np.int64)
    h = np.array([0.5, 1.5, -2.0], np.float16)
    z = np.array([True, False, True])
    bf = torch.tensor([1.0, -3.0, 0.25], dtype=torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    out = server.infer("m", {"i": i, "h": h, "z": z, "bf": Tensor("bf", BF16, (3,), array=bf)})
    np.testing.assert_array_equal(out["O__0"], i * 2)
    assert out["O__1"].dtype == np.float16
    np.testing.assert_array_equal(out["O__1"], h + 1)
    np.testing.assert_array_equal(out["O__2"], ~z)
    doubled = torch.from_numpy(out["O__3"].view(np.int16)).view(torch.bfloat16)
    assert doubled.tolist() == [2.0, -6.0, 0.5]


def test_string_tensors_as_lists_of_str(tmp_path: Path, serve: Any) -> None:
    config = "max_batch_size: 4\n" + _io("input", ["TEXT"], "TYPE_STRING", "[ 2 ]")
    config += _io("output", ["LOUD"], "TYPE_STRING", "[ 2 ]")
    md = _write(tmp_path / "repo", "m", Shout(), config)
    server = serve()
    words = np.array([[b"hi", b"there"], ["caf\u00e9".encode(), b"ok"]], dtype=np.object_)
    out = server.infer("m", {"TEXT": words})["LOUD"]
    assert out.shape == (2, 2)
    # UTF-8 both ways (TorchScript's upper() changes ASCII letters only)
    assert out.tolist() == [[b"HI!", b"THERE!"], ["CAF\u00e9!".encode(), b"OK!"]]
    with pytest.raises(InvalidArgumentError, match="element 1 is not UTF-8 text"):
        server.infer("m", {"TEXT": np.array([[b"a", b"\xff"]], dtype=np.object_)})
    inst = _load(md).create_instance(InstanceSpec("m_0", "CPU", 0))
    one = np.array([[b"a", b"b"]], dtype=np.object_)
    two = np.array([[b"c", b"d"], [b"e", b"f"]], dtype=np.object_)
    r1, r2 = inst.execute([_req("1", 1, TEXT=one), _req("2", 2, TEXT=two)])
    assert r1.outputs[0].array.tolist() == [[b"A!", b"B!"]]
    assert r2.outputs[0].array.tolist() == [[b"C!", b"D!"], [b"E!", b"F!"]]


def test_requests_are_stacked_run_once_and_split(tmp_path: Path) -> None:
    model = _load(_write(tmp_path, "m", AddSub(), ADD_SUB_CONFIG))
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    calls: list[list[tuple[int, ...]]] = []
    module = inst.program.module

    def counting(*args: Any) -> Any:
        calls.append([tuple(a.shape) for a in args])
        return module(*args)

    inst.program.module = counting
    rng = np.random.default_rng(0)
    arrays = [(rng.random((n, 4), dtype=np.float32), rng.random((n, 4), dtype=np.float32)) for n in (1, 3, 2)]
    reqs = [_req(f"r{i}", a.shape[0], INPUT__0=a, INPUT__1=b) for i, (a, b) in enumerate(arrays)]
    responses = inst.execute(reqs)
    assert calls == [[(6, 4), (6, 4)]]
    assert [r.id for r in responses] == ["r0", "r1", "r2"]
    for resp, (a, b) in zip(responses, arrays, strict=True):
        assert resp.error is None
        outs = {t.name: t.array for t in resp.outputs}
        np.testing.assert_allclose(outs["OUTPUT__0"], a + b, rtol=1e-6)
        np.testing.assert_allclose(outs["OUTPUT__1"], a - b, rtol=1e-6)
    assert inst.last_timings[1] > 0
    r1, r2 = inst.execute([_req("1", outputs=["OUTPUT__1"], **_ab()), _req("2", **_ab())])  # type: ignore[arg-type]
    assert [t.name for t in r1.outputs] == ["OUTPUT__1"]
    assert [t.name for t in r2.outputs] == ["OUTPUT__0", "OUTPUT__1"]
    inst.unload()


def _ab() -> dict[str, np.ndarray[Any, Any]]:
    a = np.ones((1, 4), np.float32)
    return {"INPUT__0": a, "INPUT__1": a}


def test_requests_of_different_shapes_run_in_separate_groups(tmp_path: Path) -> None:
    config = (
        "max_batch_size: 8\n" + _io("input", ["X"], dims="[ -1 ]") + _io("output", ["Y"], dims="[ 2, -1 ]")
    )
    model = _load(_write(tmp_path, "m", Pairs(), config))
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    x4 = np.arange(4, dtype=np.float32).reshape(1, 4)
    x6 = np.arange(12, dtype=np.float32).reshape(2, 6)
    x3 = np.arange(3, dtype=np.float32).reshape(1, 3)  # odd: this group fails at run time
    responses = inst.execute([_req("a", 1, X=x4), _req("b", 2, X=x6), _req("c", 1, X=x3), _req("d", 1, X=x4)])
    assert [r.id for r in responses] == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(responses[0].outputs[0].array, x4.reshape(1, 2, 2))
    np.testing.assert_array_equal(responses[1].outputs[0].array, x6.reshape(2, 2, 3))
    np.testing.assert_array_equal(responses[3].outputs[0].array, x4.reshape(1, 2, 2))
    err = responses[2].error
    assert isinstance(err, InferdError) and "PyTorch execute failure in model 'm'" in err.message


def test_dynamic_batching_through_the_server(tmp_path: Path, serve: Any) -> None:
    config = (
        ADD_SUB_CONFIG
        + "dynamic_batching { max_queue_delay_microseconds: 2000000 preferred_batch_size: [ 4 ] }\n"
    )
    config += "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    _write(tmp_path / "repo", "m", AddSub(), config)
    server = serve()
    rng = np.random.default_rng(1)
    data = [(rng.random((1, 4), dtype=np.float32), rng.random((1, 4), dtype=np.float32)) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda ab: server.infer("m", {"INPUT__0": ab[0], "INPUT__1": ab[1]}), data))
    for out, (a, b) in zip(results, data, strict=True):
        np.testing.assert_allclose(out["OUTPUT__0"], a + b)
    stats = server.statistics("m")["model_stats"][0]
    assert stats["inference_count"] == 4
    assert stats["execution_count"] == 1


def test_instances_answer_concurrent_requests(tmp_path: Path, serve: Any) -> None:
    _write(
        tmp_path / "repo", "m", AddSub(), ADD_SUB_CONFIG + "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    )
    server = serve()
    rng = np.random.default_rng(2)
    data = [rng.random((1, 4), dtype=np.float32) for _ in range(32)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda a: server.infer("m", {"INPUT__0": a, "INPUT__1": a})["OUTPUT__0"], data))
    for a, out in zip(data, outs, strict=True):
        np.testing.assert_allclose(out, 2 * a)


def test_reshape_on_inputs_and_outputs(tmp_path: Path, serve: Any) -> None:
    config = """max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
"""
    _write(tmp_path / "repo", "m", Doubler(), config)
    server = serve()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = server.infer("m", {"INPUT__0": x})["OUTPUT__0"]
    assert out.shape == (2, 4)
    np.testing.assert_allclose(out, 2 * x)


def test_wrong_inputs_and_runtime_failures_keep_the_model_serving(tmp_path: Path, serve: Any) -> None:
    config = (
        "max_batch_size: 8\n" + _io("input", ["X"], dims="[ -1 ]") + _io("output", ["Y"], dims="[ 2, -1 ]")
    )
    _write(tmp_path / "repo", "m", Pairs(), config)
    server = serve()
    with pytest.raises(InferdError, match="PyTorch execute failure"):
        server.infer("m", {"X": np.ones((1, 3), np.float32)})
    with pytest.raises(InferdError, match="data-type is 'INT32', but model 'm' expects 'FP32'"):
        server.infer("m", {"X": np.ones((1, 4), np.int32)})
    out = server.infer("m", {"X": np.ones((1, 4), np.float32)})["Y"]
    assert out.shape == (1, 2, 2)


def test_an_output_dtype_that_contradicts_the_config_fails_the_request(tmp_path: Path, serve: Any) -> None:
    config = "max_batch_size: 0\n" + _io("input", ["x"]) + _io("output", ["y"], dtype="TYPE_INT32")
    _write(tmp_path / "repo", "m", Doubler(), config)
    server = serve()
    with pytest.raises(
        InferdError, match=r"output 'y' of model 'm' is torch\.float32, but the configuration says TYPE_INT32"
    ):
        server.infer("m", {"x": np.ones(4, np.float32)})


# -- load failures ---------------------------------------------------------------------------------


def test_corrupt_and_missing_files_leave_those_models_unavailable(tmp_path: Path, serve: Any) -> None:
    repo = tmp_path / "repo"
    _write(repo, "good", AddSub(), ADD_SUB_CONFIG)
    _write(repo, "corrupt", b"this is not a zip archive", ADD_SUB_CONFIG)
    state_dict = repo / "state_dict"
    _write(repo, "state_dict", None, ADD_SUB_CONFIG)
    torch.save(torch.nn.Linear(4, 4).state_dict(), str(state_dict / "1" / "model.pt"))
    _write(repo, "missing", None, ADD_SUB_CONFIG)
    server = serve()
    for name in ("corrupt", "state_dict"):
        entry = _state(server, name)
        assert entry["state"] == "UNAVAILABLE", entry
        assert "is not a loadable TorchScript module" in entry["reason"], entry
        assert f"{name}/1/model.pt" in entry["reason"] and "torch.jit.save" in entry["reason"], entry
    missing = _state(server, "missing")
    assert missing["state"] == "UNAVAILABLE"
    assert "unable to find" in missing["reason"] and "missing/1/model.pt" in missing["reason"]
    assert _state(server, "good")["state"] == "READY"
    assert server.infer("good", _ab())["OUTPUT__0"].shape == (1, 4)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (
            "max_batch_size: 8\n" + _io("input", ["INPUT__0"]) + _io("output", ["OUTPUT__0"]),
            "the configuration lists 1 input(s) (INPUT__0), but forward() takes 2 (a, b)",
        ),
        (
            "max_batch_size: 8\n"
            + _io("input", ["INPUT__0", "INPUT__1"])
            + _io("output", ["OUTPUT__0", "OUTPUT__2"]),
            "output 'OUTPUT__2' is index 2, but forward() returns 2 tensors",
        ),
        (
            "max_batch_size: 8\n"
            + _io("input", ["INPUT__0", "INPUT__1"], dtype="TYPE_STRING")
            + _io("output", ["OUTPUT__0"]),
            "input 'INPUT__0' is TYPE_STRING in the configuration, but forward() argument 'a' takes a Tensor",
        ),
        (
            "max_batch_size: 8\n"
            + _io("input", ["a", "b"], dtype="TYPE_UINT32")
            + _io("output", ["OUTPUT__0"]),
            "input 'a' has datatype TYPE_UINT32, which the pytorch backend does not serve",
        ),
        (
            "max_batch_size: 8\n"
            + 'input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "b" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]\n'
            + _io("output", ["OUTPUT__0"]),
            "input 'b' is optional, but forward() takes positional tensors",
        ),
        (
            "max_batch_size: 8\n"
            + _io("input", ["a", "b"])
            + 'parameters { key: "INFERENCE_MODE" value: { string_value: "maybe" } }\n'
            + _io("output", ["OUTPUT__0"]),
            "parameter 'INFERENCE_MODE' must be 'true' or 'false', not 'maybe'",
        ),
    ],
)
def test_a_config_that_contradicts_the_module_leaves_the_model_unavailable(
    tmp_path: Path, serve: Any, config: str, reason: str
) -> None:
    _write(tmp_path / "repo", "bad", AddSub(), config)
    _write(tmp_path / "repo", "good", AddSub(), ADD_SUB_CONFIG)
    server = serve()
    bad = _state(server, "bad")
    assert bad["state"] == "UNAVAILABLE"
    assert reason in bad["reason"], bad["reason"]
    assert bad["reason"].startswith("Invalid argument:"), bad["reason"]
    assert _state(server, "good")["state"] == "READY"


def test_inputs_and_outputs_must_be_listed(tmp_path: Path, serve: Any) -> None:
    _write(tmp_path / "repo", "m", AddSub(), "max_batch_size: 8\n")
    server = serve()
    entry = _state(server, "m")
    assert entry["state"] == "UNAVAILABLE"
    assert "must specify one or more 'input'" in entry["reason"]
    assert "cannot read tensors from a TorchScript module" in entry["reason"]


def test_kind_gpu_without_cuda_is_a_clear_error(tmp_path: Path) -> None:
    model = _load(_write(tmp_path, "m", AddSub(), ADD_SUB_CONFIG))
    spec = InstanceSpec("m_0", "GPU", 0)
    if torch.cuda.is_available():
        inst = model.create_instance(spec)
        assert inst.device == "cuda:0"
        (resp,) = inst.execute([_req("1", **_ab())])  # type: ignore[arg-type]
        np.testing.assert_allclose(resp.outputs[0].array, 2 * np.ones((1, 4)))
    else:
        with pytest.raises(InferdError, match=r"is KIND_GPU, but torch .* finds no CUDA device"):
            model.create_instance(spec)


# -- settings --------------------------------------------------------------------------------------


def test_settings_from_parameters() -> None:
    cfg = parse_config_text("", "x")
    default = torch_settings(cfg, instances=2, cpus=2)
    assert (default.inference_mode, default.optimized_execution, default.intra_op_threads) == (True, True, 1)
    assert torch_settings(cfg, instances=1, cpus=8).intra_op_threads == 8
    cfg = parse_config_text(
        'parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }\n'
        'parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } }\n'
        'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "3" } }\n',
        "x",
    )
    s = torch_settings(cfg, instances=2, cpus=2)
    assert (s.inference_mode, s.optimized_execution, s.intra_op_threads) == (False, False, 3)
    bad = parse_config_text(
        'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "many" } }', "x"
    )
    with pytest.raises(InvalidArgumentError, match="must be a non-negative integer"):
        torch_settings(bad, instances=1)


def test_no_grad_and_unoptimised_execution_serve(tmp_path: Path, serve: Any) -> None:
    params = (
        'parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }\n'
        'parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } }\n'
    )
    _write(tmp_path / "repo", "m", AddSub(), ADD_SUB_CONFIG + params)
    server = serve()
    np.testing.assert_allclose(server.infer("m", _ab())["OUTPUT__1"], np.zeros((1, 4)))


# -- torch.export programs -------------------------------------------------------------------------


def _export(module: torch.nn.Module, path: Path, *example: torch.Tensor, dynamic_batch: bool = True) -> None:
    dynamic = None
    if dynamic_batch:
        batch = torch.export.Dim("batch", min=1, max=64)
        dynamic = tuple({0: batch} for _ in example)
    program = torch.export.export(module, example, dynamic_shapes=dynamic)
    torch.export.save(program, str(path))


def test_an_exported_program_serves_and_batches(tmp_path: Path, serve: Any) -> None:
    md = _write(
        tmp_path / "repo", "m", None, ADD_SUB_CONFIG.replace("INPUT__0", "a").replace("INPUT__1", "b")
    )
    _export(AddSub(), md / "1" / "model.pt2", torch.ones(2, 4), torch.ones(2, 4))
    server = serve()
    assert _state(server, "m")["state"] == "READY", _state(server, "m")
    for n in (1, 3):
        a = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        out = server.infer("m", {"a": a, "b": np.ones((n, 4), np.float32)})
        np.testing.assert_allclose(out["OUTPUT__0"], a + 1)
        np.testing.assert_allclose(out["OUTPUT__1"], a - 1)


def test_exported_program_by_default_model_filename(tmp_path: Path) -> None:
    md = _write(tmp_path, "m", None, 'default_model_filename: "prog.pt2"\n' + ADD_SUB_CONFIG)
    _export(AddSub(), md / "1" / "prog.pt2", torch.ones(2, 4), torch.ones(2, 4))
    model = _load(md)
    assert model.path.name == "prog.pt2"
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    (resp,) = inst.execute([_req("1", **_ab())])  # type: ignore[arg-type]
    np.testing.assert_allclose(resp.outputs[0].array, 2 * np.ones((1, 4)))


@pytest.mark.parametrize(
    ("config", "dynamic", "reason"),
    [
        (ADD_SUB_CONFIG, False, "input 'INPUT__0': the program was exported with a fixed first dimension 2"),
        (
            ADD_SUB_CONFIG.replace("TYPE_FP32", "TYPE_FP64"),
            True,
            "input 'INPUT__0' is TYPE_FP64 in the configuration, but the program takes torch.float32",
        ),
        (
            ADD_SUB_CONFIG.replace("[ 4 ]", "[ 5 ]"),
            True,
            "input 'INPUT__0' dimension 1 is 5 in the configuration, but the program was exported with a fixed 4",
        ),
        (
            ADD_SUB_CONFIG.replace("[ 4 ]", "[ 2, 2 ]"),
            True,
            "input 'INPUT__0' has 3 dimension(s) in the configuration (batch + [2, 2]), but the program takes 2",
        ),
    ],
)
def test_an_exported_program_that_contradicts_the_config(
    tmp_path: Path, serve: Any, config: str, dynamic: bool, reason: str
) -> None:
    md = _write(tmp_path / "repo", "bad", None, config)
    _export(AddSub(), md / "1" / "model.pt2", torch.ones(2, 4), torch.ones(2, 4), dynamic_batch=dynamic)
    (md / "1" / "junk.pt2").write_bytes(b"never read")
    corrupt = _write(tmp_path / "repo", "corrupt", None, ADD_SUB_CONFIG)
    (corrupt / "1" / "model.pt2").write_bytes(b"not a program")
    server = serve()
    bad = _state(server, "bad")
    assert bad["state"] == "UNAVAILABLE"
    assert reason in bad["reason"], bad["reason"]
    entry = _state(server, "corrupt")
    assert entry["state"] == "UNAVAILABLE"
    assert (
        "is not a loadable torch.export program" in entry["reason"] and "torch.export.save" in entry["reason"]
    )
