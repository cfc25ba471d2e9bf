"""PyTorch models served by `inferd serve`: TorchScript and torch.export, over tritonclient HTTP and gRPC.

A tmp repository holds a module taking its inputs by forward() argument names and returning a dict,
a ``model.pt2`` program and the example ``digits_torch`` (examples/build_models.py) with its labels.
What PyTorch does as every native backend does (a batching add_sub with ``INPUT__0``/``OUTPUT__0``
naming over HTTP and gRPC, metadata, a corrupt ``model.pt``, bad inputs) is tested in
test_e2e_native_backends.py.
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

from native_backends import grpc_input, http_input, io_config, version_folder
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


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("torch") / "models"
    # the example first: the builder writes only into a folder of its own (or empty)
    assert build_models.build(repo, only={"digits_torch"}) == ["digits_torch"]

    scale = 'backend: "pytorch"\nmax_batch_size: 0\n'
    scale += io_config("input", [("factor", "TYPE_INT64", "[ -1 ]"), ("x", "TYPE_INT64", "[ -1, 3 ]")])
    scale += io_config(
        "output", [("total", "TYPE_INT64", "[ -1, 1 ]"), ("scaled", "TYPE_INT64", "[ -1, 3 ]")]
    )
    torch.jit.save(torch.jit.script(Scale()), str(version_folder(repo, "torch_scale", scale) / "model.pt"))

    exported = 'backend: "pytorch"\nmax_batch_size: 8\n'
    exported += io_config("input", [("a", "TYPE_FP32", "[ 4 ]"), ("b", "TYPE_FP32", "[ 4 ]")])
    exported += io_config("output", [("SUM", "TYPE_FP32", "[ 4 ]"), ("DIFF", "TYPE_FP32", "[ 4 ]")])
    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(
        AddSub(), (torch.ones(2, 4), torch.ones(2, 4)), dynamic_shapes=({0: batch}, {0: batch})
    )
    torch.export.save(program, str(version_folder(repo, "torch_exported", exported) / "model.pt2"))
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


def test_forward_argument_names_and_a_dict_return(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    factor = np.array([3], np.int64)
    r = http.infer("torch_scale", [http_input("x", x), http_input("factor", factor)])
    np.testing.assert_array_equal(r.as_numpy("scaled"), 3 * x)
    np.testing.assert_array_equal(r.as_numpy("total"), (3 * x).sum(axis=1, keepdims=True))
    g = grpc.infer("torch_scale", [grpc_input("x", x), grpc_input("factor", factor)])
    np.testing.assert_array_equal(g.as_numpy("scaled"), 3 * x)


def test_an_exported_program(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    a = np.arange(20, dtype=np.float32).reshape(5, 4)
    b = np.ones((5, 4), np.float32)
    r = http.infer("torch_exported", [http_input("a", a), http_input("b", b)])
    np.testing.assert_allclose(r.as_numpy("SUM"), a + b)
    g = grpc.infer("torch_exported", [grpc_input("a", a[:1]), grpc_input("b", b[:1])])
    np.testing.assert_allclose(g.as_numpy("DIFF"), a[:1] - b[:1])


def test_the_modules_own_error_is_answered_and_the_model_keeps_serving(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    """A shape the module cannot multiply: the module's own error, and the server goes on."""
    x = np.ones((2, 3), np.int64)
    with pytest.raises(InferenceServerException, match="PyTorch execute failure"):
        http.infer("torch_scale", [http_input("x", x), http_input("factor", np.array([1, 2], np.int64))])
    g = grpc.infer("torch_scale", [grpc_input("x", x), grpc_input("factor", np.array([2], np.int64))])
    np.testing.assert_array_equal(g.as_numpy("scaled"), 2 * x)


def test_the_digits_example_classifies(http: httpclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(7)
    x = rng.random((3, 1, 8, 8), dtype=np.float32)
    expected = build_models.family("digits").digits_torch_module()(torch.from_numpy(x)).detach().numpy()
    r = http.infer(
        "digits_torch",
        [http_input("INPUT__0", x)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True, class_count=2)],
    )
    top = r.as_numpy("OUTPUT__0")
    assert top.shape == (3, 2)
    for row, scores in zip(top, expected, strict=True):
        score, index, label = row[0].decode().split(":")
        assert int(index) == int(np.argmax(scores)) and label == index
        assert float(score) == pytest.approx(float(scores.max()), rel=1e-5)
    full = http.infer("digits_torch", [http_input("INPUT__0", x)]).as_numpy("OUTPUT__0")
    np.testing.assert_allclose(full, expected, rtol=1e-5, atol=1e-6)
