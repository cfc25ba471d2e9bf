"""Tensor: zero-copy views over received buffers, wire bytes, and the BYTES codec."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from inferd.core.tensor import BytesDecodeError, Tensor, deserialize_bytes, serialize_bytes
from inferd.core.types import BY_WIRE, BYTES

FP32 = BY_WIRE["FP32"]

shapes = st.lists(st.integers(min_value=0, max_value=4), min_size=0, max_size=3).map(tuple)


@st.composite
def bytes_arrays(draw: st.DrawFn) -> np.ndarray[Any, Any]:
    """An object array of arbitrary byte strings with an arbitrary shape."""
    shape = draw(shapes)
    count = int(np.prod(shape, dtype=np.int64))
    elements = draw(st.lists(st.binary(max_size=40), min_size=count, max_size=count))
    arr = np.empty(count, dtype=np.object_)
    arr[:] = elements
    return arr.reshape(shape)


def _encode(elements: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


# -- zero copy -----------------------------------------------------------------------------------


def test_raw_memoryview_array_shares_memory() -> None:
    buf = bytearray(np.arange(6, dtype=np.float32).tobytes())
    t = Tensor("x", FP32, (2, 3), raw=memoryview(buf))
    arr = t.array
    assert arr.shape == (2, 3)
    assert arr.dtype == np.float32
    assert np.shares_memory(arr, np.frombuffer(buf, dtype=np.uint8))
    buf[0:4] = np.float32(42).tobytes()
    assert arr[0, 0] == 42  # a view, not a copy


def test_raw_slice_of_a_received_body_shares_memory() -> None:
    # the HTTP codec slices the binary tail out of the body: the array must stay a view of the body
    payload = np.arange(4, dtype=np.int64)
    body = b"HEAD" + payload.tobytes() + b"TAIL"
    mv = memoryview(body)[4 : 4 + payload.nbytes]
    t = Tensor("x", BY_WIRE["INT64"], (4,), raw=mv)
    np.testing.assert_array_equal(t.array, payload)
    assert np.shares_memory(t.array, np.frombuffer(body, dtype=np.uint8))
    assert t.array is t.array  # made once


def test_raw_to_bytes_returns_the_received_buffer() -> None:
    buf = bytearray(b"\x00\x00\x80?\x00\x00\x00@")
    t = Tensor("x", FP32, (2,), raw=memoryview(buf))
    out = t.to_bytes()
    assert isinstance(out, memoryview)
    assert bytes(out) == bytes(buf)
    assert np.shares_memory(np.frombuffer(out, dtype=np.uint8), np.frombuffer(buf, dtype=np.uint8))


def test_renamed_shares_data() -> None:
    arr = np.arange(3, dtype=np.float32)
    t = Tensor.from_array("a", arr)
    r = t.renamed("b")
    assert r.name == "b" and t.name == "a"
    assert r.array is arr
    raw = Tensor("a", FP32, (1,), raw=b"\x00\x00\x80?").renamed("c")
    assert raw.raw == b"\x00\x00\x80?"
    assert raw.array[0] == 1.0


def test_raw_byte_size() -> None:
    assert Tensor.from_array("a", np.zeros(3, np.float32)).raw_byte_size() == -1
    assert Tensor("a", FP32, (3,), raw=bytes(12)).raw_byte_size() == 12
    assert Tensor("a", FP32, (3,), raw=memoryview(bytes(20))[4:16]).raw_byte_size() == 12


@pytest.mark.parametrize(("shape", "count"), [((), 1), ((0,), 0), ((3,), 3), ((2, 0, 5), 0), ((2, 3, 4), 24)])
def test_element_count(shape: tuple[int, ...], count: int) -> None:
    assert Tensor("a", FP32, shape, raw=b"").element_count == count


def test_from_array_picks_the_datatype() -> None:
    assert Tensor.from_array("a", np.zeros((2, 2), np.int16)).datatype is BY_WIRE["INT16"]
    assert Tensor.from_array("a", np.array(["x", "y"])).datatype is BYTES
    assert Tensor.from_array("a", np.array([b"x"])).datatype is BYTES
    t = Tensor.from_array("a", np.zeros(2, np.uint16), BY_WIRE["BF16"])
    assert t.datatype is BY_WIRE["BF16"]
    assert t.shape == (2,)
    assert all(type(d) is int for d in Tensor.from_array("a", np.zeros((2, 3))).shape)


def test_set_array_keeps_raw() -> None:
    t = Tensor("a", BYTES, (1,), raw=_encode([b"xy"]))
    arr = np.array([b"xy"], dtype=np.object_)
    t.set_array(arr)
    assert t.array is arr
    assert bytes(t.to_bytes()) == _encode([b"xy"])


# -- wire bytes of arrays ------------------------------------------------------------------------


def test_to_bytes_is_row_major_little_endian() -> None:
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert bytes(Tensor.from_array("a", arr).to_bytes()) == arr.astype("<i4").tobytes()
    transposed = arr.T  # not C-contiguous
    assert bytes(Tensor.from_array("a", transposed).to_bytes()) == np.ascontiguousarray(transposed).tobytes()
    big = np.arange(3, dtype=">f8")
    t = Tensor("a", BY_WIRE["FP64"], (3,), array=big)
    assert bytes(t.to_bytes()) == np.arange(3, dtype="<f8").tobytes()


def test_to_bytes_of_bool() -> None:
    arr = np.array([True, False, True])
    assert bytes(Tensor.from_array("a", arr).to_bytes()) == b"\x01\x00\x01"


def test_to_bytes_of_bytes_tensor_is_length_prefixed() -> None:
    arr = np.array([[b"ab"], [b""]], dtype=np.object_)
    assert Tensor.from_array("a", arr).to_bytes() == _encode([b"ab", b""])


# -- the BYTES codec -----------------------------------------------------------------------------


def test_serialize_accepts_str_bytes_and_numpy_scalars() -> None:
    values = ["é", b"\x00\xff", np.bytes_(b"np"), bytearray(b"ba"), 7]
    assert serialize_bytes(values) == _encode(["é".encode(), b"\x00\xff", b"np", b"ba", b"7"])
    assert serialize_bytes(np.array(["a", "bc"])) == _encode([b"a", b"bc"])
    assert serialize_bytes(np.array([b"a", b"bc"])) == _encode([b"a", b"bc"])
    assert serialize_bytes(np.empty((0, 3), dtype=np.object_)) == b""


def test_deserialize_gives_an_object_array_of_bytes() -> None:
    arr = deserialize_bytes(_encode([b"a", b"", b"xyz"]))
    assert arr.dtype == np.object_
    assert arr.shape == (3,)
    assert list(arr) == [b"a", b"", b"xyz"]
    assert all(type(v) is bytes for v in arr)
    assert deserialize_bytes(b"", 0).shape == (0,)


@given(bytes_arrays())
def test_bytes_round_trip(arr: np.ndarray[Any, Any]) -> None:
    wire = serialize_bytes(arr)
    back = deserialize_bytes(wire, arr.size)
    assert back.shape == (arr.size,)
    assert list(back) == list(arr.reshape(-1))
    # the same bytes tritonclient produces and reads
    if arr.size:
        assert serialize_byte_tensor(arr).item() == wire
    assert list(deserialize_bytes_tensor(wire)) == list(back)


@given(bytes_arrays())
def test_bytes_tensor_round_trip_through_raw(arr: np.ndarray[Any, Any]) -> None:
    wire = serialize_bytes(arr)
    t = Tensor("s", BYTES, arr.shape, raw=memoryview(wire))
    assert t.array.shape == arr.shape
    assert t.array.tolist() == arr.tolist()
    out = Tensor.from_array("s", arr).to_bytes()
    assert out == wire


@given(st.lists(st.binary(max_size=10), min_size=1, max_size=6), st.data())
def test_any_strict_prefix_of_a_buffer_is_malformed(elements: list[bytes], data: st.DataObject) -> None:
    wire = _encode(elements)
    cut = data.draw(st.integers(min_value=0, max_value=len(wire) - 1))
    with pytest.raises(BytesDecodeError):
        deserialize_bytes(wire[:cut], len(elements))


@pytest.mark.parametrize(
    ("buf", "count", "message"),
    [
        (b"\x01\x00", -1, "truncated BYTES element length"),
        (b"\x02\x00\x00\x00a\x01\x00", -1, "truncated BYTES element length"),
        (b"\x05\x00\x00\x00ab", -1, "BYTES element length exceeds the buffer"),
        (b"\xff\xff\xff\xff", -1, "BYTES element length exceeds the buffer"),
        (b"\x01\x00\x00\x00a\x00\x00\x00\x00", 3, "expected 3 BYTES elements, found 2"),
        (b"\x01\x00\x00\x00a", 0, "expected 0 BYTES elements, found 1"),
    ],
)
def test_malformed_bytes_buffers(buf: bytes, count: int, message: str) -> None:
    with pytest.raises(BytesDecodeError, match=message):
        deserialize_bytes(buf, count)


def test_bytes_decode_error_is_a_value_error() -> None:
    assert issubclass(BytesDecodeError, ValueError)


def test_malformed_raw_bytes_tensor_raises_on_access() -> None:
    t = Tensor("s", BYTES, (2,), raw=_encode([b"a"]))
    with pytest.raises(BytesDecodeError):
        _ = t.array


def test_repr() -> None:
    assert repr(Tensor("x", FP32, (1, 2), raw=b"")) == "Tensor('x', FP32, [1, 2])"
