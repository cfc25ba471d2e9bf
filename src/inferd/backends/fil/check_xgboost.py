"""XGBoost's model files checked before Treelite and XGBoost read them (issue 42): JSON
(``xgboost.json``), UBJSON (``xgboost.ubj``) and the legacy binary format (``xgboost.model``).

What the native parsers trust: Treelite's JSON reader sizes ``base_scores`` by ``num_class`` x
``num_target`` (int32 each: 16 GB for a class count of 2^31), reads ``categories[segment + i]`` and
``loss_changes[node]`` unchecked, and checks split features against ``num_feature`` only where the
header came first (in JSON it comes after the trees: a split on feature 1,000,000 of a 30-feature
model loaded, and its first one-row inference ended the server inside GTIL). XGBoost reads the
same file again for its own engine. The legacy reader resizes to the declared ``num_nodes`` and
``num_trees`` before reading them.

So the document is read here first (Python's ``json``, whose nesting is bounded, with duplicate
keys refused; :mod:`ubjson`'s bounded reader; the binary's structs with every count checked against
the bytes left) and every tree checked as XGBoost lays it out: per-node arrays of ``num_nodes``
entries, children forming a tree with ``parents`` agreeing, split features below ``num_feature``,
categorical splits' lists inside ``categories`` and ``tree_info``'s classes in range, the class
and target counts bounded by what the trees hold.
"""

from __future__ import annotations

import itertools
import json
import struct
from typing import Any

import numpy as np

from inferd.backends.fil import ubjson
from inferd.backends.fil.check_common import (
    Array,
    ModelFileError,
    check_trees,
    first,
    float_array,
    int_array,
    need,
)

#: XGBoost's "no parent" (the root's parents entry, as -1 in an int32 or 2^31-1)
NO_PARENT = (-1, 2147483647)
#: per-node arrays: required ones, and those an older XGBoost may leave out
NODE_ARRAYS = ("left_children", "right_children", "split_indices", "split_conditions", "default_left")
OPTIONAL_NODE_ARRAYS = ("parents", "split_type", "loss_changes", "sum_hessian")
CATEGORY_ARRAYS = ("categories", "categories_nodes", "categories_segments", "categories_sizes")


def _where(tree: int, node: int) -> str:
    return f"tree {tree}" if node < 0 else f"tree {tree}: node {node}"


def _obj(parent: Any, key: str, where: str) -> dict[str, Any]:
    value = parent.get(key) if isinstance(parent, dict) else None
    need(isinstance(value, dict), f"{where}{key} is missing or not an object")
    assert isinstance(value, dict)
    return value


def _int(value: Any, what: str, default: int | None = None) -> int:
    """An integer XGBoost writes as a string ("30") or a number."""
    if value is None and default is not None:
        return default
    try:
        n = int(value) if isinstance(value, (str, int, np.integer)) and not isinstance(value, bool) else None
    except ValueError:
        n = None
    need(n is not None and -(1 << 31) <= n < (1 << 31), f"{what} is {str(value)[:40]!r}, not an integer")
    assert n is not None
    return n


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ModelFileError(f"the key {key!r} appears twice in an object")
    return out


