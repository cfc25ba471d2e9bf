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
        "inferd.core.response_path",  # the stages a request's responses pass (the schedulers add theirs)
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
    for node in ast.walk(ast.parse(MODULES[ROOT].read_text())):  # also lazy ones (TYPE_CHECKING)
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                out[a.asname or a.name] = node.module
    return out


ROOT_EXPORTS = _root_exports()
# ModelConfig's message types: a module below the repository may name them in its annotations
# (imported under TYPE_CHECKING: nothing of the repository or protobuf runs for it)
CONFIG_TYPES = "inferd.repository.config.schema"


def _config_types(e: Edge) -> bool:
    return e.type_only and e.target == CONFIG_TYPES


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
        for sub in ast.iter_child_nodes(node):
            visit(sub, type_only)

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
    assert [
        str(e) for e in EDGES if e.module == module and e.target not in allowed and not _config_types(e)
    ] == []


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
        assert [
            str(e) for e in EDGES if e.module == module and e.target not in allowed and not _config_types(e)
        ] == []


def _scheduling_allows(e: Edge) -> bool:
    if e.target in CORE_DATA or e.target in (
        "inferd.core.stats",
        "inferd.backends.base",
        "inferd.backends.registry",
    ):
        return True
    if _in(e.target, "inferd.errors", "inferd.scheduling"):
        return True
    return (e.type_only and e.target == "inferd.engine.model") or _config_types(e)


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
            # the config's message types for annotations only (a leaf: repository/config/schema.py)
            lambda e: (
                _in(e.target, "inferd.core", "inferd.errors")
                or e.target == "inferd.gpu.cuda"
                or _config_types(e)
            ),
        )
        == []
    )


def _package_circles(package: str, edges: list[Edge] = EDGES) -> list[list[str]]:
    """The import circles among ``package``'s modules counting every edge (lazy and type-only ones
    too), each as its sorted strongly connected set of modules (``_circles`` below)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if _in(e.module, package) and _in(e.target, package) and e.target != e.module:
            graph.setdefault(e.module, set()).add(e.target)
            graph.setdefault(e.target, set())
    return sorted(sorted(c) for c in _circles(graph))


def test_package_circles_count_type_only_edges() -> None:
    def edge(a: str, b: str) -> Edge:
        return Edge(f"inferd.x.{a}", f"inferd.x.{b}", 1, True)

    edges = [edge("a", "b"), edge("b", "c"), edge("c", "a"), edge("c", "d"), edge("d", "e")]
    assert _package_circles("inferd.x", edges) == [["inferd.x.a", "inferd.x.b", "inferd.x.c"]]
    assert _package_circles("inferd.x", edges[1:]) == []


@pytest.mark.parametrize("package", ["inferd.core", "inferd.engine"])
def test_no_import_circle_inside(package: str) -> None:
    assert _package_circles(package) == []


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


# -- circles ---------------------------------------------------------------------------------------
# A circle is a set of modules each reaching every other through imports (a strongly connected
# component of the graph). TYPE_CHECKING imports never run, so they make none; an import inside a
# function runs, later, and counts.

#: circles that stay, each with the reason: none (a circle is broken by moving what both sides share
#: into a module below them, not by hiding an import in a function)
ALLOWED_CIRCLES: dict[frozenset[str], str] = {}


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The circles of ``graph`` (Tarjan's strongly connected components of two modules or more),
    iteratively: the graph is deeper than the recursion limit allows for."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _graph(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.target != e.module and e.target in MODULES:
            graph.setdefault(e.module, set()).add(e.target)
    return graph


def _describe(circle: frozenset[str], edges: list[Edge]) -> str:
    inside = sorted(
        {str(e) for e in edges if e.module in circle and e.target in circle and e.module != e.target}
    )
    return "circle " + ", ".join(sorted(circle)) + ":\n  " + "\n  ".join(inside)


def _module_level_edges(module: str, tree: ast.Module) -> list[Edge]:
    """The imports ``module`` runs while it is imported: none inside a function, none under
    TYPE_CHECKING. ``from inferd import name`` (not a submodule) reads the package ``inferd`` itself,
    whatever it re-exports: while ``inferd/__init__.py`` runs, only the names bound above its
    running line are there."""
    edges: list[Edge] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = _targets(module, node)
            if isinstance(node, ast.ImportFrom) and _resolve(module, node) == ROOT:
                targets = [
                    t if t == f"{ROOT}.{a.name}" else ROOT for t, a in zip(targets, node.names, strict=True)
                ]
            edges.extend(Edge(module, t, node.lineno, False) for t in targets if _in(t, ROOT))
            return
        for sub in ast.iter_child_nodes(node):
            visit(sub)

    visit(tree)
    return edges


MODULE_LEVEL_EDGES: list[Edge] = [
    e for m, path in MODULES.items() for e in _module_level_edges(m, ast.parse(path.read_text(), str(path)))
]


def test_circles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": {"g"}}
    assert sorted(map(sorted, _circles(graph))) == [["a", "b", "c"], ["d", "e"]]
    # a chain longer than the recursion limit
    chain = {str(i): {str(i + 1)} for i in range(3 * sys.getrecursionlimit())}
    chain[str(3 * sys.getrecursionlimit())] = {"0"}
    assert [len(c) for c in _circles(chain)] == [3 * sys.getrecursionlimit() + 1]


def test_module_level_edges_are_read() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from inferd import __version__, errors\n"
        "from inferd.core import request\n"
        "if TYPE_CHECKING:\n"
        "    from inferd.core import response\n"
        "class A:\n"
        "    from inferd.core import tensor\n"
        "def f() -> None:\n"
        "    from inferd.core import types\n"
    )
    edges = _module_level_edges("inferd.core.validate", ast.parse(source))
    assert [(e.target, e.line) for e in edges] == [
        (ROOT, 2),  # the package's namespace, while it may still be running
        ("inferd.errors", 2),
        ("inferd.core.request", 3),
        ("inferd.core.tensor", 7),  # a class body runs at import
    ]


def test_no_import_cycle_at_module_level() -> None:
    """Whatever order the modules are first imported in, each finds the names it imports bound."""
    circles = _circles(_graph(MODULE_LEVEL_EDGES))
    assert [_describe(c, MODULE_LEVEL_EDGES) for c in circles] == []


def test_no_circle_but_the_allowed() -> None:
    run_time = [e for e in EDGES if not e.type_only]
    circles = _circles(_graph(run_time))
    assert [_describe(c, run_time) for c in circles if c not in ALLOWED_CIRCLES] == []
    # an entry whose circle is gone (or changed) comes off the list
    assert [sorted(c) for c in ALLOWED_CIRCLES if c not in circles] == []
