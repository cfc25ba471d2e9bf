"""Model repositories in object storage behind a real ``inferd serve``: the reference models uploaded
to moto's S3 server (to Azurite for as://, to gcp-storage-emulator for gs://), served to tritonclient; poll mode notices a change in
the bucket; a missing bucket, refused credentials and a store that is down at start are reported
under their URL (never the credentials) while the local repository serves, and a later poll
recovers. The emulators run on 127.0.0.1, started here."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess

from ports import free_port
from repo_paths import FIXTURE_MODELS, REFERENCE_MODELS
from store_emulators import (
    S3_ENV,
    S3_SECRET,
    Emulator,
    azurite_command,
    azurite_connection_string,
    gcs_client,
    s3_client,
    start_azurite,
    start_gcs,
    start_moto,
    upload_azure,
    upload_gcs,
    upload_s3,
)
from waiting import wait_until

pytest.importorskip("boto3")
pytest.importorskip("moto")

WAIT_S = 40.0
POLL_ARGS = ("--model-control-mode=poll", "--repository-poll-secs=1", "--strict-readiness=false")


def renamed(src: Path, name: str, dest: Path) -> Path:
    """A copy of the model folder ``src`` named ``name`` (its config's name too)."""
    folder = dest / name
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("__pycache__"))
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace(f'name: "{src.name}"', f'name: "{name}"'))
    return dest


def add_sub_ok(url: str) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    client = httpclient.InferenceServerClient(url)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "FP32"),
        httpclient.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def index(proc: InferdProcess) -> dict[str, dict[str, Any]]:
    r = proc.request("POST", "/v2/repository/index", {})
    assert r.status == 200, r.body
    return {entry["name"]: entry for entry in r.json()}


def ready(proc: InferdProcess, name: str) -> bool:
    return proc.request("GET", f"/v2/models/{name}/ready").status == 200


