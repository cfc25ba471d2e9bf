"""Where each field of a config.pbtxt text is: a small structural reader of protobuf text format.

``text_format.Parse`` gives a ModelConfig but forgets where its fields were written; a problem found
after parsing (validation, the model file, an ensemble's steps) is reported at the line and column
of the field it is about, so the checker reads the text a second time with this tokenizer and keeps
every field's position. Paths name fields and occurrences: ``("input", 1, "dims", 0)`` is the first
``dims`` value of the second ``input``, however the text writes them (``input [ {..}, {..} ]`` or
two ``input {..}`` blocks; ``dims: [1, 2]`` or ``dims: 1 dims: 2``). Map entries are occurrences
too (``("parameters", 0, "key", 0)``). Only the structure is read: values are not typed, and
field names are not checked against the schema (``text_format`` does that).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

__all__ = ["ConfigIndex", "FieldPath", "Occurrence", "StructureError", "normalize_path"]

FieldPath = tuple[str | int, ...]

_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<comment>\#[^\n]*)|(?P<str>"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?)"""
    r"""|(?P<word>[-+]?[A-Za-z0-9_.][A-Za-z0-9_.+-]*)|(?P<punct>.)""",
    re.DOTALL,
)
_CLOSERS = {"{": "}", "<": ">"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


class StructureError(Exception):
    """The text is not well formed (an unclosed block, a stray token): no index can be built."""

    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(f"{line}:{column}: {message}")
        self.line = line
        self.column = column
        self.message = message


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "str", "word" or "punct"
    text: str
    offset: int


@dataclass(slots=True)
class Occurrence:
    """One occurrence of a field: where it is (1-based line and column of its name, or of the value
    or ``{`` for an element of a ``[...]`` list), its own extent, the extent of the whole field
    statement it belongs to (``name: [...]`` for a list element), and its value when scalar."""

    path: FieldPath
    line: int
    column: int
    start: int
    end: int
    field_start: int
    field_end: int
    value: str | None = None


def normalize_path(path: Sequence[str | int]) -> FieldPath:
    """``("dynamic_batching", "preferred_batch_size")`` -> ``("dynamic_batching", 0,
    "preferred_batch_size", 0)``: a field name not followed by an index means its first occurrence."""
    out: list[str | int] = []
    for i, part in enumerate(path):
        out.append(part)
        if isinstance(part, str) and (i + 1 == len(path) or not isinstance(path[i + 1], int)):
            out.append(0)
    return tuple(out)


def _unquote(text: str) -> str:
    body = text[1:-1] if len(text) >= 2 and text[-1] == text[0] else text[1:]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), body)


@dataclass(slots=True)
class ConfigIndex:
    """The fields of one config text, by path (see the module's docstring)."""

    text: str
    occurrences: dict[FieldPath, Occurrence] = field(default_factory=dict)
    _line_starts: list[int] = field(default_factory=list)

    @classmethod
    def build(cls, text: str) -> ConfigIndex:
        """Read ``text``; StructureError when its blocks or lists are not closed."""
        index = cls(text, {}, [0, *(m.end() for m in re.finditer("\n", text))])
        _Reader(index, _tokens(text)).message((), None)
        return index

    # -- positions ---------------------------------------------------------------------------------

    def position(self, offset: int) -> tuple[int, int]:
        """The 1-based (line, column) of a character offset."""
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def offset(self, line: int, column: int) -> int:
        """The character offset of a 1-based (line, column), clamped to the text."""
        if not self._line_starts:
            return 0
        row = min(max(line, 1), len(self._line_starts)) - 1
        return min(self._line_starts[row] + max(column, 1) - 1, len(self.text))

    # -- look-ups ----------------------------------------------------------------------------------

    def get(self, path: Sequence[str | int]) -> Occurrence | None:
        """The occurrence at ``path`` (indices may be left out: see :func:`normalize_path`)."""
        return self.occurrences.get(normalize_path(path))

    def nearest(self, path: Sequence[str | int]) -> Occurrence | None:
        """The occurrence at ``path``, else at its longest prefix that is in the text."""
        full = normalize_path(path)
        for end in range(len(full), 0, -1):
            found = self.occurrences.get(full[:end])
            if found is not None:
                return found
        return None

    def under(self, prefix: Sequence[str | int] = ()) -> Iterator[Occurrence]:
        """Every occurrence below ``prefix`` (an element path, or () for all), in text order."""
        base = normalize_path(prefix) if prefix else ()
        for path, occ in self.occurrences.items():
            if path[: len(base)] == base and len(path) > len(base):
                yield occ

    def element(
        self, parent: Sequence[str | int], name: str, value: str, key: str = "name"
    ) -> FieldPath | None:
        """The path of the ``name`` element under ``parent`` whose ``key`` field is ``value``:
        ``element((), "input", "INPUT0")`` -> ``("input", 1)``."""
        base = normalize_path(parent) if parent else ()
        k = 0
        while ((*base, name, k)) in self.occurrences:
            occ = self.occurrences.get((*base, name, k, key, 0))
            if occ is not None and occ.value == value:
                return (*base, name, k)
            k += 1
        return None

    def find_value(self, value: str, under: Sequence[str | int] = ()) -> Occurrence | None:
        """The first scalar occurrence below ``under`` whose value is ``value``."""
        return next((o for o in self.under(under) if o.value == value), None)

    def containing(self, offset: int) -> Occurrence | None:
        """The innermost occurrence whose field statement contains ``offset`` (for blanking a field
        that ``text_format`` refused)."""
        best: Occurrence | None = None
        for occ in self.occurrences.values():
            if occ.field_start <= offset < occ.field_end and (
                best is None or occ.field_end - occ.field_start <= best.field_end - best.field_start
            ):
                best = occ
        return best


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "punct"
        if kind not in ("space", "comment"):
            out.append(_Token(kind, m.group(), m.start()))
    return out


