"""The SageMaker front end beyond the recorded reference answers (test_e2e_clouds_reference.py): boto3's
``sagemaker-runtime`` client, the ``serve`` entry point, SAGEMAKER_TRITON_INFERENCE_TYPE, a multi-model
endpoint's refusals (nothing read outside the models root), statistics, metrics, logs, API keys,
limits, and ``--workers``."""

from __future__ import annotations

import json
import os
import struct
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloud_process import CloudProcess
from conftest import REFERENCE_MODEL_NAMES, REPO_ROOT

from repo_paths import FIXTURE_MODELS, REFERENCE_MODELS

pytestmark = pytest.mark.timeout(180)

SEQ = [float(i) for i in range(16)]
ONES = [1.0] * 16
ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": SEQ},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": ONES},
    ]
}
MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="


def repository(dest: Path, *models: str) -> Path:
    import shutil

    dest.mkdir(parents=True)
    for m in models:
        src = REFERENCE_MODELS / m if m in REFERENCE_MODEL_NAMES else FIXTURE_MODELS / m
        shutil.copytree(src, dest / m, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def started(proc: CloudProcess) -> CloudProcess:
    proc.start()
    return proc


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudProcess]:
    """add_sub behind /invocations, with request logging and API keys that leave health open."""
    root = tmp_path_factory.mktemp("sagemaker")
    repo = repository(root / "models", "add_sub", "identity_fp32")
    args = ("--allow-sagemaker=true", "--log-verbose=1", "--http-max-input-size=100000")
    proc = CloudProcess(
        repo, root / "inferd.log", args, env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "add_sub"}
    )
    proc.extra_args = (*args, f"--sagemaker-port={proc.cloud_port}")
    started(proc)
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]


