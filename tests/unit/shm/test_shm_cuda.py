"""CUDA shared-memory regions without a GPU (this machine, CI): every registration fails with the
reference's answer, and CUDA and system regions share one namespace of names, as in the reference's
one shared-memory manager. With a GPU: tests/e2e/test_e2e_cuda_shm.py."""

from __future__ import annotations

import mmap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError, UnsupportedError
from inferd.gpu import cuda
from inferd.shm.cuda import CudaSharedMemoryManager
from inferd.shm.system import SHM_DIR, SharedMemoryManager

NO_GPU = cuda.device_count() == 0


@pytest.fixture
def key() -> Iterator[str]:
    name = f"inferd_unit_cuda_{uuid.uuid4().hex[:10]}"
    path = Path(SHM_DIR) / name
    path.write_bytes(bytes(mmap.ALLOCATIONGRANULARITY))
    try:
        yield "/" + name
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.skipif(not NO_GPU, reason="shows the GPU-less answers; this machine has a CUDA device")
def test_registration_without_a_gpu_is_the_references_invalid_args(caplog: pytest.LogCaptureFixture) -> None:
    c = CudaSharedMemoryManager()
    assert c.status() == []
    for handle in (b"\x00" * 3, b"\x00" * 64):  # gRPC sends any bytes, unchecked (HTTP checks the size)
        with pytest.raises(
            InvalidArgumentError, match=r"^failed to register shared memory region: invalid args$"
        ):
            c.register("c", handle, 0, 64)
    # the reason goes to the log, as the reference logs it; the client gets the generic answer
    assert any("failed to open CUDA IPC handle" in r.getMessage() for r in caplog.records)
    with pytest.raises(NotFoundError, match="Unable to find cuda shared memory region: 'c'"):
        c.status("c")
    c.unregister()
    c.unregister("c")  # unknown names are fine
    c.close()


def test_turned_off_client_shared_memory_refuses_cuda_too() -> None:
    with pytest.raises(UnsupportedError, match="--allow-client-shm=true"):
        CudaSharedMemoryManager(allow_client_shm=False).register("c", b"\x00" * 64, 0, 64)


def test_cuda_and_system_regions_share_one_namespace(key: str) -> None:
    system = SharedMemoryManager()
    c = CudaSharedMemoryManager(system=system)
    system.register("a", key, 0, 64)
    try:
        with pytest.raises(AlreadyExistsError, match="shared memory region 'a' already in manager"):
            c.register("a", b"\x00" * 64, 0, 64)
        with pytest.raises(
            NotFoundError,
            match="The region named 'a' is registered as system shared memory, not CUDA shared memory",
        ):
            c.status("a")
        c.unregister("a")  # a system region's name: left alone, as the reference leaves it
        assert system.status("a")[0]["name"] == "a"
        # a request naming a region neither holds: the request path's text
        with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'b'"):
            system.resolve("b", 0, 8)
    finally:
        system.unregister()
