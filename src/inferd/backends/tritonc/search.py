"""Where a C/C++ backend's library is, in Triton's order, and what it links against.

``backend: "<name>"`` names ``libtriton_<name>.so`` (or the config's ``runtime``), looked for in the
model's version folder, then the model's folder, then ``<backend directory>/<name>/``
(``--backend-directory``, the reference's default ``/opt/tritonserver/backends``): the first found is
used, as the reference's ``TritonModel::GetBackendLibraryProperties``. Where no library is found and the
config names no ``runtime``, ``<backend directory>/<name>/model.py`` makes ``<name>`` a Python-based
backend (``python_based``: served by inferd's Python backend, ``backends/python/based.py``), as
``runtime: "model.py"`` does.

``needed`` reads a library's ``DT_NEEDED`` entries from its ELF dynamic section, so that the host can
answer to the name a backend was linked against (the Python backend of NVIDIA's PyPI wheel needs
``libtritonserver-<hash>.so``), and ``check_elf`` refuses a file that is no shared library for this
machine with why, before ``dlopen`` reads it.
"""

from __future__ import annotations

import platform
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.backends.builtin import builtin_names
from inferd.errors import InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"
#: the ``runtime`` of a Python-based backend, and its file in ``<backend directory>/<name>/``
PYTHON_BASED_RUNTIME = "model.py"
_state = {"backend_directory": DEFAULT_BACKEND_DIRECTORY}

# ELF: e_machine of the machines inferd runs on, and the dynamic section's tags read here
_MACHINES = {62: "x86_64", 183: "aarch64", 3: "i386", 40: "arm", 243: "riscv64", 21: "ppc64"}
_HOST_MACHINE = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}.get(platform.machine().lower())
_SHT_DYNAMIC = 6
_DT_NEEDED = 1
_ET_DYN = 3


def set_backend_directory(path: str) -> None:
    """The server's ``--backend-directory`` (one per process, as the host library)."""
    _state["backend_directory"] = path or DEFAULT_BACKEND_DIRECTORY


def backend_directory() -> str:
    return _state["backend_directory"]


def library_name(config: ModelConfig) -> str:
    """``runtime`` when the config names one, else ``libtriton_<backend>.so``."""
    runtime = str(getattr(config, "runtime", "") or "")
    return runtime if runtime else f"libtriton_{config.backend}.so"


def search_paths(backend: str, model_dir: Path, version_dir: Path | None) -> list[Path]:
    """The reference's search order: version folder, model folder, backend directory."""
    paths = [version_dir] if version_dir is not None else []
    return [*paths, model_dir, Path(backend_directory()) / backend]


def find_library(config: ModelConfig, model_dir: Path, version_dir: Path | None) -> Path:
    """The backend library of a model, or InvalidArgumentError with the reference's text and the
    folders looked in."""
    name = library_name(config)
    paths = search_paths(config.backend, model_dir, version_dir)
    for folder in paths:
        candidate = folder / name
        if candidate.is_file():
            if not candidate.resolve().is_relative_to(folder.resolve()):
                raise InvalidArgumentError(
                    f"backend library name '{name}' escapes backend directory '{folder}', for model "
                    f"'{config.name}', check model config runtime field"
                )
            return candidate
    if not getattr(config, "runtime", ""):
        raise not_found(config.backend, paths)
    raise InvalidArgumentError(
        f"unable to find backend library '{name}' for model '{config.name}', searched: "
        + " ".join(f"'{p}'" for p in paths)
    )


def not_found(backend: str, paths: list[Path] | None = None) -> InvalidArgumentError:
    """Neither a library nor a Python-based backend's model.py: the reference's words, then where
    inferd looked (``paths``: the library's folders) and what it has of its own."""
    where = ""
    if paths:
        where = (
            f"; no Triton C/C++ backend library libtriton_{backend}.so is in "
            + ", ".join(f"'{p}'" for p in paths)
            + f" (the version folder, the model folder, --backend-directory/<backend>) and no "
            f"Python-based backend's '{Path(backend_directory()) / backend / PYTHON_BASED_RUNTIME}'"
        )
    return InvalidArgumentError(
        f"unable to find backend library for backend '{backend}', try specifying runtime on the model "
        f"configuration. inferd's backends are {', '.join(builtin_names())}{where}"
    )


