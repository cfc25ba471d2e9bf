"""The Vertex AI front end beyond the recorded reference answers (test_e2e_clouds_reference.py): the
repository from a ``gs://`` AIP_STORAGE_URI (inferd's GCS repository, on the GCS emulator), API keys by
each redirect's category while ``--http-restricted-api`` stays off this port (as the reference), and
``--workers`` processes serving it with the whole server's statistics."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cloud_process import CloudProcess

from repo_paths import REFERENCE_MODELS

pytestmark = pytest.mark.timeout(180)

PREDICT = "/v1/endpoints/7/deployedModels/8:predict"
HEALTH = "/v1/endpoints/7/deployedModels/8"
IDENTITY = {"inputs": [{"name": "INPUT0", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}]}


def vertex_env(proc: CloudProcess, **more: str) -> dict[str, str]:
    return {
        "AIP_MODE": "PREDICTION",
        "AIP_HTTP_PORT": str(proc.cloud_port),
        "AIP_PREDICT_ROUTE": PREDICT,
        "AIP_HEALTH_ROUTE": HEALTH,
        **more,
    }


def one_model(dest: Path) -> Path:
    shutil.copytree(
        REFERENCE_MODELS / "identity_fp32",
        dest / "identity_fp32",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return dest


def test_a_gs_storage_uri_is_the_repository(tmp_path: Path) -> None:
    pytest.importorskip("google.cloud.storage")
    pytest.importorskip("gcp_storage_emulator")
    from store_emulators import gcs_client, start_gcs, upload_gcs

    emulator = start_gcs()
    try:
        upload_gcs(gcs_client(emulator), "artifacts", "run-1/model", one_model(tmp_path / "local"))
        proc = CloudProcess(tmp_path, tmp_path / "inferd.log")
        proc.command = lambda http, grpc, metrics: [
            "serve",
            f"--metrics-port={metrics}",
        ]  # no --model-repository
        proc.env = vertex_env(
            proc,
            AIP_STORAGE_URI="gs://artifacts/run-1/model",
            STORAGE_EMULATOR_HOST=emulator.endpoint,
            INFERD_MODEL_CACHE=str(tmp_path / "cache"),
        )
        proc.start()
        try:
            assert proc.cloud("GET", HEALTH).status == 200
            r = proc.cloud("POST", PREDICT, IDENTITY)
            assert r.status == 200 and r.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0]
            with pytest.raises(ConnectionRefusedError):  # AIP_MODE=PREDICTION: HTTP is off
                proc.request("GET", "/v2/health/ready")
        finally:
            assert proc.stop() == 0, proc.log()[-3000:]
    finally:
        emulator.stop()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudProcess]:
    root = tmp_path_factory.mktemp("vertex-keys")
    proc = CloudProcess(one_model(root / "models"), root / "inferd.log")
    proc.env = vertex_env(proc, INFERD_API_KEYS="infer-key: inference\nall-key: all")
    proc.extra_args = ("--allow-http=true", "--http-restricted-api=inference:x-team=ml")
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]


def test_api_keys_hold_by_category_and_restrictions_do_not(keyed: CloudProcess) -> None:
    assert keyed.cloud("GET", HEALTH).status == 200  # health is exempt
    assert keyed.cloud("POST", PREDICT, IDENTITY).status == 401
    infer = {"Authorization": "Bearer infer-key"}
    # the HTTP port's restriction (x-team) does not apply here, as on the reference's Vertex AI port
    assert keyed.cloud("POST", PREDICT, IDENTITY, infer).status == 200
    redirect = {**infer, "X-Vertex-Ai-Triton-Redirect": "v2/repository/index"}
    assert keyed.cloud("POST", PREDICT, {}, redirect).status == 403  # model-repository: not this key's
    redirect["Authorization"] = "Bearer all-key"
    assert keyed.cloud("POST", PREDICT, {}, redirect).status == 200
    # on the HTTP port the restriction holds
    assert keyed.infer("identity_fp32", IDENTITY, {"Authorization": "Bearer infer-key"}).status == 403


def test_workers_serve_vertex_ai_with_the_whole_servers_statistics(tmp_path: Path) -> None:
    proc = CloudProcess(one_model(tmp_path / "models"), tmp_path / "inferd.log")
    proc.env = vertex_env(proc)
    proc.extra_args = ("--workers=2",)
    proc.start()
    try:
        assert proc.wait_starting(lambda: "all 2 workers serving" in proc.log()), proc.log()[-3000:]
        for _ in range(20):  # fresh connections: the kernel spreads them over the two processes
            assert proc.cloud("POST", PREDICT, IDENTITY).status == 200
        stats = proc.cloud(
            "POST", PREDICT, {}, {"X-Vertex-Ai-Triton-Redirect": "v2/models/identity_fp32/stats"}
        )
        assert stats.json()["model_stats"][0]["inference_count"] == 20
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]
