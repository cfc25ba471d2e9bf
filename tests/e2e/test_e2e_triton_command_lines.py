"""Command lines written for Triton start inferd unchanged and serve, one test each: those the
reference's own deploy/ examples run (Triton 2.51's Helm charts for AWS, GCP, OCI, on-premises
Kubernetes, Fleet Command and the GKE Marketplace app, with their values as shipped or as their
READMEs fill them in), KServe's Triton ServingRuntime (config/runtimes/kserve-tritonserver.yaml), and a
launch script with the flags issue 28 names. Each runs through the ``tritonserver`` console script, or
as ``inferd tritonserver ...``, the command an image whose ENTRYPOINT is ``inferd`` runs for a
container's ``args: [tritonserver, ...]`` (KServe's runtime).

What the test machine changes, and nothing else: the ports (the charts leave Triton's 8000-8002, which
a shared machine cannot give a test, so free ports are appended as --http-port/--grpc-port/
--metrics-port; KServe's 8080 and 9000 are replaced by free ones), a volume's mount path by a folder
(/models, /mnt/models), the OCI chart's endpoint placeholder by moto's address, and the stores are
moto's S3 server (one per command line: the charts' buckets overlap) and gcp-storage-emulator, found
through the environment (AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST) as a pod finds its store's
credentials. The buckets hold the reference models.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess

from repo_paths import REFERENCE_MODELS
from store_emulators import (
    S3_ENV,
    Emulator,
    gcs_client,
    s3_client,
    start_gcs,
    start_moto,
    upload_gcs,
    upload_s3,
)

pytest.importorskip("boto3")
pytest.importorskip("moto")
pytest.importorskip("google.cloud.storage")
pytest.importorskip("gcp_storage_emulator")

#: the reference's console script name, installed beside this interpreter by ``pip install -e .``
TRITONSERVER = Path(sys.executable).parent / "tritonserver"
OCI_ENDPOINT = "https://<OCI_NAMESPACE>.compat.objectstorage.<OCI_REGION>.oraclecloud.com:443"
BUCKET = "triton-inference-server-repository"


@dataclass(frozen=True)
class CommandLine:
    """A command line as its source writes it (after ``tritonserver``), and where it comes from."""

    source: str
    argv: tuple[str, ...]
    #: (store, bucket, prefix) its repository names: the fixture fills it with the reference models
    store: tuple[str, str, str] | None = None


LINES = {
    # deploy/aws: templates/deployment.yaml's args with values.yaml's modelRepositoryPath
    "aws": CommandLine(
        "deploy/aws",
        (
            f"--model-store=s3://{BUCKET}/model_repository",
            "--model-control-mode=poll",
            "--repository-poll-secs=5",
        ),
        ("s3", BUCKET, "model_repository"),
    ),
    # deploy/gcp: the same chart on Google Cloud Storage
    "gcp": CommandLine(
        "deploy/gcp", (f"--model-store=gs://{BUCKET}/model_repository",), ("gs", BUCKET, "model_repository")
    ),
    # deploy/oci: Oracle's S3-compatible endpoint written in the URL
    "oci": CommandLine(
        "deploy/oci",
        (
            f"--model-store=s3://{OCI_ENDPOINT}/{BUCKET}",
            "--model-control-mode=poll",
            "--repository-poll-secs=5",
        ),
        ("s3", BUCKET, ""),
    ),
    # deploy/k8s-onprem: values.yaml's serverArgs, the repository on an NFS volume mounted at /models
    "k8s-onprem": CommandLine("deploy/k8s-onprem", ("--model-repository=/models",)),
    # deploy/fleetcommand: README.md's Application Configuration (serverArgs)
    "fleetcommand": CommandLine(
        "deploy/fleetcommand", (f"--model-repository=s3://{BUCKET}",), ("s3", BUCKET, "")
    ),
    # deploy/gke-marketplace-app: the chart's args with values.yaml's defaults
    "gke-marketplace": CommandLine(
        "deploy/gke-marketplace-app",
        (
            "--model-store=gs://triton_sample_models/24.09",
            "--strict-model-config=False",
            "--log-verbose=0",
            "--allow-gpu-metrics=True",
        ),
        ("gs", "triton_sample_models", "24.09"),
    ),
    # KServe's ClusterServingRuntime kserve-tritonserver (the storage initializer fills /mnt/models)
    "kserve": CommandLine(
        "kserve config/runtimes/kserve-tritonserver.yaml",
        (
            "--model-store=/mnt/models",
            "--grpc-port=9000",
            "--http-port=8080",
            "--allow-grpc=true",
            "--allow-http=true",
        ),
    ),
    # issue 28: a launch script's pool sizes, backend directory, retry count and the like
    "launch-script": CommandLine(
        "issue 28",
        (
            "--model-repository=/models",
            "--pinned-memory-pool-byte-size=268435456",
            "--cuda-memory-pool-byte-size=0:67108864",
            "--backend-directory=/opt/tritonserver/backends",
            "--model-load-retry-count=2",
            "--allow-sagemaker=false",
            "--min-supported-compute-capability=6.0",
            "--model-namespacing=true",
            "--buffer-manager-thread-count=4",
        ),
    ),
}
IGNORED_IN_LAUNCH_SCRIPT = (
    "--pinned-memory-pool-byte-size",
    "--cuda-memory-pool-byte-size",
    "--buffer-manager-thread-count",
)


class Stores:
    """moto and gcp-storage-emulator holding the reference models where the command lines look."""

    def __init__(self, root: Path) -> None:
        self.root = root
        #: command line -> its S3 store
        self.s3: dict[str, Emulator] = {}
        self.gcs: Emulator | None = None
        try:
            self.gcs = start_gcs()
            gcs = gcs_client(self.gcs)
            for name, line in LINES.items():
                if line.store is not None:
                    kind, bucket, prefix = line.store
                    if kind == "s3":
                        self.s3[name] = start_moto()
                        upload_s3(s3_client(self.s3[name].endpoint), bucket, prefix, REFERENCE_MODELS)
                    else:
                        upload_gcs(gcs, bucket, prefix, REFERENCE_MODELS)
        except BaseException:
            self.close()
            raise
        self.local = root / "models"
        shutil.copytree(REFERENCE_MODELS, self.local, ignore=shutil.ignore_patterns("__pycache__"))

    def env(self, name: str) -> dict[str, str]:
        """The environment of command line ``name``: the OCI chart names its endpoint in the URL."""
        assert self.gcs is not None
        s3 = self.s3.get(name)
        return {
            **S3_ENV,
            **({"AWS_ENDPOINT_URL": s3.endpoint} if s3 is not None and name != "oci" else {}),
            "STORAGE_EMULATOR_HOST": self.gcs.endpoint,
            "INFERD_MODEL_CACHE": str(self.root / "cache"),
        }

    def here(self, arg: str) -> str:
        """``arg`` pointed at this machine: a mount path at the local copy, OCI's endpoint at moto."""
        for mount in ("/mnt/models", "/models"):
            if arg.endswith("=" + mount):
                return arg.removesuffix(mount) + str(self.local)
        return arg.replace(OCI_ENDPOINT, self.s3["oci"].endpoint) if "oci" in self.s3 else arg

    def close(self) -> None:
        for emu in (*self.s3.values(), self.gcs):
            if emu is not None:
                emu.stop()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    s = Stores(tmp_path_factory.mktemp("command-lines"))
    try:
        yield s
    finally:
        s.close()


