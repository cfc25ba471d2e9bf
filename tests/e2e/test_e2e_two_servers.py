"""Two in-process servers (``inferd.Server``) side by side, each answering per its own options (issue
43): name, repositories, model control, latency summaries on /metrics and request logging differ,
and neither server's start changes the other (the metrics configuration and the request-logging
switch were the process's: the second start overwrote the first's). Real clients: tritonclient HTTP
and gRPC, and /metrics over HTTP."""

from __future__ import annotations

import logging
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import inferd
from inferd.logs import VERBOSE1
from repo_paths import REFERENCE_MODELS

pytestmark = pytest.mark.timeout(180)
SUMMARY = "nv_inference_request_summary_us"
WAIT_S = 30.0


class Lines(logging.Handler):
    """The ``inferd`` loggers' lines, with a wait for one that holds a text."""

    def __init__(self) -> None:
        super().__init__(VERBOSE1)
        self.lines: list[str] = []
        self.cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self.cond:
            self.lines.append(record.getMessage())
            self.cond.notify_all()

    def wait_for(self, text: str) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: any(text in line for line in self.lines), WAIT_S)

    def having(self, text: str) -> list[str]:
        with self.cond:
            return [line for line in self.lines if text in line]


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("inferd")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _repository(root: Path, *models: str) -> Path:
    root.mkdir()
    for model in models:
        shutil.copytree(REFERENCE_MODELS / model, root / model, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _metrics(server: inferd.Server) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=WAIT_S) as r:
        return str(r.read().decode())


def _identity(value: np.ndarray) -> list[grpcclient.InferInput]:
    t = grpcclient.InferInput("INPUT0", list(value.shape), "FP32")
    t.set_data_from_numpy(value)
    return [t]


def _add_sub() -> list[httpclient.InferInput]:
    out = []
    for name in ("INPUT0", "INPUT1"):
        t = httpclient.InferInput(name, [1, 16], "FP32")
        t.set_data_from_numpy(np.ones((1, 16), np.float32))
        out.append(t)
    return out


def test_two_servers_in_one_process_each_serve_per_their_options(tmp_path: Path, lines: Lines) -> None:
    # beta starts first: alpha's start must not change what beta loads later or how it logs
    beta = inferd.Server(
        _repository(tmp_path / "beta", "identity_fp32"),
        id="beta",
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
    ).start()
    try:
        alpha = inferd.Server(
            _repository(tmp_path / "alpha", "add_sub"),
            id="alpha",
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            metrics_config=["summary_latencies=true"],
            log_verbose=1,
        ).start()
        try:
            a_http = httpclient.InferenceServerClient(f"127.0.0.1:{alpha.http_port}")
            b_http = httpclient.InferenceServerClient(f"127.0.0.1:{beta.http_port}")
            a_grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{alpha.grpc_port}")
            b_grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{beta.grpc_port}")
            # each its own name and repository
            assert a_http.get_server_metadata()["name"] == "alpha"
            assert b_grpc.get_server_metadata().name == "beta"
            assert a_grpc.is_model_ready("add_sub") and not b_grpc.is_model_ready("add_sub")
            assert not b_grpc.is_model_ready("identity_fp32")  # explicit: nothing loaded at start
            # model control: beta's explicit mode loads, alpha's (none) refuses
            b_grpc.load_model("identity_fp32")
            with pytest.raises(InferenceServerException, match="explicit model load / unload is not allowed"):
                a_grpc.load_model("add_sub")
            x = np.arange(4, dtype=np.float32)
            np.testing.assert_array_equal(b_grpc.infer("identity_fp32", _identity(x)).as_numpy("OUTPUT0"), x)
            b_http.get_server_metadata()  # beta answered its infer's line (if any) before this
            out = a_http.infer("add_sub", _add_sub()).as_numpy("OUTPUT0")
            np.testing.assert_array_equal(out, np.full((1, 16), 2, np.float32))
            # request logging: alpha's level 1 writes a line per request, beta (level 0) none (the
            # loggers are the process's: beta's other verbose lines pass at alpha's level)
            assert lines.wait_for("HTTP request: POST /v2/models/add_sub/infer 200"), lines.lines[-20:]
            assert lines.having("gRPC request: RepositoryModelLoad UNAVAILABLE")  # alpha's refusal
            assert lines.having("RepositoryModelLoad OK") == [] and lines.having("ModelInfer") == []
            # latency summaries: alpha's models keep them, beta's (loaded after alpha started) do not
            assert f'{SUMMARY}_count{{model="add_sub",version="1"}} 1' in _metrics(alpha)
            assert SUMMARY not in _metrics(beta)
            for client in (a_http, b_http, a_grpc, b_grpc):
                client.close()
        finally:
            alpha.stop()
        # alpha gone: beta serves on, its own watchdog and switches untouched
        assert beta.model_ready("identity_fp32") and beta.metadata()["name"] == "beta"
    finally:
        beta.stop()


LOGGING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.Logger.log_info("worker of " + args["model_repository"].split("/")[-2])

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests
        ]
"""
LOGGING_CONFIG = """
name: "logging"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
parameters [ { key: "execution_mode" value: { string_value: "process" } } ]
"""


def test_each_servers_worker_processes_log_as_that_server(tmp_path: Path) -> None:
    """A process instance's worker starts with its own server's log switches (file and format), not
    those of the server made last."""
    servers = {}
    for name, log_format in (("jsonlog", "json"), ("plainlog", "default")):
        model = tmp_path / name / "logging"
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(LOGGING_CONFIG)
        (model / "1" / "model.py").write_text(LOGGING_MODEL)
        log_file = tmp_path / f"{name}.log"
        servers[name] = (
            inferd.Server(tmp_path / name, log_file=str(log_file), log_format=log_format),
            log_file,
        )
    try:
        for server, _ in servers.values():  # both made before either starts (its workers then)
            server.start()
        json_lines = servers["jsonlog"][1].read_text().splitlines()
        plain_lines = servers["plainlog"][1].read_text().splitlines()
        assert any(line.startswith("{") and "worker of jsonlog" in line for line in json_lines), json_lines
        assert any(line.startswith("I") and "worker of plainlog" in line for line in plain_lines), plain_lines
        assert not any("worker of jsonlog" in line for line in plain_lines)
    finally:
        for server, _ in servers.values():
            server.stop()
