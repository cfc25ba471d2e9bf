"""NVIDIA's own Python backend, ``libtriton_python.so`` from the reference's PyPI wheel (nvidia-pytriton),
unmodified, hosted by inferd (issue 44): it links a renamed core (``libtritonserver-<hash>.so``), starts
its own stub processes, and serves model.py files of the test repository, selected by
``runtime: "libtriton_python.so"`` (``backend: "python"`` alone is inferd's own Python backend).

Skipped where the reference is not installed (scripts/reference/setup.sh)."""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import InferdProcess, grpc_client, http_client

import c_backends
from repo_paths import FIXTURE_MODELS, REFERENCE_MODELS

pytestmark = pytest.mark.timeout(300)

VENV = Path(os.environ.get("TRITON_VENV", "/tmp/inferd-reference/venv-triton"))
BACKENDS = (
    next(VENV.glob("lib/python3*/site-packages/pytriton/tritonserver/backends"), None)
    if VENV.is_dir()
    else None
)
MODELS = {
    "add_sub": REFERENCE_MODELS,
    "identity_bytes": REFERENCE_MODELS,
    "decoupled": FIXTURE_MODELS,
    "raise_error": FIXTURE_MODELS,
}


def _stubs(repo: Path) -> list[str]:
    """The stub processes running this repository's models (others' servers may run stubs too)."""
    out = subprocess.run(
        ["pgrep", "-f", f"triton_python_backend_stub {repo}/"], capture_output=True, text=True
    )
    return out.stdout.split()


#: a model.py whose execute asks other models (BLS): pyc_add_sub (OUTPUT0 = its OUTPUT0 + OUTPUT1, that is
#: 2 * INPUT0), pyc_decoupled's stream of INPUT0[0] responses (OUTPUT1 = their count), and a model that
#: does not exist (its error as OUTPUT2)
BLS_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            r = pb_utils.InferenceRequest(
                model_name="pyc_add_sub", requested_output_names=["OUTPUT0", "OUTPUT1"], inputs=inputs
            ).exec()
            if r.has_error():
                raise pb_utils.TritonModelException(r.error().message())
            total = sum(pb_utils.get_output_tensor_by_name(r, n).as_numpy() for n in ("OUTPUT0", "OUTPUT1"))
            count = pb_utils.Tensor("INPUT0", np.array([3], dtype=np.int32))
            stream = pb_utils.InferenceRequest(
                model_name="pyc_decoupled", requested_output_names=["OUTPUT0"], inputs=[count]
            ).exec(decoupled=True)
            n = sum(1 for s in stream if s.output_tensors())
            missing = pb_utils.InferenceRequest(
                model_name="nowhere", requested_output_names=["X"], inputs=[count]
            ).exec()
            why = missing.error().message() if missing.has_error() else ""
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", total),
                pb_utils.Tensor("OUTPUT1", np.array([n], dtype=np.int32)),
                pb_utils.Tensor("OUTPUT2", np.array([why.encode()], dtype=np.object_)),
            ]))
        return responses
"""
BLS_CONFIG = """name: "pyc_bls"
backend: "python"
runtime: "libtriton_python.so"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 1, 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1, 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "OUTPUT2" data_type: TYPE_STRING dims: [ 1 ] }
]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    if BACKENDS is None or not (BACKENDS / "python" / "libtriton_python.so").is_file():
        pytest.skip(
            "the reference's wheel (libtriton_python.so) is not installed: scripts/reference/setup.sh"
        )
    c_backends.require_compiler()
    root = tmp_path_factory.mktemp("c_python")
    repo = root / "models"
    for name, source in MODELS.items():
        shutil.copytree(source / name, repo / f"pyc_{name}")
        cfg = repo / f"pyc_{name}" / "config.pbtxt"
        text = cfg.read_text().replace(f'name: "{name}"', f'name: "pyc_{name}"')
        cfg.write_text(text.replace('backend: "python"', 'backend: "python"\nruntime: "libtriton_python.so"'))
    (repo / "pyc_bls" / "1").mkdir(parents=True)
    (repo / "pyc_bls" / "config.pbtxt").write_text(BLS_CONFIG)
    (repo / "pyc_bls" / "1" / "model.py").write_text(BLS_MODEL)
    # the stub runs the models with the reference venv's packages (numpy), as the reference's launcher
    env = {**c_backends.server_env(), "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}"}
    proc = InferdProcess(repo, root / "inferd.log", ("--backend-directory", str(BACKENDS)), env=env).start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"inferd exited with {code}; log:\n{proc.log()[-4000:]}"
        deadline = time.monotonic() + 20  # a stub ends once its instance is finalized, or sees its parent go
        while _stubs(repo):
            assert time.monotonic() < deadline, "the backend's stub processes outlived the server"
            time.sleep(0.1)


def test_the_wheels_backend_loads_with_its_renamed_core(server: InferdProcess) -> None:
    log = server.log()
    assert "needs libtritonserver-" in log and "answered by inferd's host" in log
    assert "python_be.cc" in log  # the backend's own log lines, with its file and line
    r = server.request("POST", "/v2/repository/index", {})
    assert {m["name"]: m["state"] for m in r.json()} == {f"pyc_{n}": "READY" for n in [*MODELS, "bls"]}


def test_add_sub_over_http_and_grpc(server: InferdProcess) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.float32)
    for lib, ctx in ((httpclient, http_client(server)), (grpcclient, grpc_client(server))):
        with ctx as c:
            inputs = [lib.InferInput("INPUT0", [2, 16], "FP32"), lib.InferInput("INPUT1", [2, 16], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            r = c.infer("pyc_add_sub", inputs)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


def test_bytes_and_errors(server: InferdProcess) -> None:
    r = server.infer(
        "pyc_identity_bytes",
        {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "BYTES", "data": ["x", "yz"]}]},
    )
    assert r.status == 200, r.body
    assert r.json()["outputs"][0]["data"] == ["x", "yz"]
    r = server.infer(
        "pyc_raise_error", {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}]}
    )
    assert r.status == 500, r.body
    assert "ValueError: boom: bad input" in r.error, r.error


def test_decoupled_responses_over_a_stream(server: InferdProcess) -> None:
    import tritonclient.grpc as grpcclient

    got: queue.Queue[Any] = queue.Queue()
    with grpc_client(server) as g:
        g.start_stream(callback=lambda result, error: got.put((result, error)))
        i = grpcclient.InferInput("INPUT0", [1], "INT32")
        i.set_data_from_numpy(np.array([3], dtype=np.int32))
        g.async_stream_infer("pyc_decoupled", [i], enable_empty_final_response=True)
        values = []
        while True:
            result, error = got.get(timeout=30)
            assert error is None, error
            resp = result.get_response()
            if resp.outputs:
                values.append(int(result.as_numpy("OUTPUT0")[0]))
            if resp.parameters["triton_final_response"].bool_param:
                break
        g.stop_stream()
    assert values == [0, 1, 2]


def test_bls_from_the_wheels_backend(server: InferdProcess) -> None:
    """model.py's exec(), a decoupled exec() and a request to a model that does not exist, through
    TRITONSERVER_ServerInferAsync into inferd's core and back through the backend's allocator."""
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    doc = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a.ravel().tolist()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
        ]
    }
    r = server.infer("pyc_bls", doc)
    assert r.status == 200, r.body
    body = r.json()
    assert body["outputs"][0]["data"] == (2 * a).ravel().tolist()
    assert body["outputs"][1]["data"] == [3]
    assert body["outputs"][2]["data"] == [
        "Model nowhere - Error when running inference: Failed for execute the inference request. Model "
        "'nowhere' is not ready."
    ]