def check_json(data: bytes) -> None:
    """ModelFileError unless ``data`` is an XGBoost JSON model whose every tree is safe to read."""
    try:
        doc = json.loads(data, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise ModelFileError(
            "Provided JSON could not be parsed as XGBoost model: it nests too deep"
        ) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelFileError(f"Provided JSON could not be parsed as XGBoost model: {str(e)[:160]}") from None
    check_document(doc)


def check_ubjson(data: bytes) -> None:
    """ModelFileError unless ``data`` is an XGBoost UBJSON model whose every tree is safe to read."""
    check_document(ubjson.loads(data))


def check_document(doc: Any) -> None:
    """An XGBoost model document (JSON's or UBJSON's) checked as XGBoost lays it out."""
    learner = _obj(doc, "learner", "")
    params = _obj(learner, "learner_model_param", "learner: ")
    num_feature = _int(params.get("num_feature"), "num_feature")
    num_class = _int(params.get("num_class"), "num_class", 0)
    num_target = _int(params.get("num_target"), "num_target", 1)
    need(num_feature >= 1, f"num_feature is {num_feature}")
    need(num_class >= 0 and num_target >= 1, f"num_class is {num_class} and num_target {num_target}")
    _base_score(params.get("base_score"))
    booster = _obj(learner, "gradient_booster", "learner: ")
    name = booster.get("name")
    need(
        name in ("gbtree", "dart"),
        f"gradient_booster is {str(name)[:40]!r}: the fil backend serves gbtree and dart",
    )
    model = _obj(
        _obj(booster, "gbtree", "dart: ") if name == "dart" else booster, "model", "gradient_booster: "
    )
    trees = model.get("trees")
    need(isinstance(trees, list) and bool(trees), "the model has no trees")
    assert isinstance(trees, list)
    declared = _int(_obj(model, "gbtree_model_param", "model: ").get("num_trees"), "num_trees")
    need(declared == len(trees), f"num_trees is {declared}, but the model has {len(trees)} trees")
    for key in ("feature_names", "feature_types"):
        listed = learner.get(key, [])
        need(isinstance(listed, list), f"{key} is not a list")
        need(len(listed) in (0, num_feature), f"{key} has {len(listed)} entries for {num_feature} features")
    widths = check_trees_of(trees, num_feature)
    outputs = max(num_class, num_target, 1)
    # a class or target is scored by trees of its own, or by every tree's leaf vectors
    need(
        outputs <= max(len(trees), int(widths.max())),
        f"num_class {num_class} and num_target {num_target}, but {len(trees)} tree(s) score at most "
        f"{max(len(trees), int(widths.max()))} output(s)",
    )
    info = int_array(model.get("tree_info"), "tree_info")
    need(info.size == len(trees), f"tree_info has {info.size} entries for {len(trees)} trees")
    bad = (info < 0) | (info >= outputs)
    need(
        not bad.any(),
        lambda: f"tree {first(bad)}: tree_info says output {int(info[first(bad)])} of {outputs}",
    )
    if "iteration_indptr" in model:
        ptr = int_array(model["iteration_indptr"], "iteration_indptr")
        need(
            ptr.size >= 1 and ptr[0] == 0 and ptr[-1] == len(trees) and bool((np.diff(ptr) >= 0).all()),
            "iteration_indptr does not rise from 0 to the tree count",
        )
    if name == "dart":
        drop = float_array(booster.get("weight_drop"), "weight_drop")
        need(drop.size == len(trees), f"weight_drop has {drop.size} entries for {len(trees)} trees")
        need(bool(np.isfinite(drop).all()), "weight_drop is not all finite")


def _base_score(value: Any) -> None:
    text = str(value).strip("[]") if value is not None else "0"
    try:
        scores = [float(v) for v in text.split(",")]
    except ValueError:
        raise ModelFileError(f"base_score is {str(value)[:40]!r}") from None
    need(all(np.isfinite(scores)), "base_score is not finite")


def _gather(trees: list[dict[str, Any]], key: str, ints: bool) -> Array:
    """Every tree's ``key`` concatenated: JSON's lists, or UBJSON's typed arrays, in one step."""
    values = [t[key] for t in trees]
    convert = int_array if ints else float_array
    if all(type(v) is list for v in values):
        return convert(list(itertools.chain.from_iterable(values)), key)
    if all(type(v) is ubjson.TypedArray for v in values) and len({v.dtype for v in values}) == 1:
        return convert(ubjson.join(values), key)
    return np.concatenate([convert(v, key) for v in values])


def check_trees_of(trees: list[Any], num_feature: int) -> Array:
    """Every tree of the document checked at once; each tree's leaf-vector width."""
    n = len(trees)
    for t, tree in enumerate(trees):
        need(isinstance(tree, dict), f"tree {t} is not an object")
        for key in NODE_ARRAYS:
            need(key in tree, f"tree {t}: {key} is missing")
    nodes = np.array([_int(_obj(t, "tree_param", "").get("num_nodes"), "num_nodes") for t in trees])
    widths = np.array(
        [max(1, _int(t["tree_param"].get("size_leaf_vector"), "size_leaf_vector", 1)) for t in trees]
    )
    bad = nodes < 1
    need(not bad.any(), lambda: f"tree {first(bad)} has {int(nodes[first(bad)])} nodes")
    starts = np.concatenate(([0], np.cumsum(nodes)))
    tree_of = np.repeat(np.arange(n), nodes)
    base = starts[:-1][tree_of]

    def at(mask: Array) -> str:
        i = first(mask)
        return _where(int(tree_of[i]), int(i - base[i]))

    def per_node(key: str, per: Array, ints: bool, optional: bool = False) -> Array | None:
        lengths = np.array([len(t[key]) if key in t else -1 for t in trees])
        if optional and (lengths <= 0).all():
            return None  # left out (or empty) in every tree: an older XGBoost's, or no statistics
        bad = lengths != per
        need(
            not bad.any(),
            lambda: (
                f"tree {first(bad)}: {key} has {max(0, int(lengths[first(bad)]))} entries for {int(per[first(bad)])}"
            ),
        )
        return _gather(trees, key, ints)

    left = per_node("left_children", nodes, True)
    right = per_node("right_children", nodes, True)
    assert left is not None and right is not None
    leaf = left == -1
    check_trees(left, right, leaf, starts, _where)
    split = per_node("split_indices", nodes, True)
    assert split is not None
    bad = ~leaf & ((split < 0) | (split >= num_feature))
    need(
        not bad.any(),
        lambda: (
            f"{at(bad)} splits on feature {int(split[first(bad)])}, but the model reads {num_feature} feature(s)"
        ),
    )
    cond = per_node("split_conditions", nodes, False)
    assert cond is not None
    bad = ~leaf & np.isnan(cond)
    need(not bad.any(), lambda: f"{at(bad)} has a NaN threshold")
    bad = leaf & (widths[tree_of] == 1) & ~np.isfinite(cond)
    need(not bad.any(), lambda: f"{at(bad)} has a leaf value that is not finite")
    flags = per_node("default_left", nodes, True)
    assert flags is not None
    need(
        bool(((flags == 0) | (flags == 1)).all()),
        lambda: f"{at((flags != 0) & (flags != 1))}: default_left is not 0 or 1",
    )
    weights = per_node("base_weights", nodes * widths, False, optional=True)
    if weights is not None:
        need(bool(np.isfinite(weights).all()), "a tree's base_weights are not all finite")
    for key in ("loss_changes", "sum_hessian"):
        per_node(key, nodes, False, optional=True)
    parents = per_node("parents", nodes, True, optional=True)
    if parents is not None:
        _parents(parents, left, right, leaf, base, starts, at)
    kinds = per_node("split_type", nodes, True, optional=True)
    categorical = np.zeros(leaf.size, dtype=bool) if kinds is None else ~leaf & (kinds == 1)
    if kinds is not None:
        bad = ~leaf & (kinds != 0) & (kinds != 1)
        need(not bad.any(), lambda: f"{at(bad)} has split_type {int(kinds[first(bad)])}")
    _categories(trees, nodes, categorical)
    return widths


def _parents(
    parents: Array, left: Array, right: Array, leaf: Array, base: Array, starts: Array, at: Any
) -> None:
    """Each child's parent is the node that lists it; each root has none."""
    roots = starts[:-1]
    bad = ~np.isin(parents[roots], NO_PARENT)
    need(not bad.any(), lambda: f"tree {first(bad)}: its root has parent {int(parents[roots[first(bad)]])}")
    inner = np.flatnonzero(~leaf)
    for side in (left, right):
        child = side[inner] + base[inner]
        wrong = parents[child] != inner - base[inner]
        if wrong.any():
            mask = np.zeros(leaf.size, dtype=bool)
            mask[child[first(wrong)]] = True
            raise ModelFileError(f"{at(mask)}: its parents entry is not the node that lists it as a child")


def _categories(trees: list[dict[str, Any]], nodes: Array, categorical: Array) -> None:
    """A categorical split's record: in ``categories_nodes`` (sorted: Treelite binary-searches it),
    its segment inside ``categories``. Only trees with categorical splits or records are read."""
    starts = np.concatenate(([0], np.cumsum(nodes)))
    split_trees = np.bincount(np.repeat(np.arange(len(trees)), nodes)[categorical], minlength=len(trees))
    records = [sum(len(t.get(k, ())) for k in CATEGORY_ARRAYS) for t in trees]
    for t in np.flatnonzero((split_trees > 0) | (np.array(records) > 0)).tolist():
        tree = trees[t]
        need(all(k in tree for k in CATEGORY_ARRAYS), f"tree {t}: {', '.join(CATEGORY_ARRAYS)} come together")
        cat_nodes = np.flatnonzero(categorical[int(starts[t]) : int(starts[t + 1])])
        listed = int_array(tree["categories_nodes"], f"tree {t}: categories_nodes")
        segments = int_array(tree["categories_segments"], f"tree {t}: categories_segments")
        sizes = int_array(tree["categories_sizes"], f"tree {t}: categories_sizes")
        values = float_array(tree["categories"], f"tree {t}: categories")
        need(
            listed.size == segments.size == sizes.size, f"tree {t}: its categories_* arrays differ in length"
        )
        need(bool((np.diff(listed) > 0).all()), f"tree {t}: categories_nodes are not sorted")
        need(bool(np.isin(cat_nodes, listed).all()), f"tree {t}: a categorical split has no categories")
        need(
            bool(((listed >= 0) & (listed < nodes[t])).all()),
            f"tree {t}: categories_nodes names a node it does not have",
        )
        need(
            bool(((segments >= 0) & (sizes >= 0) & (segments + sizes <= values.size)).all()),
            f"tree {t}: a categorical split's categories lie outside its {values.size} categories",
        )
        need(
            bool(((values >= 0) & (values < (1 << 31)) & (values == np.floor(values))).all()),
            f"tree {t}: a category is not an integer from 0 to 2^31",
        )


# -- the legacy binary format (XGBoost 1.x's SaveModel; XGBoost 3 no longer reads it) ----------------

_LEARNER = struct.Struct("<fIiiiIII104x")  # 136 bytes
_GBTREE = struct.Struct("<iiiiqii128x")  # 160 bytes
_TREE = struct.Struct("<iiiiii124x")  # 148 bytes
_NODE = np.dtype([("parent", "<i4"), ("left", "<i4"), ("right", "<i4"), ("sindex", "<u4"), ("value", "<f4")])
_STAT = 16
_DELETED = 0xFFFFFFFF


def check_legacy(data: bytes) -> None:
    """ModelFileError unless ``data`` is a legacy binary XGBoost model every count of which fits
    the file, with trees safe to read."""
    pos = 4 if data[:4] == b"binf" else 0
    need(data[:4] != b"bs64", "a base64 model: Treelite reads the binary format only")

    def take(n: int, what: str) -> int:
        nonlocal pos
        need(
            0 <= n <= len(data) - pos,
            lambda: f"{what} needs {n:,} bytes at offset {pos:,}, but the file has {len(data) - pos:,} left",
        )
        pos += n
        return pos - n

    _score, num_feature, num_class, _a, _e, major, _minor, num_target = _LEARNER.unpack_from(
        data, take(136, "the header")
    )
    names = []
    for what in ("the objective's name", "the booster's name"):
        (length,) = struct.unpack_from("<Q", data, take(8, f"{what}'s length"))
        at = take(length, what)
        names.append(data[at : at + length])
    need(
        names[1] in (b"gbtree", b"dart"),
        f"the booster is {names[1][:20]!r}: the fil backend serves gbtree and dart",
    )
    num_trees, _roots, _f, _p1, _p2, _groups, _slv = _GBTREE.unpack_from(
        data, take(160, "the booster's parameters")
    )
    need(1 <= num_feature < (1 << 31), f"num_feature is {num_feature}")
    need(
        1 <= num_trees <= (len(data) - pos) // (_TREE.size + _NODE.itemsize + _STAT),
        lambda: f"num_trees is {num_trees:,}, but the file's {len(data) - pos:,} bytes left hold fewer",
    )
    outputs = max(num_class, num_target, 1)
    need(
        num_class >= 0 and outputs <= num_trees,
        f"num_class {num_class} and num_target {num_target} for {num_trees} tree(s)",
    )
    offsets, counts = [], []
    end, unpack, tree_size, per_node = len(data), _TREE.unpack_from, _TREE.size, _NODE.itemsize + _STAT
    for t in range(num_trees):  # a tight loop: a text only for the tree it refuses
        if end - pos < tree_size:
            take(tree_size, f"tree {t}'s parameters")
        _r, num_nodes, _d, _depth, _nf, slv = unpack(data, pos)
        pos += tree_size
        if not 1 <= num_nodes <= (end - pos) // per_node:
            raise ModelFileError(
                f"tree {t} declares {num_nodes:,} nodes, but the file's {end - pos:,} bytes left hold fewer"
            )
        offsets.append(pos)
        counts.append(num_nodes)
        pos += num_nodes * per_node
        if slv != 0 and major < 2:
            (length,) = struct.unpack_from("<Q", data, take(8, f"tree {t}'s leaf vector length"))
            take(length * 4, f"tree {t}'s leaf vector")
    at = take(4 * num_trees, "tree_info")
    info = np.frombuffer(data, dtype="<i4", count=num_trees, offset=at)
    bad = (info < 0) | (info >= outputs)
    need(
        not bad.any(),
        lambda: f"tree {first(bad)}: tree_info says output {int(info[first(bad)])} of {outputs}",
    )
    sizes = np.array(counts, dtype=np.int64)
    # every node record at once: each tree's nodes begin at its offset, 20 bytes apart
    starts = np.repeat(np.array(offsets, dtype=np.int64), sizes)
    starts += (np.arange(starts.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)) * _NODE.itemsize
    raw = np.frombuffer(data, dtype=np.uint8)
    nodes = raw[starts[:, None] + np.arange(_NODE.itemsize)].view(_NODE).reshape(-1)
    _legacy_trees(nodes, sizes, int(num_feature))


def _legacy_trees(nodes: Array, counts: Array, num_feature: int) -> None:
    starts = np.concatenate(([0], np.cumsum(counts)))
    tree_of = np.repeat(np.arange(counts.size), counts)
    base = starts[:-1][tree_of]
    kept = nodes["sindex"] != _DELETED  # Treelite skips deleted nodes
    bad = ~kept[starts[:-1]]
    need(not bad.any(), lambda: f"tree {first(bad)}: its root is deleted")
    left, right = nodes["left"].astype(np.int64), nodes["right"].astype(np.int64)
    leaf = left == -1
    check_trees(left, right, leaf, starts, _where, present=kept)

    def at(mask: Array) -> str:
        i = first(mask)
        return _where(int(tree_of[i]), int(i - base[i]))

    split = (nodes["sindex"] & 0x7FFFFFFF).astype(np.int64)
    bad = kept & ~leaf & (split >= num_feature)
    need(
        not bad.any(),
        lambda: (
            f"{at(bad)} splits on feature {int(split[first(bad)])}, but the model reads {num_feature} feature(s)"
        ),
    )
    value = nodes["value"]
    bad = kept & ~leaf & np.isnan(value)
    need(not bad.any(), lambda: f"{at(bad)} has a NaN threshold")
    bad = kept & leaf & ~np.isfinite(value)
    need(not bad.any(), lambda: f"{at(bad)} has a leaf value that is not finite")
