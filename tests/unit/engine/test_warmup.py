"""Model warmup through the in-process server: samples run on each instance before READY, a failed
sample fails the load with the reference's text, and the statistics do not count warmup."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from inferd import Server

# records every execute's batch (inputs as lists) in the model's folder, one JSON line each;
# a request with X < 0 answers an error
MODEL = """
import json, os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.log = os.path.join(args["model_repository"], "executes.jsonl")

    def execute(self, requests):
        batch = []
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            s = pb_utils.get_input_tensor_by_name(r, "S").as_numpy()
            batch.append({"x": x.tolist(), "s": [v.decode() for v in s.reshape(-1)]})
            if (x < 0).any():
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input")))
            else:
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        with open(self.log, "a") as f:
            f.write(json.dumps(batch) + "\\n")
        return out
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 4
input [
  {{ name: "X" data_type: TYPE_INT32 dims: [ 2 ] }},
  {{ name: "S" data_type: TYPE_STRING dims: [ 1 ] }}
]
output [ {{ name: "Y" data_type: TYPE_INT32 dims: [ 2 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
{warmup}
"""

WARMUP = """
model_warmup [
  {
    name: "zeros" batch_size: 2 count: 2
    inputs { key: "X" value: { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } }
    inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 1 ] random_data: true } }
  },
  {
    name: "from_file" batch_size: 1
    inputs { key: "X" value: { data_type: TYPE_INT32 dims: [ 2 ] input_data_file: "x.bin" } }
    inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 1 ] input_data_file: "s.bin" } }
  },
  { name: "skipped" batch_size: 0 }
]
"""


def _model(repo: Path, name: str, warmup: str, x: list[int]) -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL)
    (folder / "config.pbtxt").write_text(CONFIG.format(name=name, warmup=warmup))
    (folder / "warmup").mkdir()
    (folder / "warmup" / "x.bin").write_bytes(np.array(x, np.int32).tobytes())
    (folder / "warmup" / "s.bin").write_bytes(struct.pack("<I", 2) + b"hi")
    return folder


def _executes(folder: Path) -> list[list[dict[str, object]]]:
    path = folder / "executes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_warmup_runs_each_sample_on_each_instance_before_ready(tmp_path: Path) -> None:
    good = _model(tmp_path, "warm", WARMUP, [7, 8])
    with Server(tmp_path) as server:
        assert server.model_ready("warm")
        executes = _executes(good)
        # per instance: "zeros" twice (a batch of 2 requests), "from_file" once
        assert len(executes) == 6
        zeros = [b for b in executes if len(b) == 2]
        assert len(zeros) == 4
        assert all(r == {"x": [[0, 0]], "s": [""]} for b in zeros for r in b)
        assert [b for b in executes if len(b) == 1] == [[{"x": [[7, 8]], "s": ["hi"]}]] * 2
        stats = server.statistics("warm")["model_stats"][0]
        assert stats["execution_count"] == 0 and stats["inference_stats"]["success"]["count"] == 0


def test_a_failed_warmup_fails_the_load_with_the_references_text(tmp_path: Path) -> None:
    _model(tmp_path, "cold", WARMUP, [-1, 5])
    with Server(tmp_path, exit_on_error=False) as server:
        assert not server.model_ready("cold")
        (entry,) = [m for m in server.repository_index() if m["name"] == "cold"]
        assert entry["state"] == "UNAVAILABLE"
        assert (
            entry["reason"] == "Invalid argument: failed to run warmup sample 'from_file': negative input; "
        )


@pytest.mark.parametrize(
    ("inputs", "text"),
    [
        (
            'inputs { key: "X" value: { data_type: TYPE_INT32 dims: [ -1 ] zero_data: true } }',
            "warmup setting expects all variable-size dimensions are specified for input 'X'",
        ),
        (
            'inputs { key: "X" value: { data_type: TYPE_INT32 dims: [ 2 ] input_data_file: "short.bin" } }',
            "warmup setting expects 8 bytes, but the data provided from short.binonly has 4 bytes",
        ),
    ],
)
def test_bad_warmup_settings(tmp_path: Path, inputs: str, text: str) -> None:
    folder = _model(tmp_path, "bad", f'model_warmup [ {{ name: "w" batch_size: 1 {inputs} }} ]', [1, 2])
    (folder / "warmup" / "short.bin").write_bytes(b"\x00" * 4)
    with Server(tmp_path, exit_on_error=False) as server:
        (entry,) = [m for m in server.repository_index() if m["name"] == "bad"]
        assert entry["state"] == "UNAVAILABLE" and text in entry["reason"]
