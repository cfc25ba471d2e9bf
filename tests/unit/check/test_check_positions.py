"""check/positions.py: every field of a config text by path, with its line and column."""

from __future__ import annotations

import pytest

from inferd.check.positions import ConfigIndex, StructureError, normalize_path

TEXT = """name: "m"  # a comment: "not a string" { not a block
max_batch_size: 8
input [
  { name: "A", data_type: TYPE_FP32, dims: [ 1, -1 ] },
  { name: 'B' dims: 3 dims: 4 }
]
input { name: "C" }
parameters { key: "k" value: { string_value: "v \\"quoted\\"" } }
dynamic_batching < preferred_batch_size: [4, 8]; >
label: "a" "b"
offset: - 3
"""


@pytest.fixture(scope="module")
def index() -> ConfigIndex:
    return ConfigIndex.build(TEXT)


def at(index: ConfigIndex, *path: str | int) -> tuple[int, int]:
    occ = index.get(path)
    assert occ is not None, path
    return occ.line, occ.column


def test_normalize_path_adds_the_first_occurrence() -> None:
    assert normalize_path(("dynamic_batching", "preferred_batch_size")) == (
        "dynamic_batching",
        0,
        "preferred_batch_size",
        0,
    )
    assert normalize_path(("input", 1, "dims", 1)) == ("input", 1, "dims", 1)
    assert normalize_path(("input", 1)) == ("input", 1)


def test_scalar_fields_are_at_their_name(index: ConfigIndex) -> None:
    assert at(index, "name") == (1, 1)
    assert at(index, "max_batch_size") == (2, 1)
    assert index.get(("max_batch_size",)).value == "8"  # type: ignore[union-attr]


def test_list_elements_count_across_both_forms(index: ConfigIndex) -> None:
    # ``input [ {..}, {..} ]`` and a later ``input {..}`` are occurrences 0, 1 and 2
    assert at(index, "input", 0) == (4, 3)  # its "{"
    assert at(index, "input", 1, "name") == (5, 5)
    assert at(index, "input", 2) == (7, 1)  # its name
    assert at(index, "input", 2, "name") == (7, 9)
    # ``dims: [1, -1]``: each value where it is; ``dims: 3 dims: 4``: each field
    assert at(index, "input", 0, "dims", 0) == (4, 46)
    assert at(index, "input", 0, "dims", 1) == (4, 49)
    assert index.get(("input", 0, "dims", 1)).value == "-1"  # type: ignore[union-attr]
    assert at(index, "input", 1, "dims", 1) == (5, 23)


def test_strings_comments_maps_and_angle_brackets(index: ConfigIndex) -> None:
    assert index.get(("input", 1, "name")).value == "B"  # type: ignore[union-attr]
    assert at(index, "parameters", 0, "key") == (8, 14)
    assert index.get(("parameters", 0, "value", 0, "string_value")).value == 'v "quoted"'  # type: ignore[union-attr]
    assert at(index, "dynamic_batching", "preferred_batch_size", 1) == (9, 46)
    assert index.get(("label",)).value == "ab"  # type: ignore[union-attr]
    assert index.get(("offset",)).value == "-3"  # type: ignore[union-attr]
    # the comment's quote and brace were not read as a string or a block
    assert [o.path for o in index.under() if len(o.path) == 2][:2] == [("name", 0), ("max_batch_size", 0)]


def test_element_finds_by_name_and_map_key(index: ConfigIndex) -> None:
    assert index.element((), "input", "C") == ("input", 2)
    assert index.element((), "input", "nope") is None
    assert index.element((), "parameters", "k", key="key") == ("parameters", 0)


def test_find_value_under_and_nearest(index: ConfigIndex) -> None:
    found = index.find_value("B", under=("input", 1))
    assert found is not None and found.path == ("input", 1, "name", 0)
    assert index.find_value("B", under=("input", 0)) is None
    nearest = index.nearest(("input", 1, "reshape", "shape"))
    assert nearest is not None and nearest.path == ("input", 1)
    assert index.nearest(("sequence_batching",)) is None


def test_containing_is_the_innermost_field_statement(index: ConfigIndex) -> None:
    offset = TEXT.index("TYPE_FP32")
    occ = index.containing(offset)
    assert occ is not None and occ.path == ("input", 0, "data_type", 0)
    assert TEXT[occ.field_start : occ.field_end] == "data_type: TYPE_FP32,"
    # a list value: the whole ``dims: [...]`` statement (what blanking must remove)
    occ = index.containing(TEXT.index("-1"))
    assert occ is not None and TEXT[occ.field_start : occ.field_end] == "dims: [ 1, -1 ]"


def test_offsets_and_positions_round_trip(index: ConfigIndex) -> None:
    for line, column in ((1, 1), (4, 46), (9, 1)):
        assert index.position(index.offset(line, column)) == (line, column)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('input { name: "x"\n', (2, 1)),  # never closed: the end of the text
        ("input [ { name: 1 }\n", (2, 1)),
        ("name: }\n", (1, 7)),
        ("{ }\n", (1, 1)),
    ],
)
def test_malformed_text_raises_with_a_position(text: str, where: tuple[int, int]) -> None:
    with pytest.raises(StructureError) as e:
        ConfigIndex.build(text)
    assert (e.value.line, e.value.column) == where
