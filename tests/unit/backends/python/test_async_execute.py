"""``async def execute``: executes of one instance overlap on its own event loop; answers, errors,
tasks a model leaves running, unload; and execute errors the reference answers (SystemExit)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pymodels import WAIT_S, answers, drain, execute, instance, outs, request, until, write_model

SLEEPY = """
import asyncio
import json
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def initialize(self, args):
        self.loop_thread = threading.current_thread().name
        self.started = 0
        self.all_started = asyncio.Event()

    async def execute(self, requests):
        self.started += 1
        params = json.loads(requests[0].parameters())
        if params.get("together"):  # on until that many executes started: only if they overlap
            if self.started >= params["together"]:
                self.all_started.set()
            await asyncio.wait_for(self.all_started.wait(), 30)
        await asyncio.sleep(params.get("sleep", 0))
        if params.get("raise"):
            raise ValueError("wait_secs cannot be negative")
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.get_input("IN").as_numpy() * 2)])
            for r in requests
        ]

    async def finalize(self):
        self.finalized_on = threading.current_thread().name
"""


def test_executes_of_one_instance_overlap(tmp_path: Path) -> None:
    inst = instance(write_model(tmp_path, "sleepy", SLEEPY))
    assert inst.is_async

    async def main() -> list[list[Any]]:
        # each execute waits until all 6 started (SLEEPY's "together"): they end only if they overlap
        reqs = [request(i, together=6) for i in range(6)]
        for r in reqs:  # each execute hands its batch over and returns at once
            assert await execute(inst, r) is None
        return [outs(await drain(r.stream)) for r in reqs]

    got = asyncio.run(main())
    assert got == [[[2 * i], "F"] for i in range(6)]
    assert inst.obj.loop_thread == "inferd-sleepy_0-loop"  # async initialize ran on the instance's loop
    inst.unload()
    assert inst.obj.finalized_on == "inferd-sleepy_0-loop"


def test_inline_execute_hands_over_too(tmp_path: Path) -> None:
    inst = instance(write_model(tmp_path, "sleepy", SLEEPY))
    assert answers(inst, request(4), on_loop=True) == [[[8], "F"]]
    inst.unload()


def test_an_async_execute_that_raises(tmp_path: Path) -> None:
    inst = instance(write_model(tmp_path, "sleepy", SLEEPY))
    ((error, final),) = answers(inst, request(1, **{"raise": True}))
    assert final == "F"
    assert error.startswith(
        "error: Failed to process the request(s) for model 'sleepy_0', message: ValueError: wait_secs cannot be "
        "negative\n\nAt:\n"
    )
    assert "model.py(" in error and "): execute" in error
    inst.unload()


DECOUPLED_ASYNC = """
import asyncio
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.background = set()

    async def execute(self, requests):
        if json.loads(requests[0].parameters()).get("return"):
            return [pb_utils.InferenceResponse() for _ in requests]
        for r in requests:
            params = json.loads(r.parameters())
            sender = r.get_response_sender()
            n = int(r.get_input("IN").as_numpy()[0])
            if params.get("later"):
                task = asyncio.create_task(self.later(sender, n))
                self.background.add(task)
                task.add_done_callback(self.background.discard)
                continue
            for i in range(n):
                await asyncio.sleep(0.01)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))]))
            if params.get("raise"):
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                raise ValueError("nobody left to tell")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    async def later(self, sender, n):
        await asyncio.sleep(0.05)
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([n], np.int32))]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


def test_decoupled_async_sends_through_its_senders(tmp_path: Path) -> None:
    inst = instance(write_model(tmp_path, "dec_async", DECOUPLED_ASYNC, decoupled=True))
    assert answers(inst, request(3)) == [[[0], [1], [2], None, "F"]]
    inst.unload()


def test_tasks_a_model_starts_run_after_its_execute_returned(tmp_path: Path) -> None:
    inst = instance(write_model(tmp_path, "dec_async", DECOUPLED_ASYNC, decoupled=True))
    assert answers(inst, request(7, later=True)) == [[[7], "F"]]
    inst.unload()


def test_decoupled_async_must_return_none(tmp_path: Path) -> None:
    inst = instance(write_model(tmp_path, "dec_async", DECOUPLED_ASYNC, decoupled=True))
    assert answers(inst, request(0, **{"return": True})) == [
        [
            "error: Failed to process the request(s) for model 'dec_async_0', message: Python model 'dec_async_0' "
            "is using the decoupled mode and the execute function must return None.",
            "F",
        ]
    ]
    inst.unload()


def test_an_error_with_nobody_to_tell_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    inst = instance(write_model(tmp_path, "dec_async", DECOUPLED_ASYNC, decoupled=True))
    assert answers(inst, request(1, **{"raise": True})) == [[[0], None, "F"]]
    # the final flag went out before the model raised
    until(lambda: "ValueError: nobody left to tell" in caplog.text, "error logged")
    assert "ValueError: nobody left to tell" in caplog.text
    inst.unload()


FOREVER = """
import asyncio
import threading
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.started = threading.Event()

    async def execute(self, requests):
        self.started.set()
        await asyncio.sleep(3600)
"""


def test_unload_ends_executes_still_running(tmp_path: Path) -> None:
    inst = instance(write_model(tmp_path, "forever", FOREVER))

    async def main() -> list[Any]:
        r = request()
        assert await execute(inst, r) is None
        assert await asyncio.to_thread(inst.obj.started.wait, WAIT_S), "the execute never started"
        await asyncio.to_thread(inst.unload)
        return outs(await drain(r.stream))

    (error, final) = asyncio.run(main())
    assert final == "F" and error == "error: model 'forever' was unloaded during execute"


EXITS = """
import json
import sys
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        how = json.loads(requests[0].parameters())["how"]
        if how == "exit":
            sys.exit(3)
        if how == "bare":
            sys.exit()
        if how == "unittest":
            import unittest
            unittest.main("model")
        raise KeyboardInterrupt("k")
"""


@pytest.mark.parametrize(
    ("how", "first_line"),
    [
        ("exit", "SystemExit: 3"),
        ("bare", "SystemExit: <EMPTY MESSAGE>"),
        ("interrupt", "KeyboardInterrupt: k"),
    ],
)
def test_system_exit_in_execute_is_answered(tmp_path: Path, how: str, first_line: str) -> None:
    from inferd.errors import InternalError

    inst = instance(write_model(tmp_path, "exits", EXITS))

    async def main() -> None:
        await execute(inst, request(how=how))

    with pytest.raises(InternalError) as info:  # the pool answers every request of the batch with it
        asyncio.run(main())
    assert info.value.message.startswith(
        f"Failed to process the request(s) for model 'exits_0', message: {first_line}"
    )
