"""The forest Treelite read, walked before anything runs it (issue 42): what GTIL dereferences.

GTIL (``src/gtil/predict.cc``) follows ``cleft``/``cright`` until a node whose ``cleft`` is -1,
reads ``row[split_index]``, copies ``leaf_vector[begin:end]`` and ``category_list[begin:end]`` and
adds into ``output[row, target_id, class_id]``, all unchecked, inside an OpenMP loop where a thrown
check ends the process. So every tree must be a tree (each node reached once from the root), every
split feature below ``num_feature``, every range inside its array, every leaf's output shaped as
its tree's class says, every class and target in range; thresholds not NaN (a comparison with NaN
sends every row one way) and leaf outputs finite. :func:`check_forest` checks all of it and raises
:class:`ModelFileError` naming the tree and node.

The fields are read through Treelite's own API: ``TreeliteSerializeModelToPyBuffer`` lists every
field of the model as a frame pointing into it (format, item size, count: what a checkpoint holds,
without copying), in the order of its v4 format; :func:`forest_fields` confirms that order against
the named accessors (``TreeliteGetHeaderField`` / ``TreeliteGetTreeField`` answer the same
pointers; once a process: the order is the installed Treelite's) and, should a Treelite lay them
out otherwise, reads every tree through the accessors instead (the same arrays, about 10x slower: 9 us a field and tree).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.backends.fil.check_common import Array, ModelFileError, check_trees, first, need

#: the header's frames in the v4 format, before the trees
HEADER = (
    "major_ver", "minor_ver", "patch_ver", "threshold_type", "leaf_output_type", "num_tree",
    "num_feature", "task_type", "average_tree_output", "num_target", "num_class", "leaf_vector_shape",
    "target_id", "class_id", "postprocessor", "sigmoid_alpha", "ratio_c", "base_scores", "attributes",
    "num_opt_field_per_model",
)  # fmt: skip
#: a tree's frames in the v4 format
TREE = (
    "num_nodes", "has_categorical_split", "node_type", "cleft", "cright", "split_index", "default_left",
    "leaf_value", "threshold", "cmp", "category_list_right_child", "leaf_vector", "leaf_vector_begin",
    "leaf_vector_end", "category_list", "category_list_begin", "category_list_end", "data_count",
    "data_count_present", "sum_hess", "sum_hess_present", "gain", "gain_present",
    "num_opt_field_per_tree", "num_opt_field_per_node",
)  # fmt: skip
#: the header fields the accessor names (the version, the types and the counts it does not)
NAMED_HEADER = HEADER[6:19]
#: what the walk reads of every tree (and the leaf vectors and category lists they point into)
WALKED = (
    "node_type", "cleft", "cright", "split_index", "leaf_value", "threshold", "cmp", "leaf_vector_begin",
    "leaf_vector_end",
)  # fmt: skip
VECTORS = ("leaf_vector",)
CATEGORIES = ("category_list", "category_list_begin", "category_list_end")
#: Treelite's TreeNodeType and Operator values
LEAF, NUMERICAL, CATEGORICAL = 0, 1, 2
OPERATORS = (1, 2, 3, 4, 5)  # kEQ kLT kLE kGT kGE
#: GTIL's postprocessors (src/gtil/postprocessor.cc)
POSTPROCESSORS = frozenset(
    (
        "identity", "signed_square", "hinge", "sigmoid", "exponential", "exponential_standard_ratio",
        "logarithm_one_plus_exp", "identity_multiclass", "softmax", "multiclass_ova",
    )
)  # fmt: skip


class _Frame(ctypes.Structure):
    """Treelite's ``TreelitePyBufferFrame``."""

    _fields_ = (
        ("buf", ctypes.c_void_p),
        ("format", ctypes.c_char_p),
        ("itemsize", ctypes.c_size_t),
        ("nitem", ctypes.c_size_t),
    )


#: Treelite's frame formats (PEP 3118 with standard sizes: ``=l`` is 4 bytes)
DTYPES = {
    b"=b": "i1", b"=B": "u1", b"=l": "<i4", b"=L": "<u4", b"=q": "<i8", b"=Q": "<u8", b"=f": "<f4",
    b"=d": "<f8", b"=c": "S1",
}  # fmt: skip


@dataclass
class Fields:
    """What the walk reads: the header's fields by name, and the walked fields of every tree, each
    concatenated over the trees (``starts[name]``: where each tree's entries begin, then their
    total; ``starts["nodes"]`` for the per-node ones)."""

    header: dict[str, Any]
    trees: dict[str, Array]
    starts: dict[str, Array]


