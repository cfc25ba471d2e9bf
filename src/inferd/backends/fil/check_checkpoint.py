"""A Treelite checkpoint (``checkpoint.tl``) framed as Treelite's deserializer reads it, checked
before it reads it (issue 42).

Treelite's ``ReadArrayFromStream`` reads an array's 64-bit count and resizes the array to it before
reading a byte of it: a count of 2^31 in a 6 KB file had a deserializer zero-fill 21 GB (killed by
the kernel), and ``num_tree`` loops that many times over whatever the stream yields. So the frames
are walked here first, in the v4 format's order (``docs/serialization/v4.rst``; the order
``check_forest.py`` confirms against the named accessors of the model Treelite makes), and every
count must fit in the bytes left; ``num_tree`` must fit as many of the smallest tree; per-node
arrays have one entry a node; the file ends where the last tree does. Treelite 3's v3 checkpoints
(which Treelite 4 also reads, in another layout) are refused: re-serialize them with Treelite 4.
"""

from __future__ import annotations

import struct

from inferd.backends.fil.check_common import ModelFileError, need

#: TypeInfo codes for the threshold and leaf types, and their sizes
FLOAT_TYPES = {2: 4, 3: 8}
#: the tree's arrays after num_nodes and has_categorical_split: (name, item size or "T" for the
#: model's float type, one entry per node ("node"), none or one a node ("stat"), any count)
TREE_ARRAYS = (
    ("node_type", 1, "node"),
    ("cleft", 4, "node"),
    ("cright", 4, "node"),
    ("split_index", 4, "node"),
    ("default_left", 1, "node"),
    ("leaf_value", "T", "node"),
    ("threshold", "T", "node"),
    ("cmp", 1, "node"),
    ("category_list_right_child", 1, "node"),
    ("leaf_vector", "T", "any"),
    ("leaf_vector_begin", 8, "node"),
    ("leaf_vector_end", 8, "node"),
    ("category_list", 4, "any"),
    ("category_list_begin", 8, "node"),
    ("category_list_end", 8, "node"),
    ("data_count", 8, "stat"),
    ("data_count_present", 1, "stat"),
    ("sum_hess", 8, "stat"),
    ("sum_hess_present", 1, "stat"),
    ("gain", 8, "stat"),
    ("gain_present", 1, "stat"),
)
#: the fewest bytes a tree takes: num_nodes, has_categorical_split, each array's count, the two
#: optional-field counts
MIN_TREE = 4 + 1 + 8 * len(TREE_ARRAYS) + 4 + 4
#: the fewest bytes an optional field takes (its name's length, item size and count)
MIN_OPTIONAL = 8 * 3

_I32, _U64, _F32 = struct.Struct("<i"), struct.Struct("<Q"), struct.Struct("<f")


