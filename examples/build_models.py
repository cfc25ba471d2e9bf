"""Build the example model repository that `make run` serves (never committed).

    python examples/build_models.py examples/models

Python-backend models are copied from examples/python_models/. Everything is made offline from
what installed packages ship; nothing is downloaded.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(dest: Path) -> list[str]:
    """Write the repository into ``dest``; returns the model names."""
    dest.mkdir(parents=True, exist_ok=True)
    names = []
    for src in sorted((HERE / "python_models").iterdir()):
        if not (src / "1").is_dir():
            continue
        target = dest / src.name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
        names.append(src.name)
    return names


def main() -> int:
    dest = Path(sys.argv[1] if len(sys.argv) > 1 else HERE / "models")
    names = build(dest)
    print(f"example repository {dest}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
