"""A LightGBM text model (``model.txt``) checked before Treelite and LightGBM read it (issue 42).

Two parsers read the file, each trusting it: Treelite (``src/model_loader/lightgbm.cc``) reads
``num_leaves`` and then that many numbers of each array whatever the line holds (a 6 KB file
declaring a billion leaves grew the server to 12.8 GB), walks the children breadth first (a cycle
never ends), and indexes ``cat_boundaries`` with a categorical split's threshold unchecked;
LightGBM (``src/io/tree.cpp``) parses arrays of ``num_leaves`` numbers past the end of their line,
jumps to each tree by the offsets of ``tree_sizes``, and scans a tree's line for ``=`` past its end.
And they do not read the same lines: Treelite gives a tree every ``key=value`` line up to the next
``Tree=`` (the lines after the trees land in the last one), LightGBM a tree's block of at most 22
lines up to a blank one.

So the file is read here as both read it: every tree's fields as Treelite sees them must be the
ones LightGBM sees; every array holds exactly the count its tree declares (so every declared size
is backed by the file's bytes); children form a tree; features lie below ``max_feature_idx + 1``
(itself the count of ``feature_names``); categorical splits index ``cat_boundaries``, whose
offsets lie in ``cat_threshold``; ``tree_sizes`` give each tree's true offset; ``num_class`` is at
most the trees' count. Linear trees' leaf features are checked too (LightGBM runs them).
"""

from __future__ import annotations

import re
from typing import Any, cast

import numpy as np

from inferd.backends.fil.check_common import Array, ModelFileError, check_trees, first, need

#: the tree fields Treelite reads (and so must read as LightGBM does)
TREELITE_KEYS = (
    "num_leaves", "num_cat", "leaf_value", "decision_type", "cat_boundaries", "cat_threshold",
    "split_feature", "threshold", "split_gain", "internal_count", "leaf_count", "left_child", "right_child",
)  # fmt: skip
#: LightGBM's most lines a tree (``Tree::Tree``'s max_num_line)
MAX_TREE_LINES = 22
#: a tree's arrays: (field, entries: "L" one a leaf, "I" one an internal node; parsed here or only
#: counted: LightGBM's parser reads a count of numbers and stops at the line's end when it has them)
ARRAYS = (
    ("leaf_value", "L", "float"),
    ("leaf_weight", "L", "count"),
    ("leaf_count", "L", "count"),
    ("split_feature", "I", "int"),
    ("split_gain", "I", "count"),
    ("threshold", "I", "float"),
    ("decision_type", "I", "int"),
    ("left_child", "I", "int"),
    ("right_child", "I", "int"),
    ("internal_value", "I", "count"),
    ("internal_weight", "I", "count"),
    ("internal_count", "I", "count"),
)
REQUIRED = ("leaf_value", "split_feature", "threshold", "left_child", "right_child")
_INT = re.compile(r"[+-]?\d+")


def _int(text: str | None, what: str) -> int:
    if text is not None and text.isdigit() and len(text) < 10:  # the usual case, without a regex
        return int(text)
    need(text is not None, f"{what} is missing")
    assert text is not None
    need(_INT.fullmatch(text) is not None, lambda: f"{what} is {text[:40]!r}, not an integer")
    value = int(text)
    need(-(1 << 31) <= value < (1 << 31), f"{what} is {value}, out of range")
    return value


def _parse(text: str, kind: str, what: str) -> Array:
    """Numbers one space apart (the count already checked). numpy's reading takes what Python's
    ``int``/``float`` take, underscores too, which neither parser does: refused."""
    if not text:
        return np.zeros(0, dtype=np.int64 if kind == "int" else np.float64)
    need("_" not in text, f"{what} holds something other than numbers")
    try:
        out = np.array(text.split(" "), dtype=np.float64 if kind == "float" else np.int64)
    except (ValueError, OverflowError):
        raise ModelFileError(
            f"{what} holds something other than {'numbers' if kind == 'float' else 'integers'}"
        ) from None
    if kind == "int":
        need(bool(((out >= -(1 << 31)) & (out < (1 << 31))).all()), f"{what} holds an integer out of range")
    return out


def _counted(values: list[str | None], want: Array, name: str) -> None:
    """Each tree's ``name`` (None: absent) holds exactly its ``want`` entries, one space apart."""
    present = [i for i, v in enumerate(values) if v is not None]
    texts = [values[i] or "" for i in present]
    got = np.array([(v.count(" ") + 1) if v else 0 for v in texts], dtype=np.int64)
    bad = got != want[present]
    if bad.any():
        t = present[first(bad)]
        raise ModelFileError(f"tree {t}: {name} has {int(got[first(bad)])} entries for {int(want[t])}")
    if "  " in " ".join(texts) or any(v[:1] == " " or v[-1:] == " " for v in texts):
        t = next(present[i] for i, v in enumerate(texts) if "  " in v or v[:1] == " " or v[-1:] == " ")
        raise ModelFileError(f"tree {t}: {name} has spaces out of place")


