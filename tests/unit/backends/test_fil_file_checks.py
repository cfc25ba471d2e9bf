"""The fil backend's checks of a model file before any native parser reads it (issue 42):
``check_xgboost`` (JSON, UBJSON, the legacy binary), ``ubjson``, ``check_lightgbm`` and
``check_checkpoint``, on real files of every kind the frameworks write and on those files with one
thing changed; and through the backend's load, the refusal's text.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fil_models as fm
from inferd.backends.base import LoadContext
from inferd.backends.fil import ubjson
from inferd.backends.fil.backend import FilBackend
from inferd.backends.fil.check_checkpoint import check_checkpoint
from inferd.backends.fil.check_common import ModelFileError
from inferd.backends.fil.check_lightgbm import check_lightgbm
from inferd.backends.fil.check_xgboost import check_json, check_legacy, check_ubjson
from inferd.errors import UnknownError
from inferd.repository import autofill_backend_fields, load_model_config, normalize_config


def refused(check: Callable[[bytes], None], data: bytes) -> str:
    with pytest.raises(ModelFileError) as e:
        check(data)
    return e.value.what


@pytest.fixture(scope="module")
def boosters() -> dict[str, Any]:
    return {
        "binary": fm.xgboost("cancer", "binary:logistic", trees=5),
        "softprob": fm.xgboost("iris", "multi:softprob", trees=5),
        "reg": fm.xgboost("diabetes", "reg:squarederror", trees=5),
        "dart": fm.xgboost("cancer", "binary:logistic", trees=5, booster="dart", rate_drop=0.1),
        "vector": fm.xgboost("iris", "multi:softprob", trees=5, multi_strategy="multi_output_tree"),
    }


def _categorical_xgboost() -> Any:
    import xgboost as xgb

    x, y = fm.categorical_dataset()
    dm = xgb.DMatrix(x, y, enable_categorical=True, feature_types=["q", "c", *["q"] * 8])
    return xgb.train({"max_depth": 3, "tree_method": "hist", "seed": fm.SEED}, dm, 5)


# -- XGBoost JSON and UBJSON ------------------------------------------------------------------------


def test_every_kind_of_xgboost_model_passes(boosters: dict[str, Any]) -> None:
    for booster in [*boosters.values(), _categorical_xgboost()]:
        check_json(bytes(booster.save_raw("json")))
        check_ubjson(bytes(booster.save_raw("ubj")))
    for name in ("binary", "softprob", "reg"):
        check_legacy(fm.legacy_binary(boosters[name]))


def _json(booster: Any, edit: Callable[[dict[str, Any]], None]) -> bytes:
    doc = json.loads(booster.save_raw("json"))
    edit(doc)
    return json.dumps(doc).encode()


def _tree0(doc: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = doc["learner"]["gradient_booster"]["model"]["trees"][0]
    return tree


def _params(doc: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = doc["learner"]["learner_model_param"]
    return params


JSON_EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "split feature",
        lambda d: _tree0(d)["split_indices"].__setitem__(0, 1_000_000),
        "tree 0: node 0 splits on feature 1000000, but the model reads 30 feature(s)",
    ),
    (
        "child out of range",
        lambda d: _tree0(d)["left_children"].__setitem__(0, 10_000),
        "tree 0: node 0: its left child 10000 is not a node",
    ),
    (
        "cycle",
        lambda d: _tree0(d)["left_children"].__setitem__(1, 0),
        "(the root) is the child of another node: a cycle",
    ),
    ("short array", lambda d: _tree0(d)["loss_changes"].pop(), "tree 0: loss_changes has"),
    (
        "num_nodes",
        lambda d: _tree0(d)["tree_param"].__setitem__("num_nodes", "100000"),
        "tree 0: left_children has",
    ),
    (
        "parents",
        lambda d: _tree0(d)["parents"].__setitem__(1, 2),
        "tree 0: node 1: its parents entry is not the node",
    ),
    (
        "NaN threshold",
        lambda d: _tree0(d)["split_conditions"].__setitem__(0, float("nan")),
        "tree 0: node 0 has a NaN threshold",
    ),
    (
        "num_class",
        lambda d: _params(d).__setitem__("num_class", "2147483647"),
        "num_class 2147483647 and num_target 1, but 5 tree(s)",
    ),
    ("num_feature", lambda d: _params(d).__setitem__("num_feature", "0"), "num_feature is 0"),
    (
        "num_trees",
        lambda d: d["learner"]["gradient_booster"]["model"]["gbtree_model_param"].__setitem__(
            "num_trees", "6"
        ),
        "num_trees is 6, but the model has 5 trees",
    ),
    (
        "tree_info",
        lambda d: d["learner"]["gradient_booster"]["model"]["tree_info"].__setitem__(0, 7),
        "tree 0: tree_info says output 7 of 1",
    ),
    (
        "iteration_indptr",
        lambda d: d["learner"]["gradient_booster"]["model"].__setitem__("iteration_indptr", [0, 9]),
        "iteration_indptr does not rise",
    ),
    (
        "booster",
        lambda d: d["learner"]["gradient_booster"].__setitem__("name", "gblinear"),
        "gradient_booster is 'gblinear'",
    ),
]


@pytest.mark.parametrize(("case", "edit", "text"), JSON_EDITS, ids=[c[0] for c in JSON_EDITS])
def test_a_changed_xgboost_json_is_refused(boosters: dict[str, Any], case: str, edit: Any, text: str) -> None:
    assert text in refused(check_json, _json(boosters["binary"], edit))


def test_categories_outside_their_list_are_refused() -> None:
    booster = _categorical_xgboost()
    doc = json.loads(booster.save_raw("json"))
    tree = next(t for t in doc["learner"]["gradient_booster"]["model"]["trees"] if t["categories_nodes"])
    tree["categories_sizes"][0] = 1_000_000
    assert "categories lie outside its" in refused(check_json, json.dumps(doc).encode())
    tree["categories_sizes"][0] = 1
    tree["categories"][0] = -4
    assert "a category is not an integer" in refused(check_json, json.dumps(doc).encode())


def test_json_that_is_not_json_or_nests_too_deep(boosters: dict[str, Any]) -> None:
    data = bytes(boosters["binary"].save_raw("json"))
    assert refused(check_json, data[:200]).startswith("Provided JSON could not be parsed as XGBoost model: ")
    assert "nests too deep" in refused(check_json, b"[" * 100_000)
    twice = data.replace(b'{"learner":', b'{"version":[1],"learner":', 1)
    assert "appears twice" in refused(check_json, twice)


def test_ubjson_declared_sizes_are_bounded_by_the_file(boosters: dict[str, Any]) -> None:
    data = bytes(boosters["binary"].save_raw("ubj"))
    at = data.index(b"left_children") + len(b"left_children")
    assert data[at : at + 4] == b"[$l#"
    huge = data[: at + 5] + struct.pack(">q", 1 << 40) + data[at + 13 :]
    assert "declares 1,099,511,627,776 items of 4 bytes" in refused(check_ubjson, huge)
    nulls = data[: at + 2] + b"Z" + data[at + 3 :]
    assert "a typed container of b'Z' (numbers only)" in refused(check_ubjson, nulls)
    assert "the document nests deeper than 32" in refused(check_ubjson, b"[" * 40 + b"]" * 40)
    assert "bytes follow the document" in refused(check_ubjson, data + b"Z")
    assert "ends inside a value" in refused(check_ubjson, data[:-1])
    count = b"[#L" + struct.pack(">q", 1 << 50)
    assert "a container declares" in refused(ubjson.loads, count)


def test_ubjson_reads_what_xgboost_wrote(boosters: dict[str, Any]) -> None:
    doc = ubjson.loads(bytes(boosters["softprob"].save_raw("ubj")))
    want = json.loads(boosters["softprob"].save_raw("json"))
    tree, tree_want = _tree0(doc), _tree0(want)
    assert tree["left_children"].array().tolist() == tree_want["left_children"]
    np.testing.assert_allclose(tree["split_conditions"].array(), tree_want["split_conditions"], rtol=1e-6)
    assert _params(doc) == _params(want)


def test_ubjson_refuses_what_json_does(boosters: dict[str, Any]) -> None:
    data = bytes(fm.xgboost("cancer", "binary:logistic", trees=2).save_raw("ubj"))
    at = data.index(b"split_indices") + len(b"split_indices") + 13  # [$l#L<count>
    bad = data[:at] + struct.pack(">i", 1_000_000) + data[at + 4 :]
    assert "tree 0: node 0 splits on feature 1000000" in refused(check_ubjson, bad)


# -- the legacy binary format -------------------------------------------------------------------------


def test_legacy_binary_counts_are_bounded_by_the_file(boosters: dict[str, Any]) -> None:
    data = fm.legacy_binary(boosters["binary"])
    names = 136 + 8 + len(b"binary:logistic") + 8 + len(b"gbtree")
    bad = bytearray(data)
    bad[names : names + 4] = struct.pack("<i", 1 << 30)  # num_trees
    assert "num_trees is 1,073,741,824" in refused(check_legacy, bytes(bad))
    bad = bytearray(data)
    tree = names + 160
    bad[tree + 4 : tree + 8] = struct.pack("<i", 1 << 30)  # tree 0's num_nodes
    assert "tree 0 declares 1,073,741,824 nodes" in refused(check_legacy, bytes(bad))
    bad = bytearray(data)
    node = tree + 148
    bad[node + 12 : node + 16] = struct.pack("<I", 999)  # the root's split index
    assert "tree 0: node 0 splits on feature 999, but the model reads 30" in refused(check_legacy, bytes(bad))
    bad[node + 12 : node + 16] = struct.pack("<I", 0xFFFFFFFF)
    assert "its root is deleted" in refused(check_legacy, bytes(bad))
    assert "the header needs 136 bytes" in refused(check_legacy, data[:100])
    bad = bytearray(data)
    bad[4:8] = struct.pack("<I", 0)  # num_feature
    assert "num_feature is 0" in refused(check_legacy, bytes(bad))


# -- LightGBM ---------------------------------------------------------------------------------------


def _lightgbm_models() -> list[Any]:
    import lightgbm as lgb

    x, y = fm.categorical_dataset()
    categorical = lgb.train(
        {"objective": "regression", "verbose": -1, "min_data_per_group": 2, "cat_smooth": 1, "seed": fm.SEED},
        lgb.Dataset(x, y, categorical_feature=[1]),
        5,
    )
    return [
        fm.lightgbm("diabetes", "regression", trees=5),
        fm.lightgbm("cancer", "binary", trees=5),
        fm.lightgbm("iris", "multiclass", trees=5),
        fm.lightgbm("iris", "multiclassova", trees=5),
        fm.lightgbm("diabetes", "regression", trees=5, linear_tree=True),
        fm.lightgbm("diabetes", "regression", trees=3, min_data_in_leaf=1000),  # one-leaf trees
        categorical,
    ]


def test_every_kind_of_lightgbm_model_passes() -> None:
    for booster in _lightgbm_models():
        check_lightgbm(booster.model_to_string().encode())


@pytest.fixture(scope="module")
def lgb_text() -> str:
    text: str = fm.lightgbm("diabetes", "regression", trees=3, num_leaves=4).model_to_string()
    return text


def _edit_line(text: str, key: str, new: str, nth: int = 0) -> bytes:
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line.startswith(f"{key}=")]
    lines[hits[nth]] = f"{key}={new}"
    return "\n".join(lines).encode()


LGB_EDITS: list[tuple[str, Callable[[str], bytes], str]] = [
    (
        "num_leaves",
        lambda t: fm.huge_num_leaves(_Booster(t)),
        "tree 0: leaf_value has 4 entries for 1000000000",
    ),
    (
        "cycle",
        lambda t: fm.tree_cycle(_Booster(t)),
        "tree 0: node 0 (the root) is the child of another node: a cycle",
    ),
    (
        "child out of range",
        lambda t: _edit_line(t, "left_child", "1 -9 -2"),
        "tree 0: node 1's left_child -9 is not a node (3 internal, 4 leaves)",
    ),
    (
        "split feature",
        lambda t: _edit_line(t, "split_feature", "8 2 99"),
        "tree 0: node 2 splits on feature 99, but the model reads 10 feature(s)",
    ),
    ("short array", lambda t: _edit_line(t, "split_gain", "1 2"), "tree 0: split_gain has 2 entries for 3"),
    (
        "max_feature_idx",
        lambda t: _edit_line(t, "max_feature_idx", "2147483646"),
        "feature_names has 10 entries for max_feature_idx 2147483646",
    ),
    (
        "num_class",
        lambda t: _edit_line(t, "num_class", "1000000000"),
        "num_class is 1000000000, but the model has 3 tree(s)",
    ),
    (
        "tree_sizes",
        lambda t: _edit_line(t, "tree_sizes", "1 2 3"),
        "tree_sizes puts tree 1 at offset 1 after the first tree",
    ),
    ("NaN threshold", lambda t: _edit_line(t, "threshold", "nan 1 2"), "tree 0: node 0 has a NaN threshold"),
    ("leaf value", lambda t: _edit_line(t, "leaf_value", "1 2 inf 4"), "tree 0: a leaf value is not finite"),
    (
        "decision type",
        lambda t: _edit_line(t, "decision_type", "2 2 13"),
        "tree 0: node 2 has decision_type 13",
    ),
    (
        "categorical split",
        lambda t: _edit_line(t, "decision_type", "3 2 2"),
        "tree 0: node 0 is categorical with category set",
    ),
    ("spaces", lambda t: _edit_line(t, "split_gain", "1  2 3"), "tree 0: split_gain has 4 entries for 3"),
    (
        "not a number",
        lambda t: _edit_line(t, "left_child", "1 x -2"),
        "left_child holds something other than integers",
    ),
    ("carriage return", lambda t: t.replace("\n", "\r\n").encode(), "carriage returns"),
    (
        "no header",
        lambda t: t[t.index("Tree=0") :].encode(),
        "Ill-formed LightGBM model file: need max_feature_idx",
    ),
    (
        "a line after the trees",
        lambda t: t.replace("end of trees", "end of trees\nthreshold=1 2 3").encode(),
        "tree 2: Treelite and LightGBM read its threshold from different lines",
    ),
    (
        "a long tree",
        lambda t: t.replace("num_cat=0\n", "num_cat=0\n" + "x=1\n" * 30, 1).encode(),
        "tree 0 has 46 lines: LightGBM reads 22",
    ),
]


class _Booster:
    """What fm.huge_num_leaves / fm.tree_cycle read of a booster: its text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def model_to_string(self) -> str:
        return self.text


