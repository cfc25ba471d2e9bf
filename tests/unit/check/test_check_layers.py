"""``inferd.check`` reads what the server reads at load, never the server itself: its imports of inferd
are the repository, the backends, the core data modules, the ensemble planner and the GPU list."""

from __future__ import annotations

import ast
from pathlib import Path

import inferd.check

ALLOWED = (
    "inferd.check",
    "inferd.errors",
    "inferd.gpu.devices",
    "inferd.repository",
    "inferd.backends",
    "inferd.core.tensor",
    "inferd.core.types",
    "inferd.scheduling.ensemble",
)


def test_check_imports_only_what_a_load_reads() -> None:
    package = Path(inferd.check.__file__).parent
    outside = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("inferd") and not any(
                    name == a or name.startswith(a + ".") for a in ALLOWED
                ):
                    outside.append(f"{path.name}:{node.lineno} imports {name}")
    assert outside == []
