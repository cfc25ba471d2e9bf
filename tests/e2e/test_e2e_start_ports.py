"""The e2e fixtures' server start: a port taken between picking and binding it is picked again."""

from __future__ import annotations

import socket
from pathlib import Path

import conftest
import pytest


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