def python_based(config: ModelConfig, model_dir: Path, version_dir: Path | None) -> Path | None:
    """The ``model.py`` of the model's backend when that backend is Python-based, else None (a C/C++
    library: ``find_library`` finds it or says why not). The reference's rule: ``runtime:
    "model.py"`` names ``<backend directory>/<backend>/model.py`` (InvalidArgumentError in its words
    where that file is missing); no ``runtime``, no ``libtriton_<backend>.so`` in the search paths
    and that file present does too."""
    runtime = str(getattr(config, "runtime", "") or "")
    if runtime and runtime != PYTHON_BASED_RUNTIME:
        return None
    backend = str(config.backend)
    folder = Path(backend_directory()) / backend
    # the registry refuses a name with a path in it: a backend is a folder of the backend directory
    if folder.parent != Path(backend_directory()) or backend in ("", ".", ".."):
        e = not_found(backend)
        raise InvalidArgumentError(
            f"{e.message} (a backend's name is a folder of --backend-directory: no path)"
        )
    path = folder / PYTHON_BASED_RUNTIME
    if runtime:
        if not path.is_file():
            raise InvalidArgumentError(
                f"unable to find Python backend based backend library '{PYTHON_BASED_RUNTIME}' for model "
                f"'{config.name}', searched: '{path}'"
            )
        return path
    name = library_name(config)
    if any((p / name).is_file() for p in search_paths(backend, model_dir, version_dir)):
        return None
    return path if path.is_file() else None


def _elf_header(data: bytes) -> tuple[str, int, int, int, int, int]:
    """(byte order, type, machine, section table offset, entry size, count) of an ELF64 file."""
    order = "<" if data[5] == 1 else ">"
    e_type, machine = struct.unpack_from(order + "HH", data, 16)
    shoff = struct.unpack_from(order + "Q", data, 40)[0]
    shentsize, shnum = struct.unpack_from(order + "HH", data, 58)
    return order, e_type, machine, shoff, shentsize, shnum


def check_elf(path: Path) -> None:
    """A file dlopen could load on this machine, else NotFoundError in the reference's words for a
    library that does not load ("unable to load shared library: ..."), saying what the file is."""

    def refuse(why: str) -> NotFoundError:
        return NotFoundError(f"unable to load shared library: {path}: {why}")

    with path.open("rb") as f:
        head = f.read(64)
    if head[:4] != b"\x7fELF":
        raise refuse("is not a shared library (no ELF header)")
    if head[4] != 2:
        raise refuse("is a 32-bit ELF file: a 64-bit shared library is needed")
    _, e_type, machine, *_ = _elf_header(head)
    if e_type != _ET_DYN:
        raise refuse(f"is an ELF file but not a shared library (type {e_type})")
    if _HOST_MACHINE is not None and machine != _HOST_MACHINE:
        built = _MACHINES.get(machine, f"machine {machine}")
        raise refuse(f"is a shared library for {built}, not for this machine ({platform.machine()})")


def needed(path: Path) -> list[str]:
    """The ``DT_NEEDED`` names of a 64-bit ELF shared library ([] when it has none or is unreadable)."""
    try:
        data = path.read_bytes()
        order, _, _, shoff, shentsize, shnum = _elf_header(data)
        sections = [
            struct.unpack_from(order + "IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
        ]
        names: list[str] = []
        for _name, sh_type, _flags, _addr, offset, size, link, *_ in sections:
            if sh_type != _SHT_DYNAMIC:
                continue
            strtab = sections[link][4]
            for at in range(offset, offset + size, 16):
                tag, value = struct.unpack_from(order + "qQ", data, at)
                if tag == 0:
                    break
                if tag == _DT_NEEDED:
                    end = data.index(b"\0", strtab + value)
                    names.append(data[strtab + value : end].decode("utf-8", "replace"))
        return names
    except (OSError, struct.error, IndexError, ValueError):
        return []
