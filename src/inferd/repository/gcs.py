"""Google Cloud Storage repositories (``gs://bucket/prefix``) through google-cloud-storage.

Credentials are Google's Application Default Credentials: ``GOOGLE_APPLICATION_CREDENTIALS`` (a
service account's key file, as the reference reads it), the metadata server of GCE and GKE
(workload identity), or gcloud's login. Without any, the bucket is read anonymously (a public
bucket). ``STORAGE_EMULATOR_HOST`` points the client at an emulator (anonymously, as the SDK does).
The SDK is imported when the first ``gs://`` repository is opened (``pip install inferd[gcs]``).

An object's generation is its ETag here: a rewrite is a new generation, so poll mode and the cache
see the change, and a download asks for the generation that was listed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.repository.cache import StoredObject
from inferd.repository.store_url import StoreURL

__all__ = ["GCSStore"]

_TIMEOUT = (5.0, 60.0)  # connect, read (seconds)
_RETRY_S = 10.0  # transient errors are retried this long (the SDK's default is 120 s)


def _sdk() -> Any:
    try:
        from google.cloud import storage
    except ImportError as e:
        raise InvalidArgumentError(
            "gs:// model repositories need google-cloud-storage, which is not installed: "
            f"install inferd[gcs] ({e})"
        ) from None
    return storage


def _client(storage: Any) -> Any:
    """A client with the default credentials, else an anonymous one (a public bucket)."""
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return storage.Client()
    except DefaultCredentialsError:
        return storage.Client.create_anonymous_client()


class GCSStore:
    """The objects under one prefix of one bucket (see the module docstring)."""

    def __init__(self, url: StoreURL) -> None:
        storage = _sdk()
        from google.cloud.storage.retry import DEFAULT_RETRY

        self.url = url
        self._client = _client(storage)
        self._bucket = self._client.bucket(url.bucket)
        self._retry = DEFAULT_RETRY.with_timeout(_RETRY_S)

    @staticmethod
    def _error(e: Exception) -> UnavailableError:
        """An SDK error as a short text (the caller adds the URL): its code and its first line; for
        retries that ran out, the last error's."""
        e = getattr(e, "cause", None) or e  # google.api_core's RetryError
        code = getattr(e, "code", None)
        message = str(getattr(e, "message", "") or e).strip()
        first = (message.splitlines() or [""])[0]
        text = f"{code} {type(e).__name__}: {first}" if code else f"{type(e).__name__}: {first}"
        return UnavailableError(text)

    def list(self) -> list[StoredObject]:
        prefix = self.url.key_prefix
        out: list[StoredObject] = []
        try:
            for blob in self._client.list_blobs(
                self._bucket, prefix=prefix or None, timeout=_TIMEOUT, retry=self._retry
            ):
                out.append(
                    StoredObject(
                        path=str(blob.name)[len(prefix) :],
                        size=int(blob.size or 0),
                        etag=str(blob.generation or ""),
                        modified=str(blob.updated or ""),
                    )
                )
        except Exception as e:  # google.api_core's exceptions, google.auth's (credentials), transport
            raise self._error(e) from None
        return out

    def download(self, obj: StoredObject, dest: Path) -> None:
        blob = self._bucket.blob(self.url.key_prefix + obj.path)
        # the generation listed: an object rewritten since fails here (the next look fetches it anew)
        extra: dict[str, Any] = {"if_generation_match": int(obj.etag)} if obj.etag.isdigit() else {}
        try:
            with open(dest, "wb") as f:
                blob.download_to_file(f, timeout=_TIMEOUT, retry=self._retry, **extra)
        except Exception as e:
            raise self._error(e) from None
