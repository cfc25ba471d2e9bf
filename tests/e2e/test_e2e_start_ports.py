"""The e2e fixtures' server start: a port taken between picking and binding it is picked again."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time
from pathlib import Path

import conftest
import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from ports import free_port


def test_a_taken_metrics_port_is_picked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """inferd serves on without a metrics port in use (as the reference); the fixture must not
    hand such a server to a test, whose scrapes would reach whoever holds the port."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        real = conftest.free_port
        picks = iter([real(), real(), taken])  # the first start's HTTP, gRPC and metrics ports
        monkeypatch.setattr(conftest, "free_port", lambda: next(picks, 0) or real())
        (tmp_path / "m").mkdir()
        proc = conftest.InferdProcess(tmp_path / "m", tmp_path / "inferd.log").start()
        try:
            assert proc.metrics_port != taken
            assert b"failed to start Metrics Service" in (tmp_path / "inferd.log").read_bytes()
            assert proc.request("GET", "/v2/health/live").status == 200
        finally:
            proc.stop()


@pytest.mark.parametrize("grpc_server", ["lean", "aio"])
def test_addresses_written_as_tritons_docs_write_them(tmp_path: Path, grpc_server: str) -> None:
    """``--http-address ipv6:[::1]`` (Triton's protocol README) exited with "Name or service not
    known"; the reference serves on [::1]. Every port binds it here (gRPC too, which the reference
    refuses with that spelling)."""

    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    repo = tmp_path / "empty"
    repo.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inferd",
            "serve",
            "--model-repository",
            str(repo),
            "--grpc-server",
            grpc_server,
            "--http-address",
            "ipv6:[::1]",
            "--http-port",
            str(http_port),
            "--grpc-address",
            "ipv6:[::1]",
            "--grpc-port",
            str(grpc_port),
            "--metrics-port",
            str(metrics_port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        status = 0
        deadline = time.monotonic() + 60
        while status != 200 and time.monotonic() < deadline and proc.poll() is None:
            conn = http.client.HTTPConnection("::1", http_port, timeout=2)
            try:
                conn.request("GET", "/v2/health/live")
                status = conn.getresponse().status
            except OSError:
                time.sleep(0.05)
            finally:
                conn.close()
        assert proc.stderr is not None
        assert status == 200, proc.stderr.read().decode() if proc.poll() is not None else "not live"
        with grpc.insecure_channel(f"[::1]:{grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=10).live
        conn = http.client.HTTPConnection("::1", metrics_port, timeout=5)  # metrics take the HTTP address
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        proc.terminate()
        proc.wait(30)
        assert proc.stderr is not None
        proc.stderr.close()
