"""NVIDIA's own identity backend (github triton-inference-server/identity_backend, r24.10), compiled
unmodified from its sources against NVIDIA's headers (core, common and backend repositories: 72 API
functions through the backend utilities), served by inferd: once linked against inferd's
``libtritonserver.so`` (``DT_NEEDED``, as Triton's builds link their stub), once linked against nothing
(its symbols found in the process's global scope). FP32 and BYTES through the utilities' input collector
and output responder, dynamic batching, statistics, and its custom metric on /metrics.

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

import numpy as np
import pytest
from conftest import InferdProcess, http_client

import c_backends

pytestmark = pytest.mark.timeout(600)

SOURCES = Path(os.environ.get("INFERD_TRITON_SOURCES", "/nonexistent"))
UTILITIES = ["backend_common", "backend_input_collector", "backend_memory", "backend_model_instance", "backend_model", "backend_output_responder"]  # fmt: skip


def _build(out: Path, link_host: bool) -> Path:
    if out.is_file():
        return out
    cmd = ["g++", "-std=c++17", "-shared", "-fPIC", "-O1", "-DTRITON_ENABLE_METRICS", "-pthread"]
    cmd += [f"-I{SOURCES / r / 'include'}" for r in ("backend", "common", "core")]
    cmd += [str(SOURCES / "identity_backend" / "src" / "identity.cc")]
    cmd += [str(SOURCES / "backend" / "src" / f"{u}.cc") for u in UTILITIES]
    cmd += [str(SOURCES / "common" / "src" / f"{u}.cc") for u in ("async_work_queue", "thread_pool", "error")]
    cmd += [f"-Wl,--version-script={SOURCES / 'identity_backend' / 'src' / 'libtriton_identity.ldscript'}"]
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
