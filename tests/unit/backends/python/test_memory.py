"""``memory_limit_bytes``: a worker process past its limit is killed with a clear error and restarts on
its next request; the limit's value is checked at load."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd import Server
from inferd.backends.base import LoadContext
from inferd.backends.process.memory import memory_limit
from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.repository import ModelConfig

MiB = 1 << 20
LIMIT = 300 * MiB
# MB > 0: keeps MB more MiB for good (a leak); MB < 0: grows by 100 MiB every 50 ms within the execute
LEAKY = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

KEPT = []


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            mb = int(pb_utils.get_input_tensor_by_name(r, "MB").as_numpy()[0])
            if mb > 0:
                KEPT.append(np.ones(mb << 20, np.uint8))
            while mb < 0:
                KEPT.append(np.ones(100 << 20, np.uint8))
                time.sleep(0.05)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()], np.int64))]))
        return out
"""
CONFIG = f"""
name: "leaky"
backend: "python"
max_batch_size: 0
input [ {{ name: "MB" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }} ]
parameters [ {{ key: "memory_limit_bytes" value: {{ string_value: "{LIMIT}" }} }} ]
"""


def _ctx(param: str | None, backend: dict[str, str] | None = None) -> LoadContext:
    config = ModelConfig(name="m", backend="python")
    if param is not None:
        config.parameters["memory_limit_bytes"].string_value = param
    return LoadContext("m", 1, Path("."), Path("."), config, None, backend_config=backend or {})


def test_the_limit_is_a_number_of_bytes() -> None:
    assert memory_limit(_ctx(None)) == 0
    assert memory_limit(_ctx("1000")) == 1000
    assert memory_limit(_ctx(None, {"memory-limit-bytes": "2048"})) == 2048  # the server-wide default
    assert memory_limit(_ctx("0", {"memory-limit-bytes": "2048"})) == 0  # the model's own wins
    with pytest.raises(
        InvalidArgumentError, match="memory_limit_bytes of model 'm' must be a number of bytes"
    ):
        memory_limit(_ctx("1GiB"))


def test_a_worker_past_its_limit_is_restarted_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "repo" / "leaky" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "leaky" / "config.pbtxt").write_text(CONFIG)
    (tmp_path / "repo" / "leaky" / "1" / "model.py").write_text(LEAKY)

    def infer(server: Server, mb: int) -> Any:
        return int(server.infer("leaky", {"MB": np.array([mb], np.int32)})["PID"][0])

    with Server(tmp_path / "repo") as server:  # auto: a limited model runs in worker processes
        events = server.runtime.core.worker_processes.events  # this server's
        first = infer(server, 100)
        assert infer(server, 100) == first  # about 240 MiB: under the limit
        try:  # past 300 MiB: killed, after its answer (the check after each execute) or before it
            assert infer(server, 100) == first
        except UnavailableError as e:
            assert "more than its memory_limit_bytes of 300.0 MiB" in e.message
        deadline = time.monotonic() + 30
        while events[("leaky", "1", "exited")] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert events[("leaky", "1", "exited")] == 1
        second = infer(server, 0)  # a new worker
        assert second != first
        with pytest.raises(UnavailableError) as killed:  # killed while it grows within one execute
            infer(server, -1)
        assert killed.value.message.startswith(
            "the process of model 'leaky' instance 'leaky_0' was killed: it used "
        ) and killed.value.message.endswith(
            "MiB of memory, more than its memory_limit_bytes of 300.0 MiB; it restarts on its next request"
        )
        assert infer(server, 0) not in (first, second)  # and back again