@pytest.mark.parametrize(("case", "edit", "text"), LGB_EDITS, ids=[c[0] for c in LGB_EDITS])
def test_a_changed_lightgbm_model_is_refused(lgb_text: str, case: str, edit: Any, text: str) -> None:
    assert text in refused(check_lightgbm, edit(lgb_text))


def test_categories_of_a_lightgbm_model_are_bounded() -> None:
    text = _lightgbm_models()[-1].model_to_string()
    at = text.index("cat_boundaries=")
    line = text[at : text.index("\n", at)]
    bounds = line.split("=")[1].split(" ")
    bounds[-1] = str(int(bounds[-1]) + 100)
    assert "cat_threshold has" in refused(
        check_lightgbm, text.replace(line, "cat_boundaries=" + " ".join(bounds), 1).encode()
    )


# -- Treelite checkpoints -----------------------------------------------------------------------------


def _checkpoint(model: Any) -> bytes:
    import treelite

    if hasattr(model, "estimators_"):
        return bytes(treelite.sklearn.import_model(model).serialize_bytes())
    if hasattr(model, "model_to_string"):
        return bytes(treelite.frontend.from_lightgbm(model).serialize_bytes())
    return bytes(treelite.frontend.from_xgboost(model).serialize_bytes())


def test_every_kind_of_checkpoint_passes(boosters: dict[str, Any]) -> None:
    models = [
        fm.sklearn_forest("iris"),
        fm.sklearn_forest("diabetes", "rf_regressor"),
        fm.sklearn_forest("iris", "gb_classifier"),
    ]
    for model in [*models, boosters["binary"], boosters["softprob"], _lightgbm_models()[-1]]:
        check_checkpoint(_checkpoint(model))


