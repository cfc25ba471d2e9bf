"""The public API: a sorted, complete ``__all__``, and the in-process Server on the reference models."""

from __future__ import annotations

import ast
import importlib.metadata
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import inferd
from inferd import (
    ErrorCode,
    InferdError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    Server,
    ServerOptions,
)
from repo_paths import REFERENCE_MODELS

INIT = Path(inferd.__file__)


# -- __all__ -------------------------------------------------------------------------------------


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """The module's statements, with those of its ``if TYPE_CHECKING:`` blocks: a name served
    lazily by the module's ``__getattr__`` is imported there for the type checker."""
    out: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            out.extend(node.body)
        else:
            out.append(node)
    return out


def _public_names_of_init() -> set[str]:
    """Names ``inferd/__init__.py`` binds at top level that are not private."""
    names: set[str] = set()
    for node in _top_level(ast.parse(INIT.read_text())):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return {n for n in names if not n.startswith("_") or n == "__version__"} - {"__all__"}


def test_all_is_sorted() -> None:
    assert inferd.__all__ == sorted(inferd.__all__)


def test_every_name_in_all_exists() -> None:
    for name in inferd.__all__:
        assert hasattr(inferd, name), name


def test_nothing_public_is_missing_from_all() -> None:
    assert set(inferd.__all__) == _public_names_of_init()
    assert len(inferd.__all__) == len(set(inferd.__all__))


def test_errors_are_exported() -> None:
    for code in ErrorCode:
        cls = next(
            getattr(inferd, n) for n in inferd.__all__ if getattr(getattr(inferd, n), "code", None) is code
        )
        assert issubclass(cls, InferdError)


def test_no_error_shadows_a_builtin_or_asyncio_name() -> None:
    """``except CancelledError`` next to asyncio code must mean asyncio's: ours is RequestCancelledError."""
    import asyncio
    import builtins

    assert inferd.RequestCancelledError.code is ErrorCode.CANCELLED
    errors = {n for n in inferd.__all__ if n.endswith("Error")}
    assert errors.isdisjoint(dir(asyncio)) and errors.isdisjoint(dir(builtins))


def test_version() -> None:
    assert inferd.__version__ == importlib.metadata.version("inferd")


def test_server_options_defaults() -> None:
    opts = ServerOptions()
    assert (opts.id, opts.model_control_mode, opts.http_port, opts.grpc_port, opts.metrics_port) == (
        "triton",
        "none",
        8000,
        8001,
        8002,
    )


# -- the in-process server -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with Server(REFERENCE_MODELS, http_port=0) as s:
        yield s


@pytest.fixture(scope="module")
def reference(request: pytest.FixtureRequest) -> dict[str, Any]:
    answers: dict[str, str] = request.getfixturevalue("reference_answers")
    return {k: json.loads(v) for k, v in answers.items() if v.startswith(("{", "["))}


def _ab() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    return a, np.full((1, 16), 2, dtype=np.float32)


def test_health_and_metadata(server: Server, reference: dict[str, Any]) -> None:
    assert server.live() and server.ready()
    meta = server.metadata()
    ref = reference["server_metadata"]
    assert (meta["name"], meta["version"]) == (ref["name"], ref["version"])
    assert set(meta["extensions"]) <= set(ref["extensions"])


def test_repository_index_is_the_references(server: Server, reference: dict[str, Any]) -> None:
    assert server.repository_index() == reference["repository_index"]
    assert server.repository_index(ready=True) == reference["repository_index"]


@pytest.mark.parametrize("name", ["add_sub", "ensemble_add_sub"])
def test_model_metadata_is_the_references(server: Server, reference: dict[str, Any], name: str) -> None:
    key = "model_metadata" if name == "add_sub" else "model_metadata_ensemble"
    assert server.model_metadata(name) == reference[key]
    assert server.model_ready(name)
    assert server.model_ready(name, "1")


@pytest.mark.parametrize(
    "name", ["add_sub", "mul_fp32", "identity_fp32", "identity_bytes", "batched_sleep", "ensemble_add_sub"]
)
def test_model_config_is_the_references(server: Server, reference: dict[str, Any], name: str) -> None:
    assert server.model_config(name) == reference[f"model_config_{name}"]


def test_infer_add_sub(server: Server) -> None:
    a, b = _ab()
    out = server.infer("add_sub", {"INPUT0": a, "INPUT1": b})
    assert set(out) == {"OUTPUT0", "OUTPUT1"}
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)


def test_infer_one_output_of_a_version(server: Server) -> None:
    a, b = _ab()
    out = server.infer("add_sub", {"INPUT0": a, "INPUT1": b}, outputs=["OUTPUT1"], model_version="1")
    assert list(out) == ["OUTPUT1"]


def test_infer_ensemble(server: Server) -> None:
    a, b = _ab()
    out = server.infer("ensemble_add_sub", {"INPUT0": a, "INPUT1": b}, request_id="e1")
    np.testing.assert_array_equal(out["OUTPUT0"], (a + b) * (a - b))
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)
    assert server.statistics("ensemble_add_sub")["model_stats"][0]["inference_count"] >= 1


@pytest.mark.parametrize(
    "values",
    [
        np.array(["ab", "c", "é"]),
        np.array([b"ab", b"\x00\xff"], dtype=np.object_),
        np.array(["x", b"y"], dtype=np.object_),
    ],
    ids=["str", "bytes", "mixed"],
)
def test_infer_bytes(server: Server, values: np.ndarray[Any, Any]) -> None:
    out = server.infer("identity_bytes", {"INPUT0": values})["OUTPUT0"]
    expected = [v if isinstance(v, bytes) else str(v).encode() for v in values.tolist()]
    assert out.tolist() == expected


