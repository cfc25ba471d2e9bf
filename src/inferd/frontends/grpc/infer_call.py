"""One ModelInfer request on its way from the wire into the core (``InferCall``).

The servicer (``service.py``) reads an ``InferCall`` from each ModelInfer or ModelStreamInfer
message and hands its ``decode`` to ``Core.submit`` as the ``Decoder``: once the core found the model, the
request is built from the ``RequestCache``'s template when one fits the message, else from the
parsed message in full (``codec.decode_infer_request``), whose result is then remembered. Header
forwarding and trace sampling follow, the same on both ways.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Protocol

from google.protobuf.message import DecodeError

from inferd.core.request import InferRequest, Target
from inferd.engine.model import Model
from inferd.errors import InternalError
from inferd.frontends.grpc import trace as _trace
from inferd.frontends.grpc._pb import pb
from inferd.frontends.grpc.codec import (
    PARSE_ERROR,
    SharedMemory,
    decode_infer_request,
    forwarded_headers,
    output_targets,
)
from inferd.frontends.grpc.request_cache import RequestCache, Split, Template
from inferd.trace import Trace, Tracing

#: a call's metadata, (key, value) pairs
Metadata = Iterable[tuple[str, str | bytes]]


class Servicer(Protocol):
    """What a call reads of the servicer that read it (``service.InferenceServicer``: service.py
    imports this module, not the other way)."""

    @property
    def requests(self) -> RequestCache: ...

    @property
    def shm(self) -> SharedMemory: ...

    @property
    def forward(self) -> re.Pattern[str] | None: ...  # --grpc-header-forward-pattern

    @property
    def tracing(self) -> Tracing: ...


class InferCall:
    """One ModelInfer request on its way in (``read`` from its bytes): the model name, version text
    and id it names, decoded once the core found its model (from its template in the
    ``RequestCache`` when it has one that fits, else in full)."""

    __slots__ = (
        "at",
        "decoupled",
        "empty_final",
        "metadata",
        "model_name",
        "model_version",
        "msg",
        "parts",
        "request",
        "rid",
        "servicer",
        "template",
        "trace",
    )

    def __init__(
        self,
        servicer: Servicer,
        msg: Any,
        metadata: Metadata | None,
        parts: Split | None = None,
        template: Template | None = None,
        rid: str = "",
    ) -> None:
        self.servicer = servicer
        self.at = 0  # when it was read, while tracing is on
        self.trace: Trace | None = None
        self.msg = msg  # (None: not parsed, a template stands for it)
        self.metadata = metadata
        self.parts = parts
        self.template = template
        if template is not None:
            self.model_name, self.model_version, self.rid = (
                template.base.model_name,
                template.version_text,
                rid,
            )
        else:
            self.model_name, self.model_version, self.rid = msg.model_name, msg.model_version, msg.id
        self.request: InferRequest | None = None
        self.decoupled = False
        self.empty_final = False

    @classmethod
    def read(cls, servicer: Servicer, payload: bytes, metadata: Metadata | None) -> InferCall:
        """The call of a ModelInfer message: from its template when its key is known (nothing
        parsed), else parsed (DecodeError: not a ``ModelInferRequest``)."""
        requests = servicer.requests
        parts = requests.split(payload)
        if parts is not None:
            tpl = requests.get(parts)
            if tpl is not None:
                rid = _text(parts.rid)
                if rid is not None:  # (an id that is not UTF-8: parsed below, the parser refuses it)
                    return cls(servicer, None, metadata, parts, tpl, rid)
        return cls(servicer, pb.ModelInferRequest.FromString(payload), metadata, parts)

    def decode(self, model: Model) -> InferRequest:
        """The core's ``Decoder``."""
        servicer = self.servicer
        parts, tpl = self.parts, self.template
        hit = None if tpl is None or parts is None else RequestCache.request(tpl, parts, model, self.rid)
        if hit is not None:
            request, self.empty_final = hit
        else:
            msg = self.msg
            if msg is None:  # the template did not fit (a reloaded model, other tensor sizes)
                assert parts is not None
                try:  # (its key parsed before, and its id is UTF-8: this parses too)
                    msg = self.msg = pb.ModelInferRequest.FromString(parts.payload)
                except DecodeError:
                    raise InternalError(PARSE_ERROR) from None
            request, self.empty_final = decode_infer_request(msg, model, servicer.shm)
            if parts is not None:
                servicer.requests.remember(parts, model, msg.model_version, request, self.empty_final)
        self.decoupled = model.decoupled
        forward = servicer.forward
        if forward is not None:
            request.parameters.update(forwarded_headers(self.metadata or (), forward))
        self.request = request
        if self.at:
            self.trace = _trace.start_trace(servicer.tracing, model.name, request, self.metadata, self.at)
        return request

    def targets(self) -> dict[str, Target] | None:
        request = self.request
        return None if request is None or request.outputs is None else output_targets(request)


def _text(rid: bytes | None) -> str | None:
    """A message's id as text ("" when it has none); None when it is not UTF-8."""
    if rid is None:
        return ""
    try:
        return rid.decode()
    except UnicodeDecodeError:
        return None
