"""backends/python/based.py: Python-based backends in an embedded server (tests/python_based.py's
``linear`` backend): one ``model.py`` for two models, each with its own weights and its own copy of the
backend's modules; a model unloaded and loaded again while the other serves; the completed config with
``--strict-model-config`` too; a backend given in a model upload (its files read in worker processes).
The e2e file (tests/e2e/test_e2e_python_based_backends.py) holds the answers to the reference's."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import python_based
from inferd import Server
from inferd.errors import InferdError

X = np.array([1.0, 2.0], dtype=np.float32)


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    return python_based.write_layout(tmp_path)  # (the servers here load only what each test names)


@pytest.fixture
def server(layout: tuple[Path, Path]) -> Iterator[Server]:
    models, backends = layout
    with Server(models, backend_directory=str(backends), model_control_mode="explicit") as s:
        yield s


def _y(server: Server, name: str, x: np.ndarray[Any, Any]) -> Any:
    return server.infer(name, {"X": x})["Y"]


def test_one_backend_file_serves_two_models_each_with_its_weights(server: Server) -> None:
    server.load_model("lin_a")
    server.load_model("lin_b")
    np.testing.assert_array_equal(_y(server, "lin_a", X), X * 2 + 1)
    np.testing.assert_array_equal(_y(server, "lin_b", X[None]), X[None] * -1 + 0.5)
    assert server.model_config("lin_b")["runtime"] == "model.py"
    # lin_a's instance is a thread of this process; lin_b's a worker process (execution_mode)
    assert int(server.infer("lin_a", {"X": X})["PID"][0]) == os.getpid()
    assert int(server.infer("lin_b", {"X": X[None]})["PID"][0, 0]) != os.getpid()


def test_a_model_unloads_and_loads_again_while_the_other_serves(
    server: Server, layout: tuple[Path, Path]
) -> None:
    models, _ = layout
    server.load_model("lin_a")
    server.load_model("lin_b")
    server.unload_model("lin_a")
    np.testing.assert_array_equal(_y(server, "lin_b", X[None]), X[None] * -1 + 0.5)
    (models / "lin_a" / "1" / "model.json").write_text(json.dumps({"w": 10, "b": 0}))
    server.load_model("lin_a")  # the backend's initialize reads the model's files afresh
    np.testing.assert_array_equal(_y(server, "lin_a", X), X * 10)


def test_the_backend_s_modules_are_each_model_s_own(server: Server, layout: tuple[Path, Path]) -> None:
    models, backends = layout
    # a backend whose helper counts the models that imported it: each model its own copy, so 1 each
    (backends / "counting").mkdir()
    (backends / "counting" / "counter.py").write_text("LOADS = []\n")
    (backends / "counting" / "model.py").write_text(
        "import numpy as np\nimport counter\nimport triton_python_backend_utils as pb_utils\n\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n        counter.LOADS.append(args['model_name'])\n"
        "    def execute(self, requests):\n"
        "        n = np.array([len(counter.LOADS)], dtype=np.int64)\n"
        "        return [pb_utils.InferenceResponse([pb_utils.Tensor('N', n)]) for _ in requests]\n"
    )
    for name in ("c1", "c2"):
        (models / name / "1").mkdir(parents=True)
        (models / name / "config.pbtxt").write_text(
            'backend: "counting"\nparameters {key: "execution_mode" value {string_value: "thread"}}\n'
            'input [{name: "X" data_type: TYPE_FP32 dims: [-1]}]\n'
            'output [{name: "N" data_type: TYPE_INT64 dims: [1]}]\n'
        )
        server.load_model(name)
    assert [int(server.infer(n, {"X": X})["N"][0]) for n in ("c1", "c2")] == [1, 1]


def test_strict_config_resolves_the_same(layout: tuple[Path, Path]) -> None:
    models, backends = layout
    with Server(
        models, backend_directory=str(backends), strict_model_config=True, model_control_mode="explicit"
    ) as s:
        s.load_model("lin_b")
        assert s.model_config("lin_b")["runtime"] == "model.py"
        np.testing.assert_array_equal(_y(s, "lin_b", X[None]), X[None] * -1 + 0.5)


def test_an_uploaded_model_of_a_python_based_backend(server: Server, layout: tuple[Path, Path]) -> None:
    # a client's files (the model's weights): the backend's auto-complete and instance in workers
    server.load_model(
        "uploaded",
        config=json.dumps({"backend": "linear"}),
        files={"1/model.json": json.dumps({"w": 3, "b": -1}).encode()},
    )
    np.testing.assert_array_equal(_y(server, "uploaded", X), X * 3 - 1)
    assert int(server.infer("uploaded", {"X": X})["PID"][0]) != os.getpid()
    assert server.model_config("uploaded")["runtime"] == "model.py"


def test_no_backend_file_fails_the_load_with_the_reference_s_text(server: Server) -> None:
    with pytest.raises(InferdError) as e:
        server.load_model("nosuch")
    assert "unable to find backend library for backend 'nosuch', try specifying runtime" in e.value.message
    server.load_model("lin_a")  # and the next load serves
    np.testing.assert_array_equal(_y(server, "lin_a", X), X * 2 + 1)


def test_a_model_with_no_tensors_loads_as_a_python_model_does(
    server: Server, layout: tuple[Path, Path]
) -> None:
    # the reference loads it READY (config.pbtxt: backend only; the backend completes nothing)
    models, backends = layout
    (backends / "bare").mkdir()
    (backends / "bare" / "model.py").write_text(
        "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    )
    (models / "noio" / "1").mkdir(parents=True)
    (models / "noio" / "config.pbtxt").write_text('backend: "bare"\n')
    server.load_model("noio")
    config = server.model_config("noio")
    assert (config["runtime"], config["input"], config["output"]) == ("model.py", [], [])


def test_the_python_backend_s_settings_hold_for_a_python_based_backend(layout: tuple[Path, Path]) -> None:
    models, backends = layout
    (models / "lin_c" / "1").mkdir(parents=True)
    (models / "lin_c" / "config.pbtxt").write_text('backend: "linear"\n')  # no execution_mode of its own
    (models / "lin_c" / "1" / "model.json").write_text(json.dumps({"w": 1, "b": 0}))
    options: dict[str, Any] = {"backend_directory": str(backends), "model_control_mode": "explicit"}
    with Server(models, backend_config=["python,execution-mode=process"], **options) as s:
        s.load_model("lin_c")
        assert int(s.infer("lin_c", {"X": X})["PID"][0]) != os.getpid()
    with Server(models, backend_config=["python,execution-mode=thread"], **options) as s:
        s.load_model("lin_c")
        assert int(s.infer("lin_c", {"X": X})["PID"][0]) == os.getpid()
