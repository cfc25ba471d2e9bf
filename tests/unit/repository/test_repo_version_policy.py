"""Version policies: latest / all / specific over the versions on disk."""

from __future__ import annotations

import pytest

from inferd.errors import InvalidArgumentError
from inferd.repository import ModelVersionPolicy, no_version_message, parse_config_text, select_versions


def _policy(text: str) -> ModelVersionPolicy:
    return parse_config_text(f"version_policy {{ {text} }}", "p").version_policy


@pytest.mark.parametrize(
    ("text", "available", "expected"),
    [
        ("latest { num_versions: 1 }", [1, 2, 3], [3]),
        ("latest { num_versions: 2 }", [3, 1, 2], [2, 3]),
        ("latest { num_versions: 9 }", [1, 10, 2], [1, 2, 10]),
        ("latest { num_versions: 1 }", [2, 2, 1], [2]),
        ("latest { num_versions: 0 }", [1, 2], []),
        ("latest { num_versions: 1 }", [], []),
        ("all { }", [3, 1, 2], [1, 2, 3]),
        ("all { }", [], []),
        ("specific { versions: [ 1, 3 ] }", [1, 2, 3], [1, 3]),
        ("specific { versions: [ 3, 1, 3 ] }", [1, 2, 3], [1, 3]),
        ("specific { versions: [ 1, 7 ] }", [1, 2], [1]),
        ("specific { versions: [ 7 ] }", [1, 2], []),
        ("", [2, 1], [1, 2]),  # unset: every version, as Triton's fallback branch
    ],
)
def test_select_versions(text: str, available: list[int], expected: list[int]) -> None:
    assert select_versions(_policy(text), available) == expected


def test_version_zero_is_a_version() -> None:
    assert select_versions(_policy("latest { num_versions: 2 }"), [0, 1]) == [0, 1]


def test_accepts_any_iterable() -> None:
    assert select_versions(_policy("all { }"), {5: None, 4: None}.keys()) == [4, 5]


def test_empty_selection_raises_when_model_named() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        select_versions(_policy("specific { versions: [ 7 ] }"), [1], model_name="m")
    assert str(info.value) == "at least one version must be available under the version policy of model 'm'"
    assert str(info.value) == no_version_message("m")
    with pytest.raises(InvalidArgumentError):
        select_versions(_policy("latest { num_versions: 1 }"), [], model_name="m")


def test_non_empty_selection_with_model_name() -> None:
    assert select_versions(_policy("latest { num_versions: 1 }"), [1, 4], model_name="m") == [4]
