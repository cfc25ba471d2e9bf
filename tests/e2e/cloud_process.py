"""An inferd server with a SageMaker or Vertex AI port, for the e2e tests of those front ends."""

from __future__ import annotations

import http.client
import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import InferdProcess, Response


class CloudProcess(InferdProcess):
    """``python -m inferd serve ...`` (or the ``serve`` entry point) with a cloud front end on
    ``cloud_port``: live once that port listens and the server logged that it is ready. The port is
    0 (the flags and variables a test writes with it ask for any free port) until the server's
    start-up line names the port it got."""

    def __init__(
        self,
        repository: Path,
        log_path: Path,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        serve_entry_point: bool = False,
    ) -> None:
        self.cloud_port = 0
        self.serve_entry_point = serve_entry_point
        super().__init__(repository, log_path, args, env=env)
        if serve_entry_point:  # SageMaker's `serve`: everything comes from the environment
            self.launcher = [sys.executable, "-m", "inferd.sagemaker_serve"]
            self.command: Callable[[int, int, int], list[str]] | None = lambda http, grpc, metrics: []
            self.env: dict[str, str] = {"SAGEMAKER_BIND_TO_PORT": str(self.cloud_port), **self.env}

    def _wait_live(self) -> bool:
        def listening() -> bool:
            self.read_ports()
            ports = self.listening
            self.cloud_port = ports.get("Sagemaker HTTPService") or ports.get("Vertex AI HTTPService", 0)
            if not self.cloud_port:
                return False
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.cloud_port)) == 0 and "ready in" in self.log()

        return self.wait_starting(listening)

    def cloud(
        self,
        method: str,
        path: str,
        body: bytes | str | dict[str, Any] | list[Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> Response:
        """One request to the cloud port on a fresh connection."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.cloud_port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    @property
    def cloud_url(self) -> str:
        return f"http://127.0.0.1:{self.cloud_port}"
