"""Access control, for HTTP and gRPC alike: the reference's restricted APIs, and API keys.

Every route or RPC belongs to one ``Category`` (the reference's nine). Two independent rules may
guard a category:

- **Restriction** (``--http-restricted-api`` / ``--grpc-restricted-protocol``, the reference's
  syntax ``<category>[,<category>...]:<header>=<value>``): a request must carry that header (gRPC:
  metadata ``triton-grpc-protocol-<header>``) with that value. Refused as the reference refuses:
  HTTP 403, gRPC UNAVAILABLE, with its texts.
- **API keys** (beyond the reference): a request carries ``Authorization: Bearer <key>`` (gRPC:
  ``authorization`` metadata); each key grants a set of categories. No key, or an unknown one: HTTP
  401, gRPC UNAUTHENTICATED; a key without the category: HTTP 403, gRPC PERMISSION_DENIED. Keys
  come from a file (``--api-keys-file``) or the ``INFERD_API_KEYS`` environment variable, never
  from the command line (``ps`` shows it), and are compared in constant time. Categories in
  ``--api-keys-exempt`` (default ``health``: load balancers and Kubernetes probes carry no key) are
  open to every caller.

This module decides; each front end turns a ``Denial`` into its own status.
"""

from __future__ import annotations

import enum
import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: the gRPC metadata prefix of a restricted protocol's header (the reference's)
GRPC_RESTRICTED_PREFIX = "triton-grpc-protocol-"
API_KEYS_ENV = "INFERD_API_KEYS"


class Category(enum.Enum):
    """The reference's API categories (``RESTRICTED_CATEGORY_NAMES``)."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


class AccessConfigError(ValueError):
    """A restriction or key setting that cannot be used (the message says why)."""


class Denial(enum.Enum):
    """Why a request is refused (front ends map each to their status)."""

    RESTRICTED = "restricted"  # the restriction header is missing or wrong
    UNAUTHENTICATED = "unauthenticated"  # no API key, or an unknown one
    FORBIDDEN = "forbidden"  # a known key that does not grant the category


@dataclass(slots=True)
class AccessPolicy:
    """Restrictions and API keys of one front end (the empty policy lets everything through)."""

    #: category -> (header, value) the request must carry
    restrictions: dict[Category, tuple[str, str]] = field(default_factory=dict)
    #: API key -> the categories it grants
    keys: dict[str, frozenset[Category]] = field(default_factory=dict)
    #: categories open to callers without a key
    exempt: frozenset[Category] = frozenset()

    @property
    def enabled(self) -> bool:
        return bool(self.restrictions or self.keys)

    def check(self, category: Category, headers: Mapping[str, str]) -> tuple[Denial, str] | None:
        """None when ``headers`` (lower-case names) may use ``category``; else why not, and the
        restriction's header name (for its message)."""
        if self.keys and category not in self.exempt:
            token = _bearer(headers.get("authorization", ""))
            granted = self._granted(token)
            if granted is None:
                return Denial.UNAUTHENTICATED, ""
            if category not in granted:
                return Denial.FORBIDDEN, ""
        restriction = self.restrictions.get(category)
        if restriction is not None:
            header, value = restriction
            actual = headers.get(header)
            if actual is None or not _first_value_is(actual, value):
                return Denial.RESTRICTED, header
        return None

    def _granted(self, token: str) -> frozenset[Category] | None:
        if not token:
            return None
        found = None
        for key, categories in self.keys.items():  # every key compared: no early exit to time
            if hmac.compare_digest(key.encode(), token.encode()):
                found = categories
        return found


def _first_value_is(actual: str, value: str) -> bool:
    """Whether a header's first value is ``value``, in constant time. HTTP joins a repeated header's
    values with commas; the reference reads the first (a client repeating the header, or a proxy
    adding one after it, is let through as there)."""
    n = len(value)
    return hmac.compare_digest(actual[:n].encode(), value.encode()) and (len(actual) == n or actual[n] == ",")


def _bearer(value: str) -> str:
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def parse_restrictions(
    settings: Iterable[str], option: str, key_prefix: str = "", feature: str = "api"
) -> dict[Category, tuple[str, str]]:
    """``<category>[,...]:<header>=<value>`` settings (the reference's syntax and messages)."""
    out: dict[Category, tuple[str, str]] = {}
    for arg in settings:
        names, colon, setting = arg.partition(":")
        header, eq, value = setting.partition("=")
        if not colon or not eq or not names or not header or not value:
            raise AccessConfigError(
                f"--{option} option format is '<config name>:<setting>=<value>'. Got {arg}"
            )
        for name in names.split(","):
            try:
                category = Category(name.strip())
            except ValueError:
                raise AccessConfigError(f"unknown restricted {feature} '{name}'") from None
            if category in out:
                raise AccessConfigError(
                    f"restricted {feature} '{name}' can not be specified in multiple config groups"
                )
            out[category] = ((key_prefix + header).lower(), value)
    return out


def parse_categories(text: str) -> frozenset[Category]:
    """``all`` or a comma-separated list of category names."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"] or names == ["*"]:
        return frozenset(Category)
    try:
        return frozenset(Category(n) for n in names)
    except ValueError as e:
        raise AccessConfigError(f"unknown API category in '{text}': {e}") from None


def parse_keys(text: str, where: str) -> dict[str, frozenset[Category]]:
    """API keys, one per line (or ``;``-separated): ``<key>: <categories>`` (``all`` for every
    category); blank lines and ``#`` comments ignored."""
    keys: dict[str, frozenset[Category]] = {}
    for n, raw in enumerate(text.replace(";", "\n").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, colon, categories = line.partition(":")
        key = key.strip()
        if not colon or not key or any(c.isspace() for c in key):
            raise AccessConfigError(f"{where}:{n}: expected '<key>: <categories>'")
        keys[key] = parse_categories(categories)
    return keys


def load_keys(path: Path | None, environ: Mapping[str, str] = os.environ) -> dict[str, frozenset[Category]]:
    """The API keys of ``path`` and of ``$INFERD_API_KEYS`` together."""
    keys: dict[str, frozenset[Category]] = {}
    if path is not None:
        try:
            text = path.read_text()
        except OSError as e:
            raise AccessConfigError(f"cannot read the API keys file {path}: {e.strerror}") from e
        keys.update(parse_keys(text, str(path)))
    env = environ.get(API_KEYS_ENV, "")
    if env.strip():
        keys.update(parse_keys(env, f"${API_KEYS_ENV}"))
    return keys