class _Reader:
    """A recursive reader over the tokens: fields, blocks, lists and scalar values."""

    def __init__(self, index: ConfigIndex, tokens: list[_Token]) -> None:
        self.index = index
        self.tokens = tokens
        self.i = 0

    def _peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _fail(self, token: _Token | None, message: str) -> StructureError:
        offset = token.offset if token is not None else len(self.index.text)
        return StructureError(*self.index.position(offset), message)

    def _take(self) -> _Token:
        token = self._peek()
        if token is None:
            raise self._fail(None, "unexpected end of text")
        self.i += 1
        return token

    def _end(self) -> int:
        last = self.tokens[self.i - 1]
        return last.offset + len(last.text)

    def _record(self, path: FieldPath, token: _Token, start: int, value: str | None = None) -> Occurrence:
        line, column = self.index.position(token.offset)
        occ = Occurrence(path, line, column, start, start, start, start, value)
        self.index.occurrences[path] = occ
        return occ

    def message(self, path: FieldPath, closer: str | None) -> None:
        counts: dict[str, int] = {}
        while True:
            token = self._peek()
            if token is None:
                if closer is not None:
                    raise self._fail(None, f'expected "{closer}"')
                return
            if closer is not None and token.text == closer and token.kind == "punct":
                self.i += 1
                return
            self.field(path, counts)

    def field(self, path: FieldPath, counts: dict[str, int]) -> None:
        token = self._take()
        if token.kind == "punct" and token.text == "[":  # an extension or Any type URL
            parts = []
            while (inner := self._take()).text != "]":
                parts.append(inner.text)
            name = "[" + "".join(parts) + "]"
        elif token.kind == "word":
            name = token.text
        else:
            raise self._fail(token, f"expected a field name, found {token.text!r}")
        nxt = self._peek()
        if nxt is not None and nxt.text == ":" and nxt.kind == "punct":
            self.i += 1
        k = counts.get(name, 0)
        made: list[Occurrence] = []
        nxt = self._peek()
        if nxt is not None and nxt.kind == "punct" and nxt.text in _CLOSERS:
            made.append(self._block((*path, name, k), token, token.offset))
            k += 1
        elif nxt is not None and nxt.kind == "punct" and nxt.text == "[":
            self.i += 1
            while not self._skip("]"):
                item = self._peek()
                if item is not None and item.kind == "punct" and item.text in _CLOSERS:
                    made.append(self._block((*path, name, k), item, item.offset))
                else:
                    made.append(self._scalar((*path, name, k), None))
                k += 1
                self._skip(",")
        else:
            made.append(self._scalar((*path, name, k), token))
            k += 1
        counts[name] = k
        if not self._skip(","):
            self._skip(";")
        for occ in made:
            occ.field_start, occ.field_end = token.offset, self._end()

    def _skip(self, text: str) -> bool:
        token = self._peek()
        if token is not None and token.kind == "punct" and token.text == text:
            self.i += 1
            return True
        return False

    def _block(self, path: FieldPath, at: _Token, start: int) -> Occurrence:
        occ = self._record(path, at, start)
        opener = self._take()
        self.message(path, _CLOSERS[opener.text])
        occ.end = self._end()
        return occ

    def _scalar(self, path: FieldPath, name_token: _Token | None) -> Occurrence:
        value = self._take()
        if value.kind == "punct" and value.text != "-":
            raise self._fail(value, f"expected a value, found {value.text!r}")
        text = _unquote(value.text) if value.kind == "str" else value.text
        if value.kind == "punct":  # "- 1": a sign apart from its number
            text += self._take().text
        while value.kind == "str" and (more := self._peek()) is not None and more.kind == "str":
            text += _unquote(more.text)  # "a" "b": adjacent strings concatenate
            self.i += 1
        at = name_token if name_token is not None else value
        occ = self._record(path, at, value.offset, text)
        occ.start = at.offset
        occ.end = self._end()
        return occ
