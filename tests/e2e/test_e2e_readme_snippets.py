"""README.md's snippets, run as a new user runs them after ``make run`` (tests/readme_snippets.py).

The example repository is built into a temporary ``examples/models`` (examples/build_models.py, as
``make models`` builds it) and served by ``inferd serve`` on free ports. Every ```python block runs in
a process of its own from the folder holding that ``examples/models``, with the server's ports in place
of 8000 and 8001 (the only change to its text), and must exit 0 and print what its comments show. The
```bash blocks that only call curl run the same way under ``bash -e``. And what the Python blocks
import is installed by ``make run``'s install (the Makefile's extras of pyproject.toml), not only by
``make test``'s.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO_ROOT, InferdProcess, serving, timeout_paused
from packaging.requirements import Requirement

from readme_snippets import (
    Snippet,
    bash_expectations,
    python_expectations,
    run_bash,
    run_python,
    snippets,
)

pytestmark = pytest.mark.timeout(300)

PYTHON = snippets("python")
CURL = [s for s in snippets("bash") if s.code.split()[0] == "curl"]
#: seconds one snippet may take (the embedded server loads every example model itself)
SNIPPET_TIMEOUT_S = 240.0
BUILD_TIMEOUT_S = 900.0


def test_the_readme_has_the_snippets_this_test_runs() -> None:
    assert len(PYTHON) >= 9 and len(CURL) >= 3
    shown = sum(len(python_expectations(s)) for s in PYTHON) + sum(len(bash_expectations(s)) for s in CURL)
    assert shown >= 20  # outputs the README shows, each checked below


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose examples/models is the example repository, built as `make models` builds it."""
    root = tmp_path_factory.mktemp("readme")
    command = [
        sys.executable,
        str(REPO_ROOT / "examples" / "build_models.py"),
        str(root / "examples" / "models"),
    ]
    with timeout_paused():  # the build imports torch and trains the examples: minutes on a loaded machine
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 up to date" in done.stdout and "skipped" not in done.stdout, done.stdout
    return root


@pytest.fixture(scope="module")
def server(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    log = tmp_path_factory.mktemp("log") / "inferd-readme.log"
    with serving(home / "examples" / "models", log) as proc:
        yield proc


@pytest.mark.parametrize("snippet", PYTHON, ids=[s.where for s in PYTHON])
def test_python_snippet(snippet: Snippet, server: InferdProcess, home: Path) -> None:
    run = run_python(snippet, home, server.port, server.grpc_port, SNIPPET_TIMEOUT_S)
    assert run.returncode == 0, f"{snippet.where} failed:\n{run.output[-4000:]}"
    assert run.differences(python_expectations(snippet), snippet.line) == [], run.output[-4000:]


@pytest.mark.parametrize("snippet", CURL, ids=[s.where for s in CURL])
def test_curl_snippet(snippet: Snippet, server: InferdProcess, home: Path) -> None:
    run = run_bash(snippet, home, server.port, server.grpc_port, SNIPPET_TIMEOUT_S)
    assert run.returncode == 0, f"{snippet.where} failed:\n{run.output[-4000:]}"
    assert run.differences(bash_expectations(snippet), snippet.line) == [], run.output[-4000:]


# -- what `make run` installs ----------------------------------------------------------------------------
def _make_run_requirements() -> list[Requirement]:
    """inferd's dependencies and those of the extras the Makefile's `make run` install names."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    recipe = makefile.split("$(RUN_STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    (extras,) = re.findall(r"pip install .*-e '\.\[([a-z,]+)\]'", recipe)
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras.split(","):
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def _imports(snippet: Snippet) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(snippet.code)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_make_run_installs_what_the_python_snippets_import() -> None:
    """Each module a snippet imports comes with a distribution `make run` installs; a submodule that is an
    extra of its distribution (tritonclient.http: tritonclient[http]) with that extra (or "all")."""
    required = _make_run_requirements()
    distributions = importlib.metadata.packages_distributions()
    modules = set().union(*(_imports(s) for s in PYTHON))
    assert {"tritonclient.http", "tritonclient.grpc", "openai", "sklearn.datasets"} <= modules
    missing = []
    for module in sorted(modules):
        top, _, sub = module.partition(".")
        if top == "inferd":
            continue
        for dist in distributions[top]:
            wanted = [r for r in required if r.name.lower() == dist.lower()]
            extras = importlib.metadata.metadata(dist).get_all("Provides-Extra") or []
            sub_extra = sub.split(".")[0] if sub.split(".")[0] in extras else None
            if not wanted or (sub_extra and not any({sub_extra, "all"} & r.extras for r in wanted)):
                missing.append(f"{module} ({dist}{f'[{sub_extra}]' if sub_extra else ''})")
    assert missing == [], "README snippets import what `make run` does not install"
