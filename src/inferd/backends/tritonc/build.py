"""Where the host library is, and how it is built.

The host (``native/``: ``libtritonserver.so`` and the ``_tritonc`` extension) is C, built from source
with the machine's compiler: ``make install`` at the repository's root builds it beside this package
(``_lib/``); an installed inferd builds it with ``python -m inferd.backends.tritonc.build`` (into
``_lib/`` when the package's folder is writable, else into the user's cache). ``INFERD_TRITONC_LIB``
names another folder (the tests' sanitizer build). inferd runs without it; a model that needs a C
backend then fails its load with :func:`missing` (what to install and run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from inferd.errors import UnavailableError

NATIVE = Path(__file__).resolve().parent / "native"
PACKAGE_LIB = Path(__file__).resolve().parent / "_lib"
ENV = "INFERD_TRITONC_LIB"
LIBRARY = "libtritonserver.so"


#: the extension's file name, read once here: sysconfig's first reading is not thread-safe (models
#: load in parallel, and a concurrent first call read no suffix)
_EXTENSION = "_tritonc" + str(sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def extension_name() -> str:
    return _EXTENSION


def cache_lib() -> Path:
    """The user's cache folder for a build an installed (read-only) package cannot hold."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return base / "inferd" / "tritonc" / tag


def candidates() -> list[Path]:
    """Where the library is looked for, in order."""
    env = os.environ.get(ENV)
    return [Path(env)] if env else [PACKAGE_LIB, cache_lib()]


def find() -> Path | None:
    """The folder holding a built host (library and extension), or None."""
    for folder in candidates():
        if (folder / LIBRARY).is_file() and (folder / extension_name()).is_file():
            return folder
    return None


def missing(backend: str) -> UnavailableError:
    """The load error of a model whose C backend cannot be hosted: what to install and run."""
    where = ", ".join(str(p) for p in candidates())
    return UnavailableError(
        f"backend '{backend}' is a C/C++ backend (libtriton_{backend}.so): inferd hosts these through its "
        f"Triton backend host, which is not built here (looked in {where}). Install a C compiler, make and "
        f"Python's headers (Debian/Ubuntu: apt-get install build-essential python3-dev), then run "
        f"'python -m inferd.backends.tritonc.build' (in a source checkout: make install)"
    )


def build(prefix: Path | None = None, sanitize: bool = False, quiet: bool = False) -> Path:
    """Build the host into ``prefix`` (default: the package's ``_lib`` if writable, else the cache)."""
    if prefix is None:
        prefix = PACKAGE_LIB if os.access(PACKAGE_LIB.parent, os.W_OK) else cache_lib()
    prefix.mkdir(parents=True, exist_ok=True)
    make = shutil.which("make")
    if make is None:
        raise RuntimeError("'make' is not installed (Debian/Ubuntu: apt-get install build-essential)")
    cmd = [make, "-C", str(NATIVE), "install", f"PREFIX={prefix}", f"PYTHON={sys.executable}"]
    if sanitize:
        cmd.append("SANITIZE=1")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL if quiet else None)
    return prefix


def main() -> None:
    sanitize = "--sanitize" in sys.argv[1:]
    folder = build(sanitize=sanitize)
    print(f"inferd's Triton backend host is in {folder}")


if __name__ == "__main__":
    main()
