"""ModelStreamInfer against ``inferd serve``: tritonclient's streaming API (sync and aio), decoupled
models with 0, 1 and many responses, errors that never end a stream, cancellation reaching the
model, and broken streams that never affect another stream."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from conftest import InferdProcess
from tritonclient.grpc import service_pb2 as pb

from waiting import wait_for_text

pytestmark = pytest.mark.timeout(120)
A = np.arange(16, dtype=np.float32).reshape(1, 16)


class Collector:
    """A stream callback that queues (result, error) pairs."""

    def __init__(self) -> None:
        self.items: queue.Queue[tuple[Any, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self.items.put((result, error))

    def take(self, n: int, timeout: float = 30) -> list[tuple[Any, Any]]:
        return [self.items.get(timeout=timeout) for _ in range(n)]

    def nothing_more(self, wait: float = 0.3) -> bool:
        time.sleep(wait)
        return self.items.empty()


@pytest.fixture
def client(server: InferdProcess) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield c
    c.close()


def _i(name: str, arr: np.ndarray[Any, Any], dt: str | None = None) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(arr.shape), dt or grpcclient.np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr)
    return t


def _final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def test_non_decoupled_model_answers_once_with_final(client: grpcclient.InferenceServerClient) -> None:
    got = Collector()
    client.start_stream(got)
    for i in range(5):
        client.async_stream_infer("add_sub", [_i("INPUT0", A), _i("INPUT1", A)], request_id=f"s-{i}")
    items = got.take(5)
    client.stop_stream()
    assert sorted(r.get_response().id for r, _ in items) == [f"s-{i}" for i in range(5)]
    for r, e in items:
        assert e is None and _final(r)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + A)


@pytest.mark.parametrize("n", [0, 1, 5])
@pytest.mark.parametrize("empty_final", [False, True])
def test_decoupled_responses(client: grpcclient.InferenceServerClient, n: int, empty_final: bool) -> None:
    got = Collector()
    client.start_stream(got)
    client.async_stream_infer(
        "decoupled",
        [_i("INPUT0", np.array([n], np.int32))],
        request_id="d",
        enable_empty_final_response=empty_final,
    )
    items = got.take(n + (1 if empty_final else 0))
    assert got.nothing_more()
    client.stop_stream()
    for i, (r, e) in enumerate(items[:n]):
        assert e is None and not _final(r) and r.get_response().id == "d"
        assert r.as_numpy("OUTPUT0").tolist() == [i]
    if empty_final:
        last = items[-1][0].get_response()
        assert last.parameters["triton_final_response"].bool_param and not last.outputs and last.id == "d"


def test_errors_never_end_the_stream(client: grpcclient.InferenceServerClient) -> None:
    got = Collector()
    client.start_stream(got)
    client.async_stream_infer("add_sub", [_i("INPUT0", A)], request_id="bad")
    client.async_stream_infer("nope", [_i("INPUT0", A)], request_id="unknown")
    client.async_stream_infer(
        "dec_ctl", [_i("IN", np.array([0], np.int32))], request_id="mid", parameters={"n": 3, "error_at": 1}
    )
    client.async_stream_infer("add_sub", [_i("INPUT0", A), _i("INPUT1", A)], request_id="good")
    items = got.take(6)
    client.stop_stream()
    errors = [str(e) for r, e in items if e is not None]
    assert any("expected 2 inputs but got 1 inputs for model 'add_sub'" in t for t in errors)
    assert any("Request for unknown model: 'nope' is not found" in t for t in errors)
    assert any("custom failure" in t for t in errors)
    ok = [r.get_response() for r, e in items if e is None]
    assert [r.id for r in ok if r.id == "good"] == ["good"]
    assert [r.outputs[0].name for r in ok if r.id == "mid"] == ["OUT", "OUT"]


def test_aio_stream_infer(server: InferdProcess) -> None:
    """tritonclient.grpc.aio's stream_infer (it cannot ask for the empty final response)."""

    async def main() -> None:
        c = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

        async def requests() -> AsyncIterator[dict[str, Any]]:
            for n in (2, 3):
                t = aioclient.InferInput("INPUT0", [1], "INT32")
                t.set_data_from_numpy(np.array([n], np.int32))
                yield {"model_name": "decoupled", "inputs": [t], "request_id": f"a{n}"}

        seen: dict[str, list[int]] = {}
        try:
            async for result, error in c.stream_infer(requests()):
                assert error is None
                r = result.get_response()
                assert r.parameters["triton_final_response"].bool_param is False
                seen.setdefault(r.id, []).extend(result.as_numpy("OUTPUT0").tolist())
                if sum(len(v) for v in seen.values()) == 5:
                    break
        finally:
            await c.close()
        assert seen == {"a2": [0, 1], "a3": [0, 1, 2]}

    asyncio.run(main())


