"""The ServerCore over a temporary repository: lookups, errors, index, statistics."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.engine.model import ModelState
from inferd.engine.server import EXTENSIONS, PROTOCOL_VERSION
from inferd.engine.server import ServerCore as Server
from inferd.errors import (
    InferdError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from inferd.options import ServerOptions
from inferd.server_config import CoreConfig

T = TypeVar("T")

IDENTITY_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
{extra}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] {output_extra} }} ]
"""
IDENTITY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]

    def finalize(self):
        with open({marker!r}, "w") as f:
            f.write("finalized")
"""
FAILING_INIT = """
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("cannot start")

    def execute(self, requests):
        return []
"""


def _model(repo: Path, name: str, versions: dict[int, str], extra: str = "", output_extra: str = "") -> Path:
    d = repo / name
    d.mkdir(parents=True)
    (d / "config.pbtxt").write_text(IDENTITY_CONFIG.format(name=name, extra=extra, output_extra=output_extra))
    for v, source in versions.items():
        (d / str(v)).mkdir()
        (d / str(v) / "model.py").write_text(source)
    return d


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    good = IDENTITY_MODEL.format(marker=str(tmp_path / "good.finalized"))
    _model(repo, "good", {1: good})
    _model(
        repo,
        "multi",
        {1: IDENTITY_MODEL.format(marker=str(tmp_path / "multi.finalized")), 2: FAILING_INIT},
        extra="version_policy: { all { } }",
    )
    _model(repo, "broken_init", {1: FAILING_INIT})
    bad = repo / "bad_config"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text("name: 'bad_config' max_batch_size: [")
    (bad / "1" / "model.py").write_text(good)
    labelled = _model(repo, "labelled", {1: good}, output_extra='label_filename: "labels.txt"')
    (labelled / "labels.txt").write_text("zero\none\ntwo\n")
    return repo


def run(repo: Path, fn: Callable[[Server], Awaitable[T]], **options: Any) -> T:
    """Start a core Server over ``repo`` on a fresh loop, run ``fn``, stop it."""

    async def main() -> T:
        server = Server(CoreConfig.from_options(ServerOptions(model_repository=[repo], **options)))
        await server.start()
        try:
            return await fn(server)
        finally:
            await server.stop(5)

    return asyncio.run(main())


def _error(fn: Callable[[], Any]) -> InferdError:
    with pytest.raises(InferdError) as info:
        fn()
    return info.value


def test_model_states_after_load(repo: Path) -> None:
    async def check(server: Server) -> None:
        models = server.registry.models
        assert models["good"][1].state is ModelState.READY
        assert models["multi"][1].state is ModelState.READY
        assert models["multi"][2].state is ModelState.UNAVAILABLE
        assert "ValueError: cannot start" in models["multi"][2].reason
        assert models["broken_init"][1].state is ModelState.UNAVAILABLE
        assert "bad_config" in server.registry.failed
        assert "bad_config" not in models

    run(repo, check)


def test_get_model_texts(repo: Path) -> None:
    async def check(server: Server) -> None:
        cases: list[tuple[Callable[[], Any], type[InferdError], str]] = [
            (
                lambda: server.get_model("nope"),
                NotFoundError,
                "Request for unknown model: 'nope' is not found",
            ),
            (
                lambda: server.get_model("nope", "1"),
                NotFoundError,
                "Request for unknown model: 'nope' is not found",
            ),
            (
                lambda: server.get_model("good", "7"),
                NotFoundError,
                "Request for unknown model: 'good' version 7 is not found",
            ),
            (
                lambda: server.get_model("good", "0"),
                NotFoundError,
                "Request for unknown model: 'good' version 0 is not found",
            ),
            (
                lambda: server.get_model("broken_init"),
                NotFoundError,
                "Request for unknown model: 'broken_init' has no available versions",
            ),
            (
                lambda: server.get_model("bad_config"),
                NotFoundError,
                "Request for unknown model: 'bad_config' has no available versions",
            ),
            (
                lambda: server.get_model("bad_config", "1"),
                NotFoundError,
                "Request for unknown model: 'bad_config' has no available versions",
            ),
            (
                lambda: server.get_model("multi", "2"),
                UnavailableError,
                "Request for unknown model: 'multi' version 2 is not at ready state",
            ),
        ]
        for fn, cls, text in cases:
            e = _error(fn)
            assert type(e) is cls, text
            assert e.message == text

    run(repo, check)


def test_get_model_default_is_the_highest_ready_version(repo: Path) -> None:
    async def check(server: Server) -> None:
        assert server.get_model("multi").version == 1
        assert server.get_model("multi", "1").version == 1
        assert server.get_model("good").ready
        assert server.model_ready("good")
        assert server.model_ready("good", "1")
        assert not server.model_ready("good", "2")
        assert not server.model_ready("multi", "2")
        assert not server.model_ready("broken_init")
        assert not server.model_ready("nope")

    run(repo, check)


def test_statistics(repo: Path) -> None:
    async def check(server: Server) -> None:
        req = InferRequest("good", {"INPUT0": Tensor.from_array("INPUT0", np.ones(3, np.float32))})
        resp = await server.infer(req)
        assert resp.error is None
        everything = server.statistics()["model_stats"]
        assert [(s["name"], s["version"]) for s in everything] == [
            ("good", "1"),
            ("labelled", "1"),
            ("multi", "1"),
        ]
        one = server.statistics("good")["model_stats"]
        assert len(one) == 1
        assert one[0]["inference_count"] == 1 and one[0]["execution_count"] == 1
        assert one[0]["inference_stats"]["success"]["count"] == 1
        assert server.statistics("good", "1")["model_stats"][0]["version"] == "1"
        for fn, text in [
            (lambda: server.statistics("nope"), "requested model 'nope' is not available"),
            (lambda: server.statistics("broken_init"), "requested model 'broken_init' is not available"),
            (lambda: server.statistics("bad_config"), "requested model 'bad_config' is not available"),
            (
                lambda: server.statistics("good", "3"),
                "requested model version is not available for model 'good'",
            ),
            (
                lambda: server.statistics("multi", "2"),
                "requested model version is not available for model 'multi'",
            ),
        ]:
            e = _error(fn)
            assert isinstance(e, InvalidArgumentError)
            assert e.message == text

    run(repo, check)


def test_repository_index(repo: Path) -> None:
    async def check(server: Server) -> None:
        index = server.repository_index()
        names = [e["name"] for e in index]
        assert names == sorted(names)
        by_key = {(e["name"], e.get("version")): e for e in index}
        assert by_key[("good", "1")] == {"name": "good", "version": "1", "state": "READY"}
        assert by_key[("multi", "1")]["state"] == "READY"
        assert by_key[("multi", "2")]["state"] == "UNAVAILABLE"
        assert "ValueError: cannot start" in by_key[("multi", "2")]["reason"]
        assert by_key[("broken_init", "1")]["state"] == "UNAVAILABLE"
        failed = by_key[("bad_config", None)]
        assert failed["state"] == "UNAVAILABLE"
        assert "version" not in failed
        assert failed["reason"]
        ready = server.repository_index(ready_only=True)
        assert ready == [
            {"name": "good", "version": "1", "state": "READY"},
            {"name": "labelled", "version": "1", "state": "READY"},
            {"name": "multi", "version": "1", "state": "READY"},
        ]

    run(repo, check)


def test_metadata_and_extensions(repo: Path) -> None:
    async def check(server: Server) -> None:
        meta = server.metadata()
        assert meta == {"name": "triton", "version": "2.51.0", "extensions": list(EXTENSIONS)}
        assert PROTOCOL_VERSION == "2.51.0"
        for ext in (
            "classification",
            "model_repository",
            "model_configuration",
            "binary_tensor_data",
            "parameters",
            "statistics",
        ):
            assert ext in meta["extensions"]
        assert server.metadata(("system_shared_memory",))["extensions"][-1] == "system_shared_memory"

    run(repo, check)

    async def name(server: Server) -> str:
        return str(server.metadata()["name"])

    assert run(repo, name, id="custom") == "custom"


def test_model_metadata(repo: Path) -> None:
    async def check(server: Server) -> None:
        assert server.model_metadata("multi") == {
            "name": "multi",
            "versions": ["1"],
            "platform": "python",
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}],
            "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}],
        }
        assert server.model_config("good")["name"] == "good"
        assert isinstance(_error(lambda: server.model_metadata("nope")), NotFoundError)

    run(repo, check)


def test_load_and_unload_refused_in_mode_none(repo: Path) -> None:
    async def check(server: Server) -> None:
        for call in (server.load_model("good"), server.unload_model("good")):
            with pytest.raises(InferdError) as info:
                await call
            e = info.value
            assert isinstance(e, UnavailableError)
            assert e.code.http_status == 503
            assert e.message == "explicit model load / unload is not allowed if polling is enabled"

    run(repo, check)


def test_health_and_load_failures(repo: Path) -> None:
    async def check(server: Server) -> tuple[bool, bool]:
        failures = server.load_failures()
        assert [(n, v) for n, v, _ in failures] == [("bad_config", ""), ("broken_init", "1"), ("multi", "2")]
        table = server.model_table()
        assert ("good", "1", "READY") in table
        assert any(r[0] == "bad_config" and r[1] == "-" and r[2].startswith("UNAVAILABLE: ") for r in table)
        assert table == sorted(table)
        return server.live(), server.ready()

    assert run(repo, check) == (True, False)  # strict readiness: a model failed
    assert run(repo, check, strict_readiness=False) == (True, True)


def test_infer_and_classification_with_labels(repo: Path) -> None:
    async def check(server: Server) -> None:
        data = np.array([0.5, 2.0, 1.0], dtype=np.float32)
        req = InferRequest(
            "labelled",
            {"INPUT0": Tensor.from_array("INPUT0", data)},
            id="r1",
            outputs=[RequestedOutput("OUTPUT0", classification=2)],
        )
        resp = await server.infer(req)
        assert resp.error is None
        assert resp.id == "r1" and resp.model_name == "labelled" and resp.model_version == "1"
        (out,) = resp.outputs
        assert out.datatype.wire == "BYTES"
        assert out.array.tolist() == [b"2.000000:1:one", b"1.000000:2:two"]
        plain = await server.infer(InferRequest("labelled", {"INPUT0": Tensor.from_array("INPUT0", data)}))
        np.testing.assert_array_equal(plain.outputs[0].array, data)

    run(repo, check)


def test_infer_validates(repo: Path) -> None:
    async def check(server: Server) -> None:
        req = InferRequest("good", {"X": Tensor.from_array("X", np.ones(1, np.float32))})
        with pytest.raises(InvalidArgumentError, match="unexpected inference input 'X' for model 'good'"):
            await server.infer(req)
        with pytest.raises(NotFoundError):
            await server.infer(InferRequest("nope", {}))

    run(repo, check)


def test_stop_finalizes_and_refuses_new_requests(repo: Path, tmp_path: Path) -> None:
    async def main() -> None:
        server = Server(CoreConfig.from_options(ServerOptions(model_repository=[repo])))
        await server.start()
        assert server.live()
        await server.stop(5)
        assert not server.live() and not server.ready()
        assert server.registry.models["good"][1].state is ModelState.UNAVAILABLE
        assert server.inflight() == 0
        req = InferRequest("good", {"INPUT0": Tensor.from_array("INPUT0", np.ones(1, np.float32))})
        with pytest.raises(UnavailableError, match="Server is stopping"):
            server.submit("good", "1", lambda _model: req)
        await server.stop(5)  # a second stop is a no-op

    asyncio.run(main())
    assert (tmp_path / "good.finalized").read_text() == "finalized"
    assert (tmp_path / "multi.finalized").read_text() == "finalized"
