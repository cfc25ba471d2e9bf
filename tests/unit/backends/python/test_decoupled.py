"""Decoupled models in the Python backend: response senders from any thread, the final flag exactly
once, errors as responses, cancellation, requests released or left open, and the pool around them.

Exception texts are the 2.51 reference's Python backend's (observed with tests/fixtures/models/dec_ctl).
"""

from __future__ import annotations

import asyncio
import gc
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.python import pb_utils
from inferd.backends.python.backend import PythonBackend, PythonInstance
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.stats import ModelStats
from inferd.core.tensor import Tensor
from inferd.errors import (
    InternalError,
    NotFoundError,
    RequestCancelledError,
    UnavailableError,
)
from inferd.repository import load_model_config, normalize_config
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.queue import BatchPolicy

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "models"

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: {decoupled} }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "MSG" data_type: TYPE_STRING dims: [ 1 ] }}
]
"""


def _instance(model_dir: Path) -> PythonInstance:
    cfg, _ = load_model_config(model_dir)
    normalize_config(cfg, model_dir.name, model_dir=model_dir)
    ctx = LoadContext(model_dir.name, 1, model_dir, model_dir / "1", cfg)
    inst = PythonBackend().load(ctx).create_instance(InstanceSpec(f"{model_dir.name}_0", "CPU", 0))
    assert isinstance(inst, PythonInstance)
    return inst


def _write(root: Path, name: str, source: str, decoupled: bool = True) -> PythonInstance:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(CONFIG.format(name=name, decoupled=str(decoupled).lower()))
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
    return _instance(model_dir)


def dec_ctl() -> PythonInstance:
    """The e2e fixture model (parameters choose what it sends)."""
    return _instance(FIXTURES / "dec_ctl")


def _request(n: int = 1, rid: str = "", **params: Any) -> InferRequest:
    return InferRequest(
        model_name="m",
        inputs={"IN": Tensor.from_array("IN", np.array([n], np.int32))},
        id=rid,
        parameters=params,
    )


_worker = ThreadPoolExecutor(2, thread_name_prefix="test-decoupled")


async def _execute(
    inst: PythonInstance, *requests: InferRequest, on_loop: bool = False
) -> list[InferResponse] | None:
    """Execute in a worker thread (or on the loop's thread, as inline mode does) with streams set."""
    loop = asyncio.get_running_loop()
    for r in requests:
        if r.stream is None:
            r.stream = ResponseStream(loop)
    if on_loop:
        try:
            return inst.execute(list(requests))
        finally:
            pb_utils._set_thread_hooks(pb_utils._default_hooks)  # this thread runs other tests too
    return await loop.run_in_executor(_worker, inst.execute, list(requests))


async def _drain(
    stream: ResponseStream | None, timeout: float = 5
) -> list[tuple[InferResponse | None, bool]]:
    """Everything the stream gets until its final flag."""
    assert stream is not None
    items = []

    async def run() -> None:
        async for item in stream:
            items.append(item)

    await asyncio.wait_for(run(), timeout)
    return items


def _outs(items: list[tuple[InferResponse | None, bool]]) -> list[Any]:
    """OUT values, error messages, None for a flag-only send; a trailing "F" marks the final flag."""
    out: list[Any] = []
    for r, final in items:
        if r is None:
            out.append(None)
        elif r.error is not None:
            out.append(f"error: {r.error.message}")
        else:
            tensors = {t.name: t.array.tolist() for t in r.outputs}
            out.append(tensors.get("OUT", tensors.get("MSG")))
        if final:
            out.append("F")
    return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- responses, final flag, errors --------------------------------------------------------------


def test_many_responses_then_final() -> None:
    inst = dec_ctl()

    async def main() -> list[Any]:
        r = _request(3)
        assert await _execute(inst, r) is None
        return _outs(await _drain(r.stream))

    assert run(main()) == [[0], [1], [2], "F"]
    assert inst.open == {}


@pytest.mark.parametrize(
    ("params", "want"),
    [
        ({"n": 0}, [None, "F"]),
        ({"n": 1}, [[0], "F"]),
        ({"n": 2, "final_alone": True}, [[0], [1], None, "F"]),
        # an error response does not end the stream; its code is kept
        ({"n": 3, "error_at": 1, "code": 2}, [[0], "error: custom failure", [2], "F"]),
        ({"n": 2, "error_at": 1, "code": 4}, [[0], "error: custom failure", "F"]),
    ],
)
def test_responses(params: dict[str, Any], want: list[Any]) -> None:
    inst = dec_ctl()

    async def main() -> list[tuple[InferResponse | None, bool]]:
        r = _request(**params)
        await _execute(inst, r)
        return await _drain(r.stream)

    items = run(main())
    assert _outs(items) == want
    codes = [type(r.error) for r, _ in items if r is not None and r.error is not None]
    assert codes == (
        [NotFoundError] if params.get("code") == 2 else [UnavailableError] if "code" in params else []
    )


def test_responses_carry_the_request_id_and_version() -> None:
    inst = dec_ctl()

    async def main() -> InferResponse | None:
        r = _request(1, rid="abc")
        await _execute(inst, r)
        return (await _drain(r.stream))[0][0]

    resp = run(main())
    assert resp is not None and (resp.id, resp.model_version) == ("abc", "1")


def test_sends_from_a_thread_after_execute_returned() -> None:
    inst = dec_ctl()

    async def main() -> list[Any]:
        r = _request(3, thread=True, delay=0.05)
        assert await _execute(inst, r) is None
        assert r.stream is not None and not r.stream.done  # execute returned before the responses
        return _outs(await _drain(r.stream))

    assert run(main()) == [[0], [1], [2], "F"]


def test_several_requests_in_one_execute_answer_independently() -> None:
    inst = dec_ctl()

    async def main() -> list[list[Any]]:
        rs = [_request(n) for n in (0, 2, 1)]
        await _execute(inst, *rs)
        return [_outs(await _drain(r.stream)) for r in rs]

    assert run(main()) == [[None, "F"], [[0], [1], "F"], [[0], "F"]]


def test_execute_raising_after_a_response() -> None:
    inst = dec_ctl()

    async def main() -> list[Any]:
        r = _request(raise_after=True)
        with pytest.raises(InternalError) as info:
            await _execute(inst, r)
        assert info.value.message.startswith(
            "Failed to process the request(s) for model 'dec_ctl_0', message: TritonModelException: raised "
            "after one response\n\nAt:\n"
        )
        assert inst.open == {}
        # the pool answers the error with the final flag; what was sent before comes first
        assert r.stream is not None
        r.stream.send(InferResponse("dec_ctl", "1", error=info.value), True)
        return _outs(await _drain(r.stream))

    out = run(main())
    assert out[0] == [7] and out[1].startswith("error: Failed to process") and out[2] == "F"


def test_execute_returning_a_list() -> None:
    inst = dec_ctl()

    async def main() -> None:
        with pytest.raises(InternalError) as info:
            await _execute(inst, _request(return_list=True))
        assert info.value.message == (
            "Failed to process the request(s) for model 'dec_ctl_0', message: Python model 'dec_ctl_0' is "
            "using the decoupled mode and the execute function must return None."
        )
        assert inst.open == {}

    run(main())


@pytest.mark.parametrize(
    ("misuse", "message"),
    [
        (
            "none_nonfinal",
            "TritonModelException: Inference Response object must be provided when the response flags is set to zero.",
        ),
        ("bad_flags", "TritonModelException: Unable to send response. Unsupported flag provided."),
        (
            "not_response",
            "TypeError: send(): incompatible function arguments. The following argument types are supported:\n"
            "    1. (self: c_python_backend_utils.InferenceResponseSender, response: "
            "c_python_backend_utils.InferenceResponse = None, flags: int = 0) -> None\n\nInvoked with: ",
        ),
    ],
)
def test_sender_misuse_raises_in_the_model(misuse: str, message: str) -> None:
    inst = dec_ctl()

    async def main() -> list[Any]:
        r = _request(misuse=misuse)
        await _execute(inst, r)
        return _outs(await _drain(r.stream))

    (msg,), final = run(main())
    assert msg.decode().startswith(message) and final == "F"


def test_the_final_flag_closes_the_sender(tmp_path: Path) -> None:
    inst = _write(
        tmp_path,
        "closes",
        """
        import numpy as np
        import triton_python_backend_utils as pb_utils
        F = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

        class TritonPythonModel:
            def execute(self, requests):
                self.errors = []
                for r in requests:
                    s = r.get_response_sender()
                    assert r.get_response_sender() is s
                    s.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))]), flags=F)
                    for again in (lambda: s.send(flags=F), lambda: s.send(pb_utils.InferenceResponse([]))):
                        try:
                            again()
                        except pb_utils.TritonModelException as e:
                            self.errors.append(str(e))
                return None
        """,
    )

    async def main() -> list[Any]:
        r = _request()
        await _execute(inst, r)
        return _outs(await _drain(r.stream))

    assert run(main()) == [[1], "F"]
    assert inst.obj.errors == ["Unable to send response. Response sender has been closed."] * 2


# -- non-decoupled models with a sender ----------------------------------------------------------

SENDER = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils
F = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

def out(i):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))])

