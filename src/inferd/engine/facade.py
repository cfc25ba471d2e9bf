"""``Core``: what a front end may ask of the core, and nothing more.

``ServerCore`` (``engine/server.py``) implements it; the front ends (``frontends/http``,
``frontends/grpc``, ``metrics``) are typed against this protocol, so their unit tests drive them
with a small fake core instead of a loaded repository.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from inferd.core.request import InferRequest
from inferd.core.response import ResponseStream
from inferd.engine.model import Model

#: turns a front end's wire data into the request, once the core found its model
Decoder = Callable[[Model], InferRequest]


class Core(Protocol):
    """Health, metadata, the request lifecycle, statistics and the repository, as front ends see them."""

    def live(self) -> bool: ...

    def ready(self) -> bool: ...

    def metadata(self, extra_extensions: tuple[str, ...] = ()) -> dict[str, Any]: ...

    def get_model(self, name: str, version: str = "") -> Model:
        """The READY model version (``version`` "": the default one), else NotFound/Unavailable."""
        ...

    def model_ready(self, name: str, version: str = "") -> bool: ...

    def ready_check(self, name: str, version: str = "") -> Callable[[], Awaitable[bool]] | None:
        """The READY version's own readiness check (engine/readiness.py), None without one."""
        ...

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]: ...

    def model_config(self, name: str, version: str = "") -> dict[str, Any]: ...

    def submit(
        self, name: str, version: str, decode: Decoder, *, decoupled_error: str | None = None
    ) -> ResponseStream:
        """Look up, decode, validate and queue one request (see ``ServerCore.submit``)."""
        ...

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """This process's statistics (Triton's statistics extension)."""
        ...

    async def gather_statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """The whole server's statistics: what the front ends answer (``--workers`` sums every
        process's, ``workers/peers.py``; one process answers its own)."""
        ...

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]: ...

    def status(self) -> dict[str, Any] | None:
        """The live status page's data (engine/status.py); None when the page is turned off."""
        ...

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...

    async def register_repository(self, path: str, mapping: dict[str, str], label: str = "") -> None:
        """Serve folder ``path``'s models too, those ``mapping`` names (model -> subfolder) under
        those names (SageMaker's multi-model loads; explicit mode only)."""
        ...

    async def unregister_repository(self, path: str) -> None: ...

    def registrations(self) -> list[tuple[str, str, dict[str, str]]]:
        """The folders registered now, oldest first: (label, path, mapping)."""
        ...
