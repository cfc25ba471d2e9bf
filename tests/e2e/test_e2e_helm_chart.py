"""The Helm chart's pod, short of a cluster: the container's command line as Helm renders it (the image's
ENTRYPOINT and the Deployment's args) and its environment (the chart's values plus the keys of the
store's Secret) start a real ``inferd``, which serves the reference models from moto's S3 server. The
probes answer on the ports and paths the chart names, Prometheus finds the HPA's metric where the
annotations point, tritonclient infers through the Service's ports, and SIGTERM ends the server
within the pod's grace period. Not run here: the image, the cluster, the HPA and prometheus-adapter."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess

from deploy_files import container, container_port, helm, image_command, render, the
from inferd.metrics.scaling import FAMILY as SCALING_FAMILY
from ports import free_port
from repo_paths import REFERENCE_MODELS
from store_emulators import S3_ENV, Emulator, s3_client, start_moto, upload_s3

pytest.importorskip("boto3")
pytest.importorskip("moto")


class ChartPod:
    """The chart rendered for the ports picked, its container's command line running here."""

    def __init__(self, root: Path, store: Emulator) -> None:
        self.root = root
        self.store = store
        self.docs: list[dict[str, Any]] = []
        self.proc = InferdProcess(root, root / "inferd.log", command=self.command)

    def values(self, http: int = 8000, grpc: int = 8001, metrics: int = 8002) -> dict[str, Any]:
        return {
            "modelRepositories": ["s3://models/repo"],
            "storage": {"secretName": "inferd-s3", "env": {"AWS_ENDPOINT_URL": self.store.endpoint}},
            "ports": {"http": http, "grpc": grpc, "metrics": metrics},
            "exitTimeoutSecs": 10,
            "autoscaling": {"enabled": True},  # off by default (it needs prometheus-adapter)
        }

    def command(self, http: int, grpc: int, metrics: int) -> list[str]:
        # the chart's port numbers are what these tests check: fixed ones, not the port 0 given
        self.docs = render(self.values(free_port(), free_port(), free_port()))
        argv = image_command(self.container)
        assert argv[0] == "inferd"  # `python -m inferd` runs the same main
        return argv[1:]

    @property
    def container(self) -> dict[str, Any]:
        return container(self.docs)

    def start(self, mp: pytest.MonkeyPatch) -> None:
        # the container's environment: the chart's own variables, and the keys the Secret holds
        # (the tests' dummies); the cache is a temporary folder where the pod mounts a volume
        env = container(render(self.values()))["env"]
        for var in env:
            mp.setenv(var["name"], var["value"])
        for key, value in S3_ENV.items():
            mp.setenv(key, value)
        mp.setenv("INFERD_MODEL_CACHE", str(self.root / "cache"))
        self.proc.start()

    def get(self, port: int, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChartPod]:
    helm()
    store = start_moto()
    try:
        upload_s3(s3_client(store.endpoint), "models", "repo", REFERENCE_MODELS)
        p = ChartPod(tmp_path_factory.mktemp("chart"), store)
        with pytest.MonkeyPatch.context() as mp:
            p.start(mp)
        try:
            yield p
        finally:
            p.proc.kill()
    finally:
        store.stop()


def add_sub_inputs(module: Any) -> tuple[list[Any], np.ndarray, np.ndarray]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    inputs = [module.InferInput("INPUT0", [1, 16], "FP32"), module.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def test_probes_answer_on_the_ports_and_paths_the_chart_names(pod: ChartPod) -> None:
    c = pod.container
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        status, _ = pod.get(container_port(c, get["port"]), get["path"])
        assert status == 200, probe


def test_the_models_come_from_the_store(pod: ChartPod) -> None:
    assert sorted(p.name for p in (pod.root / "cache").glob("*/add_sub"))  # fetched, content-addressed
    for module, port in ((httpclient, "http"), (grpcclient, "grpc")):
        client = module.InferenceServerClient(f"127.0.0.1:{container_port(pod.container, port)}")
        inputs, a, b = add_sub_inputs(module)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_prometheus_finds_the_hpas_metric_where_the_annotations_point(pod: ChartPod) -> None:
    client = httpclient.InferenceServerClient(pod.proc.url)
    client.infer("add_sub", add_sub_inputs(httpclient)[0])
    annotations = the(pod.docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    status, body = pod.get(int(annotations["prometheus.io/port"]), annotations["prometheus.io/path"])
    assert status == 200
    hpa_metric = the(pod.docs, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]["metric"]["name"]
    assert hpa_metric == SCALING_FAMILY[0]
    text = body.decode()
    assert f"# TYPE {hpa_metric} gauge" in text
    assert f'{hpa_metric}{{model="add_sub",version="1"}}' in text


def test_sigterm_ends_the_server_within_the_grace_period(pod: ChartPod) -> None:
    grace = the(pod.docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    began = time.monotonic()
    assert pod.proc.stop(timeout=grace) == 0, pod.proc.log()[-3000:]
    assert time.monotonic() - began < grace
