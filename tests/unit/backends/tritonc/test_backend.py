"""backends/tritonc/backend.py without a built host: a model that needs a C backend is refused at load
with what to install and run (``pip install inferd`` works without a compiler), and the backend
configuration a library gets is the reference's ``{"cmdline": {...}}``."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.backends.base import LoadContext
from inferd.backends.tritonc import backend as tritonc
from inferd.backends.tritonc import build, search
from inferd.errors import UnavailableError
from inferd.repository import parse_config_text


def test_without_a_built_host_the_load_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(build.ENV, str(tmp_path / "nothing-built"))
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    (model / "libtriton_custom.so").write_bytes(b"")
    io = 'input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ] output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]'
    cfg = parse_config_text(f'name: "m" backend: "custom" {io}', "test")
    backend = tritonc.TritonCBackend("custom")
    backend.auto_complete(cfg, model, model / "1")  # nothing to complete with: the load says why
    with pytest.raises(UnavailableError) as e:
        backend.load(LoadContext("m", 1, model, model / "1", cfg))
    assert e.value.message.startswith("backend 'custom' is a C/C++ backend (libtriton_custom.so)")
    assert "apt-get install build-essential python3-dev" in e.value.message
    assert "python -m inferd.backends.tritonc.build" in e.value.message
    # a config with no tensors says it at once (its auto-complete could not run)
    bare = parse_config_text('name: "m" backend: "custom"', "test")
    with pytest.raises(UnavailableError, match=r"is a C/C\+\+ backend"):
        backend.auto_complete(bare, model, model / "1")


def test_the_backend_configuration_is_the_references(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "_state", {"backend_directory": "/opt/b"})
    assert tritonc._backend_config({"shm-default-byte-size": "4194304"}, True) == {
        "cmdline": {
            "auto-complete-config": "true",
            "backend-directory": "/opt/b",
            "default-max-batch-size": "4",
            "min-compute-capability": "6.000000",
            "shm-default-byte-size": "4194304",
        }
    }
