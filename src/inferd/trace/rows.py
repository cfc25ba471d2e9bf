"""The common trace's records, formatted many at a time with numpy instead of one at a time.

Most traces a server writes have one shape: a request sampled by a front end, attached to a model,
computed once, no children, no request id, TIMESTAMPS only. Such a trace waits for the flush as it
is; there it becomes a row of integers (``record.row_runs``: its id and its timestamps) under a key
that fixes the rest (the stamps' names and order, the model, which of QUEUE_START / COMPUTE_* it
has); ``format_rows`` turns a run of rows with one key into the same bytes ``Trace._records`` writes,
joined by commas.

Why: turning some twenty integers into decimal text was most of what tracing cost a request (Python's
``int.__str__`` is about 80 ns for a 14-digit timestamp, and a trace has eleven of them besides its
id, which every record repeats). Here the digits of a whole run come out of a few array operations
(``format_many``): per trace, a list append on the request path and a share of the batch's work at
flush time. numpy's share is fixed (some 60 array operations a run), so a short run, what a slow or
lightly loaded server flushes, is formatted a row at a time instead (``format_few``, compiled by
mypyc: ``hotpath.MODULES``).

A row's columns: the trace id, REQUEST_START, QUEUE_START, the execute as the instance pool reported
it (start, the backend's input and infer nanoseconds, end: the four COMPUTE_* stamps are worked out
from them for the whole batch, as ``compute_stamps`` does for one), then the front end's stamps'
values in the order they were stamped. A column a key leaves out (no queue, no execute) holds 0 and
is not written.
"""

from __future__ import annotations

import functools
import itertools
from typing import Final

import numpy as np
import orjson

#: columns of a row before the front end's stamps
ID, REQUEST, QUEUE, COMPUTE = 0, 1, 2, 3
FIXED = 7
#: stamps written before the header, as the reference captures them before the request starts
EARLY = ("HTTP_RECV_START", "HTTP_RECV_END")
_COMPUTE = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")

#: 10**0 .. 10**18: a non-negative int64 has at most 19 digits
_POW10 = np.array([10**i for i in range(19)], dtype=np.int64)
#: runs shorter than this are formatted one row at a time (``format_few``), longer ones with numpy
#: (``format_many``). Measured under callgrind, compiled, per HTTP trace: numpy ~105k instructions
#: in runs of 5, 30k in runs of 50, 18k in runs of 200 (its fixed cost is some 500k a run); a row
#: at a time ~34k whatever the run's length
FEW = 40
#: numbers at or above this are written one by one (a sum of two stays within int64)
_LARGE = 2**62
#: 0 .. 9999 as four ASCII digits each, read as one little-endian uint32
_GROUPS = np.frombuffer(b"".join(b"%04d" % i for i in range(10000)), dtype="<u4")

#: (names, model name, model version, has QUEUE_START, has COMPUTE_*)
Key = tuple[tuple[str, ...], str, str, bool, bool]
#: a template: literal texts and, between each two, the column whose number goes there
Template = tuple[tuple[bytes, ...], tuple[int, ...]]


def compute_stamps(
    start_ns: int, end_ns: int, timings: tuple[int, int, int] | None
) -> tuple[int, int, int, int]:
    """COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START and COMPUTE_END of an execute from
    ``start_ns`` to ``end_ns`` whose backend reported (input, infer, output) nanoseconds (None: all
    of it infer), kept in order and within the execute."""
    in_ns, infer_ns = (0, end_ns - start_ns) if timings is None else timings[:2]
    input_end = min(end_ns, start_ns + max(0, in_ns))
    output_start = max(input_end, min(end_ns, input_end + max(0, infer_ns)))
    return start_ns, input_end, output_start, end_ns


def header(tid: str, model_name: str, model_version: str) -> str:
    """A trace's header record (no request id, no parent): ``tid`` as text."""
    version = int(model_version) if model_version.isdigit() else -1
    return f'{{"id":{tid},"model_name":{json_string(model_name)},"model_version":{version}}}'


@functools.lru_cache(maxsize=1024)
def json_string(text: str) -> str:
    """A JSON string (model names repeat: kept)."""
    return orjson.dumps(text).decode()


