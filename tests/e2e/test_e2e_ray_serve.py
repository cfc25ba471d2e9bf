"""``inferd serve-ray`` on a local two-node Ray cluster started here (a head and a worker node on
127.0.0.1, one CPU each), deploying the reference add_sub from an S3 repository served by moto:
tritonclient over Serve's HTTP and gRPC proxies (streaming included), statistics and metrics
summed over the replicas, a scale-up from 1 to 2 replicas under load, and a replica killed during
a request loop without losing any request the client retries; then what must fail loudly (issue
28): other proxy ports, a replica started while S3 is down (it waits for S3, never serves without
models), ``--delete`` (nothing left), a repository without credentials and replicas the cluster
cannot place (the command fails with the reason). Everything started here is stopped here (the
cluster's processes are the nodes' children).

One cluster for the module: the tests run in the file's order, and the last three leave no
application (``--delete``, then deploys that fail).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
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

from ports import free_port
from repo_paths import REFERENCE_MODELS
from store_emulators import S3_ENV, Emulator, s3_client, start_moto, upload_s3
from waiting import wait_until

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
pytest.importorskip("boto3")
pytest.importorskip("moto")

pytestmark = [pytest.mark.timeout(720), pytest.mark.xdist_group("ray")]

APP = "inferd"
DEPLOYMENT = "InferdReplica"
#: what a replica's failed health check says (inferd.rayserve.replica.NOT_READY)
NOT_READY = "inferd replica not ready"
#: a line of Serve's access log: "POST /v2/models/add_sub/infer 200 1.2ms"
ACCESS_LINE = re.compile(r"\b(GET|POST|CALL) \S+ (\d{3}|OK|ERROR|CANCELLED) \d+\.\dms")
A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.float32)


def wait_for(
    check: Callable[[], bool], what: str, timeout: float = 90.0, explain: Callable[[], str] | None = None
) -> None:
    """``check`` asked every 0.2 s (each asks Ray); on a timeout, ``explain()`` says what the cluster
    looked like then."""
    wait_until(check, what, timeout, interval=0.2, detail=explain)


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


@dataclass
class Cluster:
    """moto and the Ray nodes the module shares, and the proxies' ports every deploy asks for."""

    tmp: Path
    nodes: RayNodes
    moto: Emulator
    http_port: int
    grpc_port: int

    @property
    def address(self) -> str:
        return self.nodes.address

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def upload(self) -> None:
        upload_s3(s3_client(self.moto.endpoint), "models", "repo/add_sub", REFERENCE_MODELS / "add_sub")

    def serve_ray(
        self, *flags: str, credentials: bool = True, timeout: float = 240
    ) -> subprocess.CompletedProcess[str]:
        """``inferd serve-ray`` on the cluster's S3 repository (``credentials=False``: none at all)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ENDPOINT_URL=self.moto.endpoint,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_EC2_METADATA_DISABLED="true",  # no credentials: no instance metadata to ask either
            AWS_SHARED_CREDENTIALS_FILE=str(self.tmp / "none"),
            AWS_CONFIG_FILE=str(self.tmp / "none"),
            INFERD_MODEL_CACHE=str(self.tmp / "cache"),
        )
        if credentials:
            env.update(S3_ENV)
        command = [
            sys.executable,
            "-m",
            "inferd",
            "serve-ray",
            "--model-repository=s3://models/repo",
            f"--address={self.address}",
            "--http-address=127.0.0.1",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            *flags,
        ]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        assert S3_ENV["AWS_SECRET_ACCESS_KEY"] not in done.stdout + done.stderr
        return done


def running_replicas() -> int:
    status = serve.status().applications[APP].deployments[DEPLOYMENT]
    return int(status.replica_states.get("RUNNING", 0))


def deployment_message() -> str:
    app = serve.status().applications.get(APP)
    return "" if app is None else str(app.deployments[DEPLOYMENT].message)


def serve_log(actor: Any) -> tuple[list[str], str | None]:
    """A Serve actor's (a replica's, a proxy's) own log file, flushed, and its environment's
    RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD: read in the actor itself."""

    def read(_self: Any) -> tuple[list[str], str | None]:
        import logging
        import os

        lines: list[str] = []
        for handler in logging.getLogger("ray.serve").handlers:
            handler.flush()
            name = getattr(getattr(handler, "target", None), "baseFilename", None)
            if name:
                with open(name) as f:
                    lines += f.read().splitlines()
        return lines, os.environ.get("RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD")

    result: tuple[list[str], str | None] = ray.get(actor.__ray_call__.remote(read), timeout=60)
    return result


def serve_actors() -> list[tuple[str, str]]:
    """(namespace, name) of the named actors Serve and inferd made on the cluster."""
    return sorted(
        (a["namespace"], a["name"])
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] in ("serve", "inferd")
    )


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


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
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("ray")
    stack = contextlib.ExitStack()
    nodes: RayNodes | None = None
    moto = start_moto()
    try:
        # Serve's controller says why a replica waits for resources after this long (default 30 s)
        slow = {"RAY_SERVE_SLOW_STARTUP_WARNING_S": "5", "RAY_SERVE_SLOW_STARTUP_WARNING_PERIOD_S": "5"}
        nodes = RayNodes(tmp, {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **slow})
        # Ray's Unix sockets live under --temp-dir, and a socket path may not pass 107 bytes: pytest's
        # per-worker folders (/tmp/pytest-of-<user>/pytest-<n>/popen-gw<k>/...) can be too long
        ray_tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="ray-", dir="/tmp"))
        nodes.start("--head", f"--port={nodes.port}", "--include-dashboard=false", f"--temp-dir={ray_tmp}")
        nodes.start(f"--address={nodes.address}")
        found = Cluster(tmp, nodes, moto, free_port(), free_port())
        found.upload()
        ray.init(address=nodes.address, logging_level="ERROR", log_to_driver=False)
        yield found
        moto = found.moto  # started again by a test
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if nodes is not None:
            nodes.stop()
        moto.stop()
        stack.close()


@pytest.fixture(scope="module")
def application(cluster: Cluster) -> Cluster:
    deploy = cluster.serve_ray(
        "--min-replicas=1",
        "--max-replicas=2",
        "--replica-cpus=0.5",
        "--target-ongoing-requests=1",
        "--upscale-delay-s=1",
        "--downscale-delay-s=600",
    )
    assert deploy.returncode == 0, deploy.stdout + deploy.stderr
    return cluster


def test_serves_http_and_grpc_from_s3(application: Cluster) -> None:
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


def test_serve_runs_the_replicas_code_on_their_loop_without_access_logs(application: Cluster) -> None:
    """serve-ray's defaults for Serve's two per-request settings reach the replicas and proxies:
    user code on the replica's own loop, no access log line for the requests served above."""
    infer(httpclient, httpclient.InferenceServerClient(application.http))
    (replica,) = replica_actors()
    lines, separate_thread = serve_log(ray.get_actor(replica, namespace="serve"))
    assert separate_thread == "0"
    assert any("initializing replica" in line for line in lines), lines[-20:]  # the right file
    assert not [line for line in lines if ACCESS_LINE.search(line)]
    (proxy,) = [name for space, name in serve_actors() if name.startswith("SERVE_PROXY_ACTOR")]
    lines, _ = serve_log(ray.get_actor(proxy, namespace="serve"))
    assert lines and not [line for line in lines if ACCESS_LINE.search(line)]
    # the proxies answer within --request-timeout-s (60 s): they held requests for ever before
    controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
    assert ray.get(controller.get_http_config.remote()).request_timeout_s == 60.0
    assert ray.get(controller.get_grpc_config.remote()).request_timeout_s == 60.0