class _Reader:
    """Bounded reads over the checkpoint's bytes: every read says what it reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str) -> int:
        """Skip ``n`` bytes of ``what``; where they begin."""
        need(
            n <= self.left(),
            lambda: f"{what} needs {n:,} bytes at offset {self.pos:,}, but the file has {self.left():,} left",
        )
        at = self.pos
        self.pos += n
        return at

    def i32(self, what: str) -> int:
        value: int = _I32.unpack_from(self.data, self.take(4, what))[0]
        return value

    def u64(self, what: str) -> int:
        value: int = _U64.unpack_from(self.data, self.take(8, what))[0]
        return value

    def u8(self, what: str) -> int:
        return self.data[self.take(1, what)]

    def array(self, itemsize: int, what: str) -> tuple[int, int]:
        """An array's count, its items skipped: (count, where they begin)."""
        count = self.u64(f"{what}'s length")
        need(
            count <= self.left() // itemsize,
            lambda: (
                f"{what} declares {count:,} entries ({count * itemsize:,} bytes), but the file has "
                f"{self.left():,} bytes left"
            ),
        )
        return count, self.take(count * itemsize, what)

    def optional_fields(self, what: str) -> None:
        """An extension slot (``what``: whose): a count, then (name, item size, count, items) each."""
        count = self.i32(f"the count of {what}")
        need(0 <= count <= self.left() // MIN_OPTIONAL, lambda: f"{what}: {count:,} declared")
        for i in range(count):
            self.array(1, f"{what}: field {i}'s name")
            size = self.u64(f"{what}: field {i}'s item size")
            n = self.u64(f"{what}: field {i}'s count")
            self.take(size * n, f"{what}: field {i}")


def check_checkpoint(data: bytes) -> None:
    """ModelFileError unless ``data`` is a v4 Treelite checkpoint whose every declared size fits
    the bytes it has (and nothing follows its last tree)."""
    r = _Reader(data)
    major, minor, patch = r.i32("the version"), r.i32("the version"), r.i32("the version")
    need(
        major == 4,
        f"not a Treelite 4 checkpoint (format version {major}.{minor}.{patch}): "
        + (
            "load it with Treelite 4 and serialize it again"
            if major == 3
            else "checkpoint.tl is written by treelite.Model.serialize"
        ),
    )
    threshold, leaf = r.u8("the threshold type"), r.u8("the leaf type")
    need(
        threshold == leaf and threshold in FLOAT_TYPES,
        f"threshold type {threshold} and leaf type {leaf}: Treelite 4 writes float32 or float64 for both",
    )
    real = FLOAT_TYPES[threshold]
    num_tree = r.u64("num_tree")
    r.i32("num_feature")
    r.u8("task_type")
    r.u8("average_tree_output")
    num_target = r.i32("num_target")
    count, _ = r.array(4, "num_class")
    need(num_target >= 1 and count == num_target, f"num_class has {count} entries for {num_target} targets")
    count, _ = r.array(4, "leaf_vector_shape")
    need(count == 2, f"leaf_vector_shape has {count} entries")
    for name in ("target_id", "class_id"):
        count, _ = r.array(4, name)
        need(count == num_tree, f"{name} has {count:,} entries for {num_tree:,} trees")
    r.array(1, "postprocessor")
    r.take(8, "sigmoid_alpha and ratio_c")
    r.array(8, "base_scores")
    r.array(1, "attributes")
    r.optional_fields("the header's optional fields")
    need(
        1 <= num_tree <= r.left() // MIN_TREE,
        lambda: (
            f"num_tree is {num_tree:,}, but the {r.left():,} bytes left hold at most "
            f"{r.left() // MIN_TREE:,} trees"
        ),
    )
    _trees(r, num_tree, real)
    need(r.left() == 0, lambda: f"{r.left():,} bytes follow the last tree")


def _trees(r: _Reader, num_tree: int, real: int) -> None:
    """The trees' frames: a tight loop that formats a text only for the frame it refuses (a tree
    costs 21 array counts; 1,000 trees about 5 ms)."""
    data, end = r.data, len(r.data)
    i32, u64 = _I32.unpack_from, _U64.unpack_from
    arrays = [(real if size == "T" else int(size), per) for _name, size, per in TREE_ARRAYS]
    pos = r.pos
    for t in range(num_tree):
        if end - pos < MIN_TREE:
            r.pos = pos
            r.take(MIN_TREE, f"tree {t}")
        num_nodes = i32(data, pos)[0]
        if num_nodes < 1:
            raise ModelFileError(f"tree {t} has {num_nodes} nodes")
        pos += 5
        for k, (size, per) in enumerate(arrays):
            if end - pos < 8:
                r.pos = pos
                r.take(8, f"tree {t}'s {TREE_ARRAYS[k][0]}'s length")
            count = u64(data, pos)[0]
            pos += 8
            if count > (end - pos) // size or (
                count != num_nodes and (per == "node" or (per == "stat" and count))
            ):
                r.pos = pos - 8
                r.array(size, f"tree {t}'s {TREE_ARRAYS[k][0]}")
                raise ModelFileError(
                    f"tree {t}'s {TREE_ARRAYS[k][0]} has {count:,} entries for {num_nodes:,} nodes"
                )
            pos += count * size
        if end - pos >= 8 and data[pos : pos + 8] == bytes(8):
            pos += 8  # no optional fields for the tree or its nodes (what Treelite 4 writes)
        else:
            r.pos = pos
            r.optional_fields(f"tree {t}'s optional fields")
            r.optional_fields(f"tree {t}'s per-node optional fields")
            pos = r.pos
    r.pos = pos