def _check(rc: int) -> None:
    if rc != 0:
        from treelite.core import _LIB, TreeliteError

        raise TreeliteError(_LIB.TreeliteGetLastError().decode())


def _named(model: Any, name: str, tree: int | None) -> tuple[int, int, int, bytes]:
    """(buf, itemsize, nitem, format) of a field through Treelite's named accessors."""
    from treelite.core import _LIB

    frame = _Frame()
    if tree is None:
        _check(_LIB.TreeliteGetHeaderField(model.handle, name.encode(), ctypes.byref(frame)))
    else:
        _check(
            _LIB.TreeliteGetTreeField(model.handle, ctypes.c_uint64(tree), name.encode(), ctypes.byref(frame))
        )
    return int(frame.buf or 0), int(frame.itemsize), int(frame.nitem), bytes(frame.format)


def _frames(model: Any) -> tuple[Array, list[bytes]] | None:
    """The model's frames as a table of (buf, format pointer, itemsize, nitem) rows and the first
    tree's formats by field; None unless their order is the v4 order the named accessors confirm."""
    from treelite.core import _LIB

    ptr, n = ctypes.POINTER(_Frame)(), ctypes.c_size_t()
    _check(_LIB.TreeliteSerializeModelToPyBuffer(model.handle, ctypes.byref(ptr), ctypes.byref(n)))
    num_tree = int(model.num_tree)
    if num_tree < 1 or n.value != len(HEADER) + len(TREE) * num_tree:
        return None
    raw = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint64)), shape=(n.value * 4,))
    table = raw.reshape(n.value, 4).copy()  # a thread-local store of Treelite's: copied at once
    formats = [bytes(ptr[len(HEADER) + i].format) for i in range(len(TREE))]
    if any(
        np.dtype(DTYPES.get(f, "V0")).itemsize != int(table[len(HEADER) + i, 2])
        for i, f in enumerate(formats[:-2])
    ):
        return None
    if _LAYOUT["confirmed"] is None:  # the order is the installed Treelite's: confirmed once a process
        _LAYOUT["confirmed"] = _same_as_named(model, table, formats)
    return (table, formats) if _LAYOUT["confirmed"] else None


#: whether the installed Treelite's frames come in the v4 order (None: not asked yet)
_LAYOUT: dict[str, bool | None] = {"confirmed": None}


def _same_as_named(model: Any, table: Array, formats: list[bytes]) -> bool:
    """Each header and first-tree frame is the one the named accessor answers: the same pointer,
    item size, count and format."""
    checks: list[tuple[int, str, int | None]] = [(HEADER.index(name), name, None) for name in NAMED_HEADER]
    checks += [(len(HEADER) + i, name, 0) for i, name in enumerate(TREE[:-2])]
    for pos, name, tree in checks:
        buf, size, count, fmt = _named(model, name, tree)
        if (buf, size, count) != tuple(int(v) for v in table[pos, [0, 2, 3]]):
            return False
        if tree is not None and fmt != formats[pos - len(HEADER)]:
            return False
    return True


#: the frames Treelite's stream writes as scalars (the others: a 64-bit count, then the items)
HEADER_SCALARS = frozenset((*HEADER[:10], "sigmoid_alpha", "ratio_c", "num_opt_field_per_model"))
TREE_SCALARS = frozenset(
    ("num_nodes", "has_categorical_split", "num_opt_field_per_tree", "num_opt_field_per_node")
)


def _stream(model: Any, table: Array) -> tuple[Array, Array] | None:
    """The model as Treelite serializes it (``serialize_bytes``: its checkpoint, the frames in
    order) and where each frame's items begin in it; None unless every array's count and the total
    length are the frames'. Read this way, a field of every tree is a few numpy steps (about 10x
    fewer microseconds than a copy a frame)."""
    raw = np.frombuffer(model.serialize_bytes(), dtype=np.uint8)
    n = table.shape[0]
    scalar = np.zeros(n, dtype=bool)
    scalar[[HEADER.index(name) for name in HEADER_SCALARS]] = True
    within = np.arange(n - len(HEADER)) % len(TREE)
    scalar[len(HEADER) :] = np.isin(within, [TREE.index(name) for name in TREE_SCALARS])
    sizes = table[:, 2].astype(np.int64) * table[:, 3].astype(np.int64) + 8 * ~scalar
    begins = np.concatenate(([0], np.cumsum(sizes)))
    if begins[-1] != raw.size:
        return None
    counts = begins[:-1][~scalar]
    if not np.array_equal(_items(raw, counts, np.dtype("<u8")), table[~scalar, 3]):
        return None
    return raw, begins[:-1] + 8 * ~scalar


