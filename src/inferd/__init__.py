"""inferd: a Triton-compatible inference server in Python.

``Server`` (inferd.api) is imported when first asked for: a worker process imports ``inferd`` for its
backends alone, and the server's whole engine had doubled its start (0.43 -> 0.26 s of CPU).
"""

import typing as _typing

# first (sorted so): picks the compiled hot path or the pure-Python one before any of its modules loads
from inferd import hotpath as _hotpath  # noqa: F401  (imported for its effect, not exported)
from inferd._version import __version__ as __version__
from inferd.errors import (
    AlreadyExistsError,
    ErrorCode,
    InferdError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    RequestCancelledError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from inferd.options import ServerOptions

__all__ = [
    "AlreadyExistsError",
    "ErrorCode",
    "InferdError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "RequestCancelledError",
    "Server",
    "ServerOptions",
    "UnavailableError",
    "UnknownError",
    "UnsupportedError",
    "__version__",
]

if _typing.TYPE_CHECKING:
    from inferd.api import Server
else:  # out of the type checker's sight: a misspelt name stays an error there

    def __getattr__(name: str) -> object:
        if name == "Server":
            from inferd.api import Server

            return Server
        raise AttributeError(f"module 'inferd' has no attribute {name!r}")
