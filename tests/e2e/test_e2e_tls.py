"""TLS on every port, with certificates the test makes (openssl): HTTPS and mutual TLS for the HTTP
API, HTTPS for metrics, TLS and mutual TLS on the default (lean) gRPC server and on grpc.aio."""

from __future__ import annotations

import http.client
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import listening_ports

from waiting import read_text, wait_until

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, all CA-signed."""
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "2", "-subj", "/CN=inferd test CA", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext", cwd=d)  # fmt: skip
    return d


class TlsServer:
    """``inferd serve`` with TLS on its ports, ready once its HTTPS health check answers."""

    def __init__(self, repository: Path, log: Path, certs: Path, args: list[str], client_cert: bool) -> None:
        self.port = self.grpc_port = self.metrics_port = 0
        cmd = [sys.executable, "-m", "inferd", "serve", "--model-repository", str(repository),
               "--http-port=0", "--grpc-port=0", "--metrics-port=0", "--exit-on-error=false", *args]  # fmt: skip
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)

        def live() -> bool:
            assert self.proc.poll() is None, f"inferd exited; log:\n{read_text(log)}"
            ports = listening_ports(read_text(log))  # the ports it got, from its start-up lines
            if "HTTPService" not in ports:
                return False
            self.port, self.grpc_port = ports["HTTPService"], ports.get("GRPCInferenceService", 0)
            self.metrics_port = ports.get("Metrics Service", 0)
            return _https(self.port, "/v2/health/live", certs, client_cert)[0] == 200

        try:
            wait_until(live, "inferd to be live over HTTPS", 30, ignore=(OSError, ssl.SSLError),
                       detail=lambda: read_text(log))  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _https(port: int, path: str, certs: Path, client_cert: bool = False) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    if client_cert:
        ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _grpc_infer(port: int, certs: Path, client_cert: bool) -> list[float]:
    kwargs: dict[str, Any] = {"ssl": True, "root_certificates": str(certs / "ca.crt")}
    if client_cert:
        kwargs.update(private_key=str(certs / "client.key"), certificate_chain=str(certs / "client.crt"))
    client = grpcclient.InferenceServerClient(f"localhost:{port}", **kwargs)
    try:
        inp = grpcclient.InferInput("INPUT0", [2], "FP32").set_data_from_numpy(np.array([1, 2], np.float32))
        out: list[float] = client.infer("identity_fp32", [inp]).as_numpy("OUTPUT0").tolist()
        return out
    finally:
        client.close()


@pytest.mark.parametrize("grpc_server", ["lean", "aio"])
def test_https_metrics_and_grpc_over_tls(
    model_repository: Path, tmp_path: Path, certs: Path, grpc_server: str
) -> None:
    args = [
        f"--http-ssl-cert={certs / 'server.crt'}",
        f"--http-ssl-key={certs / 'server.key'}",
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certs / 'server.crt'}",
        f"--grpc-server-key={certs / 'server.key'}",
        f"--grpc-server={grpc_server}",
    ]
    server = TlsServer(model_repository, tmp_path / "inferd.log", certs, args, client_cert=False)
    try:
        status, body = _https(server.port, "/v2/models/identity_fp32", certs)
        assert status == 200 and b'"identity_fp32"' in body
        status, body = _https(server.metrics_port, "/metrics", certs)
        assert status == 200 and b"nv_inference_request_success" in body
        assert _grpc_infer(server.grpc_port, certs, client_cert=False) == [1, 2]
        with pytest.raises(ssl.SSLCertVerificationError):  # a client that does not trust the CA
            conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ssl.create_default_context())
            try:
                conn.request("GET", "/v2")
            finally:
                conn.close()
        plain = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        with pytest.raises((ConnectionError, http.client.HTTPException)):  # plain text to a TLS port
            plain.request("GET", "/v2/health/live")
            plain.getresponse()
        plain.close()
        assert _https(server.port, "/v2/health/live", certs)[0] == 200  # and it serves on
    finally:
        server.stop()
    assert server.proc.returncode == 0


def test_mutual_tls_refuses_clients_without_a_certificate(
    model_repository: Path, tmp_path: Path, certs: Path
) -> None:
    args = [
        f"--http-ssl-cert={certs / 'server.crt'}",
        f"--http-ssl-key={certs / 'server.key'}",
        f"--http-ssl-root-cert={certs / 'ca.crt'}",
        "--grpc-use-ssl-mutual=true",
        f"--grpc-server-cert={certs / 'server.crt'}",
        f"--grpc-server-key={certs / 'server.key'}",
        f"--grpc-root-cert={certs / 'ca.crt'}",
    ]
    server = TlsServer(model_repository, tmp_path / "inferd.log", certs, args, client_cert=True)
    try:
        assert _https(server.port, "/v2/health/live", certs, client_cert=True)[0] == 200
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _https(server.port, "/v2/health/live", certs, client_cert=False)
        assert _grpc_infer(server.grpc_port, certs, client_cert=True) == [1, 2]
        with pytest.raises(Exception, match=r"(?i)unavailable|handshake|ssl|socket closed"):
            _grpc_infer(server.grpc_port, certs, client_cert=False)
    finally:
        server.stop()


def test_unusable_certificate_files_stop_the_server_with_a_reason(
    start_server: Callable[..., Any], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(RuntimeError, match="cannot use the certificate"):
        start_server(f"--http-ssl-cert={bad}", f"--http-ssl-key={bad}")


@pytest.mark.parametrize("grpc_server", ["lean", "aio"])
def test_mutual_tls_without_a_root_certificate_does_not_start(
    start_server: Callable[..., Any], certs: Path, grpc_server: str
) -> None:
    """Mutual TLS with no CA to check clients against would accept anyone (the lean server) or
    fail deep inside grpcio (aio): refused before anything loads, naming the missing flag."""
    with pytest.raises(RuntimeError, match=r"--grpc-use-ssl-mutual needs --grpc-root-cert"):
        start_server(
            f"--grpc-server={grpc_server}",
            "--grpc-use-ssl-mutual=true",
            f"--grpc-server-cert={certs / 'server.crt'}",
            f"--grpc-server-key={certs / 'server.key'}",
        )


def test_an_http_client_ca_without_https_does_not_start(
    start_server: Callable[..., Any], certs: Path
) -> None:
    """A client CA alone would leave HTTP in plain text while its flag names mutual TLS."""
    with pytest.raises(RuntimeError, match=r"--http-ssl-root-cert needs --http-ssl-cert and --http-ssl-key"):
        start_server(f"--http-ssl-root-cert={certs / 'ca.crt'}")