@functools.lru_cache(maxsize=256)
def template(key: Key) -> Template:
    """The records of a trace with this key, as literal texts around its columns' numbers."""
    names, model_name, model_version, has_queue, has_compute = key
    parts: list[str | int] = []

    def stamp(name: str, column: int) -> None:
        parts.extend(('{"id":', ID, f',"timestamps":[{{"name":"{name}","ns":', column, "}]},"))

    for i, name in enumerate(names):
        if name in EARLY:
            stamp(name, FIXED + i)
    head = header("\0", model_name, model_version)
    before, after = head.split("\0")
    parts.extend((before, ID, after + ","))
    stamp("REQUEST_START", REQUEST)
    if has_queue:
        stamp("QUEUE_START", QUEUE)
    if has_compute:
        for j, name in enumerate(_COMPUTE):
            stamp(name, COMPUTE + j)
    for i, name in enumerate(names):
        if name not in EARLY:
            stamp(name, FIXED + i)
    texts: list[bytes] = []
    columns: list[int] = []
    pending = ""
    for p in parts:
        if isinstance(p, str):
            pending += p
        else:
            texts.append(pending.encode())
            columns.append(p)
            pending = ""
    texts.append(pending.encode())  # ends with the "," that joins it to the next trace's records
    return tuple(texts), tuple(columns)


@functools.lru_cache(maxsize=256)
def text_template(key: Key) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``template`` as text."""
    texts, columns = template(key)
    return tuple(t.decode() for t in texts), columns


#: 0 .. 9999 as text, and as four digits
_G: Final = tuple(str(i) for i in range(10000))
_G4: Final = tuple(f"{i:04d}" for i in range(10000))


def decimal(x: int) -> str:
    """``str(x)``, four digits at a time through tables: compiled, a fraction of ``int.__str__``
    (literal powers of ten: mypyc folds no ``10**k``)."""
    if x < 0 or x >= 10_000_000_000_000_000:
        return str(x)
    if x < 10_000:
        return _G[x]
    if x < 100_000_000:
        return _G[x // 10_000] + _G4[x % 10_000]
    if x < 1_000_000_000_000:
        return f"{_G[x // 100_000_000]}{_G4[x // 10_000 % 10_000]}{_G4[x % 10_000]}"
    return (
        f"{_G[x // 1_000_000_000_000]}{_G4[x // 100_000_000 % 10_000]}"
        f"{_G4[x // 10_000 % 10_000]}{_G4[x % 10_000]}"
    )


def format_few(key: Key, values: list[int], n: int) -> bytes:
    """``format_rows``'s bytes one row at a time (compiled: below ``FEW`` rows cheaper than numpy's
    fixed cost): each number through ``decimal``, the run's texts and numbers joined once."""
    if not n:
        return b""
    texts, columns = text_template(key)
    k = len(values) // n
    parts: list[str] = []
    for base in range(0, n * k, k):
        if key[4]:
            row = values[base : base + k]
            start, in_ns, infer_ns, end = row[COMPUTE : COMPUTE + 4]
            row[COMPUTE : COMPUTE + 4] = compute_stamps(start, end, (in_ns, infer_ns, 0))
        else:
            row = values[base : base + k]
        numbers = [decimal(v) for v in row]
        parts.append(texts[0])
        for j in range(len(columns)):
            parts.append(numbers[columns[j]])
            parts.append(texts[j + 1])
    return "".join(parts)[:-1].encode()  # (the last row's joining comma)


def format_rows(key: Key, values: list[int], n: int) -> bytes | memoryview:
    """The records of ``n`` traces of ``key`` whose rows are ``values`` (flat, row after row),
    comma-separated: one row at a time below ``FEW`` rows, else with numpy."""
    return format_few(key, values, n) if n < FEW else format_many(key, values, n)