def test_cancelling_a_stream_reaches_the_model(
    client: grpcclient.InferenceServerClient, tmp_path: Path
) -> None:
    log = tmp_path / "cancel.log"
    got = Collector()
    client.start_stream(got)
    client.async_stream_infer(
        "dec_cancel", [_i("IN", np.array([[0]], np.int32))], parameters={"mode": "wait", "log": str(log)}
    )
    _, e = got.take(1)[0]  # the model sent OUT 0 and now polls is_cancelled()
    assert e is None
    client.stop_stream(cancel_requests=True)
    wait_for_text(log, "cancelled", 15)
    assert "cancelled request=True sender=True" in log.read_text()


def _raw_stream(server: InferdProcess) -> tuple[grpc.Channel, Any]:
    ch = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    return ch, ch.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")


def _add_sub_bytes(rid: str) -> bytes:
    r = pb.ModelInferRequest(model_name="add_sub", id=rid)
    for name in ("INPUT0", "INPUT1"):
        r.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        r.raw_input_contents.append(A.tobytes())
    return r.SerializeToString()


def test_malformed_message_ends_only_its_stream(server: InferdProcess) -> None:
    ch, fn = _raw_stream(server)
    with ch:
        out = [
            pb.ModelStreamInferResponse.FromString(b)
            for b in fn(iter([_add_sub_bytes("a"), b"\xff\xff", _add_sub_bytes("b")]), timeout=30)
        ]
        # as the reference: what came before is answered, the stream then ends with OK
        assert [o.infer_response.id for o in out] == ["a"]
        out = [pb.ModelStreamInferResponse.FromString(b) for b in fn(iter([_add_sub_bytes("c")]), timeout=30)]
        assert [o.infer_response.id for o in out] == ["c"]


def test_repeated_messages_on_a_stream_are_each_their_own_request(server: InferdProcess) -> None:
    """Messages that differ only in id and tensor data (the request cache's hits) answer each with
    its own id and sums; one under a known key whose id is not UTF-8 is malformed like any other:
    the stream ends after what it answered."""
    rng = np.random.default_rng(3)
    messages, sums = [], []
    for i in range(8):
        a, b = rng.random((1, 16), dtype=np.float32), rng.random((1, 16), dtype=np.float32)
        r = pb.ModelInferRequest(model_name="add_sub", id=f"s{i}")
        for name, arr in (("INPUT0", a), ("INPUT1", b)):
            r.inputs.add(name=name, datatype="FP32", shape=[1, 16])
            r.raw_input_contents.append(arr.tobytes())
        messages.append(r.SerializeToString())
        sums.append(a + b)
    bad = _add_sub_bytes("x").replace(b"\x1a\x01x", b"\x1a\x01\xff")
    ch, fn = _raw_stream(server)
    with ch:
        out = [
            pb.ModelStreamInferResponse.FromString(b)
            for b in fn(iter([*messages, _add_sub_bytes("x"), bad, messages[0]]), timeout=30)
        ]
    assert [o.infer_response.id for o in out] == [f"s{i}" for i in range(8)] + ["x"]
    for o, expected in zip(out, sums, strict=False):
        assert o.error_message == ""
        names = [t.name for t in o.infer_response.outputs]
        got = o.infer_response.raw_output_contents[names.index("OUTPUT0")]
        assert np.array_equal(np.frombuffer(got, np.float32).reshape(1, 16), expected)


