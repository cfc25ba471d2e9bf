"""``execution_mode: auto`` at load: a model whose own code can end the process (ctypes, cffi, an
extension module of its own, os._exit, os.abort) starts in worker processes; the others in threads."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from inferd import Server
from inferd.backends.python.containment import crash_risks

PLAIN = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()], np.int64))])
                for r in requests]
"""
CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }} ]
{extra}
"""


RECURSION = "it raises the recursion limit, which holds in a worker process only (recursion.py)"


def _risks(tmp_path: Path, source: str, **others: str) -> list[str]:
    (tmp_path / "model.py").write_text(source)
    for name, text in others.items():
        (tmp_path / name).write_text(text)
    return crash_risks(tmp_path / "model.py")


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("import ctypes\n", "it imports ctypes"),
        ("from ctypes import CDLL\n", "it imports ctypes"),
        ("def f():\n    import ctypes.util\n", "it imports ctypes"),
        ("import importlib\nimportlib.import_module('cffi')\n", "it imports cffi"),
        ("import os\ndef execute(r):\n    os._exit(3)\n", "it calls os._exit"),
        ("import os\nos.abort()\n", "it calls os.abort"),
        ("from os import _exit\n", "it calls os._exit or os.abort"),
        ("import sys\nsys.setrecursionlimit(10**7)\n", RECURSION),
        ("import sys\nsys.setrecursionlimit(5000)\n", RECURSION),
        ("from sys import setrecursionlimit as s\ndef f(n):\n    setrecursionlimit(n)\n", RECURSION),
    ],
)
def test_code_that_can_end_the_process(tmp_path: Path, source: str, reason: str) -> None:
    assert _risks(tmp_path, source) == [reason]


def test_plain_models_and_forked_children_are_not_risks(tmp_path: Path) -> None:
    assert _risks(tmp_path, "import os\nimport numpy as np\nimport json\nx = os.getpid()\n") == []
    assert _risks(tmp_path, "import sys\nsys.setrecursionlimit(800)\n") == []  # within the server's cap
    # os._exit after os.fork ends the forked child: how multiprocessing ends its workers too
    forking = "import os\ndef execute(r):\n    if os.fork() == 0:\n        os._exit(0)\n"
    assert _risks(tmp_path, forking) == []
    assert _risks(tmp_path, "this is not python (\n") == []  # the load reports it


def test_what_the_models_folder_holds(tmp_path: Path) -> None:
    assert _risks(tmp_path, "import helper\n", **{"helper.py": "import ctypes\n"}) == ["it imports ctypes"]
    (tmp_path / "helper.py").unlink()
    assert _risks(tmp_path, "import fast\n", **{"fast.cpython-311-x86_64-linux-gnu.so": ""}) == [
        "its folder holds the extension module fast.cpython-311-x86_64-linux-gnu.so"
    ]


def test_auto_runs_a_native_model_in_a_worker_and_a_plain_one_in_a_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = tmp_path / "repo"
    models = {
        "plain": ("", PLAIN),
        "native": ("", "import ctypes\nimport os\n" + PLAIN),
        "pinned": ('parameters [ { key: "execution_mode" value: { string_value: "thread" } } ]', "import ctypes\n" + PLAIN),
    }  # fmt: skip
    for name, (extra, source) in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
        (repo / name / "1" / "model.py").write_text("import os\n" + source)
    x = {"X": np.zeros(1, np.float32)}
    with caplog.at_level(logging.INFO, "inferd.python"), Server(repo) as server:
        pids = {name: int(server.infer(name, x)["PID"][0]) for name in models}
    assert pids["plain"] == os.getpid() and pids["pinned"] == os.getpid()  # threads of this process
    assert pids["native"] != os.getpid()  # a worker process
    assert "model 'native' (execution_mode auto) runs in worker processes: it imports ctypes" in caplog.text
