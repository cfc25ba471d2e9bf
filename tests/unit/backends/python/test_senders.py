"""Response senders in non-decoupled models (sync and async): the cases of the reference's
qa/L0_backend_python/response_sender, answered as the reference answers them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pymodels import WAIT_S, drain, execute, instance, outs, request, write_model

from inferd.errors import InternalError

SOURCE = """
import asyncio
import json
import threading
import numpy as np
import triton_python_backend_utils as pb_utils
F = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def out(i):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))])


class TritonPythonModel:
    def initialize(self, args):
        self.errors = []
        self.tasks = set()
        self.release = threading.Event()  # set by the test once execute returned and was answered
        self.sent = threading.Event()  # the sends after execute are done

    def send(self, sender, ids, final):
        try:
            for i in ids:
                sender.send(out(i))
            if final:
                sender.send(flags=F)
        except pb_utils.TritonModelException as e:
            self.errors.append(str(e))

    {execute}
        returned = []
        for r in requests:
            p = json.loads(r.parameters())
            sender = r.get_response_sender() if p.get("pre") or p.get("post") or p.get("pre_final") else None
            if p.get("pre") is not None or p.get("pre_final"):
                ids = [1000 + i for i in range(p.get("pre", 0))]
                for i in ids:
                    sender.send(out(i))  # errors go out of execute
                if p.get("pre_final"):
                    sender.send(flags=F)
            if p.get("post") is not None:
                ids = [2000 + i for i in range(p["post"])]
                if {is_async}:
                    async def later(s=sender, ids=ids):
                        await asyncio.to_thread(self.release.wait, 30)
                        self.send(s, ids, True)
                        self.sent.set()
                    task = asyncio.create_task(later())
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
                else:
                    threading.Thread(
                        target=lambda s=sender, ids=ids: (self.release.wait(30), self.send(s, ids, True), self.sent.set()),
                        daemon=True,
                    ).start()
            returned.append(out(0) if p.get("ret") else None)
        return None if returned == [None] * len(requests) else returned
"""


def _model(tmp_path: Path, is_async: bool) -> Any:
    execute_line = "async def execute(self, requests):" if is_async else "def execute(self, requests):"
    source = SOURCE.replace("{execute}", execute_line).replace("{is_async}", str(is_async))
    return instance(write_model(tmp_path, "senders", source, max_batch_size=8))


def _run(inst: Any, *params: dict[str, Any]) -> list[list[Any]]:
    async def main() -> list[list[Any]]:
        reqs = [request(**p) for p in params]
        try:
            result = await execute(inst, *reqs)
        except InternalError as e:  # the pool answers the batch's open requests with it
            for r in reqs:
                assert r.stream is not None
                r.stream.deliver(None if r.stream.done else _error(r, e), True)
            result = None
        if result is not None:
            for r, resp in zip(reqs, result, strict=True):
                assert r.stream is not None
                r.stream.deliver(resp, True)
        inst.obj.release.set()  # the model's sends after execute go now
        return [outs(await drain(r.stream)) for r in reqs]

    return asyncio.run(main())


def _error(r: Any, e: InternalError) -> Any:
    from inferd.core.response import InferResponse

    return InferResponse(r.model_name, "1", r.id, error=e)


CASES = [
    ("one_on_return", {"ret": True}, [[0], "F"]),
    ("one_pre_return", {"pre": 1, "pre_final": True}, [[1000], None, "F"]),
    ("one_post_return", {"post": 1}, [[2000], None, "F"]),
    ("one_pre_and_on_return", {"pre": 1, "pre_final": True, "ret": True}, [[1000], None, "F"]),
    ("one_on_and_post_return", {"ret": True, "post": 1}, [[0], "F"]),
    ("two_pre_return", {"pre": 2, "pre_final": True}, [[1000], None, "F"]),
]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("case", "params", "want"), CASES, ids=[c[0] for c in CASES])
def test_non_decoupled_sender_cases(
    tmp_path: Path, is_async: bool, case: str, params: dict[str, Any], want: Any
) -> None:
    inst = _model(tmp_path, is_async)
    assert _run(inst, params) == [want]
    if case == "one_on_and_post_return":  # the thread's send finds the request answered
        assert inst.obj.sent.wait(WAIT_S), "the thread's send never happened"
        assert inst.obj.errors == ["Unable to send response. Response sender has been closed."]
    inst.unload()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_final_before_any_response_is_an_error(tmp_path: Path, is_async: bool) -> None:
    inst = _model(tmp_path, is_async)
    ((error, final),) = _run(inst, {"pre": 0, "pre_final": True})
    assert final == "F"
    assert (
        "Unable to send response. Non-decoupled model cannot send complete final before sending a response."
        in error
    )
    inst.unload()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_batch_answering_each_request_its_own_way(tmp_path: Path, is_async: bool) -> None:
    inst = _model(tmp_path, is_async)
    got = _run(inst, {"ret": True}, {"pre": 1, "pre_final": True}, {"post": 1})
    assert got == [[[0], "F"], [[1000], None, "F"], [[2000], None, "F"]]
    inst.unload()


def test_a_request_nobody_answers_is_closed_when_released(tmp_path: Path) -> None:
    inst = _model(tmp_path, False)
    assert _run(inst, {}) == [
        ["error: Python model 'senders_0' returned None from execute without sending a response", "F"]
    ]
    assert inst.open == {}
    inst.unload()
