"""SHAP values (``treeshap_output``) as the FIL backend serves them, computed by the frameworks.

The FIL backend (experimental on CPU since 23.04: ``src/cpu_treeshap_model.h``, ``docs/explainability.md``)
answers a second output, ``treeshap_output``, when the config lists it: per row and class score, one
value per feature and the bias last, in margin space (before the objective's sigmoid or softmax),
laid out [rows, classes, features + 1] (``(row * classes + class) * (features + 1)``), the config's
dims [features + 1] for a regressor or binary classifier and [classes, features + 1] for a multiclass
one (its QA's ``generate_example_model.py``), dims of 1 dropped as for ``output__0``.

Here the values are the frameworks' own TreeSHAP: XGBoost's ``pred_contribs`` and LightGBM's
``pred_contrib``, in the same layout. Treelite computes none, so a model only Treelite reads
(``model_type`` ``xgboost``, XGBoost's legacy binary that XGBoost 3 no longer reads, and
``treelite_checkpoint``) has no engine for them: the backend refuses the output for it at load.

XGBoost's DMatrix refuses an infinite value; FIL's TreeSHAP takes one as any other. Clipped to the
largest finite float32 it goes down every branch the infinity would (a split's threshold is finite;
only a threshold of -FLT_MAX itself would tell -inf from -FLT_MAX), NaN staying missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from inferd.backends.native import import_lazily

Array = np.ndarray[Any, Any]
Engine = Callable[[Array, int], Array]

SHAP_OUTPUT = "treeshap_output"
#: the model types whose framework computes SHAP values (Treelite, the others' only reader, does not)
SHAP_MODEL_TYPES = ("xgboost_json", "xgboost_ubj", "lightgbm")

_FLT_MAX = float(np.finfo(np.float32).max)


def shap_width(num_feature: int, num_class: int) -> int:
    """SHAP values a row: one per feature and the bias, for each class score."""
    return num_class * (num_feature + 1)


def contributions(model_type: str, booster: Any, num_feature: int, num_class: int) -> Engine:
    """The engine of SHAP values [rows, num_class * (num_feature + 1)] float32 for the framework's
    ``booster``; a zero row run once to check the framework answers that many values a row."""
    width = shap_width(num_feature, num_class)
    run = _lightgbm(booster, width) if model_type == "lightgbm" else _xgboost(booster, width)
    got = run(np.zeros((1, num_feature), np.float32), 1)
    if got.shape != (1, width):
        raise ValueError(
            f"the framework answers {got.size} SHAP value(s) a row where {num_class} class score(s) of "
            f"{num_feature} feature(s) make {width}"
        )
    return run


def _xgboost(booster: Any, width: int) -> Engine:
    xgb = import_lazily("xgboost", "fil", "fil")

    def run(x: Array, threads: int) -> Array:
        finite = np.clip(x, -_FLT_MAX, _FLT_MAX)  # see the module's docstring; NaN stays NaN
        data = xgb.DMatrix(finite, nthread=threads)
        out: Array = booster.predict(data, pred_contribs=True, validate_features=False)
        return out.reshape(x.shape[0], width).astype(np.float32, copy=False)

    return run


def _lightgbm(booster: Any, width: int) -> Engine:
    def run(x: Array, threads: int) -> Array:
        out: Array = booster.predict(x, pred_contrib=True, num_threads=threads)
        return out.reshape(x.shape[0], width).astype(np.float32, copy=False)

    return run
