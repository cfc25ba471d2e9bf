"""SharedMemoryManager: mapping, bounds, zero-copy windows, unregister while in use."""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from inferd.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)
from inferd.shm.cuda import CudaSharedMemoryManager
from inferd.shm.system import SHM_DIR, SharedMemoryManager

PAGE = mmap.ALLOCATIONGRANULARITY


@pytest.fixture
def key() -> Iterator[str]:
    name = f"inferd_unit_{uuid.uuid4().hex[:10]}"
    path = Path(SHM_DIR) / name
    path.write_bytes(bytes(PAGE + 256))
    try:
        yield "/" + name
    finally:
        path.unlink(missing_ok=True)


def test_register_status_unregister(key: str) -> None:
    m = SharedMemoryManager()
    m.register("r", key, PAGE, 128)
    assert m.status() == [{"name": "r", "key": key, "offset": PAGE, "byte_size": 128}]
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
        m.register("a", key, PAGE + 200, 100)
    # what mmap(2) refuses, in the reference's words (Triton 2.51 over HTTP: 400): an offset that is
    # not a multiple of the page size, an empty window; past the object's end is 'invalid args' first
    for offset, size in ((16, 8), (PAGE + 8, 8), (0, 0)):
        with pytest.raises(
            InvalidArgumentError,
            match=r"^failed to register shared memory region 'a': unable to process address spaceInvalid argument$",
        ):
            m.register("a", key, offset, size)
    with pytest.raises(InvalidArgumentError, match="'a': invalid args"):
        m.register("a", key, 16, PAGE + 256)
    with pytest.raises(InternalError):
        m.register("a", "/../etc/passwd", 0, 8)
    assert m.status() == []


def test_resolve_is_a_window_over_the_mapping(key: str) -> None:
    m = SharedMemoryManager()
    m.register("r", key, PAGE, 128)
    view = m.resolve("r", 8, 16)
    assert isinstance(view, memoryview)  # a system region (no CUDA one of that name)
    arr = np.frombuffer(view, dtype=np.float32)
    path = Path(SHM_DIR) / key.lstrip("/")
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), PAGE + 256) as mm:
        mm[PAGE + 8 : PAGE + 24] = np.arange(4, dtype=np.float32).tobytes()
    np.testing.assert_array_equal(arr, np.arange(4, dtype=np.float32))  # no copy: sees the write
    view[:4] = b"\x00\x00\x80\x3f"  # writes reach the object
    assert Path(path).read_bytes()[PAGE + 8 : PAGE + 12] == b"\x00\x00\x80\x3f"
    del arr, view
    m.close()


@pytest.mark.parametrize(
    ("offset", "size", "text"),
    [
        (0, 129, "Invalid offset \\+ byte size for"),
        (120, 16, "Invalid offset \\+ byte size for"),
        (0, 0, "Invalid offset \\+ byte size for"),
        (0, None, "Invalid offset \\+ byte size for"),
        (128, 8, "Invalid offset for"),  # the offset alone is past the region: the reference's own text
        (-1, 8, "Invalid offset for"),
    ],
)
def test_resolve_bounds_are_checked_before_any_byte(
    key: str, offset: int, size: int | None, text: str
) -> None:
    m = SharedMemoryManager()
    m.register("r", key, 0, 128)
    with pytest.raises(InvalidArgumentError, match=f"^{text} shared memory region: 'r'$"):
        m.resolve("r", offset, size)
    with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'x'"):
        m.resolve("x", 0, 8)
    m.close()


def test_a_region_in_use_is_not_unregistered(key: str) -> None:
    """As the reference 2.51: unmapping under a running request would be a memory-safety bug."""
    m = SharedMemoryManager()
    m.register("r", key, 0, 128)
    view = m.resolve("r", 0, 8)
    assert isinstance(view, memoryview)
    with pytest.raises(
        InternalError, match="Failed to unregister the following system shared memory regions: r ,"
    ):
        m.unregister()
    with pytest.raises(
        InternalError, match="Cannot unregister shared memory region 'r', it is currently in use"
    ):
        m.unregister("r")
    assert bytes(view) == bytes(8)  # still mapped
    assert [r["name"] for r in m.status()] == ["r"]
    view.release()
    m.unregister("r")
    assert m.status() == []
    assert os.path.exists(Path(SHM_DIR) / key.lstrip("/"))  # the client's object is the client's


def test_symlinks_and_other_files_are_refused(key: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 128)
    link = Path(SHM_DIR) / f"inferd_link_{os.getpid()}"
    link.symlink_to(secret)
    fifo = Path(SHM_DIR) / f"inferd_fifo_{os.getpid()}"
    os.mkfifo(fifo)
    try:
        m = SharedMemoryManager()
        with pytest.raises(InternalError, match="Unable to open shared memory region"):
            m.register("l", "/" + link.name, 0, 64)
        with pytest.raises(InternalError, match="Invalid shared memory region"):
            m.register("f", "/" + fifo.name, 0, 64)
        assert m.status() == []
    finally:
        link.unlink()
        fifo.unlink()


def test_client_shared_memory_can_be_turned_off(key: str) -> None:
    with pytest.raises(UnsupportedError, match="Client shared memory is disabled"):
        SharedMemoryManager(allow_client_shm=False).register("r", key, 0, 128)
    with pytest.raises(UnsupportedError, match="--allow-client-shm=true"):
        CudaSharedMemoryManager(allow_client_shm=False).register("c", b"\x00" * 64, 0, 64)


def test_an_object_shrunk_after_registration_is_refused_not_read(key: str) -> None:
    m = SharedMemoryManager()
    m.register("r", key, 0, 128)
    fd = os.open(Path(SHM_DIR) / key.lstrip("/"), os.O_RDWR)
    try:
        os.ftruncate(fd, 16)
    finally:
        os.close(fd)
    with pytest.raises(InvalidArgumentError, match="smaller than when it was registered"):
        m.resolve("r", 64, 64)
    view = m.resolve("r", 0, 16)
    assert isinstance(view, memoryview) and len(view) == 16
    view.release()  # a region in use is not unregistered
    m.unregister()


def test_a_key_with_a_nul_byte_is_refused_not_crashed() -> None:
    # found by make fuzz: os.open raised ValueError ("embedded null byte"), answered as a 500
    m = SharedMemoryManager()
    with pytest.raises(InternalError, match="Unable to open shared memory region"):
        m.register("n", "/inferd\x00x", 0, 64)
    assert m.status() == []