def test_infer_batched(server: Server) -> None:
    x = np.ones((3, 4), dtype=np.float32)
    out = server.infer("batched_sleep", {"INPUT0": x})
    np.testing.assert_array_equal(out["OUTPUT0"], x)
    assert out["BATCH_SIZE"].shape == (3, 1)
    assert out["BATCH_SIZE"].dtype == np.int32


def test_infer_errors_are_inferd_errors_with_the_reference_texts(
    server: Server, reference_errors: dict[str, int | None]
) -> None:
    a, b = _ab()
    cases: list[tuple[str, dict[str, Any], dict[str, Any], type[InferdError], str]] = [
        ("nope", {"INPUT0": a}, {}, NotFoundError, "Request for unknown model: 'nope' is not found"),
        (
            "add_sub",
            {"INPUT0": a, "INPUT1": b},
            {"model_version": "7"},
            NotFoundError,
            "Request for unknown model: 'add_sub' version 7 is not found",
        ),
        (
            "add_sub",
            {"INPUTX": a, "INPUT1": b},
            {},
            InvalidArgumentError,
            "unexpected inference input 'INPUTX' for model 'add_sub'",
        ),
        (
            "add_sub",
            {"INPUT0": a, "INPUT1": b},
            {"outputs": ["OUTPUTX"]},
            InvalidArgumentError,
            "unexpected inference output 'OUTPUTX' for model 'add_sub'",
        ),
        (
            "add_sub",
            {"INPUT0": a[:, :15], "INPUT1": b},
            {},
            InvalidArgumentError,
            "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,16], "
            "got [1,15]. NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
            "to be prepended to each input shape. If you want to specify the full shape including the batch dim "
            "in your input dims config, try setting max_batch_size to zero. See the model configuration docs for "
            "more info on max_batch_size.",
        ),
        (
            "add_sub",
            {"INPUT0": a.astype(np.int32), "INPUT1": b},
            {"request_id": "g-1"},
            InvalidArgumentError,
            "[request id: g-1] inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'",
        ),
        (
            "add_sub",
            {"INPUT0": np.zeros((65, 16), np.float32), "INPUT1": np.zeros((65, 16), np.float32)},
            {},
            InvalidArgumentError,
            "[request id: <id_unknown>] inference request batch-size must be <= 64 for 'add_sub'",
        ),
    ]
    for model, inputs, kwargs, cls, text in cases:
        with pytest.raises(InferdError) as info:
            server.infer(model, inputs, **kwargs)
        assert type(info.value) is cls
        assert info.value.message == text
        assert text in reference_errors
        if reference_errors[text] is not None:
            assert info.value.code.http_status == reference_errors[text]


def test_statistics(server: Server) -> None:
    a, b = _ab()
    server.infer("mul_fp32", {"INPUT0": a, "INPUT1": b})
    (stats,) = server.statistics("mul_fp32", "1")["model_stats"]
    assert stats["name"] == "mul_fp32" and stats["execution_count"] >= 1
    with pytest.raises(InvalidArgumentError, match="requested model 'nope' is not available"):
        server.statistics("nope")


def test_http_serves_the_same_server(server: Server) -> None:
    port = server.http_port
    assert isinstance(port, int) and port > 0
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("add_sub")
        assert client.get_model_metadata("add_sub")["platform"] == "python"
        a, b = _ab()
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32").set_data_from_numpy(a),
            httpclient.InferInput("INPUT1", [1, 16], "FP32").set_data_from_numpy(b, binary_data=False),
        ]
        result = client.infer("add_sub", inputs, request_id="h1")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert result.get_response()["id"] == "h1"
        strings = np.array([b"ab", b"c"], dtype=np.object_)
        sin = httpclient.InferInput("INPUT0", [2], "BYTES").set_data_from_numpy(strings)
        assert client.infer("identity_bytes", [sin]).as_numpy("OUTPUT0").tolist() == [b"ab", b"c"]
        with pytest.raises(InferenceServerException) as info:
            client.infer("nope", inputs)
        assert "Request for unknown model: 'nope' is not found" in str(info.value)
    finally:
        client.close()


def test_server_without_http_and_before_start() -> None:
    s = Server(REFERENCE_MODELS / "does-not-exist")
    assert s.http_port is None
    with pytest.raises(InternalError, match="the server is not started: call start\\(\\) first"):
        s.infer("add_sub", {})
    s.stop()  # stopping a server that never started does nothing


def test_explicit_mode_loads_and_unloads_in_process() -> None:
    with Server(REFERENCE_MODELS, model_control_mode="explicit", load_model=["identity_fp32"]) as s:
        assert s.model_ready("identity_fp32") and not s.model_ready("add_sub")
        s.load_model("add_sub")
        a = np.ones((1, 16), np.float32)
        assert s.infer("add_sub", {"INPUT0": a, "INPUT1": a})["OUTPUT0"].tolist() == (a + a).tolist()
        s.unload_model("add_sub")
        assert not s.model_ready("add_sub")
        entry = next(m for m in s.repository_index() if m["name"] == "add_sub")
        assert (entry["state"], entry["reason"]) == ("UNAVAILABLE", "unloaded")


def test_workers_is_refused_in_process(tmp_path: Path) -> None:
    """--workers starts processes: an in-process server cannot be several."""
    with pytest.raises(inferd.InvalidArgumentError, match="'workers' is a flag of 'inferd serve'"):
        inferd.Server(tmp_path, workers=2)
