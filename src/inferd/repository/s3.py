"""S3 repositories (``s3://bucket/prefix``, ``s3://host:port/bucket/prefix``) through boto3.

Endpoint, region and credentials come from boto3's standard configuration (environment variables,
``~/.aws/config`` and ``credentials``, profiles, instance roles), ``AWS_ENDPOINT_URL`` and
``AWS_ENDPOINT_URL_S3`` included, so S3-compatible stores need no extra flag; an endpoint written in
the URL (the reference's private-S3 form) wins over them. boto3 is imported when the first
``s3://`` repository is opened (``pip install inferd[s3]``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.repository.cache import StoredObject
from inferd.repository.store_url import StoreURL

__all__ = ["S3Store", "redact"]

_CHUNK = 1 << 20
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ACCESS_KEY_ID")


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret (at least 4 characters long) replaced by ``***``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def _sdk() -> tuple[Any, Any]:
    try:
        import boto3
        from botocore.config import Config
    except ImportError as e:
        raise InvalidArgumentError(
            f"s3:// model repositories need boto3, which is not installed: install inferd[s3] ({e})"
        ) from None
    return boto3, Config


class S3Store:
    """The objects under one S3 prefix (see the module docstring)."""

    def __init__(self, url: StoreURL) -> None:
        boto3, config_cls = _sdk()
        self.url = url
        session = boto3.session.Session()
        kwargs: dict[str, Any] = {}
        if url.endpoint is not None:
            kwargs["endpoint_url"] = url.endpoint
        config = config_cls(
            connect_timeout=5, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"}
        )
        self._client = session.client("s3", config=config, **kwargs)
        self._secrets = [os.environ.get(name, "") for name in _SECRET_ENV]
        try:
            creds = session.get_credentials()
        except Exception:  # a broken profile: the listing reports it
            creds = None
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            self._secrets += [frozen.secret_key or "", frozen.token or "", frozen.access_key or ""]

    def _error(self, e: Exception) -> UnavailableError:
        """A boto error as a short text without credentials (the caller adds the URL)."""
        response = getattr(e, "response", None)
        if isinstance(response, dict) and isinstance(response.get("Error"), dict):
            err = response["Error"]
            code, message = err.get("Code", ""), err.get("Message", "")
            text = f"{code}: {message}" if message else str(code)
        else:
            text = f"{type(e).__name__}: {e}"
        return UnavailableError(redact(text, self._secrets))

    def list(self) -> list[StoredObject]:
        prefix = self.url.key_prefix
        out: list[StoredObject] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.url.bucket, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    out.append(
                        StoredObject(
                            path=str(item["Key"])[len(prefix) :],
                            size=int(item.get("Size", 0)),
                            etag=str(item.get("ETag", "")),
                            modified=str(item.get("LastModified", "")),
                        )
                    )
        except Exception as e:  # botocore's ClientError, BotoCoreError (connection, credentials)
            raise self._error(e) from None
        return out

    def download(self, obj: StoredObject, dest: Path) -> None:
        key = self.url.key_prefix + obj.path
        # IfMatch: an object rewritten since the listing fails here (the next look fetches it anew)
        extra = {"IfMatch": obj.etag} if obj.etag else {}
        try:
            body = self._client.get_object(Bucket=self.url.bucket, Key=key, **extra)["Body"]
            with body, open(dest, "wb") as f:
                shutil.copyfileobj(body, f, _CHUNK)
        except Exception as e:
            raise self._error(e) from None
