"""NVIDIA's own backends compiled unmodified from their r24.10 sources against NVIDIA's headers (core,
common and backend repositories), served by inferd:

- the identity backend (identity_backend: 72 API functions through the backend utilities), once linked
  against inferd's ``libtritonserver.so`` (``DT_NEEDED``, as Triton's builds link their stub), once
  linked against nothing (its symbols found in the process's global scope): FP32 and BYTES through the
  utilities' input collector and output responder, dynamic batching, statistics, its custom metric on
  /metrics;
- the backend repository's examples with their own model repositories: ``minimal``, ``recommended``
  and ``bls`` (a C++ backend asking addsub_python, a Python model, and addsub_tf, a TensorFlow
  SavedModel served by inferd's tensorflow backend, through ``TRITONSERVER_ServerInferAsync``).

Needs the four repositories checked out at r24.10 under ``INFERD_TRITON_SOURCES`` (folders ``core``,
``common``, ``backend``, ``identity_backend``) and rapidjson's headers; skipped otherwise (the build
takes about 40 s of one core; it is kept between runs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import InferdProcess, http_client

import c_backends

pytestmark = pytest.mark.timeout(600)

SOURCES = Path(os.environ.get("INFERD_TRITON_SOURCES", "/nonexistent"))
UTILITIES = ["backend_common", "backend_input_collector", "backend_memory", "backend_model_instance", "backend_model", "backend_output_responder"]  # fmt: skip


EXAMPLES = SOURCES / "backend" / "examples"
#: backend -> (its sources, its linker script)
BACKENDS = {
    "identity": (
        [SOURCES / "identity_backend" / "src" / "identity.cc"],
        SOURCES / "identity_backend" / "src" / "libtriton_identity.ldscript",
    ),
    "minimal": ([EXAMPLES / "backends" / "minimal" / "src" / "minimal.cc"], None),
    "recommended": ([EXAMPLES / "backends" / "recommended" / "src" / "recommended.cc"], None),
    "bls": (
        [EXAMPLES / "backends" / "bls" / "src" / f for f in ("backend.cc", "bls.cc", "bls_utils.cc")],
        None,
    ),
}


def _build(out: Path, link_host: bool, backend: str = "identity") -> Path:
    if out.is_file():
        return out
    sources, script = BACKENDS[backend]
    cmd = ["g++", "-std=c++17", "-shared", "-fPIC", "-O1", "-DTRITON_ENABLE_METRICS", "-pthread"]
    cmd += [f"-I{SOURCES / r / 'include'}" for r in ("backend", "common", "core")]
    cmd += [str(s) for s in sources]
    cmd += [str(SOURCES / "backend" / "src" / f"{u}.cc") for u in UTILITIES]
    cmd += [str(SOURCES / "common" / "src" / f"{u}.cc") for u in ("async_work_queue", "thread_pool", "error")]
    if script is not None:
        cmd += [f"-Wl,--version-script={script}"]
    if link_host:
        cmd += [f"-L{c_backends.host()}", "-ltritonserver"]
    tmp = out.with_suffix(f".{os.getpid()}")
    subprocess.run([*cmd, "-o", str(tmp)], check=True, capture_output=True, text=True)
    tmp.rename(out)
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    if not (SOURCES / "identity_backend" / "src" / "identity.cc").is_file():
        pytest.skip("INFERD_TRITON_SOURCES does not hold NVIDIA's identity_backend, backend, common and core")
    if not Path("/usr/include/rapidjson").is_dir():
        pytest.skip("rapidjson's headers are not installed (apt-get install rapidjson-dev)")
    c_backends.require_compiler()
    cache = Path(c_backends.host()).parent / "nvidia-identity"
    cache.mkdir(exist_ok=True)
    root = tmp_path_factory.mktemp("nvidia_identity")
    repo, backends = root / "models", root / "backends"
    for backend, linked in (("identity_nv", True), ("identity_nvu", False)):
        (backends / backend).mkdir(parents=True)
        built = _build(cache / f"libtriton_identity{'_linked' if linked else ''}.so", linked)
        shutil.copyfile(built, backends / backend / f"libtriton_{backend}.so")
        (repo / f"m_{backend}" / "1").mkdir(parents=True)
        (repo / f"m_{backend}" / "config.pbtxt").write_text(
            f'name: "m_{backend}"\nbackend: "{backend}"\nmax_batch_size: 8\ndynamic_batching {{ }}\n'
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },'
            ' { name: "INPUT1" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },'
            ' { name: "OUTPUT1" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        )
    examples = EXAMPLES / "model_repos"
    for backend in ("minimal", "recommended", "bls"):
        (backends / backend).mkdir(parents=True)
        built = _build(cache / f"libtriton_{backend}.so", True, backend)
        shutil.copyfile(built, backends / backend / f"libtriton_{backend}.so")
    for source, name in (
        (examples / "minimal_models" / "batching", "minimal_batching"),
        (examples / "minimal_models" / "nonbatching", "minimal_nonbatching"),
        (examples / "recommended_models" / "batching", "recommended_batching"),
        (examples / "bls_models" / "bls_fp32", "bls_fp32"),
        (examples / "bls_models" / "addsub_python", "addsub_python"),
        (examples / "bls_models" / "addsub_tf", "addsub_tf"),
    ):
        shutil.copytree(source, repo / name)
        if not (repo / name / "1").exists():
            (repo / name / "1").mkdir()
    proc = InferdProcess(
        repo, root / "inferd.log", ("--backend-directory", str(backends)), env=c_backends.server_env()
    ).start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]


@pytest.mark.parametrize("model", ["m_identity_nv", "m_identity_nvu"])
def test_nvidias_identity_backend_serves(server: InferdProcess, model: str) -> None:
    import urllib.request

    import tritonclient.http as httpclient

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = np.array([[b"a", b"bc"], [b"", b"xyz"]], dtype=np.object_)
    with http_client(server) as c:
        i0 = httpclient.InferInput("INPUT0", [2, 3], "FP32")
        i0.set_data_from_numpy(x)
        i1 = httpclient.InferInput("INPUT1", [2, 2], "BYTES")
        i1.set_data_from_numpy(s)
        r = c.infer(model, [i0, i1])
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
        assert r.as_numpy("OUTPUT1").tolist() == s.tolist()
    stats = c_backends.settled_stats(server, model, 1)
    assert stats["inference_count"] == 2 and stats["execution_count"] == 1
    metrics = (
        urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    )
    assert f'input_byte_size_counter{{model="{model}",version="1"}} 46' in metrics


def test_nvidias_example_backends_serve(server: InferdProcess) -> None:
    """The backend repository's minimal, recommended and bls examples, with their clients' checks."""
    import tritonclient.http as httpclient

    with http_client(server) as c:
        for model, shape in (("minimal_nonbatching", [4]), ("minimal_batching", [1, 4])):
            x: np.ndarray[Any, Any] = np.array([1, 2, 3, 4], dtype=np.int32).reshape(shape)
            i = httpclient.InferInput("IN0", shape, "INT32")
            i.set_data_from_numpy(x)
            np.testing.assert_array_equal(c.infer(model, [i]).as_numpy("OUT0"), x)
        x = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
        i = httpclient.InferInput("INPUT", [1, 4, 4], "FP32")
        i.set_data_from_numpy(x)
        np.testing.assert_array_equal(c.infer("recommended_batching", [i]).as_numpy("OUTPUT"), x)
        a = np.random.default_rng(0).random(16, dtype=np.float32)
        b = np.random.default_rng(1).random(16, dtype=np.float32)
        inputs = [
            httpclient.InferInput("INPUT0", [16], "FP32"),
            httpclient.InferInput("INPUT1", [16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        r = c.infer("bls_fp32", inputs)
        np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        np.testing.assert_allclose(r.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
