"""Models a client uploads (backends/process/uploaded.py): their auto-complete, load and executes in
worker processes whatever their config asks, held to the operator's memory limit and load deadline;
a native backend's instance in a worker as a Python model's."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd import Server
from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.process.model import ProcessModel
from inferd.backends.process.uploaded import (
    DEFAULT_LOAD_TIMEOUT_S,
    DEFAULT_MEMORY_LIMIT,
    LoadAbort,
    UploadLimits,
    complete_in_worker,
    contained_model,
    upload_limits,
)
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor
from inferd.errors import InferdError, InvalidArgumentError, UnavailableError
from inferd.repository import ModelConfig

MiB = 1 << 20
CONFIG = {
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
}
# its auto_complete_config adds an output, and every import of it writes the process id to WHERE
COMPLETES = """
import os
import pathlib

import triton_python_backend_utils as pb_utils

pathlib.Path({where!r}).write_text(str(os.getpid()))


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_output({{"name": "PID", "data_type": "TYPE_FP32", "dims": [1]}})
        return config

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()),
                pb_utils.Tensor("PID", __import__("numpy").array([os.getpid()], "float32")),
            ])
            for r in requests
        ]
"""


def test_the_operators_limits() -> None:
    assert upload_limits({}, 600.0) == UploadLimits(DEFAULT_MEMORY_LIMIT, 600.0)
    assert upload_limits({}, 0.0).load_timeout_s == DEFAULT_LOAD_TIMEOUT_S  # never without a deadline
    assert upload_limits({"uploaded-memory-limit-bytes": "1000"}, 5.0) == UploadLimits(1000, 5.0)
    assert upload_limits({"uploaded-memory-limit-bytes": "0"}, 5.0).memory_limit == 0  # the operator's choice
    with pytest.raises(InvalidArgumentError, match="uploaded-memory-limit-bytes must be a number of bytes"):
        upload_limits({"uploaded-memory-limit-bytes": "lots"}, 5.0)


def _ctx(tmp_path: Path, params: dict[str, str]) -> LoadContext:
    cfg = ModelConfig(name="up", backend="python")
    for key, value in params.items():
        cfg.parameters[key].string_value = value
    return LoadContext("up", 1, tmp_path, tmp_path / "1", cfg, uploaded=True)


@pytest.mark.parametrize(
    ("params", "limit", "name"),
    [
        ({}, 300 * MiB, "uploaded-memory-limit-bytes"),
        ({"memory_limit_bytes": str(100 * MiB)}, 100 * MiB, "memory_limit_bytes"),  # less: taken
        ({"memory_limit_bytes": str(900 * MiB)}, 300 * MiB, "uploaded-memory-limit-bytes"),  # more: not
        ({"memory_limit_bytes": "0"}, 300 * MiB, "uploaded-memory-limit-bytes"),  # none: not
    ],
)
def test_the_uploader_may_lower_the_memory_limit_never_raise_it(
    tmp_path: Path, params: dict[str, str], limit: int, name: str
) -> None:
    model = contained_model(_ctx(tmp_path, params), UploadLimits(300 * MiB, 7.0), time.monotonic() + 7)
    assert (model.memory_limit, model.limit_name, model.ctx.load_timeout_s) == (limit, name, 7.0)


def test_execution_mode_thread_is_not_honoured(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "inferd.process")
    model = contained_model(_ctx(tmp_path, {"execution_mode": "thread"}), UploadLimits(), time.monotonic())
    assert isinstance(model, ProcessModel)
    assert "execution_mode 'thread' is not honoured (the uploader wrote that config)" in caplog.text


def _folder(tmp_path: Path, source: str) -> tuple[Path, Path]:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.py").write_text(source)
    return tmp_path / "m", tmp_path / "m" / "1"


def test_the_auto_complete_runs_in_a_worker_of_its_own(tmp_path: Path) -> None:
    where = tmp_path / "pid"
    folder, version = _folder(tmp_path, COMPLETES.format(where=str(where)))
    cfg = ModelConfig(name="m", backend="python")
    cfg.input.add(name="INPUT0", data_type=11, dims=[-1])  # TYPE_FP32
    complete_in_worker(cfg, folder, version, 4, UploadLimits())
    assert [o.name for o in cfg.output] == ["PID"]
    assert int(where.read_text()) != os.getpid()  # model.py was imported elsewhere


@pytest.mark.parametrize(
    ("source", "limits", "says"),
    [
        (
            "import faulthandler\nfaulthandler._sigsegv()\n",
            UploadLimits(),
            "the worker process of the auto-complete of model 'm' (backend 'python') ended (signal 11 (SIGSEGV))",
        ),
        (
            "import time\ntime.sleep(60)\n",
            UploadLimits(0, 1.0),
            "the auto-complete of model 'm' (backend 'python') did not finish within 1 s",
        ),
        (
            "import numpy as np\nKEPT = np.ones(2 << 30, np.uint8)\n",
            UploadLimits(300 * MiB, 60.0),
            "was killed: it used",
        ),
        ("raise RuntimeError('no')\n", UploadLimits(), "RuntimeError: no"),
    ],
)
def test_an_auto_complete_that_crashes_hangs_or_balloons_is_an_error(
    tmp_path: Path, source: str, limits: UploadLimits, says: str
) -> None:
    folder, version = _folder(tmp_path, source)
    t0 = time.monotonic()
    with pytest.raises(InferdError) as info:
        complete_in_worker(ModelConfig(name="m", backend="python"), folder, version, 4, limits)
    assert says in info.value.message
    assert time.monotonic() - t0 < 30


def _upload(server: Server, name: str, source: str, **extra: Any) -> None:
    server.load_model(name, json.dumps({"name": name, **CONFIG, **extra}), {"1/model.py": source.encode()})


def test_an_uploaded_model_is_completed_loaded_and_run_in_workers(tmp_path: Path) -> None:
    where = tmp_path / "pid"
    (tmp_path / "repo").mkdir()
    with Server(tmp_path / "repo", model_control_mode="explicit") as server:
        _upload(
            server,
            "up",
            COMPLETES.format(where=str(where)),
            parameters={"execution_mode": {"string_value": "thread"}},
        )
        out = server.infer("up", {"INPUT0": np.array([1.0, 2.0], np.float32)})
        assert out["OUTPUT0"].tolist() == [1.0, 2.0]
        assert int(out["PID"][0]) not in (os.getpid(), 0)
        assert (
            int(where.read_text()) != os.getpid()
        )  # neither the auto-complete nor the load imported it here
        # neither the model's module nor its auto-complete's (other tests' models may be there)
        here = [
            m
            for m in __import__("sys").modules
            if m.startswith(("_inferd_model_up_", "_inferd_autocomplete_up"))
        ]
        assert here == []


HANGS = """
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(3600)

    def execute(self, requests):
        return []
