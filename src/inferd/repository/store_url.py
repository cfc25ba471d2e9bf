"""An object-storage repository's URL (``s3://``, ``as://``, ``gs://``), parsed: what the stores
(s3.py, azure.py, gcs.py) are opened with and ``remote.py`` tells a folder from a store by."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from inferd.errors import InvalidArgumentError

__all__ = ["StoreURL", "parse_store_url"]

# ``Path("s3://b/p")`` is ``s3:/b/p``: a URL that went through pathlib has one slash left
_URL = re.compile(r"^(s3|as|gs):/+(.*)$", re.DOTALL)
# the reference's private-S3 form: s3://[http(s)://]host:port/bucket/prefix
_S3_HOST = re.compile(r"^(?:(https?):/+)?([A-Za-z0-9.\-]+):([0-9]+)/(.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A parsed repository URL. ``bucket`` is the S3 or GCS bucket or the Azure container; ``prefix`` has
    no leading or trailing slash ("" for the whole bucket); ``endpoint`` is an S3 endpoint given in
    the URL (``s3://host:port/...``), ``account`` the Azure storage account."""

    scheme: str
    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    account: str | None = None

    def __str__(self) -> str:
        if self.scheme == "as":
            head = f"as://{self.account}/{self.bucket}"
        elif self.scheme == "gs":
            head = f"gs://{self.bucket}"
        elif self.endpoint is not None:
            host = self.endpoint.removeprefix("http://")
            head = f"s3://{host}/{self.bucket}"
        else:
            head = f"s3://{self.bucket}"
        return f"{head}/{self.prefix}" if self.prefix else head

    @property
    def key_prefix(self) -> str:
        """The prefix every object of the repository's models starts with ("" or ``prefix/``)."""
        return f"{self.prefix}/" if self.prefix else ""


def _clean_prefix(text: str) -> str:
    return "/".join(part for part in text.split("/") if part)


def parse_store_url(location: str | Path) -> StoreURL | None:
    """The repository URL ``location`` stands for, or None for a local folder.

    ``s3://bucket/prefix``, ``s3://host:port/bucket/prefix`` (``s3://https://host:port/...`` for
    TLS), ``as://account/container/prefix``, ``gs://bucket/prefix``. A malformed URL raises
    InvalidArgumentError.
    """
    text = str(location)
    m = _URL.match(text)
    if m is None:
        return None
    scheme, rest = m.group(1), m.group(2)
    if scheme == "s3":
        endpoint = None
        host = _S3_HOST.match(rest)
        if host is not None:
            proto, name, port, rest = host.groups()
            endpoint = f"{proto or 'http'}://{name}:{port}"
        bucket, _, prefix = rest.strip("/").partition("/")
        if not bucket:
            raise InvalidArgumentError(f"invalid S3 repository '{text}': expected s3://bucket/path")
        return StoreURL("s3", bucket, _clean_prefix(prefix), endpoint=endpoint)
    if scheme == "gs":
        bucket, _, prefix = rest.strip("/").partition("/")
        if not bucket:
            raise InvalidArgumentError(f"invalid GCS repository '{text}': expected gs://bucket/path")
        return StoreURL("gs", bucket, _clean_prefix(prefix))
    account, _, rest = rest.strip("/").partition("/")
    container, _, prefix = rest.partition("/")
    if not account or not container:
        raise InvalidArgumentError(
            f"invalid Azure Storage repository '{text}': expected as://account/container/path"
        )
    return StoreURL("as", container, _clean_prefix(prefix), account=account)
