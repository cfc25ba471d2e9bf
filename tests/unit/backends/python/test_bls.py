"""BLS in every form: exec, exec(decoupled=True) iterating responses as they come, async_exec from an
async execute, from a thread the model started, refused outside execute; the reference's texts."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pymodels import answers, instance, request, write_model

from inferd.backends.base import ResponseCallback, ServerLinks
from inferd.backends.python import pb_utils
from inferd.backends.python.hooks import BLS_PHASE_ONLY
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.errors import InternalError, NotFoundError


class FakeServer:
    """infer_async as the core offers it: responses handed to the callback from another thread."""

    def __init__(self, respond: Callable[[InferRequest, ResponseCallback, str | None], None]) -> None:
        self.respond = respond
        self.seen: list[InferRequest] = []

    def infer_async(self, req: InferRequest, callback: ResponseCallback, decoupled_error: str | None) -> None:
        self.seen.append(req)
        threading.Thread(target=self.respond, args=(req, callback, decoupled_error), daemon=True).start()

    def links(self) -> ServerLinks:
        return ServerLinks(infer_async=self.infer_async, model_ready=lambda name, version: name != "gone")


def out(req: InferRequest, *values: int) -> InferResponse:
    return InferResponse(
        req.model_name, "1", req.id, outputs=[Tensor.from_array("Y", np.array(values, np.int32))]
    )


def counting(req: InferRequest, cb: ResponseCallback, decoupled_error: str | None) -> None:
    """A decoupled model: IN=n answers n responses (0.02 s apart), then the final flag alone."""
    n = int(req.inputs["X"].array[0])
    for i in range(n):
        time.sleep(0.02)
        cb(out(req, i), False)
    cb(None, True)


def one(req: InferRequest, cb: ResponseCallback, decoupled_error: str | None) -> None:
    cb(out(req, int(req.inputs["X"].array[0]) + 1), True)


CALLER = """
import asyncio
import json
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


def bls(n, decoupled=False, **kw):
    req = pb_utils.InferenceRequest(
        model_name=kw.pop("model", "other"), inputs=[pb_utils.Tensor("X", np.array([n], np.int32))],
        requested_output_names=["Y"], **kw)
    return req, req.exec(decoupled=decoupled)


def values(responses):
    return [r.error().message() if r.has_error() else
            (r.output_tensors()[0].as_numpy().tolist() if r.output_tensors() else None) for r in responses]