def test_checkpoint_sizes_are_bounded_by_the_file() -> None:
    data = _checkpoint(fm.sklearn_forest("iris", trees=3))
    num_tree, num_class = 14, 32  # offsets in the v4 header (after the versions and the two types)
    assert struct.unpack_from("<Q", data, num_tree)[0] == 3
    bad = bytearray(data)
    bad[num_class : num_class + 8] = struct.pack("<Q", 1 << 31)  # 8 GB of class counts, zero-filled before
    assert "num_class declares 2,147,483,648 entries (8,589,934,592 bytes)" in refused(
        check_checkpoint, bytes(bad)
    )
    bad = bytearray(data)
    bad[num_tree : num_tree + 8] = struct.pack("<Q", 1 << 40)
    assert "target_id has 3 entries for 1,099,511,627,776 trees" in refused(check_checkpoint, bytes(bad))
    assert "bytes follow the last tree" in refused(check_checkpoint, data + b"\0")
    assert "needs" in refused(check_checkpoint, data[:-3])
    bad = bytearray(data)
    bad[0:4] = struct.pack("<i", 3)
    assert "load it with Treelite 4 and serialize it again" in refused(check_checkpoint, bytes(bad))
    bad = bytearray(data)
    bad[13] = 2  # leaf type float32 with float64 thresholds
    assert "threshold type 3 and leaf type 2" in refused(check_checkpoint, bytes(bad))


