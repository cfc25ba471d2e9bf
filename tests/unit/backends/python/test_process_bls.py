"""BLS from a worker process answers as from a thread instance: async_exec awaited without holding a
thread, decoupled responses streamed back one by one (sync and async iteration), callee errors and the
reference's refusal, the request's timeout carried (and expiring in a busy callee's queue), abandoned
requests cancelled at the callee (a dropped iterator, an async_exec cancelled by asyncio.wait_for),
large tensors both ways.

Each case runs the same caller model twice in one server, in a thread instance and in a worker
process, and both must give the same answer. The callees are thread instances of this process: they
tell the test what happened through ``probe`` events (a module the test puts in ``sys.modules``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd import Server
from inferd.backends.process.ipc import SHM_DIR

PROBE = "inferd_test_bls_probe"
WAIT_S = 30.0

SYNC_CALLER = """
import json
import os
import numpy as np
import triton_python_backend_utils as pb_utils


def req(model, x=(1.0,), **kw):
    return pb_utils.InferenceRequest(
        model_name=model, inputs=[pb_utils.Tensor("X", np.array(x, np.float32))],
        requested_output_names=["Y"], **kw)


def summary(r):
    if r.has_error():
        return "error: " + r.error().message()
    ts = r.output_tensors()
    return ts[0].as_numpy().tolist() if ts else None


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            how = json.loads(request.parameters())["how"]
            if how == "exec":
                got = [summary(req("echo", (1.0, 2.0)).exec())]
            elif how == "iterate":
                got = [summary(r) for r in req("repeat", (3.0,)).exec(decoupled=True)]
            elif how == "fails":
                got = [summary(req("fails").exec())]
            elif how == "refused":  # a non-decoupled call to a decoupled model
                got = [summary(req("repeat", (3.0,)).exec())]
            elif how == "timeout":
                got = [summary(req("seen", timeout=1234).exec())]
            elif how == "queue_timeout":  # 50 ms in the queue of a model kept busy: rejected
                got = [summary(req("queued", timeout=50_000).exec())]
            elif how == "big":  # 4 MiB each way: through shared memory from and to a worker
                x = np.arange(1 << 20, dtype=np.float32)
                y = pb_utils.get_output_tensor_by_name(req("echo", x).exec(), "Y").as_numpy()
                got = [bool(np.array_equal(x, y))]
            elif how == "pid":
                got = [os.getpid()]
            elif how == "abandon":  # the first response, then the iterator is dropped
                responses = req("ticker").exec(decoupled=True)
                got = [summary(next(responses))]
                del responses
            text = np.array([json.dumps(got).encode()], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]))
        return out
"""
ASYNC_CALLER = """
import asyncio
import json
import numpy as np
import triton_python_backend_utils as pb_utils


def req(model, x=(1.0,)):
    return pb_utils.InferenceRequest(
        model_name=model, inputs=[pb_utils.Tensor("X", np.array(x, np.float32))], requested_output_names=["Y"])


def summary(r):
    if r.has_error():
        return "error: " + r.error().message()
    ts = r.output_tensors()
    return ts[0].as_numpy().tolist() if ts else None


class TritonPythonModel:
    async def execute(self, requests):
        out = []
        for request in requests:
            how = json.loads(request.parameters())["how"]
            if how == "gather":  # the gate opens only when the three are in flight at once
                got = [summary(r) for r in await asyncio.gather(*(req("gate", (i,)).async_exec() for i in range(3)))]
            elif how == "iterate":
                got = [summary(r) async for r in await req("repeat", (3.0,)).async_exec(decoupled=True)]
            elif how == "iterate_sync":  # the awaited iterator, iterated without await
                got = [summary(r) for r in await req("repeat", (2.0,)).async_exec(decoupled=True)]
            elif how == "fails":
                got = [summary(await req("fails").async_exec())]
            elif how == "wait_for":  # the model's own timeout on a request that never answers
                try:
                    await asyncio.wait_for(req("hold").async_exec(), 0.05)
                    got = ["answered"]
                except asyncio.TimeoutError:
                    got = ["timed out"]
            elif how == "abandon":
                got = []
                async for r in await req("ticker").async_exec(decoupled=True):
                    got.append(summary(r))
                    break
            text = np.array([json.dumps(got).encode()], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]))
        return out
