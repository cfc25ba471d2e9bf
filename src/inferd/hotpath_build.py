"""Builds the compiled hot path (``inferd.hotpath``): ``python -m inferd.hotpath_build`` (make install).

mypyc compiles ``hotpath.MODULES`` in place, from the checkout's root (its mypy configuration in
pyproject.toml is the one mypyc type-checks with), into extensions beside their sources: an editable
install (``pip install -e``, what make install does) then imports them. The build writes each source's
hash to ``hotpath_build.json``; ``hotpath.select()`` runs the pure path where a source changed since.
``--clean`` removes the build (the pure path runs). Measured against Cython 3.3 compiling the same
modules unchanged (issue 48): mypyc's typed code paid (-8% instructions per request on three modules),
Cython's generic attribute access did not (+-1%).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from inferd import hotpath

ROOT = hotpath.PACKAGE_DIR.parent.parent  # the checkout: src/inferd/ -> .


def built_files() -> list[Path]:
    """The extensions and the group's runtime that a build left beside the sources: of today's
    modules and of the last build's (one dropped from the list since would shadow its source)."""
    modules = set(hotpath.MODULES)
    with contextlib.suppress(OSError, ValueError, KeyError):
        modules |= set(json.loads(hotpath.MANIFEST.read_text())["sources"])
    found = [e for m in sorted(modules) if (e := hotpath.extension(m)) is not None]
    found += sorted(hotpath.PACKAGE_DIR.parent.glob(f"{hotpath.GROUP}__mypyc.*"))
    return found


def clean() -> None:
    for path in [*built_files(), hotpath.MANIFEST]:
        path.unlink(missing_ok=True)


def build() -> None:
    # imported here: mypyc (with mypy) and setuptools are build tools, not the server's dependencies
    from mypyc.build import mypycify
    from setuptools import setup

    clean()  # no extension of an older module set left to shadow a source
    sources = [str(hotpath.source(m).relative_to(ROOT)) for m in hotpath.MODULES]
    hashes = {m: hotpath.digest(hotpath.source(m)) for m in hotpath.MODULES}
    os.chdir(ROOT)
    # what the modules import from outside the group is Any to mypyc (skip): the type check stays
    # within the group (the whole program, torch's and TensorFlow's sources included, took gigabytes
    # and minutes), and no value crossing into the group is checked against a type it only claims
    flags = [
        "--follow-imports=skip",
        "--allow-subclassing-any",
        "--no-warn-return-any",
        "--disable-error-code=var-annotated",
        "--cache-dir=build/hotpath/mypy_cache",
    ]
    extensions = mypycify([*flags, *sources], opt_level="3", group_name=hotpath.GROUP)
    setup(
        name="inferd-hotpath",
        ext_modules=extensions,
        package_dir={"": "src"},
        script_args=["build_ext", "--inplace", "--build-temp", "build/hotpath", "-j", "2"],
    )
    missing = [m for m in hotpath.MODULES if hotpath.extension(m) is None]
    if missing:
        sys.exit(f"hotpath build: no extension for {', '.join(missing)}")
    hotpath.MANIFEST.write_text(json.dumps({"sources": hashes}, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clean", action="store_true", help="remove the build: the pure path runs")
    parser.add_argument("--force", action="store_true", help="build although every source is as it was built")
    args = parser.parse_args()
    if args.clean:
        clean()
    elif not args.force and hotpath.why_not_compiled() is None:  # make install runs this every time
        print(f"hot path: up to date ({len(hotpath.MODULES)} modules; --force rebuilds)")
    else:
        build()


if __name__ == "__main__":
    main()
