"""Where the tests find the repository's own files: the one place that says so.

Everything a test reads lives inside the repository (a clone with nothing beside it runs the whole
suite). pytest puts ``tests/`` on ``sys.path`` (``pythonpath`` in pyproject.toml), so any test or
conftest imports these as ``from repo_paths import ...``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
#: the test-only models (decoupled, errors, versions, ...)
FIXTURE_MODELS = FIXTURES / "models"
#: the six models both inferd and the real Triton 2.51 must load unmodified (add_sub, batched_sleep,
#: ensemble_add_sub, identity_bytes, identity_fp32, mul_fp32)
REFERENCE_MODELS = FIXTURES / "reference_models"
#: the real Triton 2.51's answers to about 45 good and bad requests, its /metrics and statistics
PROTOCOL = FIXTURES / "triton-2.51.0-protocol.txt"
#: the scripts that install, start and measure the real Triton (setup.sh, triton.sh, verify_models.py, ...)
REFERENCE_SCRIPTS = ROOT / "scripts" / "reference"


def load_script(path: Path, name: str) -> ModuleType:
    """A script of the repository (``examples/build_models.py``, a fixture's recorder) imported as the
    module ``name``, once per test process."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module
