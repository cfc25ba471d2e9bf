"""RequestCache: ``ModelInferRequest`` messages whose metadata was seen before skip protobuf decoding.

A client sends the same message again and again with only the tensor bytes (and perhaps its id)
changed: perf_analyzer and tritonclient alike. Protobuf serializers write fields in field-number
order, so a ``ModelInferRequest``'s ``raw_input_contents`` (field 7) come last. ``split`` walks the
message's top-level fields (each one length-delimited: a key byte and a varint size) and takes it
apart into the bytes before the tensor data, less the ``id`` field (the key), the id, and views of
the tensor data. A key seen before gives back what the full decoding (``codec.decode_infer_request``)
made of it: names, datatypes, shapes, parameters, requested outputs. The request is then built from
that and the views without parsing anything.

Where the key holds everything validation reads (it does, with the tensor byte sizes, which a hit
must match), it is also the request's ``validation_key``: the core validates it once per model
version. Messages that ``split`` cannot take apart plainly (a field after the tensor data, a
repeated id, an unknown field number past 15, a truncated field), requests with BYTES inputs,
typed ``contents`` or shared-memory tensors go the full way every time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from inferd.core.request import InferRequest, RequestTemplate
from inferd.core.tensor import Tensor
from inferd.core.types import BYTES, DataType
from inferd.engine.model import Model
from inferd.frontends.grpc.codec import output_targets

#: the key bytes of ``raw_input_contents`` (field 7, length-delimited), ``id`` (3), ``parameters`` (4)
_RAW: Final = 0x3A
_ID: Final = 0x1A
_PARAMETER: Final = 0x22
#: a ``parameters`` map entry's key field when the key is ``sequence_id``, and its value's tag
_SEQUENCE_KEY: Final = b"\x0a\x0bsequence_id\x12"


@dataclass(slots=True)
class Split:
    """A message taken apart: the key (the bytes before the tensor data, less the id field and a
    plain ``sequence_id`` parameter), the id (None: the message has no id field), the tensor data
    in order, and the sequence id number (None: none taken out)."""

    payload: bytes
    key: bytes
    rid: bytes | None
    raws: list[memoryview]
    cid: int | None


def _sequence_id(payload: bytes, start: int, end: int) -> int | None:
    """The number of a ``parameters`` map entry (``payload[start:end]``) that is exactly
    ``sequence_id`` with an ``int64_param``: the key field, then an InferParameter holding only the
    varint field; else None."""
    if not payload.startswith(_SEQUENCE_KEY, start):
        return None
    k = start + len(_SEQUENCE_KEY)
    if k + 2 > end or payload[k] != end - k - 1 or payload[k + 1] != 0x10:
        return None
    k += 2
    value = shift = 0
    while k < end:
        b = payload[k]
        value |= (b & 0x7F) << shift
        shift += 7
        k += 1
        if b < 0x80:
            return value if k == end else None
    return None


def split(payload: object, max_key: int = 4096) -> Split | None:
    """``payload`` taken apart, or None where it is not the plain shape (see the module) or not
    ``bytes`` (a compiled ``bytes`` parameter would refuse a ``bytearray``)."""
    if type(payload) is not bytes or not isinstance(payload, bytes):  # (the second: for mypy)
        return None
    return _split(payload, max_key)


def _split(payload: bytes, max_key: int) -> Split | None:
    n = len(payload)
    i = 0
    raw_at = -1
    id_at = id_data = id_end = -1
    cid = None
    cid_at = cid_end = -1
    spans: list[tuple[int, int]] = []
    while i < n:
        tag = payload[i]
        if tag & 7 != 2 or tag >= 0x80:  # every field of the message is length-delimited, 1..15
            return None
        j = i + 1
        if j >= n:
            return None
        b = payload[j]
        j += 1
        size = b & 0x7F
        shift = 7
        while b >= 0x80:
            if j >= n or shift > 28:
                return None
            b = payload[j]
            j += 1
            size |= (b & 0x7F) << shift
            shift += 7
        end = j + size
        if end > n:
            return None
        if tag == _RAW:
            if raw_at < 0:
                raw_at = i
                if raw_at - (id_end - id_at) - (cid_end - cid_at) > max_key:
                    return None
            spans.append((j, end))
        elif raw_at >= 0 or (tag == _ID and id_at >= 0):
            return None
        elif tag == _ID:
            id_at, id_data, id_end = i, j, end
        elif tag == _PARAMETER and cid is None:
            cid = _sequence_id(payload, j, end)
            if cid is not None:
                cid_at, cid_end = i, end
        i = end
    if raw_at < 0:
        return None
    view = memoryview(payload)
    raws = [view[a:b] for a, b in spans]
    if id_at < 0 and cid is None:
        return Split(payload, payload[:raw_at], None, raws, None)
    # the key: the bytes before the tensor data less the id's field and the sequence id's entry
    cuts = sorted(c for c in ((id_at, id_end), (cid_at, cid_end)) if c[0] >= 0)
    pieces = []
    at = 0
    for a, b in cuts:
        pieces.append(payload[at:a])
        at = b
    pieces.append(payload[at:raw_at])
    rid = payload[id_data:id_end] if id_at >= 0 else None
    return Split(payload, b"".join(pieces), rid, raws, cid)


@dataclass(slots=True)
class Template:
    """What a message's key decodes to (the request less its id and tensor bytes)."""

    model: Model
    #: the version text the message names (for ``Core.submit``, the logs; the name is ``base``'s)
    version_text: str
    inputs: tuple[tuple[str, DataType, tuple[int, ...], int], ...]  # name, datatype, shape, byte size
    #: the request less its tensors, id and sequence id; its validation key is the message's key
    #: with the tensor byte sizes
    base: RequestTemplate
    empty_final: bool
    #: made from a message whose sequence id number was taken out (it comes from each message)
    sequenced: bool


