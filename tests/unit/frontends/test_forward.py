"""Header forwarding patterns as the reference's RE2 reads them."""

from __future__ import annotations

import pytest

from inferd.errors import InvalidArgumentError
from inferd.frontends.forward import compile_forward_pattern, forwarded


def test_case_insensitive_by_default_and_a_leading_flag_group_as_re2() -> None:
    p = compile_forward_pattern("MY_HEADER.*", "--x")
    assert p is not None and p.search("my_header_1")
    sensitive = compile_forward_pattern("(?-i)MY_HEADER.*", "--x")
    assert sensitive is not None and not sensitive.search("my_header_1") and sensitive.search("MY_HEADER_1")
    assert compile_forward_pattern("", "--x") is None


def test_a_bad_pattern_names_its_flag() -> None:
    with pytest.raises(
        InvalidArgumentError, match="--grpc-header-forward-pattern: invalid regular expression"
    ):
        compile_forward_pattern("(unclosed", "--grpc-header-forward-pattern")


def test_forwarded_headers() -> None:
    p = compile_forward_pattern("my_header.*", "--x")
    assert p is not None
    headers = {"my_header_1": "a", "header_2": "b", "content-type": "c"}
    assert forwarded(headers, p) == {"my_header_1": "a"}
