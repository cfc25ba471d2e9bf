"""The example zoo's tree models, served by the fil backend as Triton's FIL backend serves them.

Trained at build time (seeded, one thread, well under a second each) on datasets the scikit-learn
wheel ships, and written as FIL repositories: the model file under the name the FIL backend reads
and a config.pbtxt in its documentation's form.

- ``breast_cancer_xgboost``: an XGBoost classifier (``binary:logistic``, 50 trees of depth 4) on
  ``load_breast_cancer`` (569 tumours, 30 measurements; 1 = benign), ``xgboost.json``,
  ``predict_proba``: ``output__0`` [N,2] is [P(malignant), P(benign)] per row.
- ``diabetes_lightgbm``: a LightGBM regressor (100 trees) on ``load_diabetes`` (442 patients, 10
  standardised measurements; the target is disease progression a year later), ``model.txt``:
  ``output__0`` is one value per row (dims [1], which the FIL backend drops: shape [N]).

Needs xgboost and lightgbm (``pip install -e '.[fil]'``, which ``make run`` installs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SEED = 20240601

XGBOOST_CONFIG = """\
# An XGBoost classifier (breast cancer, 30 features) as Triton's FIL backend serves it.
# output__0: [P(malignant), P(benign)] for each row of input__0.
backend: "fil"
max_batch_size: 8192
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 30 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_AUTO } ]
parameters [
  { key: "model_type" value: { string_value: "xgboost_json" } },
  { key: "output_class" value: { string_value: "true" } },
  { key: "predict_proba" value: { string_value: "true" } },
  { key: "threshold" value: { string_value: "0.5" } }
]
dynamic_batching { }
"""

LIGHTGBM_CONFIG = """\
# A LightGBM regressor (diabetes progression, 10 features) as Triton's FIL backend serves it.
# output__0: one prediction per row of input__0 (dims [1]: answered as shape [N], as FIL does).
backend: "fil"
max_batch_size: 8192
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_AUTO } ]
parameters [
  { key: "model_type" value: { string_value: "lightgbm" } },
  { key: "output_class" value: { string_value: "false" } }
]
dynamic_batching { }
"""


def write_breast_cancer_xgboost(dest: Path) -> None:
    import xgboost as xgb
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    params = {"objective": "binary:logistic", "max_depth": 4, "eta": 0.3, "nthread": 1, "seed": SEED}
    booster = xgb.train(params, xgb.DMatrix(x.astype(np.float32), y), 50)
    (dest / "1").mkdir(parents=True)
    booster.save_model(str(dest / "1" / "xgboost.json"))
    (dest / "config.pbtxt").write_text(XGBOOST_CONFIG)


def write_diabetes_lightgbm(dest: Path) -> None:
    import lightgbm as lgb
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    params = {"objective": "regression", "num_leaves": 15, "verbose": -1, "num_threads": 1, "seed": SEED}
    params["deterministic"] = True
    booster = lgb.train(params, lgb.Dataset(x.astype(np.float32), y), 100)
    (dest / "1").mkdir(parents=True)
    booster.save_model(str(dest / "1" / "model.txt"))
    (dest / "config.pbtxt").write_text(LIGHTGBM_CONFIG)
