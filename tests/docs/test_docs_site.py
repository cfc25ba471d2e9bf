"""The documentation site (mkdocs.yml, docs/): it builds with no warning (MkDocs' strict mode, every
internal link and anchor checked), its search index finds every flag and the quickstart's "serve your
repository", and the reference pages written by hand cover what the code defines (every top-level
config.pbtxt field, every metric family).

The code blocks of the quickstart and the tutorials run in tests/e2e/test_e2e_readme_snippets.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from repo_paths import ROOT

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
pytest.importorskip("material", reason="the docs extra is not installed: pip install -e '.[docs]'")

pytestmark = pytest.mark.timeout(300)

DOCS = ROOT / "docs"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inferd_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make docs-build` builds it, strict: a warning fails the build."""
    dest = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    command = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "-f",
        str(ROOT / "mkdocs.yml"),
        "-d",
        str(dest),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return dest


@pytest.fixture(scope="module")
def search_index(site: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = json.loads((site / "search" / "search_index.json").read_text())["docs"]
    return docs


def test_every_page_is_built(site: Path) -> None:
    pages = sorted(p.relative_to(DOCS).with_suffix("") for p in DOCS.rglob("*.md"))
    assert len(pages) >= 35
    for page in pages:
        built = site / ("" if page.name == "index" else page) / "index.html"
        assert built.is_file(), page


@pytest.mark.parametrize("command", ["serve", "serve-ray", "check"])
def test_the_search_index_finds_every_flag(search_index: list[dict[str, Any]], command: str) -> None:
    """Searching a flag's name finds its own section of the command line's reference, which says what
    it does: a section per flag, titled with the flag, its help in the text."""
    sections = {d["location"]: d for d in search_index}
    flags = hooks.flags(command)
    assert len(flags) >= {"serve": 110, "serve-ray": 12, "check": 6}[command]
    for flag in flags:
        found = [
            d for d in search_index if d["location"].startswith("reference/cli/#") and flag in d["title"]
        ]
        assert found, f"{flag} is not in the search index"
        assert any(len(re.sub(r"<[^>]+>", "", d["text"])) > len(flag) + 20 for d in found), flag
    assert "--http-port" in sections["reference/cli/#http-port"]["title"]
    assert "port of the HTTP API" in sections["reference/cli/#http-port"]["text"].replace("Port", "port")


def test_the_search_index_answers_how_to_serve_a_repository(search_index: list[dict[str, Any]]) -> None:
    titles = {d["location"]: d["title"] for d in search_index}
    assert "Serve your repository" in titles["quickstart/#serve-your-repository"]
    assert "inferd serve --model-repository" in next(
        d["text"] for d in search_index if d["location"] == "quickstart/#serve-your-repository"
    )
    assert titles["how-to/serve-a-repository/"] == "Serve a model repository"


def test_the_generated_reference_is_in_the_site(site: Path) -> None:
    api = (site / "reference" / "python-api" / "index.html").read_text()
    for method in ("start", "stop", "infer", "load_model", "unload_model", "model_ready"):
        assert f'id="server-{method.replace("_", "-")}"' in api, method
    endpoints = (site / "reference" / "endpoints" / "index.html").read_text()
    assert "RepositoryModelLoad" in endpoints and "/v2/models/{model}/infer" in endpoints
    moving = (site / "how-to" / "moving-from-triton" / "index.html").read_text()
    assert "--pinned-memory-pool-byte-size" in moving and "--trace-file" in moving


def test_an_unknown_marker_fails_the_build() -> None:
    with pytest.raises(ValueError, match="unknown marker"):
        hooks.expand("<!-- inferd:no-such-part -->\n", "page.md")
    assert hooks.expand("text <!-- inferd:errors --> inline is left alone\n", "page.md").startswith("text")


def test_config_reference_has_every_top_level_field() -> None:
    """Each field of Triton's ModelConfig has a heading of docs/reference/config-pbtxt.md saying what
    inferd does with it."""
    from tritonclient.grpc import model_config_pb2

    headings = "\n".join(re.findall(r"^## .*$", (DOCS / "reference" / "config-pbtxt.md").read_text(), re.M))
    fields = [f.name for f in model_config_pb2.ModelConfig.DESCRIPTOR.fields]
    missing = [f for f in fields if f"`{f}`" not in headings]
    assert missing == []


def test_metrics_reference_has_every_family() -> None:
    """Every metric family the server's code names (a `# HELP` line's or a family table's) is in
    docs/reference/metrics.md."""
    names: set[str] = set()
    for path in (ROOT / "src" / "inferd").rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"# HELP ((?:nv|inferd)_[a-z_]+)", text))
        names |= set(re.findall(r"\"((?:nv|inferd)_[a-z_]+)\"", text))
    # a context variable of rayserve/replica.py and the compiled hot path's mypyc group (hotpath.py): no families
    names -= {"inferd_merged", "inferd_hotpath"}
    assert len(names) >= 40
    page = (DOCS / "reference" / "metrics.md").read_text()
    assert sorted(n for n in names if f"`{n}`" not in page) == []
