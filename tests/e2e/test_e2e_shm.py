"""System shared memory end to end: tritonclient's shm utilities in this (client) process, the
server in its own process; answers compared with the reference's (recorded in the test texts)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from conftest import InferdProcess
from tritonclient.utils import InferenceServerException


@pytest.fixture
def regions(server: InferdProcess) -> Iterator[tuple[str, object, str, object]]:
    """An input region holding two [1,16] FP32 tensors and an output region of 128 bytes."""
    tag = uuid.uuid4().hex[:8]
    kin, kout = f"/inferd_in_{tag}", f"/inferd_out_{tag}"
    hin = shm.create_shared_memory_region(f"in_{tag}", kin, 128)
    hout = shm.create_shared_memory_region(f"out_{tag}", kout, 128)
    try:
        yield kin, hin, kout, hout
    finally:
        client = httpclient.InferenceServerClient(server.url)
        client.unregister_system_shared_memory()
        client.close()
        shm.destroy_shared_memory_region(hin)
        shm.destroy_shared_memory_region(hout)


def test_add_sub_through_shared_memory(
    server: InferdProcess, regions: tuple[str, object, str, object]
) -> None:
    kin, hin, kout, hout = regions
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones_like(a)
    shm.set_shared_memory_region(hin, [a, b])
    client = httpclient.InferenceServerClient(server.url)
    client.register_system_shared_memory("in", kin, 128)
    client.register_system_shared_memory("out", kout, 128)
    status = client.get_system_shared_memory_status()
    assert {r["name"]: (r["key"], r["offset"], r["byte_size"]) for r in status} == {
        "in": (kin, 0, 128),
        "out": (kout, 0, 128),
    }
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "FP32"),
        httpclient.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    inputs[0].set_shared_memory("in", 64)
    inputs[1].set_shared_memory("in", 64, offset=64)
    out0 = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    out0.set_shared_memory("out", 64)
    out1 = httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)
    result = client.infer("add_sub", inputs, outputs=[out0, out1])
    # OUTPUT0 went to the region: listed without data; OUTPUT1 came back in the body
    assert result.get_output("OUTPUT0") == {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}
    np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [1, 16]), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    # the server reads the region at each request: new contents, new answer
    shm.set_shared_memory_region(hin, [a * 2, b])
    client.infer("add_sub", inputs, outputs=[out0])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(hout, np.float32, [1, 16]), a * 2 + b)
    client.unregister_system_shared_memory("in")
    assert [r["name"] for r in client.get_system_shared_memory_status()] == ["out"]
    client.close()


def _body(in0: dict[str, object], in1: dict[str, object], out: dict[str, object]) -> dict[str, object]:
    return {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": in0},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "parameters": in1},
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": out}],
    }


def test_shared_memory_errors_match_the_reference(
    server: InferdProcess, regions: tuple[str, object, str, object]
) -> None:
    kin, _hin, kout, _hout = regions
    reg = "/v2/systemsharedmemory/region/{}/register"
    assert server.request("POST", reg.format("in"), {"key": kin, "offset": 0, "byte_size": 128}).status == 200
    r = server.request("POST", reg.format("in"), {"key": kin, "offset": 0, "byte_size": 128})
    assert (r.status, r.error) == (400, "shared memory region 'in' already in manager")
    r = server.request("POST", reg.format("zz"), {"key": "/inferd_no_such_key", "offset": 0, "byte_size": 8})
    assert (r.status, r.error) == (500, "Unable to open shared memory region: '/inferd_no_such_key'")
    r = server.request("POST", reg.format("big"), {"key": kout, "offset": 0, "byte_size": 1 << 20})
    assert (r.status, r.error) == (400, "failed to register shared memory region 'big': invalid args")
    for offset, size in ((3, 8), (8, 64), (0, 0)):  # what mmap refuses in the reference (Triton 2.51)
        r = server.request("POST", reg.format("odd"), {"key": kout, "offset": offset, "byte_size": size})
        assert (r.status, r.error) == (
            400,
            "failed to register shared memory region 'odd': unable to process address spaceInvalid argument",
        )
    r = server.request("POST", reg.format("mf"), {"key": kout})
    assert (r.status, r.error) == (400, "Shared memory register request has no 'byte_size' field")
    r = server.request("POST", reg.format("mk"), {"offset": 0, "byte_size": 4})
    assert (r.status, r.error) == (400, "Shared memory register request has no 'key' field")
    r = server.request("GET", "/v2/systemsharedmemory/region/zzz/status")
    assert (r.status, r.error) == (404, "Unable to find system shared memory region: 'zzz'")
    assert (
        server.request("POST", reg.format("out"), {"key": kout, "offset": 0, "byte_size": 128}).status == 200
    )

    ok0 = {"shared_memory_region": "in", "shared_memory_byte_size": 64}
    ok1 = {"shared_memory_region": "in", "shared_memory_byte_size": 64, "shared_memory_offset": 64}
    cases: list[tuple[tuple[dict[str, object], dict[str, object], dict[str, object]], int, str]] = [
        (
            ({"shared_memory_region": "nope", "shared_memory_byte_size": 64}, ok1, {}),
            404,
            "Unable to find shared memory region: 'nope'",
        ),
        (
            (
                {"shared_memory_region": "in", "shared_memory_byte_size": 64, "shared_memory_offset": 100},
                ok1,
                {},
            ),
            400,
            "Invalid offset + byte size for shared memory region: 'in'",
        ),
        (
            ({"shared_memory_region": "in", "shared_memory_byte_size": 32}, ok1, {}),
            400,
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'add_sub'. "
            "Expected 64, got 32",
        ),
        (
            ({"shared_memory_region": "in"}, ok1, {}),
            400,
            "Invalid offset + byte size for shared memory region: 'in'",
        ),
        (
            (ok0, ok1, {"shared_memory_region": "out", "shared_memory_byte_size": 32}),
            500,
            "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least "
            "64 bytes to hold the results",
        ),
        (
            (
                ok0,
                ok1,
                {"shared_memory_region": "out", "shared_memory_byte_size": 64, "shared_memory_offset": 100},
            ),
            400,
            "Invalid offset + byte size for shared memory region: 'out'",
        ),
        (
            (ok0, ok1, {"shared_memory_region": "nope", "shared_memory_byte_size": 64}),
            404,
            "Unable to find shared memory region: 'nope'",
        ),
        (
            (
                {"shared_memory_region": "in", "shared_memory_byte_size": 64, "shared_memory_offset": -4},
                ok1,
                {},
            ),
            500,
            "Unable to parse 'shared_memory_offset': attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
    ]
    for (in0, in1, out), status, text in cases:
        r = server.infer("add_sub", _body(in0, in1, out))
        assert (r.status, r.error) == (status, text), (in0, in1, out)
    server.assert_serving()
    # unregistering an unknown region is fine; unregister all empties the list
    assert server.request("POST", "/v2/systemsharedmemory/region/never/unregister").status == 200
    assert server.request("POST", "/v2/systemsharedmemory/unregister").status == 200
    r = server.request("GET", "/v2/systemsharedmemory/status")
    assert (r.status, r.json()) == (200, [])


def test_cuda_shared_memory_answers_as_the_reference_without_a_gpu(server: InferdProcess) -> None:
    r = server.request("GET", "/v2/cudasharedmemory/status")
    assert (r.status, r.json()) == (200, [])
    r = server.request(
        "POST",
        "/v2/cudasharedmemory/region/c/register",
        {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64},
    )
    assert (r.status, r.error) == (400, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    handle = "A" * 86 + "=="  # 64 bytes
    r = server.request(
        "POST",
        "/v2/cudasharedmemory/region/c/register",
        {"raw_handle": {"b64": handle}, "device_id": 0, "byte_size": 64},
    )
    assert (r.status, r.error) == (400, "failed to register shared memory region: invalid args")
    r = server.request("GET", "/v2/cudasharedmemory/region/c/status")
    assert (r.status, r.error) == (404, "Unable to find cuda shared memory region: 'c'")
    assert server.request("POST", "/v2/cudasharedmemory/unregister").status == 200


def test_tritonclient_reports_shm_errors(server: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException, match="Unable to find system shared memory region: 'x'"):
        client.get_system_shared_memory_status("x")
    client.close()
