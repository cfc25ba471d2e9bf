"""The server's ports: port 0 (what the e2e fixtures start every server on) and the start-up lines
that name them; addresses as Triton's docs write them."""

from __future__ import annotations

import http.client
import socket
from pathlib import Path

import conftest
import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from ports import free_port


def test_port_0_serves_on_the_ports_the_start_up_lines_name(tmp_path: Path) -> None:
    """``--http-port 0`` (and gRPC, metrics): each front end binds a port of the kernel's and its
    "Started ..." line names that port, not 0 (the reference writes ":0"), so a caller can find it."""
    (tmp_path / "m").mkdir()
    proc = conftest.InferdProcess(tmp_path / "m", tmp_path / "inferd.log").start()
    try:
        lines = conftest.listening_ports(proc.log())
        assert set(lines) == {"HTTPService", "GRPCInferenceService", "Metrics Service"}
        assert 0 not in lines.values() and len(set(lines.values())) == 3
        assert proc.request("GET", "/v2/health/live").status == 200
        with grpc.insecure_channel(f"127.0.0.1:{proc.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=10).live
        conn = http.client.HTTPConnection("127.0.0.1", proc.metrics_port, timeout=10)
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        assert proc.stop() == 0


def test_fixed_ports_keep_the_reference_start_up_lines(tmp_path: Path) -> None:
    """A fixed port is named as the reference names it: "Started HTTPService at 0.0.0.0:<port>"."""
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    (tmp_path / "m").mkdir()

    def command(*_: int) -> list[str]:
        return ["serve", f"--model-repository={tmp_path / 'm'}", f"--http-port={http_port}",
                f"--grpc-port={grpc_port}", f"--metrics-port={metrics_port}"]  # fmt: skip

    proc = conftest.InferdProcess(tmp_path / "m", tmp_path / "inferd.log", command=command).start()
    try:
        log = proc.log()
        assert f'"Started GRPCInferenceService at 0.0.0.0:{grpc_port}"' in log
        assert f'"Started Metrics Service at 0.0.0.0:{metrics_port}"' in log
        assert f'"Started HTTPService at 0.0.0.0:{http_port}"' in log
    finally:
        assert proc.stop() == 0


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
    repo = tmp_path / "empty"
    repo.mkdir()
    args = ["--grpc-server", grpc_server, "--http-address", "ipv6:[::1]", "--grpc-address", "ipv6:[::1]"]
    proc = conftest.InferdProcess(repo, tmp_path / "inferd.log", tuple(args))
    proc.host = "::1"
    proc.start()
    try:
        assert conftest.listening_ports(proc.log())["HTTPService"] == proc.port
        assert '"Started HTTPService at ipv6:[::1]:' in proc.log()
        with grpc.insecure_channel(f"[::1]:{proc.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=10).live
        conn = http.client.HTTPConnection(
            "::1", proc.metrics_port, timeout=5
        )  # metrics take the HTTP address
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        assert proc.stop() == 0
