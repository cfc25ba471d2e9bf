"""What every tree model check shares: the refusal, bounded reads, and the walk that proves a
forest's nodes are trees (issue 42: a model file is untrusted input).

Treelite, XGBoost and LightGBM trust the files they read: a declared size is allocated before the
bytes behind it are read, a child index is followed wherever it points, a split's feature index
reads whatever lies at that offset of the row. So each format is checked twice: before a native
parser sees the file (``check_xgboost.py``, ``check_lightgbm.py``, ``check_checkpoint.py``: every
declared size bounded by the bytes that must back it, the framing as the parsers read it), and the
forest Treelite made of it after (``check_forest.py``: what GTIL, the engine every model runs on,
dereferences). :func:`check_trees` is the tree walk both use.

Pure numpy: no framework.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]

#: JSON / UBJSON nesting accepted (XGBoost's models nest 6 deep; the native parsers recurse)
MAX_DEPTH = 32


class ModelFileError(ValueError):
    """A model file refused: ``what`` says what is wrong, in the file's own terms."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def need(ok: bool | np.bool_, what: str | Callable[[], str]) -> None:
    """ModelFileError(``what``) unless ``ok`` (``what`` may be a function, for texts that cost)."""
    if not ok:
        raise ModelFileError(what() if callable(what) else what)


def first(mask: Array) -> int:
    """The index of the first true entry of ``mask`` (which has one)."""
    return int(np.flatnonzero(mask)[0])


def int_array(values: Any, what: str) -> Array:
    """``values`` (a list, an array, UBJSON's typed array) as an int64 array; ModelFileError for
    anything else."""
    if hasattr(values, "array"):
        values = values.array()
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as e:
        raise ModelFileError(f"{what} is not an array of integers ({e})") from None
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iub"):
        raise ModelFileError(f"{what} is not an array of integers")
    return arr.astype(np.int64, copy=False)


def float_array(values: Any, what: str) -> Array:
    """``values`` as a float64 array; ModelFileError for anything else."""
    if hasattr(values, "array"):
        values = values.array()
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as e:
        raise ModelFileError(f"{what} is not an array of numbers ({e})") from None
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iufb"):
        raise ModelFileError(f"{what} is not an array of numbers")
    return arr.astype(np.float64, copy=False)


def check_trees(
    left: Array,
    right: Array,
    leaf: Array,
    starts: Array,
    where: Callable[[int, int], str],
    present: Array | None = None,
) -> None:
    """That the nodes of every tree form a tree: ModelFileError naming the first node that does not.

    ``left``/``right``: each node's children as indices within its tree (anything for a leaf);
    ``leaf``: which nodes are leaves; ``starts``: where each tree begins in the arrays, then their
    length (one more entry than trees); ``where(tree, node)``: how the file names that node;
    ``present``: the nodes the parsers keep (XGBoost's legacy format skips deleted ones), all if None.

    Each tree's first node is its root; every child of a kept internal node is a kept node of the
    same tree, reached from exactly one parent; the root from none; every kept node from the root
    (so no cycles and nothing shared). Vectorised over the whole forest: a parent per node, then
    ancestors by pointer doubling (log2 of the deepest chain's length in steps, so a file of one
    long chain costs what a balanced one does).
    """
    total = int(left.size)
    sizes = np.diff(starts)
    need(bool((sizes > 0).all()), lambda: f"{where(first(sizes <= 0), -1)} has no nodes")
    tree_of = np.repeat(np.arange(sizes.size), sizes)
    base = starts[:-1][tree_of]
    kept = np.ones(total, dtype=bool) if present is None else present
    internal = kept & ~leaf
    nodes = np.flatnonzero(internal)
    for side, name in ((left, "left"), (right, "right")):
        child = side[nodes]
        bad = (child < 0) | (child >= sizes[tree_of[nodes]])
        if bad.any():
            n = nodes[first(bad)]
            raise ModelFileError(
                f"{where(int(tree_of[n]), int(n - base[n]))}: its {name} child {int(side[n])} is not a node "
                f"of the tree (it has {int(sizes[tree_of[n]])})"
            )
    kids = np.concatenate((left[nodes], right[nodes])) + np.concatenate((base[nodes], base[nodes]))
    parents = np.concatenate((nodes, nodes))
    gone = ~kept[kids]
    if gone.any():
        i = first(gone)
        raise ModelFileError(
            f"{where(int(tree_of[parents[i]]), int(parents[i] - base[parents[i]]))}: its child "
            f"{int(kids[i] - base[kids[i]])} is a deleted node"
        )
    count = np.bincount(kids, minlength=total)
    twice = count > 1
    if twice.any():
        n = first(twice)
        raise ModelFileError(
            f"{where(int(tree_of[n]), int(n - base[n]))} is the child of {int(count[n])} nodes: "
            "a tree's node has one parent"
        )
    roots = starts[:-1]
    if count[roots].any():
        t = first(count[roots] > 0)
        raise ModelFileError(f"{where(t, 0)} (the root) is the child of another node: a cycle")
    orphan = kept & (count == 0)
    orphan[roots] = False
    if orphan.any():
        n = first(orphan)
        raise ModelFileError(f"{where(int(tree_of[n]), int(n - base[n]))} is not reached from the root")
    # every kept node but the roots has one parent: follow them; a node whose ancestors never reach
    # a root lies on a cycle
    parent = np.arange(total)
    parent[kids] = parents
    steps = max(1, int(total).bit_length()) + 1
    for _ in range(steps):
        up = parent[parent]
        if np.array_equal(up, parent):
            break
        parent = up
    cycle = kept & (parent != base)
    if cycle.any():
        n = first(cycle)
        raise ModelFileError(
            f"{where(int(tree_of[n]), int(n - base[n]))} is on a cycle: it is not reached from the root"
        )