"""
CALLER_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters {{ key: "execution_mode" value: {{ string_value: "{mode}" }} }}
"""
CALLEES = {
    # Y = X
    "echo": """
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x(r))]) for r in requests]
    """,
    # Y = X once all three requests of a gather are in flight together
    "gate": """
        def execute(self, requests):
            probe().gate.wait()
            return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x(r))]) for r in requests]
    """,
    # Y = [the request's timeout]
    "seen": """
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([r.timeout()], np.float32))])
                    for r in requests]
    """,
    "fails": """
        def execute(self, requests):
            raise pb_utils.TritonModelException("the callee failed on purpose")
    """,
    # decoupled: X[0] responses Y = [i], then the final flag alone
    "repeat": """
        def execute(self, requests):
            for r in requests:
                sender = r.get_response_sender()
                for i in range(int(x(r)[0])):
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([i], np.float32))]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
    """,
    # decoupled: Y = [0], then nothing until cancelled (the test's probe hears of it), then the final flag
    "ticker": """
        def execute(self, requests):
            for r in requests:
                sender = r.get_response_sender()
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([0], np.float32))]))
                threading.Thread(target=until_cancelled, args=(r, sender, probe().ticker_cancelled)).start()
            return None
    """,
    # with a queue policy the request's timeout may shorten; X = [-1]: executes until the test releases it
    "queued": """
        def execute(self, requests):
            if x(requests[0])[0] < 0:
                probe().busy.set()
                probe().release.wait({wait:g})
            return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x(r))]) for r in requests]
    """,
    # no answer until cancelled (the probe hears of it)
    "hold": """
        def execute(self, requests):
            for r in requests:
                until_cancelled(r, None, probe().hold_cancelled)
            return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x(r))]) for r in requests]
    """,
}
CALLEE_SOURCE = """
import sys
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def probe():
    return sys.modules["{probe}"]


def x(r):
    return pb_utils.get_input_tensor_by_name(r, "X").as_numpy()


def until_cancelled(request, sender, event):
    # is_cancelled() is a poll (the reference's API): every 5 ms, up to {wait:g} s
    deadline = time.monotonic() + {wait:g}
    while not request.is_cancelled() and time.monotonic() < deadline:
        time.sleep(0.005)
    if request.is_cancelled():
        event.set()
    if sender is not None:
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
{body}
"""
CALLEE_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: {decoupled} }}
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
parameters {{ key: "execution_mode" value: {{ string_value: "thread" }} }}
{extra}
"""
QUEUE_POLICY = """
dynamic_batching { default_queue_policy { default_timeout_microseconds: 20000000 allow_timeout_override: true } }
"""
MODES = ("thread", "process")


class Probe(types.ModuleType):
    """What the callees tell the test (a module in ``sys.modules``, where their code finds it)."""

    gate: threading.Barrier
    ticker_cancelled: threading.Event
    hold_cancelled: threading.Event
    busy: threading.Event
    release: threading.Event


def _model(repo: Path, name: str, config: str, source: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "1" / "model.py").write_text(source)


@pytest.fixture(scope="module")
def probe() -> Iterator[Probe]:
    module = Probe(PROBE)
    sys.modules[PROBE] = module
    yield module
    del sys.modules[PROBE]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, probe: Probe) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("process_bls") / "repo"
    for mode in MODES:
        _model(repo, f"sync_{mode}", CALLER_CONFIG.format(name=f"sync_{mode}", mode=mode), SYNC_CALLER)
        _model(repo, f"async_{mode}", CALLER_CONFIG.format(name=f"async_{mode}", mode=mode), ASYNC_CALLER)
    for name, body in CALLEES.items():
        decoupled = name in ("repeat", "ticker")
        count = 3 if name == "gate" else 1  # the gate's three requests execute at once
        extra = QUEUE_POLICY if name == "queued" else ""
        config = CALLEE_CONFIG.format(name=name, decoupled=str(decoupled).lower(), count=count, extra=extra)
        source = CALLEE_SOURCE.format(probe=PROBE, wait=WAIT_S, body=body.format(wait=WAIT_S).rstrip())
        _model(repo, name, config, source)
    with Server(repo, model_load_timeout_secs=20) as s:
        yield s


@pytest.fixture(autouse=True)
def fresh_probe(probe: Probe) -> None:
    probe.gate = threading.Barrier(3, timeout=WAIT_S)  # breaks unless the three calls are in flight at once
    probe.ticker_cancelled = threading.Event()
    probe.hold_cancelled = threading.Event()
    probe.busy = threading.Event()
    probe.release = threading.Event()


def _call(server: Server, caller: str, how: str) -> Any:
    (out,) = server.infer(caller, {"X": np.ones(1, np.float32)}, parameters={"how": how})["OUT"]
    return json.loads(out)


def _both(server: Server, caller: str, how: str) -> Any:
    """What the caller got in a thread instance, the same as in a worker process; error messages
    cut before the traceback (its file names differ from run to run)."""
    thread, process = (_call(server, f"{caller}_{mode}", how) for mode in MODES)
    assert process == thread
    return [x.split("\n")[0] if isinstance(x, str) else x for x in thread]


REFUSED = (
    "error: Model repeat - Error when running inference: Model repeat is using the decoupled. The current BLS "
    "request call doesn't support models using the decoupled transaction policy. Please use 'decoupled=True' "
    "argument to the 'exec' or 'async_exec' calls for decoupled models.'"
)
FAILED = (
    "error: Failed to process the request(s) for model 'fails_0_0', message: TritonModelException: the "
    "callee failed on purpose"
)


@pytest.mark.parametrize(
    ("how", "want"),
    [
        ("exec", [[1.0, 2.0]]),
        ("iterate", [[0.0], [1.0], [2.0], None]),  # the final flag alone: an empty response
        ("fails", [FAILED]),
        ("refused", [REFUSED]),
        ("timeout", [[1234.0]]),
        ("big", [True]),
    ],
)
def test_sync_bls(server: Server, how: str, want: list[Any]) -> None:
    assert _both(server, "sync", how) == want


@pytest.mark.parametrize(
    ("how", "want"),
    [
        ("gather", [[0.0], [1.0], [2.0]]),  # three awaited together (the gate's barrier), in order
        ("iterate", [[0.0], [1.0], [2.0], None]),
        ("iterate_sync", [[0.0], [1.0], None]),
        ("fails", [FAILED]),
    ],
)
def test_async_bls(server: Server, how: str, want: list[Any]) -> None:
    assert _both(server, "async", how) == want


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("caller", ["sync", "async"])
def test_an_abandoned_decoupled_request_is_cancelled_at_the_callee(
    server: Server, probe: Probe, mode: str, caller: str
) -> None:
    assert _call(server, f"{caller}_{mode}", "abandon") == [[0.0]]
    assert probe.ticker_cancelled.wait(WAIT_S), "the callee was never told"


@pytest.mark.parametrize("mode", MODES)
def test_a_bls_request_the_model_times_out_is_cancelled_at_the_callee(
    server: Server, probe: Probe, mode: str
) -> None:
    assert _call(server, f"async_{mode}", "wait_for") == ["timed out"]
    assert probe.hold_cancelled.wait(WAIT_S), "the callee was never told"


@pytest.mark.parametrize("mode", MODES)
def test_a_bls_request_timeout_expires_in_the_callees_queue(server: Server, probe: Probe, mode: str) -> None:
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(server.infer, "queued", {"X": np.array([-1], np.float32)})
        try:
            assert probe.busy.wait(WAIT_S)  # its one instance executes until released
            assert _call(server, f"sync_{mode}", "queue_timeout") == ["error: Request timeout expired"]
        finally:
            probe.release.set()
        assert busy.result(WAIT_S)["Y"].tolist() == [-1]


def test_process_callers_run_in_workers_and_leave_no_shared_memory_behind(server: Server) -> None:
    assert _call(server, "sync_thread", "pid") == [os.getpid()]
    (worker,) = _call(server, "sync_process", "pid")
    assert worker != os.getpid()
    assert _call(server, "sync_process", "big") == [True]
    mine = (f"inferd-{os.getpid()}-", f"inferd-{worker}-")
    assert not [n for n in os.listdir(SHM_DIR) if n.startswith(mine)]