def _items(raw: Array, at: Array, dtype: np.dtype[Any]) -> Array:
    """The items of ``dtype`` at byte offsets ``at`` of ``raw`` (any alignment)."""
    size = dtype.itemsize
    out = np.empty(at.size, dtype=dtype)
    align = at % size
    for a in np.unique(align).tolist():
        view = raw[a : a + (raw.size - a) // size * size].view(dtype)
        pick = align == a
        out[pick] = view[(at[pick] - a) // size]
    return out


def _gather(
    raw: Array, at: Array, table: Array, formats: list[bytes], name: str, num_tree: int
) -> tuple[Array, Array]:
    """Field ``name`` of every tree, concatenated, and where each tree's entries begin (then their total)."""
    k = TREE.index(name)
    rows = len(HEADER) + k + len(TREE) * np.arange(num_tree)
    counts = table[rows, 3].astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(counts)))
    dtype = np.dtype(DTYPES[formats[k]])
    offsets = (
        np.repeat(at[rows], counts)
        + (np.arange(int(starts[-1])) - np.repeat(starts[:-1], counts)) * dtype.itemsize
    )
    return _items(raw, offsets, dtype), starts


def forest_fields(model: Any, *, accessors: bool = False) -> Fields:
    """The header and the walked tree fields of ``model`` (a ``treelite.Model``); through the named
    accessors, tree by tree, when ``accessors`` or when the frames' order is not confirmed."""
    header: dict[str, Any] = {}
    for name in NAMED_HEADER:
        value = model.get_header_accessor().get_field(name)
        header[name] = value if isinstance(value, str) else np.array(value)
    num_tree = header["num_tree"] = int(model.num_tree)
    found = None if accessors else _frames(model)
    stream = None if found is None else _stream(model, found[0])
    trees: dict[str, Array] = {}
    starts: dict[str, Array] = {}
    if found is not None and stream is not None:
        table, formats = found
        for name in (*WALKED, *VECTORS, *CATEGORIES):
            trees[name], starts[name] = _gather(*stream, table, formats, name, num_tree)
    else:
        parts: dict[str, list[Array]] = {name: [] for name in (*WALKED, *VECTORS, *CATEGORIES)}
        for t in range(num_tree):
            acc = model.get_tree_accessor(t)
            for name, arrs in parts.items():
                arrs.append(np.array(acc.get_field(name)))
        for name, arrs in parts.items():
            trees[name] = np.concatenate(arrs) if arrs else np.zeros(0)
            starts[name] = np.concatenate(([0], np.cumsum([a.size for a in arrs], dtype=np.int64)))
    nodes = starts["nodes"] = starts["cleft"]
    for name in (*WALKED, *CATEGORIES[1:]):
        bad = starts[name] != nodes
        if bad.any():
            t = max(0, first(bad) - 1)
            raise ModelFileError(f"tree {t}: its {name} does not have one entry per node")
    return Fields(header, trees, starts)


def _where(tree: int, node: int) -> str:
    return f"tree {tree}" if node < 0 else f"tree {tree}: node {node}"


def check_forest(model: Any) -> None:
    """ModelFileError unless every tree of ``model`` (a ``treelite.Model``) is safe for GTIL."""
    f = forest_fields(model)
    check_header(f.header)
    check_nodes(f)


def check_header(h: dict[str, Any]) -> None:
    num_tree = int(h["num_tree"])
    num_feature = int(h["num_feature"][0])
    num_target = int(h["num_target"][0])
    num_class = h["num_class"].astype(np.int64)
    shape = [int(v) for v in h["leaf_vector_shape"]]
    need(num_tree >= 1, "the model has no trees")
    need(num_feature >= 1, f"num_feature is {num_feature}")
    need(num_target == 1, f"num_target is {num_target}: one target is served")
    need(num_class.size == 1 and num_class[0] >= 1, lambda: f"num_class is {num_class.tolist()}")
    classes = int(num_class[0])
    for name, low, high in (("target_id", -1, 1), ("class_id", -1, classes)):
        ids = h[name].astype(np.int64)
        need(ids.size == num_tree, lambda: f"{name} has {ids.size} entries for {num_tree} trees")  # noqa: B023
        bad = (ids < low) | (ids >= high)
        need(not bad.any(), lambda: f"tree {first(bad)}: its {name} {int(ids[first(bad)])} is out of range")  # noqa: B023
    every = h["class_id"] == -1
    # a tree of every class (class_id -1) has leaves of num_class values; any other, of one
    need(
        not every.any() or shape == [1, classes],
        lambda: f"leaf_vector_shape is {shape} for {classes} classes",
    )
    need(every.all() or shape == [1, 1], lambda: f"leaf_vector_shape is {shape} for trees of one class")
    # so the class count is bounded by what the file holds: trees of their own, or leaves' values
    need(
        classes <= num_tree or every.any(),
        lambda: f"num_class is {classes}, but its {num_tree} tree(s) score at most {num_tree} class(es)",
    )
    scores = h["base_scores"]
    need(scores.size == classes, lambda: f"base_scores has {scores.size} entries for {classes} class(es)")
    need(bool(np.isfinite(scores).all()), "base_scores are not all finite")
    need(h["postprocessor"] in POSTPROCESSORS, lambda: f"unknown postprocessor {h['postprocessor']!r}")
    for name in ("sigmoid_alpha", "ratio_c"):
        need(bool(np.isfinite(h[name]).all()), f"{name} is not finite")


