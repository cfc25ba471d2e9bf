"""inferd.hotpath: the compiled modules are the ones loaded when built and fresh; the pure path otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferd import hotpath

#: what a fresh interpreter reports: the path chosen, and the file each hot-path module came from
PROBE = """
import importlib, json, sys
from inferd import hotpath
for name in hotpath.MODULES:
    importlib.import_module(name)
print(json.dumps({"compiled": hotpath.compiled(), "describe": hotpath.describe(),
                  "files": {m: sys.modules[m].__file__ for m in hotpath.MODULES}}))
"""


def probe(**env: str) -> dict[str, object]:
    run_env = {k: v for k, v in os.environ.items() if k != hotpath.ENV}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**run_env, **env}, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def built() -> bool:
    return all(hotpath.extension(m) is not None for m in hotpath.MODULES) and hotpath.MANIFEST.exists()


def test_pure_python_on_request_loads_every_module_from_its_source() -> None:
    seen = probe(INFERD_PURE_PYTHON="1")
    assert seen["compiled"] is False
    assert seen["describe"] == "pure (INFERD_PURE_PYTHON=1)"
    files = seen["files"]
    assert isinstance(files, dict)
    assert all(f == str(hotpath.source(m)) for m, f in files.items()), files


@pytest.mark.skipif(not built(), reason="the hot path is not built here (make hotpath)")
def test_a_fresh_build_is_the_one_loaded() -> None:
    seen = probe()
    assert seen["compiled"] is True, seen["describe"]
    files = seen["files"]
    assert isinstance(files, dict)
    assert all(str(f).endswith(".so") for f in files.values()), files
    assert seen == probe(INFERD_PURE_PYTHON="0")  # 0 is not a request for the pure path


def test_the_finder_answers_for_the_hot_path_modules_only() -> None:
    finder = hotpath.PureFinder()
    spec = finder.find_spec("inferd.core.request", None)
    assert spec is not None and spec.origin == str(hotpath.source("inferd.core.request"))
    assert Path(spec.origin).suffix == ".py"
    assert finder.find_spec("inferd.core.types", None) is None


def test_a_stale_or_missing_build_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not built():
        assert hotpath.why_not_compiled() is not None
        return
    manifest = json.loads(hotpath.MANIFEST.read_text())
    manifest["sources"]["inferd.core.request"] = "0" * 64  # as if request.py changed since the build
    stale = tmp_path / "hotpath_build.json"
    stale.write_text(json.dumps(manifest))
    monkeypatch.setattr(hotpath, "MANIFEST", stale)
    why = hotpath.why_not_compiled()
    assert why is not None and why.startswith("stale build: inferd.core.request changed")
    monkeypatch.setattr(hotpath, "MANIFEST", tmp_path / "absent.json")
    assert hotpath.why_not_compiled() == "partial build (python -m inferd.hotpath_build to rebuild)"


#: every module of the package imported, then each class defined outside the compiled group whose
#: bases include one of the group's classes: compiled, its constructor raises "interpreted classes
#: cannot inherit from compiled" (a Python-based backend's class had; every C backend failed to load)
SUBCLASS_PROBE = """
import importlib, inspect, json, pkgutil, sys
import inferd
from inferd import hotpath
for m in pkgutil.walk_packages(inferd.__path__, "inferd."):
    if m.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(m.name)
    except Exception:  # an optional framework that is not installed: its classes cannot be made either
        pass
group = set(hotpath.MODULES)
found = []
for name, module in list(sys.modules.items()):
    if not name.startswith("inferd") or name in group:
        continue
    for _, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != name:
            continue
        bad = [b for b in cls.__mro__[1:] if b.__module__ in group]
        if bad:
            found.append(f"{name}.{cls.__qualname__} <- {bad[0].__module__}.{bad[0].__qualname__}")
print(json.dumps(found))
"""


def test_no_class_outside_the_group_subclasses_one_of_its_classes() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SUBCLASS_PROBE], capture_output=True, text=True, check=True, timeout=300
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
