"""backends/registry.py's GPU questions: whether a backend can place an instance on a GPU here
(``gpu_available``, optional), and so whether a config's KIND_AUTO may become KIND_GPU."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from inferd.backends import registry
from inferd.repository import parse_config_text


class ThirdParty:
    """A backend that says nothing about GPUs (as any entry-point backend written before them)."""

    name = "third_party"


class NoGpu(ThirdParty):
    name = "no_gpu"

    def gpu_available(self) -> bool:
        return False


@pytest.fixture(autouse=True)
def fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._cache, "third_party", ThirdParty())
    monkeypatch.setitem(registry._cache, "no_gpu", NoGpu())


def config(text: str) -> Any:
    return parse_config_text(f'name: "m" {text}', "test")


@pytest.mark.parametrize(
    ("backend", "expected"),
    [("python", True), ("fil", False), ("openvino", False), ("third_party", True), ("no_gpu", False)],
)
def test_which_backends_run_on_a_gpu(backend: str, expected: bool) -> None:
    assert registry.runs_on_gpu(backend) is expected


def test_a_backend_that_is_not_found_is_left_to_the_config_checks() -> None:
    assert registry.runs_on_gpu("nowhere") is True


def test_kind_auto_goes_to_the_gpus_only_where_there_are_some_and_the_backend_runs_there(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert registry.auto_gpu(config('backend: "python"'), have_gpus=True) is True
    assert registry.auto_gpu(config('backend: "python"'), have_gpus=False) is False
    assert registry.auto_gpu(config('platform: "ensemble"'), have_gpus=True) is False
    with caplog.at_level(logging.INFO, logger="inferd.backends"):
        assert (
            registry.auto_gpu(config('backend: "no_gpu" instance_group [ { kind: KIND_CPU } ]'), True)
            is False
        )
        assert caplog.messages == []  # no KIND_AUTO group: nothing to say
        assert registry.auto_gpu(config('backend: "no_gpu"'), True) is False
    assert caplog.messages == [
        "model 'm': KIND_AUTO is KIND_CPU: the no_gpu backend cannot run on a GPU here"
    ]


def test_any_other_name_may_be_a_c_backend() -> None:
    from inferd.backends.tritonc.backend import TritonCBackend

    backend = registry.get_backend("my_custom-1.2")
    assert isinstance(backend, TritonCBackend) and backend.name == "my_custom-1.2"
    assert registry.get_backend("my_custom-1.2") is backend


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", ""])
def test_a_name_with_a_path_finds_nothing_when_its_model_loads(name: str, tmp_path: Path) -> None:
    # as the reference, whose load of such a model fails with its "unable to find" (no file is looked
    # for outside the backend directory here: tritonc/search.py)
    from inferd.errors import InvalidArgumentError

    backend = registry.get_backend(name)
    cfg = config(f'backend: "{name}"')
    with pytest.raises(InvalidArgumentError) as e:
        backend.find_library(cfg, tmp_path, None)  # type: ignore[attr-defined]
    assert e.value.message.startswith(
        f"unable to find backend library for backend '{name}', try specifying runtime on the model configuration."
    )
    assert e.value.message.endswith("(a backend's name is a folder of --backend-directory: no path)")
