"""PyTorch models served by `inferd serve`: TorchScript and torch.export, over tritonclient HTTP and gRPC.

A tmp repository holds a batching add_sub (``INPUT__0``/``OUTPUT__0`` naming, dynamic batching),
a module taking its inputs by forward() argument names and returning a dict, a ``model.pt2``
program, the example ``digits_torch`` (examples/build_models.py) with its labels, and a corrupt
``model.pt`` that must leave only itself UNAVAILABLE.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import REPO_ROOT, InferdProcess, grpc_client, http_client, serving
from tritonclient.utils import InferenceServerException

from repo_paths import load_script

pytestmark = pytest.mark.timeout(120)


def _build_models() -> Any:
    return load_script(REPO_ROOT / "examples" / "build_models.py", "inferd_example_build_torch")


build_models = _build_models()


class AddSub(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor, factor: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"scaled": x * factor, "total": (x * factor).sum(dim=1, keepdim=True)}


def _io(kind: str, specs: list[tuple[str, str, str]]) -> str:
    items = ", ".join(f'{{ name: "{n}" data_type: {t} dims: {d} }}' for n, t, d in specs)
    return f"{kind} [ {items} ]\n"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("torch") / "models"
    # the example first: the builder writes only into a folder of its own (or empty)
    assert build_models.build(repo, only={"digits_torch"}) == ["digits_torch"]

    def model(name: str, config: str, filename: str = "model.pt") -> Path:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        return repo / name / "1" / filename

    add_sub = 'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
    add_sub += _io("input", [("INPUT__0", "TYPE_FP32", "[ 4 ]"), ("INPUT__1", "TYPE_FP32", "[ 4 ]")])
    add_sub += _io("output", [("OUTPUT__0", "TYPE_FP32", "[ 4 ]"), ("OUTPUT__1", "TYPE_FP32", "[ 4 ]")])
    add_sub += "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    torch.jit.save(torch.jit.script(AddSub()), str(model("torch_add_sub", add_sub)))

    scale = 'backend: "pytorch"\nmax_batch_size: 0\n'
    scale += _io("input", [("factor", "TYPE_INT64", "[ -1 ]"), ("x", "TYPE_INT64", "[ -1, 3 ]")])
    scale += _io("output", [("total", "TYPE_INT64", "[ -1, 1 ]"), ("scaled", "TYPE_INT64", "[ -1, 3 ]")])
    torch.jit.save(torch.jit.script(Scale()), str(model("torch_scale", scale)))

    exported = 'backend: "pytorch"\nmax_batch_size: 8\n'
    exported += _io("input", [("a", "TYPE_FP32", "[ 4 ]"), ("b", "TYPE_FP32", "[ 4 ]")])
    exported += _io("output", [("SUM", "TYPE_FP32", "[ 4 ]"), ("DIFF", "TYPE_FP32", "[ 4 ]")])
    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(
        AddSub(), (torch.ones(2, 4), torch.ones(2, 4)), dynamic_shapes=({0: batch}, {0: batch})
    )
    torch.export.save(program, str(model("torch_exported", exported, "model.pt2")))

    model("torch_corrupt", add_sub).write_bytes(b"PK\x03\x04 not really a TorchScript archive")
    return repo


@pytest.fixture(scope="module")
def torch_server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    with serving(repository, tmp_path_factory.mktemp("log") / "inferd-torch.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def http(torch_server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    with http_client(torch_server) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(torch_server: InferdProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpc_client(torch_server) as c:
        yield c


def _http_input(name: str, arr: np.ndarray[Any, Any]) -> Any:
    t = httpclient.InferInput(name, list(arr.shape), httpclient.np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr, binary_data=True)
    return t


def _grpc_input(name: str, arr: np.ndarray[Any, Any]) -> Any:
    t = grpcclient.InferInput(name, list(arr.shape), grpcclient.np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr)
    return t


def test_models_are_ready_and_the_corrupt_one_says_why(http: httpclient.InferenceServerClient) -> None:
    for name in ("torch_add_sub", "torch_scale", "torch_exported", "digits_torch"):
        assert http.is_model_ready(name), name
    assert not http.is_model_ready("torch_corrupt")
    index = {e["name"]: e for e in http.get_model_repository_index()}
    corrupt = index["torch_corrupt"]
    assert corrupt["state"] == "UNAVAILABLE"
    assert "is not a loadable TorchScript module" in corrupt["reason"]
    assert "torch.jit.save" in corrupt["reason"]
    cfg = http.get_model_config("torch_add_sub")
    assert (cfg["platform"], cfg["backend"], cfg["default_model_filename"]) == (
        "pytorch_libtorch",
        "pytorch",
        "model.pt",
    )


def test_add_sub_over_http_with_concurrent_requests_batched(http: httpclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(0)
    data = [rng.random((1, 4), dtype=np.float32) for _ in range(16)]

    pending = [
        http.async_infer("torch_add_sub", [_http_input("INPUT__0", a), _http_input("INPUT__1", a)])
        for a in data
    ]
    results = [p.get_result() for p in pending]
    for a, r in zip(data, results, strict=True):
        np.testing.assert_allclose(r.as_numpy("OUTPUT__0"), 2 * a)
        np.testing.assert_allclose(r.as_numpy("OUTPUT__1"), np.zeros_like(a))
    stats = http.get_inference_statistics("torch_add_sub")["model_stats"][0]
    assert int(stats["inference_count"]) == 16
    assert int(stats["execution_count"]) <= 16


def test_add_sub_over_grpc(grpc: grpcclient.InferenceServerClient) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 2.0, np.float32)
    r = grpc.infer(
        "torch_add_sub",
        [_grpc_input("INPUT__0", a), _grpc_input("INPUT__1", b)],
        outputs=[grpcclient.InferRequestedOutput("OUTPUT__1")],
    )
    np.testing.assert_allclose(r.as_numpy("OUTPUT__1"), a - b)
    assert r.as_numpy("OUTPUT__0") is None


def test_forward_argument_names_and_a_dict_return(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    factor = np.array([3], np.int64)
    r = http.infer("torch_scale", [_http_input("x", x), _http_input("factor", factor)])
    np.testing.assert_array_equal(r.as_numpy("scaled"), 3 * x)
    np.testing.assert_array_equal(r.as_numpy("total"), (3 * x).sum(axis=1, keepdims=True))
    g = grpc.infer("torch_scale", [_grpc_input("x", x), _grpc_input("factor", factor)])
    np.testing.assert_array_equal(g.as_numpy("scaled"), 3 * x)


def test_an_exported_program(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    a = np.arange(20, dtype=np.float32).reshape(5, 4)
    b = np.ones((5, 4), np.float32)
    r = http.infer("torch_exported", [_http_input("a", a), _http_input("b", b)])
    np.testing.assert_allclose(r.as_numpy("SUM"), a + b)
    g = grpc.infer("torch_exported", [_grpc_input("a", a[:1]), _grpc_input("b", b[:1])])
    np.testing.assert_allclose(g.as_numpy("DIFF"), a[:1] - b[:1])


def test_errors_answer_and_the_models_keep_serving(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    wrong = np.ones((1, 4), np.float64)
    with pytest.raises(InferenceServerException, match="expects 'FP32'"):
        http.infer("torch_add_sub", [_http_input("INPUT__0", wrong), _http_input("INPUT__1", wrong)])
    with pytest.raises(InferenceServerException, match="'torch_corrupt' has no available versions"):
        grpc.infer("torch_corrupt", [_grpc_input("INPUT__0", wrong), _grpc_input("INPUT__1", wrong)])
    # a shape the module cannot multiply: the module's own error, the server goes on
    x = np.ones((2, 3), np.int64)
    with pytest.raises(InferenceServerException, match="PyTorch execute failure"):
        http.infer("torch_scale", [_http_input("x", x), _http_input("factor", np.array([1, 2], np.int64))])
    ok = np.ones((1, 4), np.float32)
    r = grpc.infer("torch_add_sub", [_grpc_input("INPUT__0", ok), _grpc_input("INPUT__1", ok)])
    np.testing.assert_allclose(r.as_numpy("OUTPUT__0"), 2 * ok)


def test_the_digits_example_classifies(http: httpclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(7)
    x = rng.random((3, 1, 8, 8), dtype=np.float32)
    expected = build_models.family("digits").digits_torch_module()(torch.from_numpy(x)).detach().numpy()
    r = http.infer(
        "digits_torch",
        [_http_input("INPUT__0", x)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True, class_count=2)],
    )
    top = r.as_numpy("OUTPUT__0")
    assert top.shape == (3, 2)
    for row, scores in zip(top, expected, strict=True):
        score, index, label = row[0].decode().split(":")
        assert int(index) == int(np.argmax(scores)) and label == index
        assert float(score) == pytest.approx(float(scores.max()), rel=1e-5)
    full = http.infer("digits_torch", [_http_input("INPUT__0", x)]).as_numpy("OUTPUT__0")
    np.testing.assert_allclose(full, expected, rtol=1e-5, atol=1e-6)
