"""The KServe v2 inference body as the cloud front ends read it (SageMaker's, Vertex AI's).

Triton's SageMaker and Vertex AI servers are its HTTP server with three things changed for inference
(``sagemaker_server.cc``, ``vertex_ai_server.cc``): the size of a binary request's JSON header comes
from its Content-Type, ``application/vnd.sagemaker-triton.binary+json;json-header-size=N`` (Vertex
AI: ``vnd.vertex-ai-triton``), never from ``Inference-Header-Content-Length``; bodies are never
compressed either way (Content-Encoding and Accept-Encoding are ignored); and SageMaker labels a
binary answer with the same type (``...json-header-size=<its header's size>``) where Vertex AI
answers as the HTTP server does. A multi-model invoke also answers every error 400, or 507 when it
reads as an out-of-memory error (what SageMaker takes for "unload other models"). ``HttpApp.infer``
takes an ``InferDialect`` for these; None is the KServe HTTP API itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from inferd.errors import InferdError, InvalidArgumentError

SAGEMAKER_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
VERTEX_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
_LEADING_INT = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")

#: what SageMaker's multi-model server reads as running out of memory (``SageMakerMMECheckOOMError``)
OOM_TEXTS = (
    "CUDA out of memory",
    "CUDA_OUT_OF_MEMORY",
    "Out of memory",
    "Out Of Memory",
    "out of memory",
    "MemoryError",
    "OutOfMemory",
    "OOM",
    "Dst tensor is not initialized",
    "Src tensor is not initialized",
    "CNMEM_STATUS_OUT_OF_MEMORY",
    "CUDNN_STATUS_NOT_INITIALIZED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED",
    "Failed to allocate memory",
    "failed to allocate memory",
    "No space left on device",
)


def out_of_memory(message: str) -> bool:
    """Whether SageMaker's front end reads ``message`` as an out-of-memory error (507)."""
    return any(t in message for t in OOM_TEXTS)


def multi_model_status(e: InferdError) -> int:
    """A multi-model load's or invoke's status for ``e``: 507 out of memory, else 400."""
    return 507 if out_of_memory(e.message) else 400


def atoi(text: str) -> int:
    """C's ``atoi`` as glibc runs it: leading digits (after blanks and a sign), else 0; the long it
    reads cut to an int (its low 32 bits)."""
    m = _LEADING_INT.match(text)
    if m is None:
        return 0
    value = max(-(2**63), min(2**63 - 1, int(m.group(1))))
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


@dataclass(frozen=True, slots=True)
class InferDialect:
    """How one cloud front end reads an inference body and labels its answer (see the module)."""

    #: the binary+json content type whose ``json-header-size`` sizes the JSON header
    mime: str
    #: a binary answer's Content-Type is ``mime`` + the header's size (SageMaker); else
    #: application/octet-stream with Inference-Header-Content-Length, as the HTTP API answers
    label_binary: bool
    #: every error's status (a multi-model invoke: 400 or 507), JSON before the model ran; None:
    #: the HTTP API's statuses and content types
    status_of: Callable[[InferdError], int] | None = None

    def header_length(self, content_type: str | None, body_length: int) -> int | None:
        """The JSON header's size the Content-Type gives (0: a raw tensor body), None when it
        names no binary body (the body is JSON). InvalidArgumentError with the reference's texts."""
        if content_type is None:
            return None
        pos = content_type.find(self.mime)
        if pos < 0:
            return None
        if pos != 0:
            raise InvalidArgumentError(
                f"expect MIME type for binary data starts with '{self.mime}', got: {content_type}"
            )
        raw = content_type[len(self.mime) :]
        size = atoi(raw)
        if size < 0 or size > body_length:
            raise InvalidArgumentError(
                f"inference header size should be in range (0, {body_length}), got: {raw}"
            )
        return size

    def binary_headers(self, header_length: int) -> tuple[str, bytes]:
        """A binary answer's content type and extra header lines."""
        if self.label_binary:
            return f"{self.mime}{header_length}", b""
        return "application/octet-stream", b"\r\nInference-Header-Content-Length: %d" % header_length


SAGEMAKER = InferDialect(SAGEMAKER_MIME, label_binary=True)
SAGEMAKER_MULTI_MODEL = InferDialect(SAGEMAKER_MIME, label_binary=True, status_of=multi_model_status)
VERTEX = InferDialect(VERTEX_MIME, label_binary=False)
