"""inferd: a Triton-compatible inference server in Python."""

# first (sorted so): picks the compiled hot path or the pure-Python one before any of its modules loads
from inferd import hotpath as _hotpath  # noqa: F401  (imported for its effect, not exported)
from inferd._version import __version__ as __version__
from inferd.api import Server
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
