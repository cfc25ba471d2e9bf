"""CUDA shared memory end to end (issue 27): tritonclient's own ``cuda_shared_memory`` utilities
allocate device memory in this (client) process and register its IPC handles with a real ``inferd
serve``, over HTTP and gRPC; inputs are read from and outputs written to device memory, status and
unregister answer as the reference does, and the reference's QA cases of
qa/L0_cuda_shared_memory/cuda_shared_memory_test.py (register out of bounds, offset and byte size out
of bounds, a too-big input region, re-registration, unregister all) give its texts. A TorchScript
model on ``KIND_GPU`` reads its input where the client put it: it writes to its input, and the
client sees the write in its own region (no copy was made).

Runs where the CUDA runtime finds a device (``pytest -m gpu``; scripts/gpu_check.sh on a lent GPU
machine); skipped with the reason elsewhere. Without a GPU: tests/unit/shm/test_shm_cuda.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess, build_repository, grpc_client, http_client, serving
from tritonclient.utils import InferenceServerException

from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE
from inferd.gpu import cuda

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        cuda.device_count() == 0, reason="no CUDA device: the CUDA runtime (cuda-bindings) finds none"
    ),
    pytest.mark.timeout(240),
]

SIZE = 64  # 16 FP32, add_sub's [1, 16]
TORCH_CONFIG = """
name: "torch_in_place"
backend: "pytorch"
max_batch_size: 0
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cuda_shm")
    repo = build_repository(root / "models")
    import torch  # the torch extra (make install) and the GPU image both have it

    assert torch.cuda.is_available(), f"CUDA finds a device but torch {torch.__version__} does not"

    class InPlace(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * 2.0 + 1.0
            x.add_(100.0)  # written where the input lies: the client's region, if read in place
            return y

    (repo / "torch_in_place" / "1").mkdir(parents=True)
    (repo / "torch_in_place" / "config.pbtxt").write_text(TORCH_CONFIG)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(InPlace()), str(repo / "torch_in_place" / "1" / "model.pt"))
    return repo


