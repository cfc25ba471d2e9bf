"""``execution_mode`` of a C/C++ backend's model (backends/tritonc/backend.py): ``thread`` (and ``auto``
without a memory limit) loads the library in the server's process; ``process`` (and ``auto`` with a
``memory_limit_bytes``) in worker processes, one per instance, opening nothing here; in a worker the
instance is in-process. The worker side runs in tests/e2e/test_e2e_c_backends_process.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.backends.base import LoadContext
from inferd.backends.process import IN_WORKER
from inferd.backends.process.model import ProcessModel
from inferd.backends.tritonc import backend as tritonc
from inferd.errors import InvalidArgumentError
from inferd.repository import parse_config_text
from inferd.repository.config.schema import ModelConfig

_IO = 'input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ] output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]'


def _config(params: dict[str, str]) -> ModelConfig:
    text = "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }} ' for k, v in params.items())
    return parse_config_text(f'name: "m" backend: "custom" {_IO} {text}', "test")


def _ctx(tmp_path: Path, params: dict[str, str], settings: dict[str, str] | None = None) -> LoadContext:
    (tmp_path / "1").mkdir(exist_ok=True)
    return LoadContext("m", 1, tmp_path, tmp_path / "1", _config(params), backend_config=settings or {})


@pytest.mark.parametrize(
    ("params", "settings", "mode"),
    [
        ({}, {}, "thread"),  # auto, the default: in the server's process (the fastest)
        ({"execution_mode": "thread"}, {}, "thread"),
        ({"execution_mode": "process"}, {}, "process"),
        (
            {"execution_mode": "auto", "memory_limit_bytes": "1000000"},
            {},
            "process",
        ),  # holds in a worker only
        ({}, {"execution-mode": "process"}, "process"),  # --backend-config=<backend>,execution-mode=process
        ({"execution_mode": "thread"}, {"execution-mode": "process"}, "thread"),  # the model's own first
        ({"execution_mode": "process"}, {IN_WORKER: "1"}, "thread"),  # in the worker: in its process
    ],
)
def test_the_mode(tmp_path: Path, params: dict[str, str], settings: dict[str, str], mode: str) -> None:
    assert tritonc._execution_mode(_ctx(tmp_path, params, settings)) == mode


def test_an_unknown_mode_fails_the_load(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidArgumentError,
        match="execution_mode of model 'm' must be one of auto, thread, process, got 'fork'",
    ):
        tritonc.TritonCBackend("custom").load(_ctx(tmp_path, {"execution_mode": "fork"}))


def test_process_mode_opens_nothing_in_the_server(tmp_path: Path) -> None:
    """No library exists here: the load succeeds all the same, the workers open it (each instance's)."""
    model = tritonc.TritonCBackend("custom").load(_ctx(tmp_path, {"execution_mode": "process"}))
    assert isinstance(model, ProcessModel) and model.live == 0


@pytest.mark.parametrize(
    ("params", "asks"),
    [
        ({}, False),
        ({"execution_mode": "process"}, True),
        ({"execution_mode": "thread", "memory_limit_bytes": "5"}, False),
        ({"memory_limit_bytes": "5"}, True),
        ({"memory_limit_bytes": "0"}, False),
        ({"memory_limit_bytes": "lots"}, False),  # the load says what is wrong with it
    ],
)
def test_the_auto_complete_runs_in_a_worker_when_the_config_asks(params: dict[str, str], asks: bool) -> None:
    assert tritonc._asks_process(_config(params)) is asks
