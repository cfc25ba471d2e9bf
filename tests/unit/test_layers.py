"""Import layering of src/inferd, read with ``ast`` (lazy imports inside functions count too)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import inferd

PACKAGE = Path(inferd.__file__).resolve().parent
ROOT = "inferd"
CORE_DATA = frozenset(
    {
        "inferd.core.types",
        "inferd.core.tensor",
        "inferd.core.request",
        "inferd.core.response",
        "inferd.core.stream_flow",
        "inferd.core.unsent",  # the process's budget of held response bytes, which stream windows count in
    }
)


@dataclass(frozen=True)
class Edge:
    """``module`` imports ``target`` at ``line`` (``type_only``: under ``if TYPE_CHECKING:``)."""

    module: str
    target: str
    line: int
    type_only: bool

    def __str__(self) -> str:
        kind = " (TYPE_CHECKING)" if self.type_only else ""
        return f"{self.module}:{self.line} imports {self.target}{kind}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _root_exports() -> dict[str, str]:
    """Names ``inferd/__init__.py`` re-exports -> the module they come from."""
    out: dict[str, str] = {}
    for node in ast.parse(MODULES[ROOT].read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = node.module
    return out


ROOT_EXPORTS = _root_exports()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = _resolve(module, node)
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        if sub in MODULES:  # ``from inferd.core import request``: the submodule
            out.append(sub)
        elif base == ROOT and a.name in ROOT_EXPORTS:  # ``from inferd import Server``: where it comes from
            out.append(ROOT_EXPORTS[a.name])
        else:
            out.append(base)
    return out


def _edges(module: str) -> list[Edge]:
    edges: list[Edge] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target in _targets(module, node):
                if target == ROOT or target.startswith(ROOT + "."):
                    edges.append(Edge(module, target, node.lineno, type_only))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(ast.parse(MODULES[module].read_text(), str(MODULES[module])), False)
    return edges


EDGES: list[Edge] = [e for m in MODULES for e in _edges(m)]


def _in(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _violations(applies: Callable[[str], bool], allowed: Callable[[Edge], bool]) -> list[str]:
    return [str(e) for e in EDGES if applies(e.module) and not allowed(e)]


# -- the checker sees the imports ------------------------------------------------------------------


def test_every_layer_is_found() -> None:
    for name in (
        "inferd.errors",
        "inferd.engine.server",
        "inferd.scheduling.instances",
        "inferd.repository",
        "inferd.backends.python.backend",
        "inferd.frontends.http.decode",
        "inferd.cli",
        "inferd.api",
    ):
        assert name in MODULES, name


def test_edges_are_read() -> None:
    edges = {(e.module, e.target) for e in EDGES}
    assert ("inferd.engine.server", "inferd.engine.validate") in edges
    assert ("inferd.runtime", "inferd.engine.server") in edges
    # ``from inferd.core import request as _core_request``
    assert ("inferd.backends.python.pb_utils", "inferd.core.request") in edges
    # ``from inferd import Server`` names the module that defines it
    assert ROOT_EXPORTS["Server"] == "inferd.api"
    type_only = {(e.module, e.target) for e in EDGES if e.type_only}
    assert ("inferd.engine.model", "inferd.scheduling.base") in type_only


def test_relative_imports_resolve() -> None:
    tree = ast.parse("from . import a\nfrom ..errors import X\nfrom .tensor import Tensor\n")
    nodes = [n for n in tree.body if isinstance(n, ast.ImportFrom)]
    assert _resolve("inferd.core.request", nodes[0]) == "inferd.core"
    assert _resolve("inferd.core.request", nodes[1]) == "inferd.errors"
    assert _resolve("inferd.core", nodes[2]) == "inferd.core.tensor"


# -- the rules -------------------------------------------------------------------------------------


def test_errors_imports_nothing_from_inferd() -> None:
    assert _violations(lambda m: m == "inferd.errors", lambda e: False) == []


def test_repository_imports_only_errors_and_the_gpu_list() -> None:
    """The config checks take the GPUs as an argument (gpu.devices' SupportedGpus, a leaf that loads
    nothing): the repository never looks for GPUs itself."""
    assert (
        _violations(
            lambda m: _in(m, "inferd.repository"),
            lambda e: _in(e.target, "inferd.errors", "inferd.repository") or e.target == "inferd.gpu.devices",
        )
        == []
    )


def test_core_data_modules_import_only_errors_and_each_other() -> None:
    assert (
        _violations(
            lambda m: m in CORE_DATA,
            # gpu.cuda: the description of a tensor in GPU memory, a leaf that imports nothing of inferd
            lambda e: e.target in CORE_DATA or e.target in ("inferd.errors", "inferd.gpu.cuda"),
        )
        == []
    )


def test_backends_import_only_errors_repository_core_data_and_themselves() -> None:
    assert (
        _violations(
            lambda m: _in(m, "inferd.backends"),
            lambda e: (
                e.target in CORE_DATA
                or e.target == "inferd.core"  # the (empty) package of the data modules
                or e.target == "inferd.logs"  # a worker process sets up its log lines
                or e.target == "inferd.gpu.cuda"  # GPU tensors: CudaArray and the CUDA runtime's copies
                or _in(e.target, "inferd.errors", "inferd.repository", "inferd.backends")
            ),
        )
        == []
    )


def test_logs_imports_nothing_of_inferd_at_run_time() -> None:
    assert _violations(lambda m: m == "inferd.logs", lambda e: e.type_only) == []


SIGNATURE_MODULES = ("inferd.backends.signature", "inferd.backends.onnxruntime.graph")


@pytest.mark.parametrize("module", SIGNATURE_MODULES)
def test_signature_modules_import_no_framework(module: str) -> None:
    """The shared signature rules (and the ONNX checks on them) run without any framework installed."""
    tree = ast.parse(MODULES[module].read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    outside = {n.partition(".")[0] for n in names} - set(sys.stdlib_module_names) - {ROOT}
    assert outside == set()
    allowed = {"inferd.errors", *CORE_DATA, "inferd.backends.signature"}
    assert [str(e) for e in EDGES if e.module == module and e.target not in allowed] == []


def test_native_backends_shared_modules_import_no_framework() -> None:
    """``batched`` (stack, run once, split) and ``native`` (the load preamble) serve every native
    backend: numpy at most, never one backend's framework or another backend's package."""
    for module in ("inferd.backends.batched", "inferd.backends.native"):
        tree = ast.parse(MODULES[module].read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {
            n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level
        }
        outside = {n.partition(".")[0] for n in names} - set(sys.stdlib_module_names) - {ROOT}
        assert outside <= {"numpy"}, (module, outside)
        allowed = {"inferd.errors", *CORE_DATA, "inferd.backends.base", "inferd.backends.signature"}
        allowed |= {"inferd.backends.batched", "inferd.backends.native"}
        assert [str(e) for e in EDGES if e.module == module and e.target not in allowed] == []


def _scheduling_allows(e: Edge) -> bool:
    if e.target in CORE_DATA or e.target in (
        "inferd.core.stats",
        "inferd.backends.base",
        "inferd.backends.registry",
    ):
        return True
    if _in(e.target, "inferd.errors", "inferd.scheduling"):
        return True
    return e.type_only and e.target == "inferd.engine.model"


def test_scheduling_imports_only_errors_core_data_backend_seams_and_itself() -> None:
    assert _violations(lambda m: _in(m, "inferd.scheduling"), _scheduling_allows) == []


TOP = (
    "inferd.frontends",
    "inferd.cli",
    "inferd.sagemaker_serve",
    "inferd.api",
    "inferd.rayserve",
    "inferd.runtime",
    "inferd.metrics",
    "inferd.shm",
    "inferd.workers",
    "inferd.__main__",
)


def test_gpu_discovery_imports_nothing_of_the_server() -> None:
    assert _violations(lambda m: _in(m, "inferd.gpu"), lambda e: _in(e.target, "inferd.gpu")) == []


@pytest.mark.parametrize("forbidden", ["inferd.frontends", "inferd.cli", "inferd.api"])
def test_nothing_below_the_frontends_imports_them(forbidden: str) -> None:
    below = [m for m in MODULES if m != ROOT and not _in(m, *TOP)]
    assert "inferd.engine.server" in below and "inferd.options" in below
    assert _violations(lambda m: m in below, lambda e: not _in(e.target, forbidden)) == []


def test_frontends_see_the_core_through_its_facade() -> None:
    """HTTP and gRPC know ``engine.facade.Core``, not ServerCore: the composition root hands it over."""
    assert (
        _violations(lambda m: _in(m, "inferd.frontends"), lambda e: e.target != "inferd.engine.server") == []
    )


def test_trace_imports_only_errors_core_data_and_itself() -> None:
    """The trace extension sees requests and streams (the core data modules), nothing of the server."""
    assert (
        _violations(
            lambda m: _in(m, "inferd.trace"),
            lambda e: e.target in CORE_DATA or _in(e.target, "inferd.errors", "inferd.trace"),
        )
        == []
    )


# -- core/ below, engine/ above, no circles ----------------------------------------------------------

ABOVE_CORE = ("inferd.engine", "inferd.scheduling", "inferd.backends", "inferd.frontends")


def test_core_imports_nothing_above_it() -> None:
    """The request data (core/) sits below the engine, the schedulers, the backends and the front
    ends: no arrow runs back up, not even one for types alone."""
    assert _violations(lambda m: _in(m, "inferd.core"), lambda e: not _in(e.target, *ABOVE_CORE)) == []
    assert (
        _violations(
            lambda m: _in(m, "inferd.core"),
            lambda e: _in(e.target, "inferd.core", "inferd.errors") or e.target == "inferd.gpu.cuda",
        )
        == []
    )


def _circles(package: str, edges: list[Edge] = EDGES) -> list[list[str]]:
    """The import circles among ``package``'s modules (every edge: lazy and type-only ones too),
    each as its strongly connected set of modules (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if _in(e.module, package) and _in(e.target, package) and e.target != e.module:
            graph.setdefault(e.module, set()).add(e.target)
            graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                out.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_circles_are_found() -> None:
    def edge(a: str, b: str) -> Edge:
        return Edge(f"inferd.x.{a}", f"inferd.x.{b}", 1, True)

    edges = [edge("a", "b"), edge("b", "c"), edge("c", "a"), edge("c", "d"), edge("d", "e")]
    assert _circles("inferd.x", edges) == [["inferd.x.a", "inferd.x.b", "inferd.x.c"]]
    assert _circles("inferd.x", edges[1:]) == []


@pytest.mark.parametrize("package", ["inferd.core", "inferd.engine"])
def test_no_import_circle_inside(package: str) -> None:
    assert _circles(package) == []


def test_one_writer_of_a_models_state() -> None:
    """A version's state and reason are written by ``ModelLifecycle`` alone (engine/lifecycle.py;
    ``Model.__init__`` sets the first ones): nothing else assigns them."""
    writers = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                for leaf in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if (
                        isinstance(leaf, ast.Attribute)
                        and leaf.attr in ("_state", "_reason")
                        and not (isinstance(leaf.value, ast.Name) and leaf.value.id == "self")
                    ):
                        writers.add(module)
    assert writers == {"inferd.engine.lifecycle"}
