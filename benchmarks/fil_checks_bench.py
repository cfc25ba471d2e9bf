"""What the fil backend's checks of a model file cost (issue 42: ``backends/fil/check_*.py``): a
model version's load (``FilBackend().load``: the checks, Treelite's read, the engines READY needs)
until READY (XGBoost's own engine loads after, in a thread: not counted) with the checks and
with them replaced by nothing, per model_type, on the largest model the tests
build (``tests/fil_models.py``: 20 rounds of a 3-class problem, 60 trees) and on a big one (1,000
rounds, depth 6: ``fil_bench.py``'s ``big_xgboost``; LightGBM: up to 63 leaves a tree), in this
process, best of ``--repeat``, the loads with and without alternating (the machine is shared: the
minimum is the cost).

    .venv/bin/python benchmarks/fil_checks_bench.py [--repeat 7] [--big-rounds 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_paths import ROOT


def _models(big_rounds: int) -> list[tuple[str, str, Any, int, int]]:
    """(label, model_type, model, features, output width)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    import fil_models as fm

    test_xgb = fm.xgboost("iris", "multi:softprob")  # 60 trees
    test_lgb = fm.lightgbm("iris", "multiclass")  # 60 trees
    test_forest = fm.sklearn_forest("iris", "gb_classifier")  # 30 trees
    big_xgb = fm.xgboost("cancer", "binary:logistic", trees=big_rounds, depth=6)
    big_lgb = fm.lightgbm("diabetes", "regression", trees=big_rounds, num_leaves=63, min_data_in_leaf=2)
    return [
        ("tests' largest", "xgboost", test_xgb, 4, 3),
        ("tests' largest", "xgboost_json", test_xgb, 4, 3),
        ("tests' largest", "xgboost_ubj", test_xgb, 4, 3),
        ("tests' largest", "lightgbm", test_lgb, 4, 3),
        ("tests' largest", "treelite_checkpoint", test_forest, 4, 3),
        (f"{big_rounds} trees", "xgboost", big_xgb, 30, 1),
        (f"{big_rounds} trees", "xgboost_json", big_xgb, 30, 1),
        (f"{big_rounds} trees", "xgboost_ubj", big_xgb, 30, 1),
        (f"{big_rounds} trees", "lightgbm", big_lgb, 10, 1),
        (f"{big_rounds} trees", "treelite_checkpoint", big_xgb, 30, 1),
    ]


def _write(root: Path, model_type: str, model: Any, features: int, width: int) -> Path:
    import fil_models as fm

    if model_type == "treelite_checkpoint" and not hasattr(model, "estimators_"):
        import treelite

        folder = root / "m"
        (folder / "1").mkdir(parents=True)
        treelite.frontend.from_xgboost(model).serialize(str(folder / "1" / "checkpoint.tl"))
    else:
        folder = fm.write(root, "m", model, model_type, None)
    (folder / "config.pbtxt").write_text(fm.config("m", model_type, features, width, output_class=False))
    return folder


def _best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1000


def _interleaved(
    load: Callable[[], None], checks: dict[str, Any], walk: Any, repeat: int
) -> tuple[float, float]:
    """The best load with the checks and without them, the two alternating (the machine is shared:
    both see the same moments)."""
    from inferd.backends.fil import engine

    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeat):
        for on in (True, False):
            if not on:
                engine.FILE_CHECKS.update({k: (lambda _d: None) for k in checks})
                engine.check_forest = lambda _m: None
            try:
                t0 = time.perf_counter()
                model = load()  # READY: what the load waits for
                times[on].append(time.perf_counter() - t0)
            finally:
                engine.FILE_CHECKS.update(checks)
                engine.check_forest = walk
            model.forest.native_loaded.wait(60)  # XGBoost's engine, loaded after READY: not counted
    return min(times[True]) * 1000, min(times[False]) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--big-rounds", type=int, default=1000)
    args = p.parse_args()
    from inferd.backends.base import LoadContext
    from inferd.backends.fil import engine
    from inferd.backends.fil.backend import FilBackend
    from inferd.backends.fil.params import fil_settings
    from inferd.repository import autofill_backend_fields, load_model_config, normalize_config

    checks, walk = dict(engine.FILE_CHECKS), engine.check_forest
    print(
        "| model | model_type | file | load with the checks (ms) | without (ms) | the checks (ms) | share of the load |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for label, model_type, model, features, width in _models(args.big_rounds):
        with tempfile.TemporaryDirectory() as tmp:
            md = _write(Path(tmp), model_type, model, features, width)
            cfg, _ = load_model_config(md)
            autofill_backend_fields(cfg, "m", md)
            normalize_config(cfg, "m")

            def load(md: Path = md, cfg: Any = cfg) -> Any:
                return FilBackend().load(LoadContext("m", 1, md, md / "1", cfg))

            load().forest.native_loaded.wait(60)  # imports, caches
            path = next(p for p in (md / "1").iterdir())
            size = path.stat().st_size
            data = path.read_bytes()
            model_obj = engine.read_treelite(path, fil_settings(cfg))
            checked = _best(lambda: (checks[model_type](data), walk(model_obj)), args.repeat)  # noqa: B023
            with_checks, without = _interleaved(load, checks, walk, args.repeat)
            print(
                f"| {label} | `{model_type}` | {size / 1e3:,.0f} KB | {with_checks:,.1f} | {without:,.1f} | "
                f"{checked:,.1f} | {checked / with_checks:.0%} |"
            )


if __name__ == "__main__":
    main()