"""


def test_an_uploaded_load_past_its_deadline_is_stopped(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    with Server(tmp_path / "repo", model_control_mode="explicit", model_load_timeout_secs=2.0) as server:
        t0 = time.monotonic()
        with pytest.raises(InferdError) as info:
            _upload(server, "hangs", HANGS)
        took = time.monotonic() - t0
        # the load's deadline, or the instance's own initialize bound (the same 2 s): whichever fires first
        assert "did not finish within 2 s" in info.value.message
        assert took < 2 + 10, took


def test_a_load_abort_kills_the_workers_it_tracks(tmp_path: Path) -> None:
    folder, version = _folder(
        tmp_path,
        "import triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:\n"
        "    def execute(self, requests):\n        return [pb_utils.InferenceResponse([]) for r in requests]\n",
    )
    cfg = ModelConfig(name="m", backend="python")
    model = ProcessModel(LoadContext("m", 1, folder, version, cfg, uploaded=True), 0)
    abort = LoadAbort()
    abort.track(model)
    instance = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    try:
        abort.fire("loading did not finish within 1 s")
        with pytest.raises(UnavailableError, match="was killed: loading did not finish within 1 s"):
            instance.execute([InferRequest(model_name="m", inputs={})])
    finally:
        instance.unload()


def test_a_native_backends_instance_runs_in_a_worker(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, [2])
    s = helper.make_tensor_value_info("S", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Add", ["A", "A"], ["S"])], "double", [a], [s])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    (tmp_path / "1").mkdir()
    onnx.save(proto, str(tmp_path / "1" / "model.onnx"))
    cfg = ModelConfig(name="double", backend="onnxruntime", platform="onnxruntime_onnx")
    cfg.input.add(name="A", data_type=11, dims=[2])
    cfg.output.add(name="S", data_type=11, dims=[2])
    model = ProcessModel(LoadContext("double", 1, tmp_path, tmp_path / "1", cfg), 0)
    instance = model.create_instance(InstanceSpec("double_0", "CPU", 0))
    try:
        request = InferRequest(
            model_name="double", inputs={"A": Tensor.from_array("A", np.array([1.0, 2.5], np.float32))}
        )
        (response,) = instance.execute([request]) or []
        assert response.error is None
        assert np.asarray(response.outputs[0].array).tolist() == [2.0, 5.0]
        assert instance.pid != os.getpid()
    finally:
        instance.unload()
