"""backends/tritonc/search.py: where a backend library is found (Triton's order), what it needs
(DT_NEEDED), and the files dlopen must not be handed (not ELF, 32-bit, another machine)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from inferd.backends.tritonc import search
from inferd.errors import InvalidArgumentError, NotFoundError
from inferd.repository import parse_config_text

WHEEL_PYTHON_BACKEND = Path(
    "/tmp/inferd-reference/venv-triton/lib/python3.11/site-packages/pytriton/tritonserver/backends/python/"
    "libtriton_python.so"
)


def config(text: str) -> Any:
    return parse_config_text(f'name: "m" {text}', "test")


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    model, version, backends = tmp_path / "repo" / "m", tmp_path / "repo" / "m" / "1", tmp_path / "backends"
    for folder in (version, backends / "custom"):
        folder.mkdir(parents=True)
    monkeypatch.setattr(search, "_state", {"backend_directory": str(backends)})
    return model, version, backends


def test_the_version_folder_then_the_model_folder_then_the_backend_directory(
    layout: tuple[Path, Path, Path],
) -> None:
    model, version, backends = layout
    cfg = config('backend: "custom"')
    places = [
        version / "libtriton_custom.so",
        model / "libtriton_custom.so",
        backends / "custom" / "libtriton_custom.so",
    ]
    for p in places:
        p.write_bytes(b"")
    for expected in places:
        assert search.find_library(cfg, model, version) == expected
        expected.unlink()


def test_runtime_names_another_library(layout: tuple[Path, Path, Path]) -> None:
    model, version, backends = layout
    (backends / "custom" / "libmine.so").write_bytes(b"")
    assert (
        search.find_library(config('backend: "custom" runtime: "libmine.so"'), model, version).name
        == "libmine.so"
    )
    with pytest.raises(InvalidArgumentError) as e:
        search.find_library(config('backend: "custom" runtime: "libother.so"'), model, version)
    assert e.value.message == (
        f"unable to find backend library 'libother.so' for model 'm', searched: '{version}' '{model}' "
        f"'{backends / 'custom'}'"
    )


def test_a_runtime_may_not_leave_its_folder(layout: tuple[Path, Path, Path]) -> None:
    model, version, _ = layout
    (model / "elsewhere").mkdir()
    (model / "elsewhere" / "lib.so").write_bytes(b"")
    with pytest.raises(InvalidArgumentError, match="escapes backend directory"):
        search.find_library(config('backend: "custom" runtime: "../elsewhere/lib.so"'), model, version)


def test_a_backend_found_nowhere_says_where_it_looked(layout: tuple[Path, Path, Path]) -> None:
    model, version, backends = layout
    with pytest.raises(InvalidArgumentError) as e:
        search.find_library(config('backend: "nope"'), model, version)
    assert e.value.message == (
        "unable to find backend library for backend 'nope', try specifying runtime on the model "
        "configuration. inferd's backends are fil, onnxruntime, openvino, python, pytorch, tensorflow; no "
        f"Triton C/C++ backend library libtriton_nope.so is in '{version}', '{model}', '{backends / 'nope'}' "
        "(the version folder, the model folder, --backend-directory/<backend>) and no Python-based "
        f"backend's '{backends / 'nope' / 'model.py'}'"
    )


# -- Python-based backends: <backend directory>/<name>/model.py -------------------------------------
def test_a_model_py_in_the_backend_folder_makes_a_python_based_backend(
    layout: tuple[Path, Path, Path],
) -> None:
    model, version, backends = layout
    cfg = config('backend: "custom"')
    assert search.python_based(cfg, model, version) is None  # nothing at all: find_library says why
    (backends / "custom" / "model.py").write_text("")
    assert search.python_based(cfg, model, version) == backends / "custom" / "model.py"
    # a model.py of the model's own is no backend's: only the backend folder's counts
    (backends / "custom" / "model.py").unlink()
    (version / "model.py").write_text("")
    (model / "model.py").write_text("")
    assert search.python_based(cfg, model, version) is None


@pytest.mark.parametrize("where", ["version", "model", "backends"])
def test_a_library_anywhere_in_the_search_paths_wins_over_model_py(
    layout: tuple[Path, Path, Path], where: str
) -> None:
    model, version, backends = layout
    (backends / "custom" / "model.py").write_text("")
    folder = {"version": version, "model": model, "backends": backends / "custom"}[where]
    (folder / "libtriton_custom.so").write_bytes(b"")
    assert search.python_based(config('backend: "custom"'), model, version) is None


def test_runtime_model_py_names_the_backend_folder_s_file(layout: tuple[Path, Path, Path]) -> None:
    model, version, backends = layout
    cfg = config('backend: "custom" runtime: "model.py"')
    (version / "libtriton_custom.so").write_bytes(b"")  # runtime decides: no library is looked for
    with pytest.raises(InvalidArgumentError) as e:
        search.python_based(cfg, model, version)
    assert e.value.message == (  # the reference's text
        "unable to find Python backend based backend library 'model.py' for model 'm', searched: "
        f"'{backends / 'custom' / 'model.py'}'"
    )
    (backends / "custom" / "model.py").write_text("")
    assert search.python_based(cfg, model, version) == backends / "custom" / "model.py"
    # any other runtime is a library's name
    assert search.python_based(config('backend: "custom" runtime: "other.py"'), model, version) is None


@pytest.mark.parametrize("name", ["../outside", "custom/sub", "..", "."])
def test_a_backend_name_with_a_path_never_leaves_the_backend_directory(
    layout: tuple[Path, Path, Path], name: str
) -> None:
    model, version, backends = layout
    (backends / "custom" / "sub").mkdir()
    for folder in (backends.parent / "outside", backends / "custom" / "sub", backends, backends.parent):
        folder.mkdir(exist_ok=True)
        (folder / "model.py").write_text("")
    with pytest.raises(InvalidArgumentError, match=f"unable to find backend library for backend '{name}'"):
        search.python_based(config(f'backend: "{name}" runtime: "model.py"'), model, version)
    with pytest.raises(InvalidArgumentError, match=f"unable to find backend library for backend '{name}'"):
        search.python_based(config(f'backend: "{name}"'), model, version)


def _elf(path: Path, *, elf_class: int = 2, e_type: int = 3, machine: int = 62) -> Path:
    head = bytearray(64)
    head[:4] = b"\x7fELF"
    head[4], head[5] = elf_class, 1
    struct.pack_into("<HH", head, 16, e_type, machine)
    path.write_bytes(bytes(head))
    return path


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: p.write_text("not a library") or p, "is not a shared library (no ELF header)"),
        (lambda p: _elf(p, elf_class=1), "is a 32-bit ELF file"),
        (lambda p: _elf(p, e_type=2), "is an ELF file but not a shared library (type 2)"),
        (lambda p: _elf(p, machine=183), "is a shared library for aarch64, not for this machine"),
    ],
)
def test_files_dlopen_is_not_handed(tmp_path: Path, make: Any, why: str) -> None:
    path = tmp_path / "libtriton_x.so"
    make(path)
    with pytest.raises(NotFoundError) as e:
        search.check_elf(path)
    assert e.value.message == f"unable to load shared library: {path}: {why}" or why in e.value.message


def test_a_library_for_this_machine_passes(tmp_path: Path) -> None:
    search.check_elf(_elf(tmp_path / "libtriton_x.so"))


def test_needed_reads_the_dynamic_section() -> None:
    import c_backends

    c_backends.require_compiler()
    assert "libtritonserver.so" in search.needed(c_backends.backend("identity"))
    assert "libtritonserver.so" not in search.needed(c_backends.backend("identity", link_host=False))
    assert search.needed(Path("/nonexistent")) == []


@pytest.mark.skipif(
    not WHEEL_PYTHON_BACKEND.is_file(), reason="the reference's PyPI wheel is not installed here"
)
def test_the_wheels_python_backend_needs_a_renamed_core() -> None:
    names = search.needed(WHEEL_PYTHON_BACKEND)
    assert any(n.startswith("libtritonserver-") for n in names), names
