"""The recursion limit in the server's process (backends/python/recursion.py): a thread model's
``sys.setrecursionlimit`` stays at the cap, said once per model; a process model has its own."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from inferd import Server
from inferd.backends.python import recursion

RAISES = """
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

sys.setrecursionlimit(50000)


def down(n):
    return 0 if n == 0 else down(n - 1) + 1


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            depth = int(pb_utils.get_input_tensor_by_name(r, "DEPTH").as_numpy()[0])
            try:
                got = down(depth)
            except RecursionError:
                got = -1
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([got, sys.getrecursionlimit()], np.int64))]))
        return out
"""
CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "DEPTH" data_type: TYPE_INT64 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT64 dims: [ 2 ] }} ]
parameters {{ key: "execution_mode" value: {{ string_value: "{mode}" }} }}
"""


@pytest.fixture
def uncapped() -> Iterator[None]:
    """No cap when the test starts (another test's server may have installed it), and the process's
    own limit and function back after it."""
    recursion.uninstall()
    before = sys.getrecursionlimit()
    yield
    recursion.uninstall()
    sys.setrecursionlimit(before)


def test_the_cap_holds_and_is_said_once_per_caller(uncapped: None, caplog: pytest.LogCaptureFixture) -> None:
    sys.setrecursionlimit(3000)
    recursion.install()
    assert sys.getrecursionlimit() == recursion.CAP  # what was raised before comes down
    caplog.set_level(logging.WARNING, "inferd.python")
    sys.setrecursionlimit(10**7)
    sys.setrecursionlimit(10**6)
    assert sys.getrecursionlimit() == recursion.CAP
    sys.setrecursionlimit(500)  # lowering is the caller's business
    assert sys.getrecursionlimit() == 500
    assert caplog.text.count("asked for a recursion limit") == 1
    assert f"module '{__name__}' asked for a recursion limit of 10000000" in caplog.text
    with pytest.raises(ValueError):
        sys.setrecursionlimit(-1)  # Python's own error


def _infer(server: Server, model: str, depth: int) -> list[int]:
    out = server.infer(model, {"DEPTH": np.array([depth], np.int64)})
    return [int(v) for v in out["OUT"]]


def test_a_thread_model_gets_the_cap_a_process_model_its_own(
    uncapped: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name, mode in (("threaded", "thread"), ("own", "process")):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "config.pbtxt").write_text(CONFIG.format(name=name, mode=mode))
        (tmp_path / name / "1" / "model.py").write_text(RAISES)
    caplog.set_level(logging.WARNING, "inferd.python")
    with Server(tmp_path) as server:
        assert _infer(server, "threaded", 5000) == [-1, recursion.CAP]  # RecursionError, not a crash
        assert _infer(server, "own", 5000) == [5000, 50000]
    assert "model 'threaded' asked for a recursion limit of 50000" in caplog.text