def test_a_per_node_array_of_another_length_is_refused() -> None:
    import treelite

    model = treelite.sklearn.import_model(fm.sklearn_forest("iris", trees=3))
    data = bytes(model.serialize_bytes())
    cleft = model.get_tree_accessor(0).get_field("cleft")
    # tree 0's cleft: its count, then its entries; the count written one more than the nodes
    at = data.index(struct.pack("<Q", cleft.size) + cleft.astype("<i4").tobytes())
    bad = (
        data[:at]
        + struct.pack("<Q", cleft.size - 1)
        + data[at + 8 : at + 8 + 4 * (cleft.size - 1)]
        + data[at + 8 + 4 * cleft.size :]
    )
    assert f"tree 0's cleft has {cleft.size - 1} entries for {cleft.size} nodes" in refused(
        check_checkpoint, bad
    )


# -- through the backend --------------------------------------------------------------------------


def test_the_load_names_the_file_and_what_is_wrong(tmp_path: Path) -> None:
    md = fm.write(
        tmp_path,
        "m",
        fm.xgboost("cancer", "binary:logistic", trees=3),
        "xgboost_json",
        fm.config("m", "xgboost_json", 30, 1),
    )
    path = md / "1" / "xgboost.json"
    path.write_bytes(fm.bad_split_feature(fm.xgboost("cancer", "binary:logistic", trees=3)))
    cfg, _ = load_model_config(md)
    autofill_backend_fields(cfg, "m", md)
    normalize_config(cfg, "m")
    with pytest.raises(UnknownError) as e:
        FilBackend().load(LoadContext("m", 1, md, md / "1", cfg))
    assert str(e.value) == (
        f"failed to load '{path}' as model_type 'xgboost_json': tree 0: node 0 splits on feature 1000000, "
        "but the model reads 30 feature(s)"
    )