def test_scales_up_and_survives_a_killed_replica(application: Cluster) -> None:
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


def test_other_proxy_ports_are_an_error(application: Cluster) -> None:
    """Serve keeps the ports it started with: a deploy asking for others fails before deploying."""
    other = free_port()
    done = application.serve_ray(f"--http-port={other}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"Serve already runs on this cluster with HTTP at {application.http}" in done.stderr
    assert f"asked for HTTP at 127.0.0.1:{other}" in done.stderr
    assert "Serve application" not in done.stdout
    assert not port_open(other)
    infer(httpclient, httpclient.InferenceServerClient(application.http))


def test_a_replica_started_while_s3_is_down_waits_for_it(application: Cluster) -> None:
    """Replicas started again while the repository cannot be read fail Serve's health check (their
    server is not ready), so Serve keeps starting others; once S3 is back, one loads and serves."""
    victims = replica_actors()
    application.moto.stop()
    try:
        for victim in victims:
            ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        wait_for(lambda: NOT_READY in deployment_message(), "a replica failing its start", timeout=180)
        assert "failed to read model repository 's3://models/repo'" in deployment_message()
        # a replica Serve just started counts RUNNING until its first health check fails
        wait_for(lambda: running_replicas() == 0, "no replica running while S3 is down", timeout=60)
    finally:  # the tests after this one need the store back, whatever happened here
        application.moto = start_moto(application.moto.port)  # in memory: empty again
        application.upload()

    last_error: list[str] = []

    def serving() -> bool:
        try:
            infer(httpclient, httpclient.InferenceServerClient(application.http, network_timeout=10))
        except Exception as e:
            last_error[:] = [f"{type(e).__name__}: {e}"]
            return False
        return True

    def explain() -> str:  # a failure here once gave no clue: say what Serve and the client saw
        status = serve.status().applications[APP].deployments[DEPLOYMENT]
        return (
            f"last answer {last_error}; replica states {dict(status.replica_states)}; "
            f"deployment {status.status}: {str(status.message)[-1500:]}; replicas {replica_actors()}"
        )

    # Serve starts a replica about every 8 s; on a loaded 2-core machine each start loads the models
    # from S3 for tens of seconds: a generous bound (the wait ends as soon as one serves)
    wait_for(serving, "a replica serving add_sub once S3 is back", timeout=420, explain=explain)
    assert running_replicas() >= 1 and not set(victims) & set(replica_actors())


def test_delete_removes_everything_it_made(application: Cluster) -> None:
    model_stats(application.http)  # the statistics actor exists once statistics were asked for
    assert ("inferd", f"inferd-stats-{APP}") in serve_actors()
    done = application.serve_ray("--delete")
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for(lambda: not serve_actors(), "no actor of Serve's or inferd's left", timeout=60)
    assert not port_open(application.http_port) and not port_open(application.grpc_port)
    assert "statistics actor" in done.stdout and "controller and proxies" in done.stdout


def test_a_repository_without_credentials_fails_the_deploy(cluster: Cluster) -> None:
    """No model loads (S3 refuses a request without credentials): the command fails with the reason."""
    cluster.serve_ray("--delete")
    try:
        done = cluster.serve_ray("--replica-cpus=0.5", credentials=False)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"{NOT_READY}: 's3://models/repo': failed to read model repository" in done.stderr
        assert "Unable to locate credentials" in done.stderr
        assert "Serve application" not in done.stdout
    finally:
        cluster.serve_ray("--delete")


def test_replicas_the_cluster_cannot_place_fail_after_the_timeout(cluster: Cluster) -> None:
    """Two CPUs in the cluster, eight asked for: the deploy ends at its timeout with Serve's reason."""
    cluster.serve_ray("--delete")
    try:
        started = time.monotonic()
        done = cluster.serve_ray("--replica-cpus=8", "--deploy-timeout-s=20", timeout=180)
        assert done.returncode == 1, done.stdout + done.stderr
        assert time.monotonic() - started < 150  # the timeout, not a hang (a loaded machine: margin)
        assert "not running after 20 s" in done.stderr
        assert 'Resources required for each replica: {"CPU": 8.0}' in done.stderr
    finally:
        cluster.serve_ray("--delete")