def check_nodes(f: Fields) -> None:
    t, h, starts = f.trees, f.header, f.starts["nodes"]
    num_feature = int(h["num_feature"][0])
    sizes = np.diff(starts)
    tree_of = np.repeat(np.arange(sizes.size), sizes)
    base = starts[:-1][tree_of]

    def at(mask: Array) -> str:
        n = first(mask)
        return _where(int(tree_of[n]), int(n - base[n]))

    cleft, cright = t["cleft"].astype(np.int64), t["cright"].astype(np.int64)
    leaf = cleft == -1  # GTIL's IsLeaf
    kind = t["node_type"]
    bad = leaf & (kind != LEAF)
    need(not bad.any(), lambda: f"{at(bad)} has no children but is not a leaf")
    bad = ~leaf & (kind != NUMERICAL) & (kind != CATEGORICAL)
    need(not bad.any(), lambda: f"{at(bad)} has children but node type {int(kind[first(bad)])}")
    check_trees(cleft, cright, leaf, starts, _where)
    split = t["split_index"].astype(np.int64)
    bad = ~leaf & ((split < 0) | (split >= num_feature))
    need(
        not bad.any(),
        lambda: (
            f"{at(bad)} splits on feature {int(split[first(bad)])}, but the model reads {num_feature} feature(s)"
        ),
    )
    numerical = ~leaf & (kind == NUMERICAL)
    bad = numerical & ~np.isin(t["cmp"], OPERATORS)
    need(not bad.any(), lambda: f"{at(bad)} has comparison operator {int(t['cmp'][first(bad)])}")
    bad = numerical & np.isnan(t["threshold"])
    need(not bad.any(), lambda: f"{at(bad)} has a NaN threshold")
    _range(f, "category_list", tree_of, at, ~leaf & (kind == CATEGORICAL))
    begin, end = _range(f, "leaf_vector", tree_of, at, leaf)
    width = end - begin
    vector = leaf & (width != 0)  # GTIL's HasLeafVector
    every = (h["class_id"] == -1)[tree_of]
    want = int(h["num_class"][0])
    bad = leaf & every & (width != want)
    need(
        not bad.any(),
        lambda: (
            f"{at(bad)}: its tree scores every class, but the leaf holds {int(width[first(bad)])} value(s) for {want}"
        ),
    )
    bad = vector & ~every & (width != 1)
    need(
        not bad.any(),
        lambda: f"{at(bad)}: a leaf vector of {int(width[first(bad)])} values in a tree of one class",
    )
    bad = leaf & ~vector & (h["target_id"] == -1)[tree_of]
    need(not bad.any(), lambda: f"{at(bad)}: a leaf value in a tree of every target")
    bad = leaf & ~vector & ~np.isfinite(t["leaf_value"])
    need(not bad.any(), lambda: f"{at(bad)} has a leaf value that is not finite")
    need(bool(np.isfinite(t["leaf_vector"]).all()), "a leaf vector holds a value that is not finite")


def _range(f: Fields, name: str, tree_of: Array, at: Any, used: Array) -> tuple[Array, Array]:
    """The ``used`` nodes' [begin, end) in their tree's ``name`` array, checked (the other nodes'
    are never read); as int64 offsets in the tree's array (0 for the others)."""
    begin = f.trees[f"{name}_begin"].astype(np.uint64)
    end = f.trees[f"{name}_end"].astype(np.uint64)
    length = np.diff(f.starts[name]).astype(np.uint64)[tree_of]
    bad = used & ((begin > end) | (end > length))
    need(
        not bad.any(),
        lambda: (
            f"{at(bad)}: its {name} range [{int(begin[first(bad)])}, {int(end[first(bad)])}) is outside "
            f"the tree's {int(length[first(bad)])} entries"
        ),
    )
    return np.where(used, begin, 0).astype(np.int64), np.where(used, end, 0).astype(np.int64)
