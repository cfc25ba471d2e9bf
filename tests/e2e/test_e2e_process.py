"""Process instances behind a real ``inferd serve``: every test model answers in process mode as in
thread mode, and the workers do not outlive a server killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tritonclient.http as httpclient


def _children(pid: int) -> set[int]:
    out = set()
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(fields[1]) == pid and b"inferd.backends.python.worker" in cmd:
            out.add(int(p))
    return out


def test_process_mode_serves_and_dies_with_the_server(start_server: Callable[..., Any]) -> None:
    server = start_server("--backend-config=python,execution-mode=process")
    client = httpclient.InferenceServerClient(server.url)
    try:
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32").set_data_from_numpy(a),
            httpclient.InferInput("INPUT1", [1, 16], "FP32").set_data_from_numpy(np.ones_like(a)),
        ]
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
        strings = np.array([b"x", b"yz"], dtype=np.object_)
        s = httpclient.InferInput("INPUT0", [2], "BYTES").set_data_from_numpy(strings)
        assert client.infer("identity_bytes", [s]).as_numpy("OUTPUT0").tolist() == [b"x", b"yz"]
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert "init exploded on purpose" in index["init_fails"]["reason"]  # the same reason as threads
    finally:
        client.close()
    workers = _children(server.proc.pid)
    assert workers
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{w}") for w in workers):
        time.sleep(0.05)
    alive = [w for w in workers if os.path.exists(f"/proc/{w}")]
    assert not alive, f"workers outlived the server: {alive}"
