"""Azure Blob repositories (``as://account/container/prefix``) through azure-storage-blob.

Credentials, first found wins:

1. ``AZURE_STORAGE_CONNECTION_STRING`` (its endpoint too: Azurite and sovereign clouds);
2. ``AZURE_STORAGE_KEY`` (with the URL's account; ``AZURE_STORAGE_ACCOUNT`` as the reference
   documents it is the URL's account), or ``AZURE_STORAGE_SAS_TOKEN``;
3. azure-identity's ``DefaultAzureCredential`` (environment, workload and managed identity, the
   Azure CLI's login) when azure-identity is installed; else anonymous access (a public container).

Without a connection string the endpoint is ``https://<account>.blob.core.windows.net``, or
``AZURE_STORAGE_BLOB_ENDPOINT`` when set. The SDK is imported when the first ``as://`` repository is
opened (``pip install inferd[azure]``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.repository.cache import StoredObject
from inferd.repository.s3 import redact
from inferd.repository.store_url import StoreURL

__all__ = ["AzureBlobStore"]

_SECRETS = re.compile(r"(AccountKey|SharedAccessSignature|sig|Signature)=[^;&\s'\"]+", re.IGNORECASE)


def _sdk() -> Any:
    try:
        from azure.storage import blob
    except ImportError as e:
        raise InvalidArgumentError(
            "as:// model repositories need azure-storage-blob, which is not installed: "
            f"install inferd[azure] ({e})"
        ) from None
    return blob


def _credential(account: str) -> Any:
    key = os.environ.get("AZURE_STORAGE_KEY")
    if key:
        from azure.core.credentials import AzureNamedKeyCredential

        return AzureNamedKeyCredential(account, key)
    sas = os.environ.get("AZURE_STORAGE_SAS_TOKEN")
    if sas:
        from azure.core.credentials import AzureSasCredential

        return AzureSasCredential(sas)
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        return None  # anonymous: a public container
    return DefaultAzureCredential()


class AzureBlobStore:
    """The blobs under one prefix of one container (see the module docstring)."""

    def __init__(self, url: StoreURL) -> None:
        blob = _sdk()
        from azure.core import MatchConditions

        self.url = url
        self._match = MatchConditions.IfNotModified
        options: dict[str, Any] = {"retry_total": 2, "connection_timeout": 5, "read_timeout": 60}
        conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        assert url.account is not None
        if conn:
            self._client = blob.ContainerClient.from_connection_string(conn, url.bucket, **options)
        else:
            endpoint = os.environ.get("AZURE_STORAGE_BLOB_ENDPOINT") or (
                f"https://{url.account}.blob.core.windows.net"
            )
            self._client = blob.ContainerClient(
                endpoint, url.bucket, credential=_credential(url.account), **options
            )
        self._secrets = [
            os.environ.get(name, "")
            for name in ("AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING")
        ]

    def _error(self, e: Exception) -> UnavailableError:
        """An SDK error as a short text without credentials (the caller adds the URL)."""
        code = getattr(e, "error_code", None)
        status = getattr(e, "status_code", None)
        first = (str(getattr(e, "message", "") or e).strip().splitlines() or [""])[0]
        if code:
            text = f"{code} (HTTP {status}): {first}" if status else f"{code}: {first}"
        else:
            text = f"{type(e).__name__}: {first}"
        return UnavailableError(_SECRETS.sub(r"\1=***", redact(text, self._secrets)))

    def list(self) -> list[StoredObject]:
        prefix = self.url.key_prefix
        out: list[StoredObject] = []
        try:
            for item in self._client.list_blobs(name_starts_with=prefix or None, include=["metadata"]):
                path = str(item.name)[len(prefix) :]
                if (item.metadata or {}).get("hdi_isfolder") == "true":
                    path = path.rstrip("/") + "/"  # a folder of a hierarchical namespace
                out.append(
                    StoredObject(
                        path=path,
                        size=int(item.size or 0),
                        etag=str(item.etag or ""),
                        modified=str(item.last_modified or ""),
                    )
                )
        except Exception as e:  # azure.core's HttpResponseError, ServiceRequestError, credentials
            raise self._error(e) from None
        return out

    def download(self, obj: StoredObject, dest: Path) -> None:
        name = self.url.key_prefix + obj.path
        kwargs: dict[str, Any] = {}
        if obj.etag:
            kwargs = {"etag": obj.etag, "match_condition": self._match}
        try:
            with open(dest, "wb") as f:
                self._client.download_blob(name, **kwargs).readinto(f)
        except Exception as e:
            raise self._error(e) from None