@pytest.fixture(scope="module")
def server(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    log = tmp_path_factory.mktemp("cuda_shm_log") / "inferd.log"
    with serving(repository, log) as proc:
        yield proc


@pytest.fixture
def cshm() -> Iterator[Any]:
    """tritonclient's CUDA shared-memory module; the regions a test made are freed after it."""
    import tritonclient.utils.cuda_shared_memory as mod  # over cuda-bindings, as gpu/cuda.py

    yield mod
    for handle in list(mod.allocated_shm_regions):
        mod.destroy_shared_memory_region(handle)


def _client(server: InferdProcess, protocol: str) -> Any:
    return http_client(server) if protocol == "http" else grpc_client(server)


def _lib(protocol: str) -> Any:
    return httpclient if protocol == "http" else grpcclient


def _regions(
    cshm: Any, client: Any, sizes: dict[str, int], register_size: int | None = None
) -> dict[str, Any]:
    handles = {}
    for name, size in sizes.items():
        h = cshm.create_shared_memory_region(name, size, 0)
        client.register_cuda_shared_memory(name, cshm.get_raw_handle(h), 0, register_size or size)
        handles[name] = h
    return handles


def _add_sub(
    lib: Any, client: Any, out_offset: int = 0, out_size: int = SIZE, in1_size: int = SIZE
) -> tuple[Any, Any]:
    inputs = [lib.InferInput("INPUT0", [1, 16], "FP32"), lib.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_shared_memory("in0", SIZE)
    inputs[1].set_shared_memory("in1", in1_size)
    outputs = [lib.InferRequestedOutput("OUTPUT0"), lib.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory("out0", out_size, offset=out_offset)
    outputs[1].set_shared_memory("out1", SIZE)
    return client.infer("add_sub", inputs, outputs=outputs), outputs


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_add_sub_reads_and_writes_device_memory(server: InferdProcess, cshm: Any, protocol: str) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones_like(a)
    with _client(server, protocol) as c:
        h = _regions(cshm, c, {"in0": SIZE, "in1": SIZE, "out0": SIZE, "out1": SIZE})
        try:
            cshm.set_shared_memory_region(h["in0"], [a])
            cshm.set_shared_memory_region(h["in1"], [b])
            status = c.get_cuda_shared_memory_status()
            rows = (
                status
                if protocol == "http"
                else [
                    {"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}
                    for r in status.regions.values()
                ]
            )
            assert sorted((r["name"], int(r["device_id"]), int(r["byte_size"])) for r in rows) == [
                (n, 0, SIZE) for n in ("in0", "in1", "out0", "out1")
            ]
            _add_sub(_lib(protocol), c)
            np.testing.assert_array_equal(cshm.get_contents_as_numpy(h["out0"], np.float32, [1, 16]), a + b)
            np.testing.assert_array_equal(cshm.get_contents_as_numpy(h["out1"], np.float32, [1, 16]), a - b)
            cshm.set_shared_memory_region(h["in0"], [a * 3])  # read again at each request
            _add_sub(_lib(protocol), c)
            np.testing.assert_array_equal(
                cshm.get_contents_as_numpy(h["out0"], np.float32, [1, 16]), a * 3 + b
            )
            c.unregister_cuda_shared_memory("in0")
            left = c.get_cuda_shared_memory_status()
            names = [r["name"] for r in left] if protocol == "http" else sorted(left.regions)
            assert sorted(names) == ["in1", "out0", "out1"]
        finally:
            c.unregister_cuda_shared_memory()
        left = c.get_cuda_shared_memory_status()
        assert (left if protocol == "http" else list(left.regions)) == []


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_qa_files_registration_cases(server: InferdProcess, cshm: Any, protocol: str) -> None:
    with _client(server, protocol) as c:
        h = cshm.create_shared_memory_region("small", SIZE, 0)
        raw = cshm.get_raw_handle(h)
        try:
            # register out of bound: more bytes than the allocation holds
            with pytest.raises(
                InferenceServerException, match=r"failed to register shared memory region.*invalid args"
            ):
                c.register_cuda_shared_memory("small", raw, 0, SIZE + 1)
            # a device that is not there
            with pytest.raises(
                InferenceServerException, match="failed to register shared memory region: invalid args"
            ):
                c.register_cuda_shared_memory("small", raw, 99, SIZE)
            c.register_cuda_shared_memory("small", raw, 0, SIZE)
            # registered again under the same name: the reference's ALREADY_EXISTS
            with pytest.raises(
                InferenceServerException, match="shared memory region 'small' already in manager"
            ):
                c.register_cuda_shared_memory("small", raw, 0, SIZE)
            # one namespace with system shared memory
            with pytest.raises(
                InferenceServerException, match="is registered as CUDA shared memory, not system"
            ):
                c.get_system_shared_memory_status("small")
            c.unregister_cuda_shared_memory()
            c.unregister_cuda_shared_memory("small")  # not registered: fine
        finally:
            c.unregister_cuda_shared_memory()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_qa_files_request_window_cases(server: InferdProcess, cshm: Any, protocol: str) -> None:
    lib = _lib(protocol)
    with _client(server, protocol) as c:
        _regions(cshm, c, {"in0": SIZE, "in1": 2 * SIZE, "out0": SIZE, "out1": SIZE})
        try:
            offset = 2**64 - 32 if protocol == "http" else SIZE  # HTTP: wraps to a negative int64
            with pytest.raises(InferenceServerException, match="Invalid offset for shared memory region"):
                _add_sub(lib, c, out_offset=offset)
            with pytest.raises(
                InferenceServerException, match=r"Invalid offset \+ byte size for shared memory region"
            ):
                _add_sub(lib, c, out_offset=60)
            # test_too_big_shm: a 128-byte input for a 64-byte tensor
            with pytest.raises(
                InferenceServerException,
                match=r"input byte size mismatch for input 'INPUT1' for model 'add_sub'\. Expected 64, got 128",
            ):
                _add_sub(lib, c, in1_size=2 * SIZE)
            _add_sub(lib, c)  # and the server serves on
        finally:
            c.unregister_cuda_shared_memory()


def test_a_torch_model_on_the_gpu_reads_its_input_in_place(server: InferdProcess, cshm: Any) -> None:
    with http_client(server) as c:
        assert c.is_model_ready("torch_in_place")
        h = _regions(cshm, c, {"x": SIZE, "y": SIZE})
        try:
            x = np.arange(16, dtype=np.float32)
            cshm.set_shared_memory_region(h["x"], [x])
            inp = httpclient.InferInput("INPUT__0", [16], "FP32")
            inp.set_shared_memory("x", SIZE)
            out = httpclient.InferRequestedOutput("OUTPUT__0")
            out.set_shared_memory("y", SIZE)
            c.infer("torch_in_place", [inp], outputs=[out])
            np.testing.assert_allclose(cshm.get_contents_as_numpy(h["y"], np.float32, [16]), x * 2 + 1)
            # the model's write to its input landed in the client's region: it ran on that memory
            np.testing.assert_allclose(cshm.get_contents_as_numpy(h["x"], np.float32, [16]), x + 100)
        finally:
            c.unregister_cuda_shared_memory()


def test_device_memory_round_trips_through_the_runtime() -> None:
    import torch

    src = torch.arange(12, dtype=torch.float32, device="cuda:0").reshape(3, 4)
    a = cuda.CudaArray.of(src)
    assert a is not None and a.device_id == 0 and a.nbytes == 48
    np.testing.assert_array_equal(a.to_host(), np.arange(12, dtype=np.float32).reshape(3, 4))
    dst = torch.zeros(12, dtype=torch.float32, device="cuda:0")
    torch.cuda.synchronize()
    cuda.copy(int(dst.data_ptr()), a.ptr, a.nbytes)  # device to device
    cuda.from_host(int(dst.data_ptr()) + 8, np.array([-1.0], dtype=np.float32).tobytes())
    expected = np.arange(12, dtype=np.float32)
    expected[2] = -1.0
    np.testing.assert_array_equal(dst.cpu().numpy(), expected)
    t = Tensor("x", BY_WIRE["FP32"], (3, 4), device=a)
    np.testing.assert_array_equal(t.array, np.arange(12, dtype=np.float32).reshape(3, 4))
    # a torch consumer takes the same memory, no copy
    assert int(torch.as_tensor(a, device="cuda:0").data_ptr()) == a.ptr
