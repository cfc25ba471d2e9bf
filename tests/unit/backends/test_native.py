"""What the native backends share at load (backends/native.py), with a fake framework."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferd.backends.base import BackendInstance, InstanceSpec, LoadContext
from inferd.backends.native import NativeBackend, NativeModel, import_lazily
from inferd.backends.signature import GraphTensor
from inferd.core.types import BYTES, DataType
from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.repository import parse_config_text

CONFIG = """
name: "m"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 3 }, { count: 0 } ]
"""


class FakeModel(NativeModel):
    steps: list[str] = []

    @staticmethod
    def find(config: Any, version_dir: Path) -> Path:
        FakeModel.steps.append("find")
        if not version_dir.is_dir():
            raise UnavailableError(f"no '{version_dir}'")
        return version_dir / "model.fake"

    def import_framework(self) -> None:
        FakeModel.steps.append("import")

    def unserved(self, datatype: DataType) -> str | None:
        FakeModel.steps.append(f"unserved {datatype.wire}")
        return "is TYPE_STRING, which the fake backend does not serve" if datatype is BYTES else None

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        raise AssertionError("not called")

    def unload(self) -> None:
        """Nothing held."""


class FakeBackend(NativeBackend):
    name = "fake"
    model_type = FakeModel

    def __init__(self) -> None:
        self.read: list[Path] = []

    def signature(self, config: Any, version_dir: Path) -> tuple[list[GraphTensor], list[GraphTensor]]:
        self.read.append(version_dir)
        return [GraphTensor("X", "TYPE_FP32", (-1, 3))], [GraphTensor("Y", "TYPE_FP32", (-1, 3))]


def _ctx(tmp_path: Path, text: str = CONFIG) -> LoadContext:
    (tmp_path / "1").mkdir(exist_ok=True)
    return LoadContext("m", 1, tmp_path, tmp_path / "1", parse_config_text(text, "config.pbtxt"))


def test_the_load_preamble_runs_its_steps_in_order_and_refuses_an_unserved_datatype(tmp_path: Path) -> None:
    FakeModel.steps = []
    with pytest.raises(InvalidArgumentError) as e:
        FakeBackend().load(_ctx(tmp_path))
    assert e.value.message == (
        "unable to load model 'm': output 'OUT' is TYPE_STRING, which the fake backend does not serve"
    )
    assert FakeModel.steps == ["find", "import", "unserved FP32", "unserved BYTES"]


def test_the_load_preamble_copies_the_config(tmp_path: Path) -> None:
    model = FakeBackend().load(_ctx(tmp_path, CONFIG.replace("TYPE_STRING", "TYPE_FP32")))
    assert (model.name, model.version_str, model.max_batch_size) == ("m", "1", 8)
    assert model.path == tmp_path / "1" / "model.fake"
    assert model.instance_count == 4  # a group of count 0 makes one
    [spec] = model.inputs
    assert (spec.name, spec.dims, spec.reshape, spec.optional) == ("IN", (4,), (2, 2), False)
    assert model.outputs[0].reshape is None


def test_a_missing_model_file_fails_before_the_framework_is_imported(tmp_path: Path) -> None:
    FakeModel.steps = []
    ctx = _ctx(tmp_path)
    ctx.version_dir = tmp_path / "2"
    with pytest.raises(UnavailableError):
        FakeBackend().load(ctx)
    assert FakeModel.steps == ["find"]


def test_auto_complete_reads_the_signature_only_when_the_config_lacks_inputs_or_outputs(
    tmp_path: Path,
) -> None:
    backend = FakeBackend()
    listed = parse_config_text(CONFIG, "x")
    backend.auto_complete(listed, tmp_path, tmp_path / "1")
    assert backend.read == []
    empty = parse_config_text('name: "m"', "x")
    backend.auto_complete(empty, tmp_path, None)  # no version folder: nothing to read
    assert backend.read == []
    backend.auto_complete(empty, tmp_path, tmp_path / "1", default_max_batch_size=2)
    assert backend.read == [tmp_path / "1"]
    assert [i.name for i in empty.input] == ["X"] and [o.name for o in empty.output] == ["Y"]
    assert empty.max_batch_size == 2


def test_import_lazily_names_the_extra_that_installs_the_framework() -> None:
    assert import_lazily("json", "fake", "fake") is __import__("json")
    with pytest.raises(UnavailableError) as e:
        import_lazily("inferd_no_such_framework", "fake", "fakeextra")
    assert e.value.message.startswith(
        "the fake backend needs inferd_no_such_framework, which is not installed ("
    )
    assert e.value.message.endswith("): pip install 'inferd[fakeextra]'")