class TritonPythonModel:
    def execute(self, requests):
        self.errors = []
        for r in requests:
            s = r.get_response_sender()
            kind = json.loads(r.parameters())["kind"]
            try:
                if kind == "two":
                    s.send(out(1))
                    s.send(out(2), flags=F)
                elif kind == "final_first":
                    s.send(flags=F)
                elif kind == "one":
                    s.send(out(1))
                elif kind == "ok":
                    s.send(out(1), flags=F)
            except pb_utils.TritonModelException as e:
                self.errors.append(str(e))
        return None
"""


@pytest.mark.parametrize(
    ("kind", "error", "want"),
    [
        ("ok", None, [[1], "F"]),
        (
            "two",
            "Unable to send response. Non-decoupled model cannot send more than one response.",
            [[1], None, "F"],
        ),
        (
            "final_first",
            "Unable to send response. Non-decoupled model cannot send complete final before sending a response.",
            ["error: Python model 'sender_0' returned None from execute without sending a response", "F"],
        ),
        # one response and no final flag: the reference leaves the client waiting; closed here
        ("one", None, [[1], None, "F"]),
    ],
)
def test_non_decoupled_sender(tmp_path: Path, kind: str, error: str | None, want: list[Any]) -> None:
    inst = _write(tmp_path, "sender", SENDER, decoupled=False)

    async def main() -> list[Any]:
        r = _request(kind=kind)
        assert await _execute(inst, r) is None
        return _outs(await _drain(r.stream))

    assert run(main()) == want
    assert inst.obj.errors == ([error] if error else [])


# -- requests left open -----------------------------------------------------------------------------


def test_a_request_released_without_the_final_flag_is_closed() -> None:
    inst = dec_ctl()

    async def main() -> list[Any]:
        r = _request(2, no_final=True)
        await _execute(inst, r)
        gc.collect()
        return _outs(await _drain(r.stream))

    assert run(main()) == [
        [0],
        [1],
        "error: Python model 'dec_ctl_0' released the request without sending the final response "
        "(TRITONSERVER_RESPONSE_COMPLETE_FINAL)",
        "F",
    ]
    assert inst.open == {}


def test_a_held_sender_keeps_the_request_open_until_unload() -> None:
    inst = dec_ctl()

    async def main() -> list[Any]:
        r = _request(held=True)
        await _execute(inst, r)
        assert r.stream is not None
        # nothing to wait for: the model sent [0] and returned. A sender it had let go of would be
        # released here (inst.open at once, the stream on the loop's next round)
        gc.collect()
        await asyncio.sleep(0)
        assert not r.stream.done and list(inst.open.values()) == [r]
        await asyncio.get_running_loop().run_in_executor(_worker, inst.unload)
        return _outs(await _drain(r.stream))

    assert run(main()) == [
        [0],
        "error: model 'dec_ctl' version 1 was unloaded before the request received its final response",
        "F",
    ]
    assert inst.open == {}


def test_finalize_may_still_send(tmp_path: Path) -> None:
    inst = _write(
        tmp_path,
        "finalizes",
        """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def initialize(self, args):
                self.senders = []

            def execute(self, requests):
                self.senders += [r.get_response_sender() for r in requests]
                return None

            def finalize(self):
                for s in self.senders:
                    s.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([9], np.int32))]),
                           flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        """,
    )

    async def main() -> list[Any]:
        r = _request()
        await _execute(inst, r)
        await asyncio.get_running_loop().run_in_executor(_worker, inst.unload)
        return _outs(await _drain(r.stream))

    assert run(main()) == [[9], "F"]


# -- cancellation ----------------------------------------------------------------------------------

CANCEL = """
import threading, time
import numpy as np
import triton_python_backend_utils as pb_utils
F = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

