"""The cloud front ends' reading of an inference body (frontends/http/dialect.py): the JSON header's
size from the Content-Type with the reference's texts, C's atoi, and multi-model statuses."""

from __future__ import annotations

import pytest

from inferd.errors import InferdError, InvalidArgumentError, UnavailableError
from inferd.frontends.http.dialect import (
    SAGEMAKER,
    SAGEMAKER_MIME,
    VERTEX,
    VERTEX_MIME,
    atoi,
    multi_model_status,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [("12", 12), ("  7x", 7), ("-3", -3), ("+4", 4), ("abc", 0), ("", 0), ("99999999999", 1215752191)],
)
def test_atoi_reads_as_glibc(text: str, value: int) -> None:
    assert atoi(text) == value


@pytest.mark.parametrize(
    ("content_type", "size"),
    [
        (None, None),
        ("application/json", None),
        (SAGEMAKER_MIME + "10", 10),
        (SAGEMAKER_MIME + "10; charset=utf-8", 10),
        (SAGEMAKER_MIME + "abc", 0),
        (SAGEMAKER_MIME, 0),
        (VERTEX_MIME + "10", None),  # the other platform's type: a JSON body
    ],
)
def test_sagemaker_header_length(content_type: str | None, size: int | None) -> None:
    assert SAGEMAKER.header_length(content_type, 100) == size


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        (SAGEMAKER_MIME + "101", "inference header size should be in range (0, 100), got: 101"),
        (SAGEMAKER_MIME + "-1", "inference header size should be in range (0, 100), got: -1"),
        (
            "text/plain; " + SAGEMAKER_MIME + "5",
            f"expect MIME type for binary data starts with '{SAGEMAKER_MIME}', got: text/plain; {SAGEMAKER_MIME}5",
        ),
    ],
)
def test_header_length_refusals(content_type: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        SAGEMAKER.header_length(content_type, 100)
    assert e.value.message == message


def test_binary_answers_are_labelled_as_each_platform_does() -> None:
    assert SAGEMAKER.binary_headers(42) == (SAGEMAKER_MIME + "42", b"")
    assert VERTEX.binary_headers(42) == (
        "application/octet-stream",
        b"\r\nInference-Header-Content-Length: 42",
    )


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InvalidArgumentError("unexpected shape"), 400),
        (UnavailableError("RuntimeError: CUDA out of memory. Tried"), 507),
        (InferdError("std::bad_alloc: MemoryError"), 507),
        (UnavailableError("model is unavailable"), 400),
    ],
)
def test_multi_model_statuses(error: InferdError, status: int) -> None:
    assert multi_model_status(error) == status