class S3World:
    """The emulators of the S3 tests and the server that reads them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.main = start_moto()
        self.strict = start_moto(env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})  # refuses every key
        self.down_port = free_port()  # nothing listens here until a test starts a store
        self.late: Emulator | None = None
        self.client = s3_client(self.main.endpoint)
        upload_s3(self.client, "models", "repo", REFERENCE_MODELS)
        self.urls = {
            "main": "s3://models/repo",
            "missing": "s3://missing-bucket/repo",
            "refused": f"s3://127.0.0.1:{self.strict.port}/models/repo",
            "down": f"s3://127.0.0.1:{self.down_port}/late/repo",
        }
        local = root / "local"
        shutil.copytree(FIXTURE_MODELS / "echo_request", local / "echo_request")
        env = {**S3_ENV, "AWS_ENDPOINT_URL": self.main.endpoint, "INFERD_MODEL_CACHE": str(root / "cache")}
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            args = tuple(f"--model-repository={u}" for u in self.urls.values())
            self.proc = InferdProcess(local, root / "inferd.log", (*args, *POLL_ARGS)).start()

    def close(self) -> None:
        self.proc.stop()
        for emu in (self.main, self.strict, self.late):
            if emu is not None:
                emu.stop()


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3World]:
    world = S3World(tmp_path_factory.mktemp("s3"))
    try:
        wait_until(lambda: ready(world.proc, "add_sub"), "add_sub from S3", WAIT_S)
        yield world
    finally:
        world.close()


def test_serves_the_reference_models_from_s3(s3: S3World) -> None:
    add_sub_ok(s3.proc.url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{s3.proc.grpc_port}")
    for name in ("add_sub", "ensemble_add_sub", "identity_fp32", "mul_fp32", "identity_bytes"):
        assert grpc.is_model_ready(name), name
    # fetched into the cache, content-addressed: <cache>/<key>/<model>
    cached = sorted(p.name for p in (s3.root / "cache").glob("*/*"))
    assert "add_sub" in cached and "ensemble_add_sub" in cached


def test_the_local_repository_serves_beside_the_failures(s3: S3World) -> None:
    assert ready(s3.proc, "echo_request")


def test_failures_name_the_url_never_the_credentials(s3: S3World) -> None:
    entries = index(s3.proc)
    for key in ("missing", "refused", "down"):
        url = s3.urls[key]
        entry = entries.get(url)
        if entry is None and key != "down":  # "down" may have recovered if a later test ran first
            raise AssertionError(f"{url} not in the index: {json.dumps(entries)}")
        if entry is not None:
            assert entry["state"] == "UNAVAILABLE"
            assert url in entry["reason"]
    assert "NoSuchBucket" in entries[s3.urls["missing"]]["reason"]
    assert "InvalidAccessKeyId" in entries[s3.urls["refused"]]["reason"]
    log = s3.proc.log()
    assert s3.urls["down"] in log and "Could not connect" in log
    for secret in (S3_SECRET, S3_ENV["AWS_ACCESS_KEY_ID"]):
        assert secret not in log
        assert secret not in json.dumps(entries)


def test_poll_notices_a_changed_config_in_the_bucket(s3: S3World, tmp_path: Path) -> None:
    config = (REFERENCE_MODELS / "identity_fp32" / "config.pbtxt").read_text()
    changed = config + '\nparameters [ { key: "revision" value: { string_value: "2" } } ]\n'
    s3.client.put_object(Bucket="models", Key="repo/identity_fp32/config.pbtxt", Body=changed.encode())

    def reloaded() -> bool:
        r = s3.proc.request("GET", "/v2/models/identity_fp32/config")
        return r.status == 200 and r.json().get("parameters", {}).get("revision") == {"string_value": "2"}

    wait_until(reloaded, "identity_fp32's new config", WAIT_S)
    s3.proc.assert_serving()
    add_sub_ok(s3.proc.url)  # the unchanged models were not reloaded and serve on


def test_a_missing_bucket_recovers_at_the_next_poll(s3: S3World, tmp_path: Path) -> None:
    upload_s3(
        s3.client, "missing-bucket", "repo", renamed(REFERENCE_MODELS / "mul_fp32", "late_mul", tmp_path)
    )
    wait_until(lambda: ready(s3.proc, "late_mul"), "late_mul from the new bucket", WAIT_S)
    wait_until(lambda: s3.urls["missing"] not in index(s3.proc), "the repository failure to clear", WAIT_S)


def test_a_store_down_at_start_recovers_and_its_models_serve_on_when_it_goes_away(
    s3: S3World, tmp_path: Path
) -> None:
    s3.late = start_moto(port=s3.down_port)
    client = s3_client(s3.late.endpoint)
    upload_s3(client, "late", "repo", renamed(REFERENCE_MODELS / "identity_fp32", "late_identity", tmp_path))
    wait_until(lambda: ready(s3.proc, "late_identity"), "late_identity from the store that came up", WAIT_S)
    wait_until(lambda: s3.urls["down"] not in index(s3.proc), "the repository failure to clear", WAIT_S)
    # the store going away again: its models, cached locally, serve on (one test: under xdist a
    # second test could run on a worker whose store never came up)
    s3.late.stop()
    mark = len(s3.proc.log())
    wait_until(lambda: "late/repo" in s3.proc.log()[mark:], "a poll to fail on the stopped store", WAIT_S)
    assert ready(s3.proc, "late_identity")  # cached locally: it serves on, is not unloaded


# -- Azure Blob (Azurite) --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InferdProcess, str, str]]:
    pytest.importorskip("azure.storage.blob")
    cmd, why = azurite_command()
    if cmd is None:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("azure")
    emu = start_azurite(root / "azurite")
    try:
        conn = azurite_connection_string(emu)
        upload_azure(conn, "models", "repo", REFERENCE_MODELS)
        local = root / "local"
        shutil.copytree(FIXTURE_MODELS / "echo_request", local / "echo_request")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)
            mp.setenv("INFERD_MODEL_CACHE", str(root / "cache"))
            args = (
                "--model-repository=as://devstoreaccount1/models/repo",
                "--model-repository=as://devstoreaccount1/nocontainer/x",
            )
            proc = InferdProcess(local, root / "inferd.log", (*args, *POLL_ARGS)).start()
        try:
            wait_until(lambda: ready(proc, "add_sub"), "add_sub from Azurite", WAIT_S)
            yield proc, conn, "as://devstoreaccount1/nocontainer/x"
        finally:
            proc.stop()
    finally:
        emu.stop()


def test_serves_add_sub_from_azure_blob(azure: tuple[InferdProcess, str, str]) -> None:
    proc, _, _ = azure
    add_sub_ok(proc.url)
    assert ready(proc, "ensemble_add_sub") and ready(proc, "echo_request")


def test_azure_missing_container_names_the_url_not_the_key(azure: tuple[InferdProcess, str, str]) -> None:
    proc, conn, bad = azure
    entry = index(proc)[bad]
    assert entry["state"] == "UNAVAILABLE" and bad in entry["reason"]
    assert "ContainerNotFound" in entry["reason"]
    key = conn.split("AccountKey=")[1].split(";")[0]
    assert key not in proc.log() and key not in entry["reason"]


def test_azure_poll_notices_a_changed_blob(azure: tuple[InferdProcess, str, str], tmp_path: Path) -> None:
    proc, conn, _ = azure
    from azure.storage.blob import ContainerClient

    config = (REFERENCE_MODELS / "identity_fp32" / "config.pbtxt").read_text()
    changed = config + '\nparameters [ { key: "revision" value: { string_value: "az" } } ]\n'
    container = ContainerClient.from_connection_string(conn, "models")
    container.upload_blob("repo/identity_fp32/config.pbtxt", changed.encode(), overwrite=True)

    def reloaded() -> bool:
        r = proc.request("GET", "/v2/models/identity_fp32/config")
        return r.status == 200 and r.json().get("parameters", {}).get("revision") == {"string_value": "az"}

    wait_until(reloaded, "identity_fp32's new config from Azurite", WAIT_S)


# -- Google Cloud Storage (gcp-storage-emulator) ---------------------------------------------------


class GCSWorld:
    """The GCS emulator, the bucket holding the reference models, and the server reading it."""

    missing = "gs://no-such-bucket/repo"
    later = "gs://later-bucket/repo"  # made by a test

    def __init__(self, root: Path) -> None:
        self.root = root
        self.emulator = start_gcs()
        self.client = gcs_client(self.emulator)
        upload_gcs(self.client, "models", "repo", REFERENCE_MODELS)
        local = root / "local"
        shutil.copytree(FIXTURE_MODELS / "echo_request", local / "echo_request")
        env = {"STORAGE_EMULATOR_HOST": self.emulator.endpoint, "INFERD_MODEL_CACHE": str(root / "cache")}
        args = (
            "--model-repository=gs://models/repo",
            f"--model-repository={self.missing}",
            f"--model-repository={self.later}",
            *POLL_ARGS,
        )
        self.proc = InferdProcess(local, root / "inferd.log", args, env=env)

    def close(self) -> None:
        self.proc.stop()
        self.emulator.stop()


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GCSWorld]:
    pytest.importorskip("google.cloud.storage")
    pytest.importorskip("gcp_storage_emulator")
    world = GCSWorld(tmp_path_factory.mktemp("gcs"))
    try:
        world.proc.start()
        wait_until(lambda: ready(world.proc, "add_sub"), "add_sub from GCS", WAIT_S)
        yield world
    finally:
        world.close()


def test_serves_the_reference_models_from_gcs(gcs: GCSWorld) -> None:
    add_sub_ok(gcs.proc.url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{gcs.proc.grpc_port}")
    for name in (
        "add_sub",
        "ensemble_add_sub",
        "identity_fp32",
        "mul_fp32",
        "identity_bytes",
        "echo_request",
    ):
        assert grpc.is_model_ready(name), name
    cached = sorted(p.name for p in (gcs.root / "cache").glob("*/*"))
    assert "add_sub" in cached and "ensemble_add_sub" in cached


def test_gcs_missing_bucket_is_named_by_its_url(gcs: GCSWorld) -> None:
    entry = index(gcs.proc)[gcs.missing]
    assert entry["state"] == "UNAVAILABLE"
    assert gcs.missing in entry["reason"] and "404" in entry["reason"]


def test_gcs_poll_notices_a_changed_object(gcs: GCSWorld) -> None:
    config = (REFERENCE_MODELS / "identity_fp32" / "config.pbtxt").read_text()
    changed = config + '\nparameters [ { key: "revision" value: { string_value: "gs" } } ]\n'
    gcs.client.bucket("models").blob("repo/identity_fp32/config.pbtxt").upload_from_string(changed)

    def reloaded() -> bool:
        r = gcs.proc.request("GET", "/v2/models/identity_fp32/config")
        return r.status == 200 and r.json().get("parameters", {}).get("revision") == {"string_value": "gs"}

    wait_until(reloaded, "identity_fp32's new config from GCS", WAIT_S)
    add_sub_ok(gcs.proc.url)


def test_gcs_a_bucket_made_later_loads_at_the_next_poll(gcs: GCSWorld, tmp_path: Path) -> None:
    upload_gcs(
        gcs.client, "no-such-bucket", "repo", renamed(REFERENCE_MODELS / "mul_fp32", "gcs_mul", tmp_path)
    )
    wait_until(lambda: ready(gcs.proc, "gcs_mul"), "gcs_mul from the new bucket", WAIT_S)
    wait_until(lambda: gcs.missing not in index(gcs.proc), "the repository failure to clear", WAIT_S)