class TritonPythonModel:
    def initialize(self, args):
        self.seen = []
        self.started = threading.Event()

    def loop(self, r, s):
        i = 0
        while not s.is_cancelled():
            s.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))]))
            self.started.set()
            i += 1
            time.sleep(0.005)
        self.seen.append((r.is_cancelled(), s.is_cancelled(), i))
        s.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([-1], np.int32))]))
        s.send(flags=F)

    def execute(self, requests):
        for r in requests:
            threading.Thread(target=self.loop, args=(r, r.get_response_sender()), daemon=True).start()
        return None
"""


def test_cancellation_reaches_the_model_and_stops_the_responses(tmp_path: Path) -> None:
    inst = _write(tmp_path, "cancel", CANCEL)

    async def main() -> list[Any]:
        r = _request()
        await _execute(inst, r)
        assert r.stream is not None
        await asyncio.get_running_loop().run_in_executor(_worker, inst.obj.started.wait, 5)
        r.stream.cancel("client gone")  # what a frontend does when the client goes away
        items = await _drain(r.stream)
        return _outs(items)

    out = run(main())
    assert inst.obj.seen and inst.obj.seen[0][:2] == (True, True)
    # the response sent after the model saw the cancellation is dropped; the final flag closes
    assert -1 not in [v[0] for v in out if isinstance(v, list)]
    assert out[-2:] == [None, "F"]
    assert inst.open == {}


# -- on the loop's thread (inline mode) --------------------------------------------------------------


def test_on_the_loop_thread_responses_are_delivered_at_once_and_in_order() -> None:
    inst = dec_ctl()

    async def main() -> list[Any]:
        r = _request(raise_after=True)
        with pytest.raises(InternalError) as info:
            await _execute(inst, r, on_loop=True)
        assert r.stream is not None
        # the response sent before the exception is there already, before the pool's error
        r.stream.deliver(InferResponse("dec_ctl", "1", error=info.value), True)
        return _outs(await _drain(r.stream))

    out = run(main())
    assert out[0] == [7] and out[1].startswith("error: ") and out[2] == "F"


# -- the pool around a decoupled instance -------------------------------------------------------------


class _Gate:
    """A BackendInstance whose execute waits for a gate, then answers through the streams."""

    inline_ok = False
    uses_bls = False
    last_timings = None

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.executed: list[str] = []

    def execute(self, requests: list[InferRequest]) -> list[InferResponse] | None:
        self.started.set()
        self.gate.wait(5)
        for r in requests:
            self.executed.append(r.id)
            assert r.stream is not None
            r.stream.send(InferResponse("m", "1", r.id), True)
        return None

    def unload(self) -> None:
        """Nothing to release."""


def test_pool_skips_requests_cancelled_while_queued_and_counts_decoupled_success() -> None:
    async def main() -> tuple[_Gate, ModelStats, list[InferResponse]]:
        loop = asyncio.get_running_loop()
        inst = _Gate()
        stats = ModelStats()
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), stats, loop)
        reqs = [_request(rid=str(i)) for i in range(3)]
        for r in reqs:
            r.stream = ResponseStream(loop)
            pool.enqueue(r)
        await loop.run_in_executor(_worker, inst.started.wait, 5)
        assert reqs[1].stream is not None
        reqs[1].stream.cancel("client gone")  # its client went away while it waited
        inst.gate.set()
        firsts = []
        for r in reqs:
            assert r.stream is not None
            firsts.append(await asyncio.wait_for(r.stream.first(), 5))
        await pool.stop(1)
        return inst, stats, firsts

    inst, stats, firsts = run(main())
    assert inst.executed == ["0", "2"]
    assert isinstance(firsts[1].error, RequestCancelledError)
    assert firsts[1].error.message == "Request was cancelled"
    doc = stats.to_json("m", "1")
    assert doc["inference_stats"]["success"]["count"] == 2  # decoupled: counted when execute returns
    assert doc["inference_stats"]["fail"]["count"] == 1
    assert stats.fail_reasons["CANCELED"] == 1
    assert doc["execution_count"] == 2