def boto3_client(proc: CloudProcess) -> Any:
    boto3 = pytest.importorskip("boto3")
    return boto3.client(
        "sagemaker-runtime",
        endpoint_url=proc.cloud_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def test_boto3_invoke_endpoint_json(single: CloudProcess) -> None:
    """InvokeEndpoint as boto3 sends it (/endpoints/<name>/invocations, signed): the KServe v2 answer."""
    r = boto3_client(single).invoke_endpoint(
        EndpointName="local", Body=json.dumps(ADD_SUB), ContentType="application/json"
    )
    assert r["ContentType"] == "application/json"
    doc = json.loads(r["Body"].read())
    assert doc["model_name"] == "add_sub"
    assert doc["outputs"][0]["data"] == [v + 1 for v in SEQ]


def test_boto3_invoke_endpoint_binary(single: CloudProcess) -> None:
    head = json.dumps(
        {
            "inputs": [
                {"name": n, "shape": [1, 16], "datatype": "FP32", "parameters": {"binary_data_size": 64}}
                for n in ("INPUT0", "INPUT1")
            ],
            "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = head + struct.pack("<16f", *SEQ) + struct.pack("<16f", *ONES)
    r = boto3_client(single).invoke_endpoint(
        EndpointName="local", Body=body, ContentType=f"{MIME}{len(head)}"
    )
    assert r["ContentType"].startswith(MIME)
    size = int(r["ContentType"].rsplit("=", 1)[1])
    data = r["Body"].read()
    header = json.loads(data[:size])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 64
    assert list(struct.unpack("<16f", data[size:])) == [v - 1 for v in SEQ]


def test_invocations_are_counted_logged_and_in_metrics(single: CloudProcess) -> None:
    def count() -> int:
        return int(
            single.request("GET", "/v2/models/add_sub/stats").json()["model_stats"][0]["inference_count"]
        )

    before = count()
    for _ in range(3):
        assert single.cloud("POST", "/invocations", ADD_SUB).status == 200
    assert count() == before + 3
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{single.metrics_port}/metrics").read().decode()
    assert 'nv_inference_request_success{model="add_sub",version="1"}' in metrics
    assert "HTTP request: POST /invocations 200" in single.log()


def test_limits_hold_on_the_sagemaker_port(single: CloudProcess) -> None:
    """--http-max-input-size bounds SageMaker's bodies too (413 before the body is read)."""
    r = single.cloud("POST", "/invocations", b"x" * 200_000)
    assert r.status == 413
    assert single.cloud("GET", "/ping").status == 200


def test_unknown_inference_type_stops_the_start(tmp_path: Path) -> None:
    repo = repository(tmp_path / "models", "add_sub")
    env = {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "add_sub", "SAGEMAKER_TRITON_INFERENCE_TYPE": "predict"}
    proc = CloudProcess(repo, tmp_path / "inferd.log", env=env)
    proc.extra_args = ("--allow-sagemaker=true", f"--sagemaker-port={proc.cloud_port}")
    with pytest.raises(RuntimeError, match="did not become live"):
        proc.start()
    assert (
        "failed to start Sagemaker service: Invalid argument - Invalid SAGEMAKER_TRITON_INFERENCE_TYPE 'predict': "
        "must be one of: infer, generate, generate_stream" in proc.log()
    )


@pytest.mark.parametrize("kind", ["generate", "generate_stream"])
def test_inference_type_generate(kind: str, tmp_path: Path) -> None:
    """/invocations answers as /v2/models/<default>/<kind> does (later Triton releases' variable)."""
    repo = repository(tmp_path / "models", "gen_echo")
    env = {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "gen_echo", "SAGEMAKER_TRITON_INFERENCE_TYPE": kind}
    proc = CloudProcess(repo, tmp_path / "inferd.log", env=env)
    proc.extra_args = ("--allow-sagemaker=true", f"--sagemaker-port={proc.cloud_port}")
    started(proc)
    try:
        doc = {"text_input": "hello", "f": [1.5]}
        got = proc.cloud("POST", "/invocations", doc)
        want = proc.request("POST", f"/v2/models/gen_echo/{kind}", doc)
        assert (got.status, got.content_type, got.body) == (want.status, want.content_type, want.body)
        assert got.status == 200 and (b"HELLO" in got.body)
        assert proc.cloud("GET", "/invocations").status == 405
    finally:
        assert proc.stop() == 0


# -- multi-model endpoints ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CloudProcess, Path]]:
    """A multi-model endpoint as the ``serve`` entry point starts it, its models root a folder of ours."""
    root = tmp_path_factory.mktemp("mme")
    models = root / "opt-ml-models"
    models.mkdir()
    env = {
        "SAGEMAKER_MULTI_MODEL": "true",
        "SAGEMAKER_MULTI_MODEL_REPO": str(root / "sagemaker"),
        "SAGEMAKER_MODELS_ROOT": str(models),
        "SAGEMAKER_TRITON_LOG_VERBOSE": "false",
    }
    proc = CloudProcess(root, root / "inferd.log", env=env, serve_entry_point=True)
    started(proc)
    try:
        yield proc, models
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]


def archive(models: Path, digest: str, *names: str) -> str:
    repository(models / digest / "model", *names)
    return str(models / digest / "model")


def test_serve_starts_a_multi_model_endpoint(multi: tuple[CloudProcess, Path]) -> None:
    proc, models = multi
    assert 'SageMaker MME mode. Using Triton ping mode: "live"' in proc.log()
    assert proc.cloud("GET", "/ping").status == 200
    url = archive(models, "hserve", "add_sub")
    headers = {"X-Amzn-SageMaker-Target-Model": "add_sub.tar.gz"}
    assert proc.cloud("POST", "/models", {"model_name": "hserve", "url": url}, headers).status == 200
    r = proc.cloud("POST", "/models/hserve/invoke", ADD_SUB, headers)
    assert r.status == 200 and r.json()["model_name"] == "add_sub.tar.gz"
    # boto3 names the target model; the endpoint finds the load that serves it
    out = boto3_client(proc).invoke_endpoint(
        EndpointName="mme",
        TargetModel="add_sub.tar.gz",
        Body=json.dumps(ADD_SUB),
        ContentType="application/json",
    )
    assert json.loads(out["Body"].read())["model_name"] == "add_sub.tar.gz"
    assert proc.cloud("DELETE", "/models/hserve", None, headers).status == 200
    assert proc.cloud("GET", "/models/hserve").status == 404


@pytest.mark.parametrize(
    ("what", "url"),
    [
        ("outside the root", "/tmp/somewhere/model"),
        ("a parent step", "{root}/../escape/model"),
        ("no model folder", "{root}/hx"),
        ("a hash with other characters", "{root}/h-x/model"),
        ("relative", "opt/ml/models/hx/model"),
    ],
)
def test_a_load_reads_nothing_outside_the_models_root(
    multi: tuple[CloudProcess, Path], what: str, url: str
) -> None:
    proc, models = multi
    url = url.replace("{root}", str(models))
    r = proc.cloud("POST", "/models", {"model_name": "hx", "url": url})
    assert r.status == 400, what
    assert r.error == (
        f"failed to register '{url}': a multi-model load reads only folders under '{models}' "
        "(<root>/<hash>/model[/<subfolder>])"
    )
    assert proc.cloud("GET", "/ping").status == 200


def test_a_symbolic_link_out_of_the_root_is_refused(multi: tuple[CloudProcess, Path], tmp_path: Path) -> None:
    proc, models = multi
    outside = repository(tmp_path / "outside", "identity_fp32")
    (models / "hlink").mkdir()
    os.symlink(outside, models / "hlink" / "model")
    r = proc.cloud("POST", "/models", {"model_name": "hlink", "url": str(models / "hlink" / "model")})
    assert r.status == 400 and "reads only folders under" in r.error
    assert proc.cloud("GET", "/models/hlink").status == 404


@pytest.mark.parametrize(("index", "name"), list(enumerate(["../x", "a/b", "..", "tab\there"])))
def test_a_target_name_with_path_characters_is_refused(
    multi: tuple[CloudProcess, Path], index: int, name: str
) -> None:
    proc, models = multi
    url = archive(models, f"hname{index}", "identity_fp32")
    r = proc.cloud(
        "POST", "/models", {"model_name": "hn", "url": url}, {"X-Amzn-SageMaker-Target-Model": name}
    )
    assert r.status == 400
    assert "may not hold" in r.error


def test_an_archive_of_several_models_and_no_ensemble_is_refused(multi: tuple[CloudProcess, Path]) -> None:
    """The reference takes whichever folder its directory listing gives last; inferd says why not."""
    proc, models = multi
    url = archive(models, "htwo", "identity_fp32", "add_sub")
    r = proc.cloud("POST", "/models", {"model_name": "htwo", "url": url})
    assert r.status == 400
    assert r.error == (
        f"failed to load '{url}': it holds 2 models (add_sub, identity_fp32) and none is an ensemble: a "
        "multi-model archive holds one model, or an ensemble and its steps"
    )
    assert proc.cloud("GET", "/models/htwo").status == 404


# -- the serve entry point: one model ----------------------------------------------------------------
def test_serve_starts_the_only_model(tmp_path: Path) -> None:
    repo = repository(tmp_path / "model", "identity_fp32")
    proc = CloudProcess(
        repo, tmp_path / "inferd.log", env={"SAGEMAKER_SINGLE_MODEL_REPO": str(repo)}, serve_entry_point=True
    )
    started(proc)
    try:
        log = proc.log()
        assert "WARNING: No SAGEMAKER_TRITON_DEFAULT_MODEL_NAME provided." in log
        assert "Starting with the only existing model directory identity_fp32" in log
        r = proc.cloud(
            "POST",
            "/invocations",
            {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]},
        )
        assert r.status == 200 and r.json()["outputs"][0]["data"] == [1.0, 2.0]
        assert proc.cloud("GET", "/ping").status == 200
    finally:
        assert proc.stop() == 0


def test_serve_refuses_a_model_at_the_top(tmp_path: Path) -> None:
    import subprocess
    import sys

    repo = repository(tmp_path / "x", "identity_fp32") / "identity_fp32"
    env = {**os.environ, "SAGEMAKER_SINGLE_MODEL_REPO": str(repo), "PYTHONPATH": str(REPO_ROOT / "src")}
    r = subprocess.run(
        [sys.executable, "-m", "inferd.sagemaker_serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        "ERROR: Incorrect directory structure.",
        "       Model directory needs to contain the top level folder",
    ]


def test_workers_share_one_multi_model_list(tmp_path: Path) -> None:
    """A load reaches every --workers process (the registration and the model), and so does an unload."""
    models = tmp_path / "opt-ml-models"
    url = archive(models, "hw", "identity_fp32")
    proc = CloudProcess(repository(tmp_path / "empty"), tmp_path / "inferd.log")
    proc.extra_args = (
        "--allow-sagemaker=true",
        f"--sagemaker-port={proc.cloud_port}",
        "--model-control-mode=explicit",
        f"--sagemaker-models-root={models}",
        "--workers=2",
    )
    started(proc)
    try:
        assert proc.wait_starting(lambda: "all 2 workers serving" in proc.log()), proc.log()[-3000:]
        assert proc.cloud("POST", "/models", {"model_name": "hw", "url": url}).status == 200
        identity = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [4]}]}
        for _ in range(12):  # fresh connections, spread over the two processes by the kernel
            assert proc.cloud("GET", "/models/hw").json() == {"modelName": "hw", "modelUrl": url}
            assert proc.cloud("POST", "/models/hw/invoke", identity).status == 200
        assert proc.cloud("DELETE", "/models/hw").status == 200
        for _ in range(12):
            assert proc.cloud("GET", "/models/hw").status == 404
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]
