"""Tree models for the fil backend's tests: trained in well under a second on the datasets scikit-learn
ships (breast cancer: 30 features, 2 classes; iris: 4 features, 3 classes; diabetes: 10 features, a
regression), seeded, and written as the FIL backend's repository folders.

XGBoost 3 no longer writes its legacy binary format (``model_type: xgboost``, the FIL backend's
default), so :func:`legacy_binary` writes it from a booster's JSON, field for field as XGBoost 1.x
saved it (Treelite's ``xgboost_legacy.cc`` reads the same structs).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

SEED = 7
FILES = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}


def dataset(name: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(rows float32, targets) of a scikit-learn bundled dataset."""
    from sklearn import datasets

    load = {
        "cancer": datasets.load_breast_cancer,
        "iris": datasets.load_iris,
        "diabetes": datasets.load_diabetes,
    }
    x, y = load[name](return_X_y=True)
    return np.ascontiguousarray(x, dtype=np.float32), y


def categorical_dataset() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """diabetes with feature 1 a category (0-3, from two features' signs) that moves the target:
    the trees split on it as a category set."""
    x, y = dataset("diabetes")
    x[:, 1] = (x[:, 1] > 0) + 2 * (x[:, 2] > 0)
    return x, y + 60.0 * (x[:, 1] == 1) - 40.0 * (x[:, 1] == 2)


def xgboost(data: str, objective: str, trees: int = 20, depth: int = 4, **params: Any) -> Any:
    """A Booster trained on ``data`` with ``objective``."""
    import xgboost as xgb

    x, y = dataset(data)
    p = {"objective": objective, "max_depth": depth, "nthread": 1, "seed": SEED, **params}
    if objective.startswith("multi:"):
        p["num_class"] = len(set(y.tolist()))
    return xgb.train(p, xgb.DMatrix(x, y), trees)


def lightgbm(data: str, objective: str, trees: int = 20, **params: Any) -> Any:
    import lightgbm as lgb

    x, y = dataset(data)
    p = {
        "objective": objective,
        "verbose": -1,
        "num_threads": 1,
        "seed": SEED,
        "min_data_in_leaf": 5,
        **params,
    }
    if objective.startswith("multiclass"):
        p["num_class"] = len(set(y.tolist()))
    return lgb.train(p, lgb.Dataset(x, y), trees)


def sklearn_forest(data: str, kind: str = "rf_classifier", trees: int = 10) -> Any:
    from sklearn import ensemble

    make = {
        "rf_classifier": lambda: ensemble.RandomForestClassifier(trees, max_depth=6, random_state=SEED),
        "rf_regressor": lambda: ensemble.RandomForestRegressor(trees, max_depth=6, random_state=SEED),
        "gb_classifier": lambda: ensemble.GradientBoostingClassifier(n_estimators=trees, random_state=SEED),
        "extra_trees": lambda: ensemble.ExtraTreesClassifier(trees, max_depth=6, random_state=SEED),
    }
    x, y = dataset(data)
    return make[kind]().fit(x, y)


def save(model: Any, model_type: str, path: Path) -> None:
    """``model`` in ``model_type``'s format at ``path`` (scikit-learn's through a Treelite checkpoint)."""
    if model_type == "treelite_checkpoint":
        import treelite

        treelite.sklearn.import_model(model).serialize(str(path))
    elif model_type == "xgboost":
        path.write_bytes(legacy_binary(model))
    elif model_type in ("xgboost_json", "xgboost_ubj"):
        model.save_model(str(path))
    else:
        model.save_model(str(path))


