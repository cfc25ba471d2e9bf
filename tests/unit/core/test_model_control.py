"""Model control's pieces: a load request's parameters, file overrides kept in their folder, poll
mode's fingerprint."""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path

import pytest

from inferd.core.model_control import (
    OVERRIDE_PREFIX,
    fingerprint,
    load_parameters,
    remove_override_folder,
    write_overrides,
)
from inferd.errors import InternalError, InvalidArgumentError


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


def test_file_overrides_go_to_a_private_folder_that_is_the_models_folder() -> None:
    folder = write_overrides("m", {"1/model.py": b"x = 1", "config.pbtxt": b""})
    try:
        assert folder.name.startswith(OVERRIDE_PREFIX)  # the name is never part of the path
        assert (folder / "1" / "model.py").read_bytes() == b"x = 1"
        assert oct(folder.stat().st_mode & 0o777) == "0o700"  # mkdtemp: this user's only
    finally:
        remove_override_folder(folder)
    assert not folder.exists()


@pytest.mark.parametrize("name", ["..", "../..", "a/../../b", "/", ".", "x\\..", "m"])
def test_a_model_name_never_places_the_files(name: str) -> None:
    folder = write_overrides(name, {"1/model.py": b"x = 1"})
    try:
        assert folder.parent == Path(tempfile.gettempdir()).resolve()
        assert [p.name for p in folder.iterdir()] == ["1"]
    finally:
        remove_override_folder(folder)


def test_only_override_folders_are_removed(tmp_path: Path) -> None:
    victim = tmp_path / f"{OVERRIDE_PREFIX}lookalike"  # named so, but not in the temporary folder
    victim.mkdir()
    (victim / "f").write_text("keep")
    remove_override_folder(victim)
    remove_override_folder(tmp_path)
    assert (victim / "f").read_text() == "keep"


@pytest.mark.parametrize("name", ["../x", "1/../../x", "/etc/passwd", ""])
def test_file_overrides_never_leave_their_folder(name: str, tmp_path: Path) -> None:
    with pytest.raises(InternalError, match="must stay within the model directory"):
        write_overrides("m", {"1/model.py": b"ok", name: b"evil"})


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