def with_ports(argv: tuple[str, ...]) -> Callable[[int, int, int], list[str]]:
    """The command line with the test's ports (0 each: any free port, the start-up lines name it):
    KServe's own port flags get them, the others are appended (the charts rely on Triton's default
    ports)."""

    def command(http: int, grpc: int, metrics: int) -> list[str]:
        ports = {"--http-port": http, "--grpc-port": grpc, "--metrics-port": metrics}
        out = []
        for arg in argv:
            flag = arg.split("=", 1)[0]
            out.append(f"{flag}={ports.pop(flag)}" if flag in ports else arg)
        return out + [f"{flag}={port}" for flag, port in ports.items()]

    return command


def serves_add_sub(proc: InferdProcess) -> None:
    assert proc.request("GET", "/v2/health/ready").status == 200, proc.log()[-3000:]
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    for module, url in ((httpclient, proc.url), (grpcclient, f"127.0.0.1:{proc.grpc_port}")):
        client = module.InferenceServerClient(url)
        inputs = [module.InferInput("INPUT0", [1, 16], "FP32"), module.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        client.close()


def run(
    stores: Stores, tmp_path: Path, name: str, launcher: list[str], written: tuple[str, ...] | None = None
) -> InferdProcess:
    """Start the command line ``name`` (or as ``written``); serve add_sub; SIGTERM ends it with 0.
    The server (stopped)."""
    argv = tuple(stores.here(arg) for arg in (LINES[name].argv if written is None else written))
    proc = InferdProcess(
        stores.local,
        tmp_path / "server.log",
        command=with_ports(argv),
        env=stores.env(name),
        launcher=launcher,
    )
    try:
        proc.start()
        serves_add_sub(proc)
    finally:
        code = proc.stop()
    assert code == 0, proc.log()[-3000:]
    return proc


@pytest.mark.parametrize("name", ["aws", "gcp", "oci", "k8s-onprem", "fleetcommand", "gke-marketplace"])
def test_the_references_deploy_examples_start_inferd(stores: Stores, tmp_path: Path, name: str) -> None:
    assert TRITONSERVER.exists(), "the tritonserver console script: pip install -e ."
    run(stores, tmp_path, name, [str(TRITONSERVER)])


def test_kserves_triton_runtime_args_start_inferds_image(stores: Stores, tmp_path: Path) -> None:
    # the image's ENTRYPOINT is inferd; KServe's args begin with the command name: `inferd tritonserver ...`
    run(stores, tmp_path, "kserve", [sys.executable, "-m", "inferd", "tritonserver"])


def test_inferds_kserve_runtime_starts_and_serves(stores: Stores, tmp_path: Path) -> None:
    """deploy/kserve's runtime container: the image's ENTRYPOINT and the container's args."""
    from deploy_files import KSERVE, image_command, read_yaml

    container = read_yaml(KSERVE / "clusterservingruntime.yaml")["spec"]["containers"][0]
    argv = image_command(container)
    assert argv[:2] == ["inferd", "tritonserver"]  # `python -m inferd` runs the same main
    run(stores, tmp_path, "kserve", [sys.executable, "-m", "inferd", "tritonserver"], tuple(argv[2:]))


def test_a_launch_script_with_gpu_and_pool_flags_starts_and_logs_each_ignored_flag_once(
    stores: Stores, tmp_path: Path
) -> None:
    log = run(stores, tmp_path, "launch-script", [str(TRITONSERVER)]).log()
    for flag in IGNORED_IN_LAUNCH_SCRIPT:
        assert log.count(f"ignoring {flag}=") == 1, flag
    # the flags with a meaning here are not among the ignored ones
    for flag in ("--model-load-retry-count", "--model-namespacing", "--min-supported-compute-capability"):
        assert f"ignoring {flag}" not in log


def test_a_cloud_front_end_on_a_taken_port_stops_the_start_with_the_reference_reason(tmp_path: Path) -> None:
    """--allow-sagemaker is served now (test_e2e_clouds_*.py); its port must differ from the others'."""
    import subprocess

    r = subprocess.run(
        [
            str(TRITONSERVER),
            f"--model-repository={tmp_path}",
            "--allow-sagemaker=true",
            "--sagemaker-port=8000",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert (
        "The server cannot listen to HTTP requests and SageMaker requests at the same address and port "
        "0.0.0.0:8000" in r.stderr
    )