class TritonPythonModel:
    def initialize(self, args):
        self.log = []
        if json.loads(args["model_config"]).get("parameters", {}).get("bls_in_init"):
            bls(1)

    def execute(self, requests):
        p = json.loads(requests[0].parameters())
        how = p["how"]
        if how == "sync":
            self.log.append(values([bls(p["count"], parameters={"k": "v"}, timeout=11, request_id="r1")[1]]))
        elif how == "decoupled":
            self.log.append(values(bls(p["count"], decoupled=True)[1]))
        elif how == "thread":
            t = threading.Thread(target=lambda: self.log.append(values([bls(p["count"])[1]])))
            t.start()
            t.join()
        elif how == "replay":  # iterating the responses again replays them, as the reference's iterator
            it = bls(p["count"], decoupled=True)[1]
            self.log.append([values(it), values(it)])
        elif how == "resume":  # a replay broken off resumes where it stopped, next() included
            it = bls(p["count"], decoupled=True)[1]
            first = values([next(it)])
            rest = values(it)
            for seen, _ in enumerate(it):
                if seen == 1:
                    break
            self.log.append([first, rest, values([next(it)]), values(it), values(it)])
        elif how == "again":  # the same request object executed twice
            req, first = bls(p["count"])
            self.log.append(values([first, req.exec()]))
        elif how == "gone":
            self.log.append(values([bls(1, model="gone")[1]]))
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([0], np.int32))]) for _ in requests]
"""


def _caller(tmp_path: Path, server: FakeServer) -> Any:
    return instance(write_model(tmp_path, "caller", CALLER), server.links())


@pytest.mark.parametrize(
    ("how", "respond", "want"),
    [
        ("sync", one, [[[4]]]),
        ("decoupled", counting, [[[0], [1], [2], None]]),  # the final flag alone: an empty response
        ("decoupled", one, [[[4]]]),  # a non-decoupled model: its one response ends the iteration
        ("thread", one, [[[4]]]),  # from a thread the model started: the instance's server
        ("again", one, [[[4], [4]]]),
        ("replay", counting, [[[[0], [1], [2], None], [[0], [1], [2], None]]]),
        ("resume", counting, [[[[0]], [[1], [2], None], [[2]], [None], [[0], [1], [2], None]]]),
    ],
)
def test_bls_forms(tmp_path: Path, how: str, respond: Any, want: list[Any]) -> None:
    server = FakeServer(respond)
    inst = _caller(tmp_path, server)
    assert answers(inst, request(how=how, count=3)) == [[[0], "F"]]
    assert inst.obj.log == want
    assert inst.uses_bls  # the pool keeps this instance off the event loop from now on


def test_a_bls_request_carries_what_the_model_gave_it(tmp_path: Path) -> None:
    server = FakeServer(one)
    inst = _caller(tmp_path, server)
    answers(inst, request(how="sync", count=1))
    (seen,) = server.seen
    assert (seen.model_name, seen.id, seen.parameters, seen.timeout_us) == ("other", "r1", {"k": "v"}, 11)
    assert [o.name for o in seen.outputs or []] == ["Y"]


def test_bls_errors_keep_their_message(tmp_path: Path) -> None:
    def fail(req: InferRequest, cb: ResponseCallback, decoupled_error: str | None) -> None:
        cb(
            InferResponse(
                req.model_name, "1", error=NotFoundError("Model other - Error when running inference: x")
            ),
            True,
        )

    inst = _caller(tmp_path, FakeServer(fail))
    answers(inst, request(how="sync", count=1))
    assert inst.obj.log == [["Model other - Error when running inference: x"]]


def test_a_non_decoupled_exec_refuses_decoupled_models_with_the_reference_text(tmp_path: Path) -> None:
    texts: list[str | None] = []

    def record(req: InferRequest, cb: ResponseCallback, decoupled_error: str | None) -> None:
        texts.append(decoupled_error)
        one(req, cb, decoupled_error)

    inst = _caller(tmp_path, FakeServer(record))
    answers(inst, request(how="sync", count=1))
    answers(inst, request(how="decoupled", count=1))
    assert texts == [
        "Model other is using the decoupled. The current BLS request call doesn't support models using the decoupled "
        "transaction policy. Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled "
        "models.'",
        None,
    ]


def test_bls_is_refused_in_initialize(tmp_path: Path) -> None:
    config = """
    name: "{name}"
    backend: "python"
    max_batch_size: {max_batch_size}
    parameters {{ key: "bls_in_init" value: {{ string_value: "yes" }} }}
    """
    with pytest.raises(InternalError, match=BLS_PHASE_ONLY):
        instance(write_model(tmp_path, "caller", CALLER, config=config), FakeServer(one).links())


def test_bls_on_the_servers_loop_is_refused_and_turns_inline_off(tmp_path: Path) -> None:
    inst = _caller(tmp_path, FakeServer(one))

    async def main() -> None:
        from pymodels import execute

        loop = asyncio.get_running_loop()
        inst.server_loop = loop
        await execute(inst, request(how="sync", count=1), on_loop=True)

    with pytest.raises(InternalError, match="BLS request issued from the event loop thread"):
        asyncio.run(main())
    assert inst.uses_bls


ASYNC_CALLER = """
import asyncio
import json
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.log = []

    async def execute(self, requests):
        p = json.loads(requests[0].parameters())
        req = pb_utils.InferenceRequest(
            model_name="other", inputs=[pb_utils.Tensor("X", np.array([p["count"]], np.int32))], requested_output_names=["Y"])
        t0 = time.monotonic()
        if p["how"] == "decoupled":
            got = []
            async for r in await req.async_exec(decoupled=True):
                got.append(r.output_tensors()[0].as_numpy().tolist() if r.output_tensors() else None)
        elif p["how"] == "decoupled_sync_iteration":
            got = [len(r.output_tensors()) for r in await req.async_exec(decoupled=True)]
        else:
            got = [r.output_tensors()[0].as_numpy().tolist() for r in await asyncio.gather(
                req.async_exec(), req.async_exec(), req.async_exec())]
        self.log.append((got, time.monotonic() - t0))
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([0], np.int32))]) for _ in requests]
"""


def test_async_exec_awaits_without_holding_a_thread(tmp_path: Path) -> None:
    barrier = threading.Barrier(3, timeout=30)  # breaks unless the three calls are in flight at once

    def together(req: InferRequest, cb: ResponseCallback, decoupled_error: str | None) -> None:
        barrier.wait()
        one(req, cb, decoupled_error)

    inst = instance(write_model(tmp_path, "acaller", ASYNC_CALLER), FakeServer(together).links())
    assert answers(inst, request(how="gather", count=5)) == [[[0], "F"]]
    ((got, _),) = inst.obj.log
    assert got == [[6], [6], [6]]  # three awaited together, not one after the other
    inst.unload()


@pytest.mark.parametrize(
    ("how", "want"), [("decoupled", [[0], [1], None]), ("decoupled_sync_iteration", [1, 1, 0])]
)
def test_async_exec_of_a_decoupled_model(tmp_path: Path, how: str, want: list[Any]) -> None:
    inst = instance(write_model(tmp_path, "acaller", ASYNC_CALLER), FakeServer(counting).links())
    assert answers(inst, request(how=how, count=2)) == [[[0], "F"]]
    assert inst.obj.log[0][0] == want
    inst.unload()


def test_bls_outside_a_server() -> None:
    r = pb_utils.InferenceRequest(model_name="other", inputs=[], requested_output_names=[])
    with pytest.raises(pb_utils.TritonModelException, match="BLS is not available outside a model instance"):
        r.exec()
    with pytest.raises(pb_utils.TritonModelException, match="BLS is not available outside a model instance"):
        asyncio.run(r.async_exec())
