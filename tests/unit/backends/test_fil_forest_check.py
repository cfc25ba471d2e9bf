"""The fil backend's walk of every tree (issue 42): ``check_common.check_trees`` (the tree shape every
check uses) and ``check_forest`` (the forest Treelite read, as GTIL dereferences it), on real models
of every kind and on those models with one field changed through Treelite's field accessors (the
way a hostile checkpoint reaches the engine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import treelite

import fil_models as fm
from inferd.backends.fil.check_common import ModelFileError, check_trees
from inferd.backends.fil.check_forest import check_forest, forest_fields

Array = np.ndarray[Any, Any]


def _where(tree: int, node: int) -> str:
    return f"tree {tree}: node {node}"


def _walk(left: list[int], right: list[int], starts: list[int], present: list[bool] | None = None) -> None:
    lf, rt = np.array(left), np.array(right)
    check_trees(lf, rt, lf == -1, np.array(starts), _where, None if present is None else np.array(present))


# -- check_trees ------------------------------------------------------------------------------------


def test_trees_and_a_deep_chain_pass() -> None:
    # two trees: 0 -> (1, 2); 0 -> (1, 2), 1 -> (3, 4)
    _walk([1, -1, -1, 1, 3, -1, -1, -1], [2, -1, -1, 2, 4, -1, -1, -1], [0, 3, 8])
    # a chain of 50,000 internal nodes: i -> (i + 1, a leaf); pointer doubling takes 17 steps
    inner = 50_000
    left = [i + 1 for i in range(inner)] + [-1] * (inner + 1)
    right = [inner + 1 + i for i in range(inner)] + [-1] * (inner + 1)
    _walk(left, right, [0, 2 * inner + 1])


@pytest.mark.parametrize(
    ("left", "right", "text"),
    [
        ([1, -1, -1], [3, -1, -1], "tree 0: node 0: its right child 3 is not a node of the tree (it has 3)"),
        ([1, 3, -1, -1, -1], [2, 3, -1, -1, -1], "tree 0: node 3 is the child of 2 nodes"),
        ([1, 0, -1], [2, 2, -1], "is the child of 2 nodes"),
        ([1, 0, -1, -1], [2, 3, -1, -1], "tree 0: node 0 (the root) is the child of another node: a cycle"),
        ([1, -1, -1, 4, 3], [2, -1, -1, -1, -1], "tree 0: node 3: its right child -1 is not a node"),
        ([1, -1, -1, 4, 3, -1, -1], [2, -1, -1, 5, 6, -1, -1], "tree 0: node 3 is on a cycle"),
        ([1, -1, -1, -1], [2, -1, -1, -1], "tree 0: node 3 is not reached from the root"),
    ],
)
def test_what_is_not_a_tree_is_named(left: list[int], right: list[int], text: str) -> None:
    with pytest.raises(ModelFileError, match=text.replace("(", r"\(").replace(")", r"\)")):
        _walk(left, right, [0, len(left)])


def test_deleted_nodes_may_be_left_out_but_not_pointed_at() -> None:
    _walk([1, -1, -1, -1], [2, -1, -1, -1], [0, 4], present=[True, True, True, False])
    with pytest.raises(ModelFileError, match="its child 2 is a deleted node"):
        _walk([1, -1, -1], [2, -1, -1], [0, 3], present=[True, True, False])


def test_the_second_trees_nodes_are_named_in_their_tree() -> None:
    with pytest.raises(ModelFileError, match="tree 1: node 1: its left child 7 is not a node"):
        _walk([1, -1, -1, 1, 7, -1, -1], [2, -1, -1, 2, 4, -1, -1], [0, 3, 7])


# -- check_forest: real models ----------------------------------------------------------------------


def _treelite(kind: str) -> Any:
    if kind.startswith("sklearn_"):
        return treelite.sklearn.import_model(
            fm.sklearn_forest(
                "iris" if "classifier" in kind or kind.endswith("trees") else "diabetes", kind[8:]
            )
        )
    if kind.startswith("xgboost_"):
        objective = {
            "xgboost_binary": "binary:logistic",
            "xgboost_softprob": "multi:softprob",
            "xgboost_reg": "reg:squarederror",
        }[kind]
        data = {"xgboost_binary": "cancer", "xgboost_softprob": "iris", "xgboost_reg": "diabetes"}[kind]
        return treelite.frontend.from_xgboost(fm.xgboost(data, objective))
    objective, data = {
        "lightgbm_multiclass": ("multiclass", "iris"),
        "lightgbm_binary": ("binary", "cancer"),
    }[kind]
    return treelite.frontend.from_lightgbm(fm.lightgbm(data, objective))


KINDS = [
    "sklearn_rf_classifier", "sklearn_rf_regressor", "sklearn_gb_classifier", "sklearn_extra_trees",
    "xgboost_binary", "xgboost_softprob", "xgboost_reg", "lightgbm_multiclass", "lightgbm_binary",
]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_real_models_pass_and_both_readings_agree(kind: str) -> None:
    model = _treelite(kind)
    check_forest(model)
    fast, slow = forest_fields(model), forest_fields(model, accessors=True)
    for name, values in fast.trees.items():
        if name.startswith("category_list") and not (fast.trees["node_type"] == 2).any():
            continue  # not read where no split is categorical
        np.testing.assert_array_equal(values, slow.trees[name], err_msg=name)
        np.testing.assert_array_equal(fast.starts[name], slow.starts[name], err_msg=name)


def test_a_categorical_lightgbm_model_passes() -> None:
    import lightgbm as lgb

    x, y = fm.categorical_dataset()
    booster = lgb.train(
        {"objective": "regression", "verbose": -1, "min_data_per_group": 2, "cat_smooth": 1, "seed": fm.SEED},
        lgb.Dataset(x, y, categorical_feature=[1]),
        10,
    )
    model = treelite.frontend.from_lightgbm(booster)
    fields = forest_fields(model)
    assert (fields.trees["node_type"] == 2).any()
    check_forest(model)
    slow = forest_fields(model, accessors=True)
    for name in ("category_list", "category_list_begin", "category_list_end"):
        np.testing.assert_array_equal(fields.trees[name], slow.trees[name])


# -- check_forest: one field changed ----------------------------------------------------------------


def _first(model: Any, tree: int, leaf: bool) -> int:
    cleft = model.get_tree_accessor(tree).get_field("cleft")
    return int(np.flatnonzero((cleft == -1) if leaf else (cleft != -1))[0])


def _set_tree(field: str, value: Any, leaf: bool = False) -> Callable[[Any], None]:
    def edit(model: Any) -> None:
        tree = model.get_tree_accessor(0)
        values = tree.get_field(field).copy()
        values[_first(model, 0, leaf)] = value
        tree.set_field(field, values)

    return edit


def _set_header(field: str, value: Any) -> Callable[[Any], None]:
    def edit(model: Any) -> None:
        model.get_header_accessor().set_field(field, value)

    return edit


def _both(*edits: Callable[[Any], None]) -> Callable[[Any], None]:
    def edit(model: Any) -> None:
        for e in edits:
            e(model)

    return edit


EDITS = [
    # (model, edit, what the refusal says)
    (
        "sklearn_rf_classifier",
        _set_tree("leaf_vector_end", 1 << 40, leaf=True),
        "its leaf_vector range [0, 1099511627776) is outside",
    ),
    (
        "sklearn_rf_classifier",
        _set_tree("leaf_vector_begin", 5, leaf=True),
        "its leaf_vector range [5, 3) is outside",
    ),
    (
        "xgboost_binary",
        _set_tree("split_index", 1_000_000),
        "tree 0: node 0 splits on feature 1000000, but the model reads 30 feature(s)",
    ),
    ("xgboost_binary", _set_tree("split_index", -3), "splits on feature -3"),
    (
        "xgboost_binary",
        _set_tree("cleft", 0),
        "tree 0: node 0 (the root) is the child of another node: a cycle",
    ),
    ("xgboost_binary", _set_tree("cright", 99_999), "its right child 99999 is not a node of the tree"),
    ("xgboost_binary", _set_tree("cmp", 9), "tree 0: node 0 has comparison operator 9"),
    ("xgboost_binary", _set_tree("threshold", np.nan), "tree 0: node 0 has a NaN threshold"),
    ("xgboost_binary", _set_tree("leaf_value", np.inf, leaf=True), "has a leaf value that is not finite"),
    ("xgboost_binary", _set_tree("node_type", 7), "has children but node type 7"),
    (
        "xgboost_binary",
        _both(_set_tree("node_type", 2), _set_tree("category_list_end", 5)),
        "tree 0: node 0: its category_list range [0, 5) is outside the tree's 0 entries",
    ),
    (
        "xgboost_softprob",
        _set_header("class_id", np.arange(60, dtype=np.int32) % 5),
        "its class_id 3 is out of range",
    ),
    (
        "xgboost_binary",
        _set_header("num_class", np.array([1 << 30], dtype=np.int32)),
        "num_class is 1073741824, but its 20 tree(s) score at most 20 class(es)",
    ),
    ("xgboost_binary", _set_header("postprocessor", "bogus"), "unknown postprocessor 'bogus'"),
    ("xgboost_binary", _set_header("base_scores", np.array([np.nan])), "base_scores are not all finite"),
    (
        "sklearn_rf_classifier",
        _set_header("leaf_vector_shape", np.array([1, 5], dtype=np.int32)),
        "leaf_vector_shape is [1, 5] for 3 classes",
    ),
]


@pytest.mark.parametrize(("kind", "edit", "text"), EDITS)
def test_a_changed_field_is_refused_naming_it(kind: str, edit: Callable[[Any], None], text: str) -> None:
    model = _treelite(kind)
    edit(model)
    with pytest.raises(ModelFileError) as e:
        check_forest(model)
    assert text in e.value.what


def test_the_accessor_reading_refuses_alike() -> None:
    model = _treelite("sklearn_rf_classifier")
    _set_tree("leaf_vector_end", 1 << 40, leaf=True)(model)
    fields = forest_fields(model, accessors=True)
    from inferd.backends.fil.check_forest import check_header, check_nodes

    check_header(fields.header)
    with pytest.raises(ModelFileError, match="leaf_vector range"):
        check_nodes(fields)
