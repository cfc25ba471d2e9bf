"""The code blocks of README.md, the quickstart and the tutorials, run as a new user runs them after
``make run`` (tests/readme_snippets.py): a test per page.

The example repository is built into a temporary ``examples/models`` (examples/build_models.py, as
``make models`` builds it) and served by ``inferd serve`` on free ports, as ``make run`` serves it, for
the pages that talk to it; a page that starts a server of its own (its ``inferd serve`` block) gets it
started by ``InferdProcess`` on free ports, and stopped with SIGTERM, which must exit 0. Every block
runs in the page's own folder (``readme_snippets.lay_out``) with the servers' ports in place of 8000-8002
(the only change to its text), and must exit 0 and print what its comments show. And what the Python
blocks import is installed by ``make run``'s install (the Makefile's extras of pyproject.toml), not only
by ``make test``'s.
"""

from __future__ import annotations

import ast
import contextlib
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
    PAGES,
    Ports,
    Snippet,
    bash_expectations,
    lay_out,
    python_expectations,
    run_page,
    snippets,
)

pytestmark = pytest.mark.timeout(600)

#: seconds one block may take (the embedded server loads every example model itself)
SNIPPET_TIMEOUT_S = 240.0
BUILD_TIMEOUT_S = 900.0
PAGE_IDS = [str(p.relative_to(REPO_ROOT)) for p in PAGES]
CODE = [s for page in PAGES for s in snippets(page=page) if s.kind in ("python", "bash")]


def test_the_pages_have_the_blocks_this_test_runs() -> None:
    """The quickstart and seven tutorials, each with code that prints what the page shows."""
    tutorials = [p.stem for p in PAGES if p.parent.name == "tutorials"]
    assert {"first-python-model", "onnx-from-pytorch", "batching-and-instances", "ensemble"} <= set(tutorials)
    assert {"stateful-sequence", "tree-models", "openai-api"} <= set(tutorials)
    for page in PAGES[1:]:
        blocks = snippets(page=page)
        assert any(s.kind in ("python", "bash") for s in blocks), page
        shown = sum(
            len(python_expectations(s) if s.kind == "python" else bash_expectations(s))
            for s in blocks
            if s.kind in ("python", "bash")
        )
        assert shown >= 1, f"{page}: no output shown to check"
    quickstart = snippets(page=PAGES[1])
    assert [s.kind for s in quickstart if s.kind == "serve"] == ["serve"]  # serves *your* repository


def test_a_block_that_does_not_run_says_why() -> None:
    for page in PAGES:
        for s in snippets(page=page):
            if s.kind == "skip":
                assert len(s.skip) > 10, s.where


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example repository, built as `make models` builds it."""
    dest = tmp_path_factory.mktemp("examples") / "models"
    command = [sys.executable, str(REPO_ROOT / "examples" / "build_models.py"), str(dest)]
    with timeout_paused():  # the build imports torch and trains the examples: minutes on a loaded machine
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 up to date" in done.stdout and "skipped" not in done.stdout, done.stdout
    return dest


@pytest.fixture(scope="module")
def make_run(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    """The server `make run` starts: the example repository, every model loaded."""
    log = tmp_path_factory.mktemp("log") / "inferd-make-run.log"
    with serving(models, log) as proc:
        yield proc


@contextlib.contextmanager
def _serve(args: list[str], cwd: Path, log: Path) -> Iterator[Ports]:
    """A page's own `inferd serve ...` (or `tritonserver ...`) on free ports, in its folder."""

    def command(http: int, grpc: int, metrics: int) -> list[str]:
        return [*args, "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]

    proc = InferdProcess(cwd, log, command=command, cwd=cwd).start()
    try:

        def ready() -> bool:
            with contextlib.suppress(OSError):
                return proc.request("GET", "/v2/health/ready", timeout=2).status == 200
            return False

        assert proc.wait_starting(ready), f"not ready:\n{proc.log()[-4000:]}"
        yield proc.port, proc.grpc_port, proc.metrics_port
    finally:
        code = proc.stop()
        assert code == 0, f"inferd exited with {code}; log:\n{proc.log()[-4000:]}"


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_page(page: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Every block of the page, in order, prints what the page shows."""
    blocks = snippets(page=page)
    first_serve = next((i for i, s in enumerate(blocks) if s.kind == "serve"), len(blocks))
    # the `make run` server (and the examples' build) only for a page with code before its own server
    needs_make_run = any(s.kind in ("python", "bash") for s in blocks[:first_serve])
    ports: Ports = (0, 0, 0)
    models = tmp_path / "no-models"
    if needs_make_run:
        server: InferdProcess = request.getfixturevalue("make_run")
        ports = (server.port, server.grpc_port, server.metrics_port)
        models = request.getfixturevalue("models")
    home = lay_out(tmp_path / "home", models)
    logs = iter(tmp_path / f"inferd-{i}.log" for i in range(100))
    outcomes = list(
        run_page(page, home, ports, lambda args, cwd: _serve(args, cwd, next(logs)), SNIPPET_TIMEOUT_S)
    )
    problems = [p for o in outcomes for p in o.problems]
    assert problems == [], "\n".join(problems)
    ran = [o.snippet for o in outcomes if o.done == "ran"]
    assert ran == [s for s in blocks if s.kind in ("python", "bash")], "a block was not reached"


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


def test_make_run_installs_what_the_python_blocks_import() -> None:
    """Each module a block imports comes with a distribution `make run` installs; a submodule that is an
    extra of its distribution (tritonclient.http: tritonclient[http]) with that extra (or "all"). Files
    the pages write (a model's model.py) run in the server, not in the reader's client."""
    required = _make_run_requirements()
    distributions = importlib.metadata.packages_distributions()
    modules = set().union(*(_imports(s) for s in CODE if s.kind == "python"))
    assert {"tritonclient.http", "tritonclient.grpc", "openai", "sklearn.datasets", "torch"} <= modules
    missing = []
    for module in sorted(modules):
        top, _, sub = module.partition(".")
        if top == "inferd" or top in sys.stdlib_module_names:
            continue
        for dist in distributions[top]:
            wanted = [r for r in required if r.name.lower() == dist.lower()]
            extras = importlib.metadata.metadata(dist).get_all("Provides-Extra") or []
            sub_extra = sub.split(".")[0] if sub.split(".")[0] in extras else None
            if not wanted or (sub_extra and not any({sub_extra, "all"} & r.extras for r in wanted)):
                missing.append(f"{module} ({dist}{f'[{sub_extra}]' if sub_extra else ''})")
    assert missing == [], "the pages' blocks import what `make run` does not install"
