"""The wire to worker processes: frames, tensors inline and through shared memory, requests and
responses both ways, and no shared-memory object left behind."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from inferd.backends.process.ipc import (
    INLINE_MAX,
    SHM_DIR,
    Channel,
    ChannelClosed,
    ShmNames,
    pack_request,
    pack_response,
    pack_tensor,
    release_unmapped,
    unpack_request,
    unpack_response,
    unpack_tensor,
)
from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE
from inferd.errors import InvalidArgumentError


@pytest.fixture
def shm() -> Iterator[ShmNames]:
    names = ShmNames(f"test{os.getpid()}")
    yield names
    names.cleanup()


def _ours(shm: ShmNames) -> list[str]:
    return [n for n in os.listdir(SHM_DIR) if n.startswith(shm.prefix)]


def test_channel_frames_messages_and_reports_a_closed_peer() -> None:
    a, b = socket.socketpair()
    left, right = Channel(a), Channel(b)
    big = b"x" * 3_000_000  # larger than the socket buffer: written while the other side reads
    reader = threading.Thread(target=lambda: received.append(right.recv()))
    received: list[object] = []
    reader.start()
    left.send(("big", big))
    reader.join(10)
    assert received == [("big", big)]
    left.send({"k": [1, 2.5, None]})
    assert right.recv() == {"k": [1, 2.5, None]}
    left.close()
    with pytest.raises(ChannelClosed):
        right.recv()
    right.close()


@pytest.mark.parametrize("n", [4, INLINE_MAX // 4 + 1])
def test_tensors_round_trip_inline_and_through_shared_memory(shm: ShmNames, n: int) -> None:
    arr = np.arange(n, dtype=np.float32).reshape(1, n)
    packed = pack_tensor(Tensor.from_array("X", arr), shm)
    inline = n * 4 < INLINE_MAX
    assert isinstance(packed[3], bytes) == inline
    assert len(_ours(shm)) == (0 if inline else 1)
    t = unpack_tensor(packed)
    assert (t.name, t.datatype.wire, t.shape) == ("X", "FP32", (1, n))
    np.testing.assert_array_equal(t.array, arr)
    assert _ours(shm) == []  # the receiver unlinked the object once it mapped it
    if not inline:
        t.array[0, 0] = -1  # a view over the mapping, writable: a model may use it in place


def test_bytes_and_bf16_travel_as_their_wire_bytes(shm: ShmNames) -> None:
    strings = np.array([b"a", b"\x00bc", "ü".encode()], dtype=np.object_)
    t = unpack_tensor(pack_tensor(Tensor.from_array("S", strings), shm))
    assert t.datatype.wire == "BYTES" and t.array.tolist() == strings.tolist()
    raw = np.array([0x3F80, 0x4000], dtype=np.uint16).tobytes()
    b = unpack_tensor(pack_tensor(Tensor("B", BY_WIRE["BF16"], (2,), raw=raw), shm))
    assert bytes(b.to_bytes()) == raw


def test_requests_and_responses_keep_every_field(shm: ShmNames) -> None:
    request = InferRequest(
        "m",
        {"A": Tensor.from_array("A", np.ones((2, 3), np.int64))},
        "2",
        "rid",
        {"p": 1, "q": "s"},
        [RequestedOutput("Y", 3, {"x": True})],
        correlation_id="seq",
        flags=3,
        priority=2,
        timeout_us=500,
    )
    request.batch_size = 2
    key, back = unpack_request(pack_request(7, request, shm))
    assert key == 7
    assert (back.model_name, back.model_version, back.id, back.parameters) == (
        "m",
        "2",
        "rid",
        {"p": 1, "q": "s"},
    )
    assert (back.correlation_id, back.flags, back.priority, back.timeout_us, back.batch_size) == (
        "seq",
        3,
        2,
        500,
        2,
    )
    assert (
        back.outputs is not None
        and back.outputs[0].classification == 3
        and back.output_names == frozenset({"Y"})
    )
    np.testing.assert_array_equal(back.inputs["A"].array, np.ones((2, 3)))
    response = InferResponse("m", "2", "rid", [Tensor.from_array("Y", np.zeros(3, np.float64))], {"k": "v"})
    r = unpack_response(pack_response(response, shm))
    assert (r.model_name, r.id, r.parameters, r.outputs[0].array.tolist()) == (
        "m",
        "rid",
        {"k": "v"},
        [0, 0, 0],
    )
    failed = unpack_response(pack_response(InferResponse("m", "2", error=InvalidArgumentError("bad")), shm))
    assert isinstance(failed.error, InvalidArgumentError) and failed.error.message == "bad"


def test_objects_nobody_maps_are_cleaned_up(shm: ShmNames) -> None:
    packed = pack_tensor(Tensor.from_array("X", np.zeros(INLINE_MAX, np.uint8)), shm)
    assert len(_ours(shm)) == 1
    release_unmapped([packed])
    assert _ours(shm) == []
    pack_tensor(Tensor.from_array("X", np.zeros(INLINE_MAX, np.uint8)), shm)
    ShmNames.for_pid(os.getpid(), shm.prefix.split("-")[2]).cleanup()  # as after a worker died
    assert _ours(shm) == []