def config(
    name: str,
    model_type: str,
    features: int,
    width: int,
    *,
    output_class: bool | None = True,
    predict_proba: bool = False,
    threshold: float | None = 0.5,
    max_batch_size: int = 8192,
    extra: str = "",
) -> str:
    """A config.pbtxt as the FIL backend's docs write one (``output_class`` None: left out)."""
    params = [("model_type", model_type), ("predict_proba", str(predict_proba).lower())]
    if output_class is not None:
        params.append(("output_class", str(output_class).lower()))
    if threshold is not None:
        params.append(("threshold", str(threshold)))
    body = ",\n".join(f'  {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params)
    return f"""name: "{name}"
backend: "fil"
max_batch_size: {max_batch_size}
input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
instance_group [ {{ kind: KIND_AUTO }} ]
parameters [
{body}{extra}
]
dynamic_batching {{ }}
"""


def write(repo: Path, name: str, model: Any, model_type: str, config_text: str | None) -> Path:
    """``repo/name/1/<the type's file>`` and ``repo/name/config.pbtxt``."""
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    save(model, model_type, folder / "1" / FILES[model_type])
    if config_text is not None:
        (folder / "config.pbtxt").write_text(config_text)
    return folder


# --------------------------------------------------------------------------------------------------
# XGBoost's legacy binary format (XGBoost 1.x's SaveModel), written from the booster's JSON


def _first_float(value: Any) -> float:
    text = str(value).strip("[]")
    return float(text.split(",")[0])


def legacy_binary(booster: Any) -> bytes:
    """The booster as XGBoost 1.7 saved ``xgboost.model``: LearnerModelParam (136 bytes), the
    objective and booster names, GBTreeModelParam, each tree (TreeParam, nodes, stats), tree_info."""
    doc = json.loads(booster.save_raw("json"))
    learner = doc["learner"]
    lp = learner["learner_model_param"]
    model = learner["gradient_booster"]["model"]
    trees = model["trees"]
    num_feature = int(lp["num_feature"])
    num_class = int(lp["num_class"])
    out = bytearray()
    # LearnerModelParam: base_score, num_feature, num_class, extra attrs, eval metrics, major, minor,
    # num_target, 26 pad ints
    out += struct.pack("<fIiiiIII", _first_float(lp["base_score"]), num_feature, num_class, 0, 0, 1, 7, 1)
    out += bytes(4 * 26)
    for name in (learner["objective"]["name"], "gbtree"):
        out += struct.pack("<Q", len(name)) + name.encode()
    # GBTreeModelParam: num_trees, num_roots, num_feature, pad, pad64, num_output_group, leaf vector, 32 pad
    out += struct.pack("<iiiiqii", len(trees), 1, num_feature, 0, 0, max(1, num_class), 0) + bytes(4 * 32)
    for tree in trees:
        n = len(tree["left_children"])
        out += struct.pack("<iiiiii", 1, n, 0, 0, num_feature, 0) + bytes(4 * 31)
        left, right, parents = tree["left_children"], tree["right_children"], tree["parents"]
        for i in range(n):
            parent = -1 if i == 0 else parents[i] | ((1 << 31) if left[parents[i]] == i else 0)
            sindex = tree["split_indices"][i] | ((1 << 31) if tree["default_left"][i] else 0)
            out += struct.pack(
                "<iiiIf", _int32(parent), left[i], right[i], sindex, tree["split_conditions"][i]
            )
        for i in range(n):
            out += struct.pack(
                "<fffi", tree["loss_changes"][i], tree["sum_hessian"][i], tree["base_weights"][i], 0
            )
    out += struct.pack(f"<{len(trees)}i", *model["tree_info"])
    return bytes(out)


def _int32(v: int) -> int:
    return v - (1 << 32) if v >= (1 << 31) else v


# --------------------------------------------------------------------------------------------------
# Hostile files (issue 42): a real model's file with one thing changed, as a client could upload it


def bad_split_feature(booster: Any, feature: int = 1_000_000) -> bytes:
    """``booster`` (XGBoost) as ``xgboost.json``, its first tree's root splitting on ``feature``
    (before issue 42: it loaded, and its first one-row inference ended the server in GTIL)."""
    doc = json.loads(booster.save_raw("json"))
    doc["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"][0] = feature
    return json.dumps(doc).encode()


def bad_checkpoint_field(forest: Any, field: str = "leaf_vector_end", value: int = 1 << 40) -> bytes:
    """``forest`` (scikit-learn) as ``checkpoint.tl``, its first tree's first leaf's ``field`` set to
    ``value`` through Treelite's field accessor (before issue 42: it loaded and served rows that do not
    reach that leaf; the first that did ended the server)."""
    import treelite

    model = treelite.sklearn.import_model(forest)
    tree = model.get_tree_accessor(0)
    leaf = int(np.flatnonzero(tree.get_field("cleft") == -1)[0])
    values = tree.get_field(field).copy()
    values[leaf] = value
    tree.set_field(field, values)
    return bytes(model.serialize_bytes())


def _lightgbm_text(booster: Any) -> list[str]:
    """``booster``'s model.txt as lines, without ``tree_sizes`` (LightGBM then finds the trees by
    reading them in turn; Treelite never reads it): the edits below change the trees' lengths."""
    text: str = booster.model_to_string()
    return [line for line in text.split("\n") if not line.startswith("tree_sizes=")]


def _set_tree_field(lines: list[str], key: str, edit: Any) -> bytes:
    """The first tree's ``key=`` line's values passed through ``edit``."""
    i = next(k for k, line in enumerate(lines) if line.startswith(f"{key}=") and k > lines.index("Tree=0"))
    values = lines[i].split("=", 1)[1].split(" ")
    lines[i] = f"{key}=" + " ".join(edit(values))
    return "\n".join(lines).encode()


def huge_num_leaves(booster: Any, leaves: int = 1_000_000_000) -> bytes:
    """``booster`` (LightGBM) as ``model.txt`` whose first tree declares ``leaves`` leaves (before
    issue 42: Treelite read that many numbers from each short line, growing without end)."""
    return _set_tree_field(_lightgbm_text(booster), "num_leaves", lambda v: [str(leaves)])


def tree_cycle(booster: Any) -> bytes:
    """``booster`` (LightGBM) as ``model.txt`` whose first tree's node 1 has the root as its right
    child (before issue 42: Treelite's breadth-first walk of the tree never ended)."""

    def back_to_root(values: list[str]) -> list[str]:
        values[1] = "0"
        return values

    return _set_tree_field(_lightgbm_text(booster), "right_child", back_to_root)


def config_json(name: str, model_type: str, features: int, width: int) -> str:
    """A FIL model's config as a repository load's ``config`` parameter (JSON): the scores, as they are."""
    return json.dumps(
        {
            "name": name,
            "backend": "fil",
            "max_batch_size": 64,
            "input": [{"name": "input__0", "data_type": "TYPE_FP32", "dims": [features]}],
            "output": [{"name": "output__0", "data_type": "TYPE_FP32", "dims": [width]}],
            "parameters": {
                "model_type": {"string_value": model_type},
                "output_class": {"string_value": "false"},
            },
        }
    )