class RequestCache:
    """Remembers decoded ``ModelInferRequest`` metadata by key (``split``); bounded, oldest out."""

    def __init__(self, capacity: int = 256, max_key: int = 4096) -> None:
        self._capacity = capacity
        self._max_key = max_key
        self._cache: dict[bytes, Template] = {}

    def split(self, payload: object) -> Split | None:
        return split(payload, self._max_key)

    def get(self, s: Split) -> Template | None:
        return self._cache.get(s.key)

    @staticmethod
    def request(tpl: Template, s: Split, model: Model, rid: str) -> tuple[InferRequest, bool] | None:
        """The request ``s`` holds (``rid``: its id, decoded), from its template, as (request, empty
        final response asked); None where the template does not fit (another model object, other
        tensor sizes): then the message takes the full way."""
        raws = s.raws
        specs = tpl.inputs
        cid = s.cid
        if tpl.model is not model or len(raws) != len(specs) or tpl.sequenced != (cid is not None):
            return None
        inputs = {}
        for (name, dt, shape, size), raw in zip(specs, raws, strict=True):
            if raw.nbytes != size:
                return None
            inputs[name] = Tensor(name, dt, shape, None, raw)
        return tpl.base.request(inputs, rid, cid), tpl.empty_final

    def remember(
        self,
        s: Split,
        model: Model,
        version_text: str,
        request: InferRequest,
        empty_final: bool,
    ) -> None:
        """Keep what the full decoding made of ``s``'s message, where a template can stand for it:
        every input from ``raw_input_contents`` in order (no typed contents, no shared memory, no
        BYTES), and no output written to shared memory."""
        raws = s.raws
        if len(raws) != len(request.inputs) or output_targets(request) is not None:
            return
        # the number taken out is the sequence id the decoder read, and no other entry (an input's
        # parameters included) is sequence_id: so a message differing only in that number decodes
        # to the same request with that number
        if s.cid is not None and (s.cid != request.correlation_id or s.key.find(b"\x0bsequence_id") >= 0):
            return
        specs = []
        sizes = []
        for t, raw in zip(request.inputs.values(), raws, strict=True):
            data = t.raw
            if t.datatype is BYTES or type(data) is not bytes or len(data) != raw.nbytes:
                return
            specs.append((t.name, t.datatype, t.shape, raw.nbytes))
            sizes.append(str(raw.nbytes).encode())
        if len(self._cache) >= self._capacity:
            self._cache.pop(next(iter(self._cache)))
        self._cache[s.key] = Template(
            model,
            version_text,
            tuple(specs),
            RequestTemplate.of(request, s.key + b"\x00" + b",".join(sizes)),
            empty_final,
            s.cid is not None,
        )
