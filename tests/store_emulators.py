"""Object-storage emulators the repository tests start on 127.0.0.1: moto's S3 server, Azurite and
gcp-storage-emulator (Google Cloud Storage's JSON API, pure Python, from PyPI).

Each runs as a subprocess on a free port and is stopped by the test that started it. Azurite comes
from npm (``scripts/get_azurite.sh``, which ``make test`` runs); :func:`azurite_command` says why it
is missing so that the Azure tests skip with a reason. Credentials are dummies: nothing leaves the
machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ports import free_port
from waiting import read_text, wait_until

START_TIMEOUT_S = 30.0
#: the secret the S3 tests use: any error text that shows it fails the test
S3_SECRET = "inferd-test-secret-Xq7Zr2"
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "inferdtestkeyid",
    "AWS_SECRET_ACCESS_KEY": S3_SECRET,
    "AWS_DEFAULT_REGION": "us-east-1",
}
#: Azurite's well-known development account
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass
class Emulator:
    """A running emulator: its process and port."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _wait_http(emu: Emulator, path: str) -> None:
    def answers() -> bool:
        assert emu.proc.poll() is None, "the emulator exited"
        try:
            urllib.request.urlopen(f"{emu.endpoint}{path}", timeout=1).close()
        except urllib.error.HTTPError:
            pass  # it answers
        return True

    try:
        wait_until(answers, "the emulator to answer", START_TIMEOUT_S, interval=0.05, ignore=(OSError,),
                   detail=lambda: f"log:\n{read_text(emu.log)[-3000:]}")  # fmt: skip
    except BaseException:
        emu.stop()
        raise


def start_moto(port: int | None = None, env: dict[str, str] | None = None) -> Emulator:
    """moto's S3 server (``env`` e.g. INITIAL_NO_AUTH_ACTION_COUNT=0 to refuse every credential)."""
    port = port or free_port()
    log = Path(tempfile.mkstemp(prefix="moto-", suffix=".log")[1])
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    emu = Emulator(proc, port, log)
    _wait_http(emu, "/moto-api/")
    return emu


def start_gcs(port: int | None = None) -> Emulator:
    """gcp-storage-emulator, in memory; clients find it through ``STORAGE_EMULATOR_HOST``."""
    port = port or free_port()
    log = Path(tempfile.mkstemp(prefix="gcs-", suffix=".log")[1])
    with open(log, "ab") as out:
        cmd = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1"]
        proc = subprocess.Popen(
            [*cmd, "--port", str(port), "--in-memory", "--quiet"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    emu = Emulator(proc, port, log)
    _wait_http(emu, "/storage/v1/b")
    return emu


def gcs_client(emu: Emulator) -> Any:
    """google-cloud-storage's client on the emulator (anonymous, as the SDK is with an emulator)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="inferd-test",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": emu.endpoint},
    )


def upload_gcs(client: Any, bucket: str, prefix: str, src: Path, create: bool = True) -> None:
    """Every file under ``src`` to ``bucket``/``prefix``/..., the bucket made first."""
    if create:
        with contextlib.suppress(Exception):  # Conflict: it exists
            client.create_bucket(bucket)
    b = client.bucket(bucket)
    for rel, path in _files(src):
        b.blob(f"{prefix}/{rel}" if prefix else rel).upload_from_filename(str(path))


def azurite_command() -> tuple[list[str] | None, str]:
    """Azurite's blob server command, or None with why it is missing."""
    base = Path(os.environ.get("INFERD_AZURITE_DIR") or Path(tempfile.gettempdir()) / "inferd-azurite")
    local = base / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return [str(local)], ""
    found = shutil.which("azurite-blob")
    if found:
        return [found], ""
    return None, f"Azurite is not installed (run scripts/get_azurite.sh; looked in {base} and PATH)"


def start_azurite(workdir: Path) -> Emulator:
    cmd, why = azurite_command()
    if cmd is None:
        raise RuntimeError(why)
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "azurite.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                *cmd,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--location",
                str(workdir),
                "--skipApiVersionCheck",
                "--loose",
                "--silent",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    emu = Emulator(proc, port, log)
    _wait_http(emu, f"/{AZURITE_ACCOUNT}?comp=list")
    return emu


def azurite_connection_string(emu: Emulator) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={emu.endpoint}/{AZURITE_ACCOUNT};"
    )


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.session.Session(
        aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_SECRET,
        region_name="us-east-1",
    ).client("s3", endpoint_url=endpoint)


def _files(src: Path) -> Iterator[tuple[str, Path]]:
    """The files to upload, each model's config.pbtxt before its version folders: a server that lists
    the store in between then meets a model without versions (it fails to load, and a Serve replica
    is unready and replaced) rather than a model.py without its config, which loads READY with no
    inputs or outputs (the reference too) and answers every request 400."""
    for path in sorted(src.rglob("*"), key=lambda p: (p.parent, p.name != "config.pbtxt", p)):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path.relative_to(src).as_posix(), path


def upload_s3(client: Any, bucket: str, prefix: str, src: Path, create: bool = True) -> None:
    """Every file under ``src`` to ``bucket``/``prefix``/..., the bucket made first."""
    if create:
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=bucket)
    for rel, path in _files(src):
        client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}" if prefix else rel, Body=path.read_bytes())


def upload_azure(conn: str, container: str, prefix: str, src: Path) -> None:
    from azure.storage.blob import ContainerClient

    client = ContainerClient.from_connection_string(conn, container)
    with contextlib.suppress(Exception):
        client.create_container()
    for rel, path in _files(src):
        client.upload_blob(f"{prefix}/{rel}" if prefix else rel, path.read_bytes(), overwrite=True)
