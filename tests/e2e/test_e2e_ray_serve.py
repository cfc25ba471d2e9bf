"""``inferd serve-ray`` on a local two-node Ray cluster started here (a head and a worker node on
127.0.0.1, one CPU each), deploying the reference add_sub from an S3 repository served by moto:
tritonclient over Serve's HTTP and gRPC proxies (streaming included), statistics and metrics
summed over the replicas, a scale-up from 1 to 2 replicas under load, and a replica killed during
a request loop without losing any request the client retries. Everything started here is stopped
here (the cluster's processes are the nodes' children)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from repo_paths import REFERENCE_MODELS
from store_emulators import S3_ENV, free_port, s3_client, start_moto, upload_s3

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
pytest.importorskip("boto3")
pytest.importorskip("moto")

pytestmark = [pytest.mark.timeout(420), pytest.mark.xdist_group("ray")]

APP = "inferd"
DEPLOYMENT = "InferdReplica"
A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.float32)


@dataclass
class Application:
    address: str
    http: str
    grpc: str


def wait_for(check: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class RayNodes:
    """``ray start --block`` processes (the head, then workers) on 127.0.0.1, each in a session of
    its own: stopping kills each session's process group, Ray's workers (Serve's actors) with it."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.env = env
        self.port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, *args: str) -> None:
        log = self.tmp / f"node{len(self.procs)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("ray")),
                    "start",
                    "--block",
                    "--disable-usage-stats",
                    "--node-ip-address=127.0.0.1",
                    "--num-cpus=1",
                    *args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        self.procs.append(proc)
        wait_for(lambda: b"--block" in log.read_bytes() or proc.poll() is not None, f"Ray node {log}")
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(15)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.procs.clear()


def running_replicas() -> int:
    status = serve.status().applications[APP].deployments[DEPLOYMENT]
    return int(status.replica_states.get("RUNNING", 0))


def replica_actors() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if DEPLOYMENT in a["name"]]


def infer(module: Any, client: Any) -> None:
    inputs = [module.InferInput("INPUT0", [1, 16], "FP32"), module.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def infer_retrying(url: str, attempts: int = 20) -> int:
    """One request, retried as a tritonclient user would (a fresh client after a failure); the
    number of failed attempts before it succeeded."""
    for failed in range(attempts):
        try:
            infer(httpclient, httpclient.InferenceServerClient(url, network_timeout=30))
            return failed
        except Exception:
            time.sleep(0.2)
    raise AssertionError(f"a request failed {attempts} times")


def model_stats(url: str) -> dict[str, Any]:
    stats = httpclient.InferenceServerClient(url).get_inference_statistics("add_sub")
    return dict(stats["model_stats"][0])


@pytest.fixture(scope="module")
def application(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Application]:
    tmp = tmp_path_factory.mktemp("ray")
    moto = start_moto()
    nodes: RayNodes | None = None
    stack = contextlib.ExitStack()
    try:
        upload_s3(s3_client(moto.endpoint), "models", "repo/add_sub", REFERENCE_MODELS / "add_sub")
        nodes = RayNodes(tmp, {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
        # Ray's Unix sockets live under --temp-dir, and a socket path may not pass 107 bytes: pytest's
        # per-worker folders (/tmp/pytest-of-<user>/pytest-<n>/popen-gw<k>/...) can be too long
        ray_tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="ray-", dir="/tmp"))
        nodes.start("--head", f"--port={nodes.port}", "--include-dashboard=false", f"--temp-dir={ray_tmp}")
        nodes.start(f"--address={nodes.address}")
        http_port, grpc_port = free_port(), free_port()
        env = {
            **os.environ,
            **S3_ENV,
            "AWS_ENDPOINT_URL": moto.endpoint,
            "INFERD_MODEL_CACHE": str(tmp / "cache"),
        }
        deploy = subprocess.run(
            [
                sys.executable,
                "-m",
                "inferd",
                "serve-ray",
                "--model-repository=s3://models/repo",
                f"--address={nodes.address}",
                "--http-address=127.0.0.1",
                f"--http-port={http_port}",
                f"--grpc-port={grpc_port}",
                "--min-replicas=1",
                "--max-replicas=2",
                "--replica-cpus=0.5",
                "--target-ongoing-requests=1",
                "--upscale-delay-s=1",
                "--downscale-delay-s=600",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert deploy.returncode == 0, deploy.stdout + deploy.stderr
        assert S3_ENV["AWS_SECRET_ACCESS_KEY"] not in deploy.stdout + deploy.stderr
        ray.init(address=nodes.address, logging_level="ERROR", log_to_driver=False)
        yield Application(nodes.address, f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}")
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if nodes is not None:
            nodes.stop()
        moto.stop()
        stack.close()


def test_serves_http_and_grpc_from_s3(application: Application) -> None:
    http = httpclient.InferenceServerClient(application.http)
    grpc = grpcclient.InferenceServerClient(application.grpc)
    assert http.is_server_live() and http.is_server_ready() and http.is_model_ready("add_sub")
    assert grpc.is_server_live() and grpc.is_server_ready() and grpc.is_model_ready("add_sub")
    before = int(model_stats(application.http)["inference_count"])
    for _ in range(5):
        infer(httpclient, http)
        infer(grpcclient, grpc)
    assert grpc.get_model_metadata("add_sub").name == "add_sub"
    with pytest.raises(Exception, match="Request for unknown model: 'nope' is not found"):
        grpc.get_model_metadata("nope")
    with pytest.raises(Exception, match="400"):
        http.get_inference_statistics("nope")

    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    grpc.start_stream(lambda result, error: answers.put((result, error)))
    inputs = [
        grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
        grpcclient.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    for i in range(3):
        grpc.async_stream_infer("add_sub", inputs, request_id=str(i))
    got = [answers.get(timeout=30) for _ in range(3)]
    grpc.stop_stream()
    assert sorted(r.get_response().id for r, e in got if e is None) == ["0", "1", "2"]

    stats = model_stats(application.http)
    assert int(stats["inference_count"]) == before + 13
    by_grpc = grpc.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
    assert int(by_grpc["inference_count"]) == before + 13
    metrics = urllib.request.urlopen(f"http://{application.http}/metrics", timeout=30).read().decode()
    assert f'nv_inference_request_success{{model="add_sub",version="1"}} {before + 13}' in metrics


def test_scales_up_and_survives_a_killed_replica(application: Application) -> None:
    assert running_replicas() == 1
    stop = threading.Event()
    served: list[int] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            while not stop.is_set():
                served.append(infer_retrying(application.http))
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=load) for _ in range(8)]
    for w in workers:
        w.start()
    try:
        wait_for(lambda: running_replicas() == 2, "a second replica under load", timeout=120)
        # both replicas answer: statistics come from each (the sum keeps growing past either)
        count = len(served)
        wait_for(lambda: len(served) > count + 50, "requests on two replicas")
        victim = replica_actors()[0]
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        count = len(served)
        wait_for(lambda: len(served) > count + 100, "requests after the kill")
        wait_for(lambda: victim not in replica_actors() and running_replicas() == 2, "a replacement replica")
    finally:
        stop.set()
        for w in workers:
            w.join(60)
    assert not errors, errors
    assert httpclient.InferenceServerClient(application.http).is_server_ready()
    total = int(model_stats(application.http)["inference_count"])
    assert total > 0
