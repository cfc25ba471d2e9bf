"""A bounded UBJSON reader for XGBoost's ``.ubj`` models (issue 42): what ``check_xgboost.py`` walks
before Treelite and XGBoost read the file.

UBJSON declares its containers' counts up front (``[$d#L<count>``); a native reader allocates what
a count declares. Here every count must fit in the bytes left (each element of an untyped array
takes at least its marker byte, an object's entry two bytes, a typed array's item its size), typed
containers hold numbers only (a typed array of ``Z`` nulls would hold any count in no bytes), and
containers nest at most ``MAX_DEPTH`` deep. Numbers are big-endian, as the format says; typed
arrays come back as numpy arrays read in place (a model's per-node arrays are typed: a 100 MB model
is not read item by item), the rest as Python values. Written as one closure over the bytes, with
markers as ints: about 1 us a value.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from inferd.backends.fil.check_common import MAX_DEPTH, ModelFileError

#: the numeric markers: (struct format, numpy dtype)
NUMBERS = {
    b"i": (">b", ">i1"),
    b"U": (">B", ">u1"),
    b"I": (">h", ">i2"),
    b"l": (">i", ">i4"),
    b"L": (">q", ">i8"),
    b"d": (">f", ">f4"),
    b"D": (">d", ">f8"),
    b"C": (">c", "S1"),
}
_UNPACK = {m[0]: struct.Struct(f).unpack_from for m, (f, _) in NUMBERS.items()}
_SIZE = {m[0]: struct.Struct(f).size for m, (f, _) in NUMBERS.items()}
_DTYPES = {m[0]: np.dtype(d) for m, (_, d) in NUMBERS.items()}
_INTEGERS = frozenset(b"iUIlL")
_INT64 = b"L"[0]
_unpack_q = struct.Struct(">q").unpack_from
(_NOOP, _STR, _TRUE, _FALSE, _NULL, _ARRAY, _OBJECT, _ARRAY_END, _OBJECT_END, _TYPE, _COUNT, _CHAR) = (
    b"NSTFZ[{]}$#C"
)


class TypedArray:
    """A typed array of the document, read only when asked for (its count already bounded): numpy's
    ``frombuffer`` costs a microsecond, and a model has 15 arrays a tree; :func:`join` reads many
    at once."""

    __slots__ = ("count", "data", "dtype", "offset")

    def __init__(self, data: bytes, offset: int, count: int, dtype: np.dtype[Any]) -> None:
        self.data, self.offset, self.count, self.dtype = data, offset, count, dtype

    def __len__(self) -> int:
        return self.count

    def array(self) -> np.ndarray[Any, Any]:
        return np.frombuffer(self.data, dtype=self.dtype, count=self.count, offset=self.offset)


def join(arrays: list[TypedArray]) -> np.ndarray[Any, Any]:
    """The arrays concatenated, read in one step (they share a dtype)."""
    size = arrays[0].dtype.itemsize
    raw = b"".join([a.data[a.offset : a.offset + a.count * size] for a in arrays])
    return np.frombuffer(raw, dtype=arrays[0].dtype)


def loads(data: bytes) -> Any:
    """The document ``data`` holds; ModelFileError for anything malformed or oversized."""
    end = len(data)

    def fail(what: str, pos: int) -> ModelFileError:
        return ModelFileError(f"{what} at offset {pos:,} of the UBJSON")

    def marker(pos: int) -> int:
        if pos >= end:
            raise fail("the document ends inside a value", pos)
        return data[pos]

    def integer(pos: int, what: str) -> tuple[int, int]:
        """A length or count: an integer value, not negative."""
        m = marker(pos)
        if m not in _INTEGERS or pos + 1 + _SIZE[m] > end:
            raise fail(f"{what} is not an integer", pos)
        n: int = _UNPACK[m](data, pos + 1)[0]
        if n < 0:
            raise fail(f"{what} is {n}", pos)
        return n, pos + 1 + _SIZE[m]

    def text(pos: int, what: str) -> tuple[str, int]:
        n, pos = integer(pos, f"the length of {what}")
        if n > end - pos:
            raise fail(f"{what} declares {n:,} bytes, {end - pos:,} left", pos)
        return data[pos : pos + n].decode("utf-8", errors="replace"), pos + n

    def value(pos: int, m: int, depth: int) -> tuple[Any, int]:
        """The value whose marker ``m`` is at ``pos - 1``; and where the next begins."""
        while m == _NOOP:
            m = marker(pos)
            pos += 1
        unpack = _UNPACK.get(m)
        if unpack is not None:
            size = _SIZE[m]
            if pos + size > end:
                raise fail("the document ends inside a number", pos)
            v = unpack(data, pos)[0]
            return (v.decode("latin-1") if m == _CHAR else v), pos + size
        if m == _STR:
            return text(pos, "a string")
        if m in (_TRUE, _FALSE, _NULL):
            return (True if m == _TRUE else False if m == _FALSE else None), pos
        if m in (_ARRAY, _OBJECT):
            if depth >= MAX_DEPTH:
                raise fail(f"the document nests deeper than {MAX_DEPTH}", pos)
            return container(pos, m == _OBJECT, depth + 1)
        raise fail(f"unknown marker {bytes([m])!r}", pos - 1)

    def container(pos: int, is_object: bool, depth: int) -> tuple[Any, int]:
        typ = count = None
        if pos < end and data[pos] == _TYPE:
            typ = marker(pos + 1)
            if typ not in _UNPACK:
                raise fail(f"a typed container of {bytes([typ])!r} (numbers only)", pos)
            if marker(pos + 2) != _COUNT:
                raise fail("a typed container without a count", pos)
            pos += 2
        if pos < end and data[pos] == _COUNT:
            count, pos = integer(pos + 1, "a container's count")
        if typ is not None and not is_object:
            assert count is not None
            dtype = _DTYPES[typ]
            if count > (end - pos) // dtype.itemsize:
                raise fail(
                    f"an array declares {count:,} items of {dtype.itemsize} bytes, {end - pos:,} left", pos
                )
            return TypedArray(data, pos, count, dtype), pos + count * dtype.itemsize
        if count is not None and count > (end - pos) // (2 if is_object else 1):
            raise fail(f"a container declares {count:,} entries, {end - pos:,} bytes left", pos)
        close = _OBJECT_END if is_object else _ARRAY_END
        items: list[Any] = []
        keys: dict[str, Any] = {}
        i = 0
        while count is None or i < count:
            if count is None:
                m = marker(pos)
                while m == _NOOP:
                    pos += 1
                    m = marker(pos)
                if m == close:
                    pos += 1
                    break
            if is_object:
                if data[pos] == _INT64 and pos + 9 <= end:  # XGBoost's keys: an int64 length
                    n = _unpack_q(data, pos + 1)[0]
                    pos += 9
                    if not 0 <= n <= end - pos:
                        raise fail(f"a key declares {n:,} bytes, {end - pos:,} left", pos)
                    key = data[pos : pos + n].decode("utf-8", errors="replace")
                    pos += n
                else:
                    key, pos = text(pos, "a key")
                if key in keys:
                    raise fail(f"the key {key!r} appears twice in an object", pos)
            if typ is not None:
                v, pos = value(pos, typ, depth)
            elif (
                data[pos] == _ARRAY
                and pos + 5 < end
                and data[pos + 1] == _TYPE
                and data[pos + 2] in _DTYPES
                and data[pos + 3] == _COUNT
                and data[pos + 4] == _INT64
                and pos + 13 <= end
            ):  # a typed array with an int64 count: most of a model, read here without a call
                dtype = _DTYPES[data[pos + 2]]
                n = _unpack_q(data, pos + 5)[0]
                pos += 13
                if not 0 <= n <= (end - pos) // dtype.itemsize:
                    raise fail(
                        f"an array declares {n:,} items of {dtype.itemsize} bytes, {end - pos:,} left", pos
                    )
                v = TypedArray(data, pos, n, dtype)
                pos += n * dtype.itemsize
            else:
                v, pos = value(pos + 1, marker(pos), depth)
            if is_object:
                keys[key] = v
            else:
                items.append(v)
            i += 1
        return (keys if is_object else items), pos

    doc, pos = value(1, marker(0), 0)
    if pos != end:
        raise fail(f"{end - pos:,} bytes follow the document", pos)
    return doc