def test_a_broken_stream_never_affects_another(
    server: InferdProcess, client: grpcclient.InferenceServerClient
) -> None:
    """A long decoupled stream keeps going while other streams are cancelled, fed garbage or fail."""
    got = Collector()
    client.start_stream(got)
    client.async_stream_infer(
        "dec_ctl", [_i("IN", np.array([0], np.int32))], request_id="long", parameters={"n": 20, "delay": 0.02}
    )
    errors: list[BaseException] = []

    def breaker(kind: str) -> None:
        try:
            ch, fn = _raw_stream(server)
            with ch:
                if kind == "garbage":
                    list(fn(iter([b"\xff\xff\xff"]), timeout=10))
                elif kind == "cancel":
                    call = fn(iter([_add_sub_bytes("x")] * 50), timeout=10)
                    next(call)
                    call.cancel()
                elif kind == "errors":
                    bad = pb.ModelInferRequest(model_name="add_sub").SerializeToString()
                    assert len(list(fn(iter([bad] * 10), timeout=10))) == 10
                elif kind == "deadline":
                    gate = threading.Event()

                    def slow() -> Iterator[bytes]:
                        yield _add_sub_bytes("y")
                        gate.wait(2)

                    with pytest.raises(grpc.RpcError):
                        list(fn(slow(), timeout=0.2))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [
        threading.Thread(target=breaker, args=(k,)) for k in ("garbage", "cancel", "errors", "deadline") * 2
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    items = got.take(20)
    client.stop_stream()
    assert not errors, errors
    assert all(e is None for _, e in items)
    assert [r.as_numpy("OUT").tolist() for r, _ in items[:20]] == [[i] for i in range(20)]
    res = client.infer("add_sub", [_i("INPUT0", A), _i("INPUT1", A)])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), A + A)


def test_stream_echoes_parameters_and_ids(client: grpcclient.InferenceServerClient) -> None:
    got = Collector()
    client.start_stream(got)
    client.async_stream_infer(
        "echo_request", [_i("INPUT0", np.array([1], np.int32))], request_id="e", parameters={"k": "v"}
    )
    ((r, e),) = got.take(1)
    client.stop_stream()
    assert e is None and r.get_response().id == "e" and _final(r)
    assert json.loads(r.as_numpy("PARAMETERS")[0]) == {"k": "v"}


def test_stream_answers_non_decoupled_requests_in_the_order_they_arrived(
    client: grpcclient.InferenceServerClient,
) -> None:
    """As the reference's stream handler: a later request that finishes first waits for the earlier
    one (parallel_sleep has two instances, so the 0 ms request is done while the 400 ms one sleeps);
    a refused request keeps its place too."""
    got = Collector()
    client.start_stream(callback=got)
    try:
        for rid, ms in (("slow", 400), ("fast", 0)):
            client.async_stream_infer(
                "parallel_sleep", [_i("SLEEP_MS", np.array([ms], dtype=np.int32))], request_id=rid
            )
        client.async_stream_infer(
            "no_such_model", [_i("SLEEP_MS", np.array([0], dtype=np.int32))], request_id="gone"
        )
        answers = got.take(3)
    finally:
        client.stop_stream()
    ids = [(r.get_response().id if r is not None else "error") for r, _ in answers]
    assert ids == ["slow", "fast", "error"], ids
    slow_end = answers[0][0].as_numpy("START_END")[1]
    fast_end = answers[1][0].as_numpy("START_END")[1]
    assert fast_end < slow_end  # the fast one was done first, and still answered second
    assert "no_such_model" in str(answers[2][1])
