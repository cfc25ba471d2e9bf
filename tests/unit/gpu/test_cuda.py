"""inferd.gpu.cuda: the device-tensor description (CudaArray) and the CUDA runtime calls.

Without a GPU the calls fail with CudaError and the runtime's reason, and device_count() is 0; the
interface parsing runs anywhere. With a GPU, tests/e2e/test_e2e_cuda_shm.py reads, writes and copies
real device memory through the same calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE
from inferd.gpu import cuda

FP32 = BY_WIRE["FP32"]

HAS_GPU = cuda.device_count() > 0


class Interface:
    """What a producer of __cuda_array_interface__ (v3) hands over: the shape of the dict only."""

    def __init__(self, shape: tuple[int, ...], typestr: str, strides: Any = None, stream: Any = None) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (0x7F0000001000, False),
            "strides": strides,
            "version": 3,
            "stream": stream,
        }
        self.device = type("Device", (), {"index": 3})()


def test_a_contiguous_interface_becomes_a_cuda_array_and_hands_itself_on() -> None:
    a = cuda.CudaArray.of(Interface((2, 3), "<f4", strides=(12, 4), stream=7))
    assert a is not None
    assert (a.ptr, a.device_id, a.dtype, a.shape, a.nbytes, a.stream) == (
        0x7F0000001000,
        3,
        np.dtype(np.float32),
        (2, 3),
        24,
        7,
    )
    iface = a.__cuda_array_interface__
    assert iface["shape"] == (2, 3) and iface["typestr"] == "<f4" and iface["data"] == (0x7F0000001000, False)


def test_a_strided_tensor_or_a_host_object_is_not_a_cuda_array() -> None:
    assert cuda.CudaArray.of(Interface((2, 3), "<f4", strides=(4, 8))) is None  # a transpose
    assert cuda.CudaArray.of(np.zeros(3)) is None
    # a dimension of 1 may carry any stride (torch writes them so)
    assert cuda.CudaArray.of(Interface((1, 3), "<f4", strides=(99, 4))) is not None


def test_a_device_tensor_counts_its_bytes_without_a_copy() -> None:
    a = cuda.CudaArray(0x1000, 0, np.dtype(np.uint8), (64,), owner=None)
    t = Tensor("x", FP32, (4, 4), device=a)
    assert t.raw_byte_size() == 64  # validation reads this, not a host copy


@pytest.mark.skipif(HAS_GPU, reason="shows the GPU-less answers; this machine has a CUDA device")
def test_without_a_gpu_calls_fail_with_the_runtimes_reason() -> None:
    assert cuda.device_count() == 0
    with pytest.raises(cuda.CudaError):
        cuda.ipc_open(b"\x00" * cuda.IPC_HANDLE_SIZE, 0)
    with pytest.raises(cuda.CudaError, match="64 bytes"):
        cuda.ipc_open(b"\x00" * 3, 0)
    with pytest.raises(cuda.CudaError):
        cuda.to_host(0x1000, 16)
