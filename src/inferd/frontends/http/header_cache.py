"""HeaderCache: binary requests whose JSON header was seen before skip JSON parsing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferd.core.request import InferRequest, RequestTemplate
from inferd.core.tensor import Tensor
from inferd.core.types import BYTES, DataType
from inferd.engine.model import Model
from inferd.frontends.http.decode import decode_infer_request
from inferd.frontends.http.encode import OutputEncoding

if TYPE_CHECKING:
    from inferd.shm.system import SharedMemoryManager


@dataclass(slots=True)
class _Template:
    """What a binary-only request header decodes to, minus the tensor bytes."""

    model: Model
    version: str
    inputs: tuple[tuple[str, DataType, tuple[int, ...], int], ...]  # name, datatype, shape, byte size
    tail_len: int
    id: str
    #: the request less its tensors; its validation key is the header without its leading "id"
    #: (it fixes every property validation reads)
    base: RequestTemplate
    enc: OutputEncoding
    #: made from a header whose leading id was taken off (the id then comes from each request)
    stripped: bool
    #: made from a header whose ``sequence_id`` number was taken out (it comes from each request)
    sequenced: bool


_ID_PREFIXES = (b'{"id":"', b'{"id": "')


def _without_id(head: bytes) -> tuple[bytes, str | None]:
    """A header that begins with a plain request id (perf_analyzer sends a new one with every
    request of a sequence; tritonclient puts it first too) as (the header without it, the id), so
    that those requests share one cached template; else (``head``, None). An id with an escape, or
    bytes that are not UTF-8, is left to the JSON parser."""
    for prefix in _ID_PREFIXES:
        if head.startswith(prefix):
            start = len(prefix)
            end = head.find(b'"', start)
            if end < 0 or head.find(b"\\", start, end) >= 0 or head[end + 1 : end + 2] != b",":
                return head, None
            try:
                rid = head[start:end].decode()
            except UnicodeDecodeError:
                return head, None
            return b"{" + head[end + 2 :].lstrip(b" "), rid
    return head, None


#: ``"sequence_id":`` and a plain number: a JSON integer of 1 to 19 digits with no leading zero (so
#: valid JSON that the decoder reads as that same uint64), followed by the end of its member
_SEQUENCE_ID = re.compile(rb'"sequence_id": ?([1-9][0-9]{0,18})(?=[,}])')


def _without_sequence_id(key: bytes) -> tuple[bytes, int | None]:
    """A key holding a plain sequence id number (each sequence has its own: perf_analyzer starts a
    new one every 20 requests or so) as (the key without the number, the number), so that
    sequences share one template for each kind of request; else (``key``, None). Whether the number
    is the request's sequence id is settled when the template is made (``HeaderCache.decode``): the
    decoder read that number, and no other key of the header is ``sequence_id`` in any spelling."""
    m = _SEQUENCE_ID.search(key)
    if m is None:
        return key, None
    start, end = m.span(1)
    return key[:start] + key[end:], int(m[1])


class HeaderCache:
    """Remembers decoded JSON headers of binary requests (clients resend the same header each time).

    A hit skips JSON parsing. Names, datatypes, shapes and byte sizes all come from the header,
    so the header is also the request's ``validation_key``: the core validates it once per model
    version. Requests with BYTES inputs (whose contents matter) or shared-memory tensors (whose
    windows are resolved per request) are never cached.
    """

    def __init__(
        self, capacity: int = 256, max_header: int = 4096, shm: SharedMemoryManager | None = None
    ) -> None:
        self._shm = shm
        self._capacity = capacity
        self._max_header = max_header
        self._cache: dict[bytes, _Template] = {}

    def decode(
        self, model: Model, version: str, body: bytes, header_length: int | None
    ) -> tuple[InferRequest, OutputEncoding]:
        """As ``decode_infer_request`` (with a ``validation_key`` when the header is cacheable)."""
        if header_length is None or header_length <= 0 or header_length > self._max_header:
            return decode_infer_request(model, version, body, header_length, self._shm)
        head = body[:header_length]
        key, rid = _without_id(head) if head.startswith(_ID_PREFIXES) else (head, None)
        tpl = self._cache.get(key)
        cid = None
        if tpl is None:  # the header as it is first: requests without a sequence id pay nothing here
            skey, cid = _without_sequence_id(key)
            if cid is not None:
                key = skey
                tpl = self._cache.get(key)
        if (
            tpl is not None
            and tpl.model is model
            and tpl.version == version
            and tpl.stripped == (rid is not None)
            and tpl.sequenced == (cid is not None)
            and len(body) - header_length == tpl.tail_len
        ):
            view = memoryview(body)
            inputs = {}
            off = header_length
            for name, dt, shape, size in tpl.inputs:
                inputs[name] = Tensor(name, dt, shape, None, view[off : off + size])
                off += size
            return tpl.base.request(inputs, tpl.id if rid is None else rid, cid), tpl.enc
        request, enc = decode_infer_request(model, version, body, header_length, self._shm)
        tpl = self._template(
            model, version, request, enc, len(body) - header_length, key, rid is not None, cid is not None
        )
        if (
            tpl is not None
            and (rid is None or rid == request.id)
            # the number taken out is the sequence id the decoder read, and no other key is
            # sequence_id in any spelling (no escapes: "sequence\u005fid" is one): so a header
            # differing only in that number decodes to the same request with that number
            and (
                cid is None
                or (
                    cid == request.correlation_id and key.count(b'"sequence_id"') == 1 and key.find(b"\\") < 0
                )
            )
        ):
            if len(self._cache) >= self._capacity:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = tpl
            request.validation_key = key
        return request, enc

    @staticmethod
    def _template(
        model: Model,
        version: str,
        request: InferRequest,
        enc: OutputEncoding,
        tail_len: int,
        key: bytes,
        stripped: bool,
        sequenced: bool,
    ) -> _Template | None:
        if enc.shm:
            return None  # windows are resolved per request
        specs = []
        for t in request.inputs.values():
            if t.raw is None or t.datatype is BYTES:
                return None
            specs.append((t.name, t.datatype, t.shape, t.raw_byte_size()))
        return _Template(
            model,
            version,
            tuple(specs),
            tail_len,
            request.id,
            RequestTemplate.of(request, key),
            enc,
            stripped,
            sequenced,
        )