def _fields(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition("=")
        out[key] = value
    return out


def check_lightgbm(data: bytes) -> None:
    """ModelFileError unless ``data`` is a LightGBM text model both parsers read alike and safely."""
    need(b"\x00" not in data, "the file holds a NUL byte: not a LightGBM text model")
    need(b"\r" not in data, "the file has carriage returns: LightGBM writes lines ending in \\n")
    text = data.decode("latin-1")  # one character a byte: offsets are LightGBM's
    lines = text.split("\n")
    keys = [line.partition("=")[0] for line in lines]
    tree_lines = [i for i, k in enumerate(keys) if k == "Tree"]
    header = _fields(lines[: tree_lines[0] if tree_lines else len(lines)])
    for name in ("max_feature_idx", "num_class"):  # Treelite's first questions, in its words
        need(name in header, f"Ill-formed LightGBM model file: need {name}")
    need(bool(tree_lines), "the model has no trees (no Tree= line)")
    for i in tree_lines:
        need(lines[i].startswith("Tree="), lambda: f"line {i + 1} is {lines[i][:40]!r}")  # noqa: B023
    num_class = _int(header.get("num_class"), "num_class")
    max_feature = _int(header.get("max_feature_idx"), "max_feature_idx")
    per_iteration = _int(header.get("num_tree_per_iteration", str(num_class)), "num_tree_per_iteration")
    need(max_feature >= 0, f"max_feature_idx is {max_feature}")
    for name in ("feature_names", "feature_infos"):
        value = header.get(name)
        need(value is not None, f"{name} is missing")
        assert value is not None
        count = len(value.split(" "))
        need(count == max_feature + 1, f"{name} has {count} entries for max_feature_idx {max_feature}")
    trees = _lightgbm_blocks(lines, tree_lines, keys)
    need(
        len(trees) == len(tree_lines),
        lambda: (
            f"LightGBM reads {len(trees)} tree(s) where Treelite reads {len(tree_lines)}: line "
            f"{tree_lines[len(trees)] + 1} starts a tree after the trees end"
        ),
    )
    _same_for_treelite(lines, keys, tree_lines, trees)
    _trees(trees, max_feature)
    starts = np.concatenate(([0], np.cumsum([len(line) + 1 for line in lines])))[:-1]
    _tree_sizes(header.get("tree_sizes"), starts, tree_lines)
    need(num_class >= 1, f"num_class is {num_class}")
    need(
        num_class <= len(trees),
        f"num_class is {num_class}, but the model has {len(trees)} tree(s): a class has trees of its own",
    )
    need(
        per_iteration == num_class, f"num_tree_per_iteration is {per_iteration}, but num_class is {num_class}"
    )
    for part in header.get("objective", "").split(" ")[1:]:
        name, _, value = part.partition(":")
        if name == "num_class":
            need(
                _int(value, "the objective's num_class") == num_class,
                "the objective's num_class is not num_class",
            )


def _where(tree: int, node: int) -> str:
    return f"tree {tree}" if node < 0 else f"tree {tree}: node {node}"


def _lightgbm_blocks(lines: list[str], tree_lines: list[int], keys: list[str]) -> list[dict[str, str]]:
    """The trees as LightGBM reads them: after each ``Tree=`` line, up to 22 ``key=value`` lines
    until a blank one; the trees end at the first line that is neither blank nor ``Tree=``."""
    values: list[str | None] = [
        line[len(k) + 1 :] if len(k) < len(line) else None for k, line in zip(keys, lines, strict=True)
    ]
    blocks: list[dict[str, str]] = []
    i = tree_lines[0]
    while i < len(lines):
        if lines[i] == "":
            i += 1
            continue
        if keys[i] != "Tree":
            break
        j = i + 1
        while j < len(lines) and lines[j] != "":
            j += 1
        t = len(blocks)
        if j - i - 1 > MAX_TREE_LINES:
            raise ModelFileError(f"tree {t} has {j - i - 1} lines: LightGBM reads {MAX_TREE_LINES}")
        fields = dict(zip(keys[i + 1 : j], values[i + 1 : j], strict=True))
        if len(fields) != j - i - 1 or None in fields.values():
            raise ModelFileError(f"tree {t} sets a field twice or has a line without '='")
        blocks.append(cast(dict[str, str], fields))
        i = j
    return blocks


def _same_for_treelite(
    lines: list[str], keys: list[str], tree_lines: list[int], trees: list[dict[str, str]]
) -> None:
    """Treelite gives a tree every line up to the next ``Tree=`` (trailing spaces trimmed, the last
    value of a key kept): the fields it reads must be LightGBM's. They are when no line outside
    the trees' blocks names one of them, and none of theirs ends in a space."""
    wanted = frozenset(TREELITE_KEYS)
    bounds = [*tree_lines[1:], len(lines)]
    for t, (begin, block) in enumerate(zip(tree_lines, trees, strict=True)):
        after = begin + 1 + len(block)
        outside = [k for k in range(after, bounds[t]) if keys[k] in wanted]
        if outside:
            k = outside[0]
            raise ModelFileError(
                f"tree {t}: Treelite and LightGBM read its {keys[k]} from different lines (line {k + 1}, "
                "outside the tree's block, sets it again for Treelite)"
            )
        spaced = [key for key in wanted if block.get(key, "").endswith((" ", "\t"))]
        need(not spaced, lambda: f"tree {t}: its {spaced[0]} ends in a space")  # noqa: B023


def _trees(trees: list[dict[str, str]], max_feature: int) -> None:
    """Every tree's fields, each array checked for all trees at once."""
    n = len(trees)
    leaves = np.array([_int(b.get("num_leaves"), f"tree {t}: num_leaves") for t, b in enumerate(trees)])
    num_cat = np.array([_int(b.get("num_cat"), f"tree {t}: num_cat") for t, b in enumerate(trees)])
    linear = np.array([_int(b.get("is_linear", "0"), f"tree {t}: is_linear") for t, b in enumerate(trees)])
    for name, values, low in (("num_leaves", leaves, 1), ("num_cat", num_cat, 0), ("is_linear", linear, 0)):
        bad = values < low
        need(not bad.any(), lambda: f"tree {first(bad)}: {name} is {int(values[first(bad)])}")  # noqa: B023
    bad = linear > 1
    need(not bad.any(), lambda: f"tree {first(bad)}: is_linear is {int(linear[first(bad)])}")
    inner = leaves - 1
    arrays: dict[str, Array] = {}
    for name, per, kind in ARRAYS:
        want = leaves if per == "L" else inner
        # a tree of one leaf: both read its leaf_value and leaf_count, nothing else
        read = [inner[t] > 0 or name in ("leaf_value", "leaf_count") for t in range(n)]
        texts = [b.get(name) if read[t] else None for t, b in enumerate(trees)]
        if name in REQUIRED:
            missing = [t for t, v in enumerate(texts) if v is None and read[t]]
            if missing:
                raise ModelFileError(f"tree {missing[0]}: {name} is missing")
        _counted(texts, want, name)
        if kind != "count":
            arrays[name] = _parse(" ".join(v for v in texts if v), kind, name)
    decision = [b.get("decision_type") or " ".join(["0"] * int(inner[t])) for t, b in enumerate(trees)]
    arrays["decision_type"] = _parse(" ".join(d for d in decision if d), "int", "decision_type")
    node_tree = np.repeat(np.arange(n), inner)
    node_index = np.arange(node_tree.size) - np.repeat(np.cumsum(inner) - inner, inner)

    def at(mask: Array) -> str:
        i = first(mask)
        return f"tree {int(node_tree[i])}: node {int(node_index[i])}"

    values = arrays["leaf_value"]
    bad = ~np.isfinite(values)
    leaf_tree = np.repeat(np.arange(n), leaves)
    need(not bad.any(), lambda: f"tree {int(leaf_tree[first(bad)])}: a leaf value is not finite")
    feature, threshold, kinds = arrays["split_feature"], arrays["threshold"], arrays["decision_type"]
    bad = (feature < 0) | (feature > max_feature)
    need(
        not bad.any(),
        lambda: (
            f"{at(bad)} splits on feature {int(feature[first(bad)])}, but the model reads "
            f"{max_feature + 1} feature(s)"
        ),
    )
    need(not np.isnan(threshold).any(), lambda: f"{at(np.isnan(threshold))} has a NaN threshold")
    bad = (kinds < 0) | (kinds > 127) | (((kinds >> 2) & 3) == 3)
    need(not bad.any(), lambda: f"{at(bad)} has decision_type {int(kinds[first(bad)])}")
    categorical = (kinds & 1) == 1
    _categories(trees, num_cat, categorical, threshold, node_tree, at)
    for t in np.flatnonzero(linear).tolist():
        _linear(trees[t], int(leaves[t]), max_feature, f"tree {t}")
    _structure(arrays["left_child"], arrays["right_child"], inner, leaves)


def _structure(left: Array, right: Array, inner: Array, leaves: Array) -> None:
    """Children as LightGBM writes them (internal i as i, leaf j as ~j) checked, then the trees'
    shape: nodes numbered internal ones first, then leaves."""
    node_tree = np.repeat(np.arange(inner.size), inner)
    own_inner, own_leaves = inner[node_tree], leaves[node_tree]
    size = inner + leaves
    starts = np.concatenate(([0], np.cumsum(size)))
    total = int(starts[-1])
    node_left = np.zeros(total, dtype=np.int64)
    node_right = np.zeros(total, dtype=np.int64)
    inner_at = np.arange(node_tree.size) - np.repeat(np.cumsum(inner) - inner, inner)
    where = starts[:-1][node_tree] + inner_at
    for side, c, out in (("left_child", left, node_left), ("right_child", right, node_right)):
        bad = np.where(c >= 0, c >= own_inner, ~c >= own_leaves)
        if bad.any():
            i = first(bad)
            raise ModelFileError(
                f"tree {int(node_tree[i])}: node {int(inner_at[i])}'s {side} {int(c[i])} is not a node "
                f"({int(own_inner[i])} internal, {int(own_leaves[i])} leaves)"
            )
        out[where] = np.where(c >= 0, c, own_inner + ~c)
    leaf = np.ones(total, dtype=bool)
    leaf[where] = False
    check_trees(node_left, node_right, leaf, starts, _where)


def _tree_sizes(value: str | None, starts: Array, tree_lines: list[int]) -> None:
    """LightGBM finds tree i at the first tree's offset plus the sizes of those before it."""
    if value is None:
        return
    _counted([value], np.array([len(tree_lines)]), "tree_sizes")
    sizes = _parse(value, "int", "tree_sizes")
    offsets = np.concatenate(([0], np.cumsum(sizes)))[:-1]
    real = starts[tree_lines] - starts[tree_lines[0]]
    bad = offsets != real
    need(
        not bad.any(),
        lambda: (
            f"tree_sizes puts tree {first(bad)} at offset {int(offsets[first(bad)])} after the first "
            f"tree, but it is at {int(real[first(bad)])}"
        ),
    )


def _categories(
    trees: list[dict[str, str]], num_cat: Array, categorical: Array, index: Array, node_tree: Array, at: Any
) -> None:
    """A categorical split's threshold indexes its tree's ``cat_boundaries``, whose offsets lie in
    ``cat_threshold``."""
    cats = num_cat[node_tree]
    bad = categorical & ((index != np.floor(index)) | (index < 0) | (index >= cats))
    need(
        not bad.any(),
        lambda: (
            f"{at(bad)} is categorical with category set {index[first(bad)]}, but the tree has {int(cats[first(bad)])}"
        ),
    )
    for t in np.flatnonzero(num_cat).tolist():
        b = trees[t]
        need(
            "cat_boundaries" in b and "cat_threshold" in b,
            f"tree {t}: num_cat is set, its categories missing",
        )
        _counted([b["cat_boundaries"]], np.array([num_cat[t] + 1]), f"tree {t}: cat_boundaries")
        bounds = _parse(b["cat_boundaries"], "int", f"tree {t}: cat_boundaries")
        need(
            bounds[0] == 0 and bool((np.diff(bounds) >= 0).all()),
            f"tree {t}: cat_boundaries do not rise from 0",
        )
        _counted([b["cat_threshold"]], np.array([int(bounds[-1])]), f"tree {t}: cat_threshold")


def _linear(f: dict[str, str], leaves: int, max_feature: int, where: str) -> None:
    """A linear tree's leaves: a constant each, and coefficients of features below the count
    (LightGBM writes a leaf's features and coefficients one space apart, the leaves two apart)."""
    if "leaf_const" in f:
        _counted([f["leaf_const"]], np.array([leaves]), f"{where}: leaf_const")
    if "num_features" not in f:
        return
    _counted([f["num_features"]], np.array([leaves]), f"{where}: num_features")
    counts = _parse(f["num_features"], "int", f"{where}: num_features")
    need(bool((counts >= 0).all()), f"{where}: num_features holds a negative count")
    total = int(counts.sum())
    for name, kind in (("leaf_features", "int"), ("leaf_coeff", "float")):
        if name not in f:
            continue
        tokens = f[name].split()
        need(len(tokens) == total, f"{where}: {name} has {len(tokens)} entries for {total}")
        if total == 0:
            continue
        values = _parse(" ".join(tokens), kind, f"{where}: {name}")
        bad = (values < 0) | (values > max_feature)
        if name == "leaf_features" and bad.any():
            raise ModelFileError(f"{where}: a leaf's linear model reads feature {int(values[first(bad)])}")
