"""SharedMemoryManager: mapping, bounds, zero-copy windows, unregister while in use."""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from inferd.errors import AlreadyExistsError, InternalError, InvalidArgumentError, NotFoundError
from inferd.shm.system import SHM_DIR, CudaSharedMemoryManager, SharedMemoryManager


@pytest.fixture
def key() -> Iterator[str]:
    name = f"inferd_unit_{uuid.uuid4().hex[:10]}"
    path = Path(SHM_DIR) / name
    path.write_bytes(bytes(256))
    try:
        yield "/" + name
    finally:
        path.unlink(missing_ok=True)


def test_register_status_unregister(key: str) -> None:
    m = SharedMemoryManager()
    m.register("r", key, 16, 128)
    assert m.status() == [{"name": "r", "key": key, "offset": 16, "byte_size": 128}]
    assert m.status("r") == m.status()
    with pytest.raises(AlreadyExistsError, match="shared memory region 'r' already in manager"):
        m.register("r", key, 0, 8)
    m.unregister("nope")  # unknown: fine
    m.unregister("r")
    assert m.status() == []
    with pytest.raises(NotFoundError, match="Unable to find system shared memory region: 'r'"):
        m.status("r")


def test_register_errors(key: str) -> None:
    m = SharedMemoryManager()
    with pytest.raises(InternalError, match="Unable to open shared memory region: '/inferd_missing_x'"):
        m.register("a", "/inferd_missing_x", 0, 8)
    with pytest.raises(
        InvalidArgumentError, match="failed to register shared memory region 'a': invalid args"
    ):
        m.register("a", key, 200, 100)
    with pytest.raises(InternalError):
        m.register("a", "/../etc/passwd", 0, 8)
    assert m.status() == []


def test_resolve_is_a_window_over_the_mapping(key: str) -> None:
    m = SharedMemoryManager()
    m.register("r", key, 16, 128)
    view = m.resolve("r", 8, 16)
    arr = np.frombuffer(view, dtype=np.float32)
    path = Path(SHM_DIR) / key.lstrip("/")
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 256) as mm:
        mm[16 + 8 : 16 + 24] = np.arange(4, dtype=np.float32).tobytes()
    np.testing.assert_array_equal(arr, np.arange(4, dtype=np.float32))  # no copy: sees the write
    view[:4] = b"\x00\x00\x80\x3f"  # writes reach the object
    assert Path(path).read_bytes()[24:28] == b"\x00\x00\x80\x3f"
    del arr, view
    m.close()


@pytest.mark.parametrize(("offset", "size"), [(0, 129), (120, 16), (0, 0), (0, None), (-1, 8)])
def test_resolve_bounds_are_checked_before_any_byte(key: str, offset: int, size: int | None) -> None:
    m = SharedMemoryManager()
    m.register("r", key, 0, 128)
    with pytest.raises(
        InvalidArgumentError, match="Invalid offset \\+ byte size for shared memory region: 'r'"
    ):
        m.resolve("r", offset, size)
    with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'x'"):
        m.resolve("x", 0, 8)
    m.close()


def test_unregister_while_a_view_is_held(key: str) -> None:
    m = SharedMemoryManager()
    m.register("r", key, 0, 128)
    view = m.resolve("r", 0, 8)
    m.unregister()  # the mapping stays alive for the holder of the view
    assert bytes(view) == bytes(8)
    view.release()
    assert os.path.exists(Path(SHM_DIR) / key.lstrip("/"))  # the client's object is the client's


def test_cuda_without_gpu() -> None:
    c = CudaSharedMemoryManager()
    assert c.status() == []
    with pytest.raises(InvalidArgumentError, match="must be a valid base64 encoded cudaIpcMemHandle_t"):
        c.register("c", b"\x00" * 3, 0, 64)
    with pytest.raises(InvalidArgumentError, match="failed to register shared memory region: invalid args"):
        c.register("c", b"\x00" * 64, 0, 64)
    with pytest.raises(NotFoundError, match="Unable to find cuda shared memory region: 'c'"):
        c.status("c")
    c.unregister()