def format_many(key: Key, values: list[int], n: int) -> bytes | memoryview:
    """``format_rows`` with numpy: a run's digits out of a few array operations (a view of the
    formatted array: no copy of it is made)."""
    if not n:
        return b""
    texts, columns = template(key)
    try:
        rows = np.fromiter(values, dtype=np.int64, count=len(values)).reshape(n, -1)
    except (OverflowError, ValueError):
        rows = None
    # (numbers no timestamp has, or sums that could overflow: written one by one)
    if rows is None or rows.min() < 0 or rows.max() >= _LARGE:
        return _one_by_one(texts, columns, values, n)
    if key[4]:  # COMPUTE_INPUT_END and COMPUTE_OUTPUT_START from the execute, as compute_stamps
        start, end = rows[:, COMPUTE], rows[:, COMPUTE + 3]
        input_end = np.minimum(end, start + rows[:, COMPUTE + 1])
        rows[:, COMPUTE + 2] = np.maximum(input_end, np.minimum(end, input_end + rows[:, COMPUTE + 2]))
        rows[:, COMPUTE + 1] = input_end
    used = sorted(set(columns))
    numbers = rows[:, used]
    # a column whose least and greatest numbers have one width has it on every row (the common
    # batch: timestamps of one flush, ids that did not pass a power of ten): one layout, no per-row
    # widths
    edges = np.maximum(np.searchsorted(_POW10, [numbers.min(axis=0), numbers.max(axis=0)], side="right"), 1)
    if (edges[0] == edges[1]).all():
        widths = edges[:1]
        bounds = [0, len(rows)]
    else:
        widths = np.maximum(np.searchsorted(_POW10, numbers, side="right"), 1)
        # runs of rows whose numbers have the same widths share one layout (ids change width rarely)
        cut = np.flatnonzero((widths[1:] != widths[:-1]).any(axis=1)) + 1
        bounds = [0, *cut.tolist(), len(rows)]
    digits = _digits(numbers, -(-int(widths.max()) // 4))
    slot = {c: i for i, c in enumerate(used)}
    out = [
        _fill(texts, [slot[c] for c in columns], digits[a:b], widths[a].tolist())
        for a, b in itertools.pairwise(bounds)
    ]
    whole = out[0] if len(out) == 1 else np.concatenate(out)
    return whole.data[:-1]  # (the last row's joining comma)


def _digits(values: np.ndarray, groups_used: int = 5) -> np.ndarray:
    """Each value's 20 decimal digits, zero-padded on the left (uint8 ASCII, one more axis); only
    the last ``groups_used`` groups of four are worked out (the rest is left unset: the numbers are
    narrower, and no one reads it)."""
    x = values  # (never written to: each step makes a new array)
    groups = np.empty((*values.shape, 5), dtype="<u4")
    for k in range(4, 4 - groups_used, -1):  # four digits at a time, through a table (no per-digit division)
        q = x // 10000
        groups[..., k] = _GROUPS[x - q * 10000]
        x = q
    return groups.view(np.uint8)


def _fill(texts: tuple[bytes, ...], slots: list[int], digits: np.ndarray, widths: list[int]) -> np.ndarray:
    """Rows whose numbers all have these widths: one byte matrix, a row per trace (flat)."""
    line = bytearray(texts[0])
    offsets: list[tuple[int, int, int]] = []
    for s, text in zip(slots, texts[1:], strict=True):
        w = widths[s]
        offsets.append((s, len(line), w))
        line += b"0" * w
        line += text
    out = np.empty((len(digits), len(line)), dtype=np.uint8)
    out[:] = np.frombuffer(bytes(line), dtype=np.uint8)
    for s, at, w in offsets:
        out[:, at : at + w] = digits[:, s, 20 - w :]
    return out.reshape(-1)


def _one_by_one(texts: tuple[bytes, ...], columns: tuple[int, ...], values: list[int], n: int) -> bytes:
    out = bytearray()
    k = len(values) // n
    for i in range(n):
        row = values[i * k : (i + 1) * k]
        start, in_ns, infer_ns, end = row[COMPUTE : COMPUTE + 4]
        row[COMPUTE : COMPUTE + 4] = compute_stamps(start, end, (in_ns, infer_ns, 0))
        out += texts[0]
        for column, text in zip(columns, texts[1:], strict=True):
            out += str(row[column]).encode()
            out += text
    return bytes(out[:-1])
