"""Model control's pieces: a load request's parameters, poll mode's fingerprint (file overrides:
test_overrides.py)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from inferd.engine.overrides import load_parameters
from inferd.errors import InternalError, InvalidArgumentError
from inferd.repository import fingerprint


def test_load_parameters_over_http_and_grpc() -> None:
    data = base64.b64encode(b"print(1)").decode()
    assert load_parameters({"config": "{}", "file:1/model.py": data}, base64_files=True) == (
        "{}",
        {"1/model.py": b"print(1)"},
    )
    assert load_parameters({"file:1/m.onnx": b"\x00\x01"}, base64_files=False) == (
        None,
        {"1/m.onnx": b"\x00\x01"},
    )
    assert load_parameters({}, base64_files=True) == (None, {})


@pytest.mark.parametrize(
    ("params", "error", "text"),
    [
        ({"config": 5}, InternalError, "attempt to access JSON non-string as string"),
        ({"file:1/model.py": 5}, InternalError, "attempt to access JSON non-string as string"),
        ({"file:1/model.py": "not base64!"}, InvalidArgumentError, "are not base64"),
        ({"unknown": "1"}, InternalError, "unexpected error on creating Triton parameter"),
    ],
)
def test_load_parameters_refused(params: dict[str, object], error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        load_parameters(params, base64_files=True)


def test_load_parameters_over_grpc_want_bytes() -> None:
    with pytest.raises(InvalidArgumentError, match="bytes_param"):
        load_parameters({"file:1/model.py": "text"}, base64_files=False)


def test_fingerprint_sees_edits_additions_and_removals(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    model = tmp_path / "1" / "model.py"
    model.write_text("a")
    first = fingerprint(tmp_path)
    assert fingerprint(tmp_path) == first
    model.write_text("ab")
    second = fingerprint(tmp_path)
    assert second != first
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # touched, same size
    assert fingerprint(tmp_path) != second
    (tmp_path / "2").mkdir()
    assert len(fingerprint(tmp_path)) == 3
