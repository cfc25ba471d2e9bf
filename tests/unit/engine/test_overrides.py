"""A load's file overrides (engine/overrides.py): a private folder each, every path checked before a
byte is written, the bytes held bounded, the folders of servers that are gone swept at start."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from inferd.engine.overrides import MAX_DEPTH, MAX_FILES, OVERRIDE_PREFIX, Uploads, sweep_stale
from inferd.errors import InvalidArgumentError


def test_file_overrides_go_to_a_private_folder_that_is_the_models_folder() -> None:
    uploads = Uploads(0)
    folder = uploads.write("m", {"1/model.py": b"x = 1", "config.pbtxt": b""})
    try:
        assert folder.name.startswith(f"{OVERRIDE_PREFIX}{os.getpid()}-")  # the name is never part of it
        assert (folder / "1" / "model.py").read_bytes() == b"x = 1"
        assert oct(folder.stat().st_mode & 0o777) == "0o700"  # mkdtemp: this user's only
        assert uploads.held_bytes == 5
    finally:
        uploads.remove(folder)
    assert not folder.exists()
    assert uploads.held_bytes == 0


@pytest.mark.parametrize("name", ["..", "../..", "a/../../b", "/", ".", "x\\..", "m"])
def test_a_model_name_never_places_the_files(name: str) -> None:
    uploads = Uploads(0)
    folder = uploads.write(name, {"1/model.py": b"x = 1"})
    try:
        assert folder.parent == Path(tempfile.gettempdir()).resolve()
        assert [p.name for p in folder.iterdir()] == ["1"]
    finally:
        uploads.remove(folder)


def test_only_override_folders_are_removed(tmp_path: Path) -> None:
    victim = tmp_path / f"{OVERRIDE_PREFIX}lookalike"  # named so, but not in the temporary folder
    victim.mkdir()
    (victim / "f").write_text("keep")
    Uploads(0).remove(victim)
    Uploads(0).remove(tmp_path)
    assert (victim / "f").read_text() == "keep"


def _written_folders() -> set[str]:
    tmp = Path(tempfile.gettempdir())
    return {p.name for p in tmp.glob(f"{OVERRIDE_PREFIX}{os.getpid()}-*")}


@pytest.mark.parametrize(
    ("files", "text"),
    [
        ({"../x": b"evil"}, "must stay within the model directory"),
        ({"1/../../x": b"evil"}, "must stay within the model directory"),
        ({"/etc/passwd": b"evil"}, "must stay within the model directory"),
        ({".": b"evil"}, "must stay within the model directory"),
        ({"": b"evil"}, "the path is empty"),
        ({"1/a\0b": b"x"}, r"'file:1/a\\0b': the path holds a NUL character"),
        ({"1": b"x", "1/model.py": b"x"}, "'file:1' is a file, not a folder"),
        ({"a" * 300 + "/model.py": b"x"}, "longer than 255 bytes"),
        ({"d/" * 2000 + "m.py": b"x"}, f"2001 names deep; at most {MAX_DEPTH}"),
        (
            {f"1/f{i}": b"" for i in range(MAX_FILES + 1)},
            f"{MAX_FILES + 1} file parameters; at most {MAX_FILES}",
        ),
    ],
)
def test_a_path_that_cannot_be_written_is_refused_before_anything_is(
    files: dict[str, bytes], text: str
) -> None:
    before = _written_folders()
    with pytest.raises(InvalidArgumentError, match=text) as e:
        Uploads(0).write("m", files)
    assert e.value.message.startswith("failed to load 'm', failed to poll from model repository: ")
    assert len(e.value.message) < 400  # a path thousands of names deep is shown by its start
    assert _written_folders() == before


def test_a_write_that_fails_names_the_reason_not_the_servers_path(tmp_path: Path) -> None:
    uploads = Uploads(0)
    # two spellings of one path: the second write finds the first's file (nothing is overwritten)
    with pytest.raises(
        InvalidArgumentError, match=r"'file:1/./model.py': it cannot be written: File exists"
    ) as e:
        uploads.write("m", {"1/model.py": b"a", "1/./model.py": b"b"})
    assert tempfile.gettempdir() not in e.value.message
    assert uploads.held_bytes == 0


def test_the_bytes_held_are_bounded_and_returned_on_removal() -> None:
    uploads = Uploads(100)
    first = uploads.write("a", {"1/model.py": b"x" * 60})
    try:
        with pytest.raises(
            InvalidArgumentError, match=r"\(60 bytes\) exceed --model-upload-max-bytes \(100\)"
        ):
            uploads.write("b", {"1/model.py": b"y" * 60})
        uploads.remove(first)
        second = uploads.write("b", {"1/model.py": b"y" * 60})  # room again
        uploads.remove(second)
    finally:
        uploads.remove(first)


def test_folders_of_servers_that_are_gone_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    dead_pid = subprocess.Popen(["true"])  # a process that has ended (and been reaped)
    dead_pid.wait()
    dead = tmp_path / f"{OVERRIDE_PREFIX}{dead_pid.pid}-abc"
    live = tmp_path / f"{OVERRIDE_PREFIX}{os.getppid()}-def"  # this test's parent runs
    mine = tmp_path / f"{OVERRIDE_PREFIX}{os.getpid()}-ghi"
    unnamed = tmp_path / f"{OVERRIDE_PREFIX}xyz"  # no pid in its name: not known to be ours
    other = tmp_path / "keep-me"
    for d in (dead, live, mine, unnamed, other):
        (d / "1").mkdir(parents=True)
        (d / "1" / "model.py").write_text("x")
    assert sweep_stale(tmp_path) == [dead]
    assert not dead.exists()
    assert all(d.exists() for d in (live, mine, unnamed, other))
