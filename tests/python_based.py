"""The Python-based backends of inferd's tests: a repository and a backend directory written here.

``backend: "linear"`` is ``<backends>/linear/model.py`` (LINEAR): y = w * x + b, each model's weights
read from its own version folder's ``model.json`` (the layout of Triton's vLLM backend), with where it
ran (PID) and what it was given (INFO); ``failing`` raises in ``initialize``; ``empty`` has no
``model.py``; MODELS name these and the ways a name finds nothing. ``write_layout`` writes them
(tests/e2e/test_e2e_python_based_backends.py serves them, tests/fixtures/make_reference_python_based.py
records the reference's answers to the same files).
"""

from __future__ import annotations

import json
from pathlib import Path

#: the backend: y = w * x + b, its weights from the model's own version folder; where it ran (PID) and
#: what it was given (INFO) come back too
LINEAR = """
import json, os
import numpy as np
import triton_python_backend_utils as pb_utils
import linear_helper  # the backend folder's own module


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(cfg):
        if not cfg.as_dict()["input"]:
            cfg.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [-1]})
            cfg.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]})
            cfg.add_output({"name": "PID", "data_type": "TYPE_INT64", "dims": [1]})
            cfg.add_output({"name": "INFO", "data_type": "TYPE_STRING", "dims": [1]})
        return cfg

    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(folder, "model.json")) as f:
            weights = json.load(f)
        self.w, self.b = float(weights["w"]), float(weights["b"])
        self.info = json.dumps({
            "model_name": args["model_name"],
            "model_version": args["model_version"],
            "model_folder": os.path.basename(args["model_repository"]),
            "helper": linear_helper.NAME,
            "file": os.path.relpath(__file__, os.path.dirname(os.path.dirname(__file__))),
        })

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            lead = x.shape[:-1] + (1,)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", (x * self.w + self.b).astype(np.float32)),
                pb_utils.Tensor("PID", np.full(lead, os.getpid(), dtype=np.int64)),
                pb_utils.Tensor("INFO", np.full(lead, self.info.encode(), dtype=np.object_)),
            ]))
        return responses
"""

FAILING = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights are missing")

    def execute(self, requests):
        return []
"""

_IO = """
input [{name: "X" data_type: TYPE_FP32 dims: [-1]}]
output [{name: "Y" data_type: TYPE_FP32 dims: [-1]}]
"""

#: model -> (config.pbtxt, model.json or None)
MODELS: dict[str, tuple[str, dict[str, float] | None]] = {
    # auto-completed by the backend's auto_complete_config; its instance a thread of the server
    "lin_a": (
        'backend: "linear"\nparameters {key: "execution_mode" value {string_value: "thread"}}',
        {"w": 2, "b": 1},
    ),
    # runtime named, batching, its instance in a worker process
    "lin_b": (
        'backend: "linear"\nruntime: "model.py"\nmax_batch_size: 4\n'
        'parameters {key: "execution_mode" value {string_value: "process"}}\n'
        'input [{name: "X" data_type: TYPE_FP32 dims: [2]}]\n'
        'output [{name: "Y" data_type: TYPE_FP32 dims: [2]}, {name: "PID" data_type: TYPE_INT64 dims: [1]},'
        ' {name: "INFO" data_type: TYPE_STRING dims: [1]}]',
        {"w": -1, "b": 0.5},
    ),
    "no_weights": ('backend: "linear"', None),
    "failing": ('backend: "failing"' + _IO, None),
    "nosuch": ('backend: "nosuch"' + _IO, None),
    "nosuch_rt": ('backend: "nosuch"\nruntime: "model.py"' + _IO, None),
    "empty_be": ('backend: "empty"' + _IO, None),
    "slash": ('backend: "linear/x"' + _IO, None),
    "escape": ('backend: "../outside"' + _IO, None),
}


def write_layout(root: Path) -> tuple[Path, Path]:
    """The repository and the backend directory under ``root``: (models, backends)."""
    backends = root / "backends"
    for name, source in (("linear", LINEAR), ("failing", FAILING)):
        (backends / name).mkdir(parents=True)
        (backends / name / "model.py").write_text(source.lstrip())
    (backends / "linear" / "linear_helper.py").write_text('NAME = "linear_helper of the backend folder"\n')
    (backends / "empty").mkdir()
    # what "../outside" would name: it must never be imported (it leaves a mark if it is)
    (root / "outside").mkdir()
    (root / "outside" / "model.py").write_text(
        f"open({str(root / 'outside' / 'imported')!r}, 'w').close()\nclass TritonPythonModel:\n    pass\n"
    )
    repo = root / "models"
    for name, (config, weights) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config + "\n")
        if weights is not None:
            (repo / name / "1" / "model.json").write_text(json.dumps(weights))
    # a model.py of the model's own is not the backend's: it would fail the load if imported
    (repo / "lin_a" / "1" / "model.py").write_text(
        'raise RuntimeError("the model\'s own model.py was imported")\n'
    )
    return repo, backends
