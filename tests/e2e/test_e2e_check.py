"""``python -m inferd check`` on a repository with ten different mistakes: each is reported with its
file and line, the exit status is 1; the reference models check clean (exit 0)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REFERENCE_MODELS, ROOT

onnx = pytest.importorskip("onnx")
helper = onnx.helper

#: a Python model whose code must never run: ``inferd check`` imports no model code unless asked
NEVER_IMPORTED = "raise SystemExit('inferd check imported model.py')\n"
IO = (
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)
LINE = re.compile(
    r"^(?P<file>[^:]+?)(?::(?P<line>\d+):(?P<column>\d+))?: (?P<severity>error|warning|note): (?P<message>.*)$"
)


def _model(
    root: Path, name: str, config: str | None, versions: tuple[str, ...] = ("1",), python: bool = True
) -> Path:
    d = root / name
    d.mkdir(parents=True)
    if config is not None:
        (d / "config.pbtxt").write_text(config)
    for v in versions:
        (d / v).mkdir()
        if python:
            (d / v / "model.py").write_text(NEVER_IMPORTED)
    return d


def _ensemble(step_model: str, produced: str) -> str:
    return f"""platform: "ensemble"
max_batch_size: 8
input [ {{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "B" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{
  step [
    {{
      model_name: "{step_model}"
      model_version: -1
      input_map {{ key: "IN" value: "A" }}
      output_map {{ key: "OUT" value: "{produced}" }}
    }}
  ]
}}
"""


def build_broken_repository(root: Path) -> Path:
    """Ten models, one mistake each (and one model with several), beside a good one."""
    py = 'backend: "python"\nmax_batch_size: 8\n'
    _model(root, "good", py + IO)
    _model(root, "syntax_error", py + 'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }\n')
    _model(root, "unknown_field", 'backend: "python"\nmax_batch_sise: 8\n' + IO)
    _model(
        root,
        "bad_data_type",
        py + 'input [ { name: "IN" data_type: TYPE_FLOAT32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
    )
    _model(root, "negative_batch", 'backend: "python"\nmax_batch_size: -2\n' + IO)
    _model(
        root,
        "missing_dims",
        py
        + 'input [ { name: "IN" data_type: TYPE_FP32 } ]\noutput [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
    )
    _model(
        root,
        "duplicate_inputs",
        py + "input [\n"
        '  { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] },\n'
        '  { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }\n'
        "]\n"
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
    )
    _model(root, "ensemble_missing_step", _ensemble("no_such_model", "B"), python=False)
    _model(root, "ensemble_unwritten", _ensemble("good", "C"), python=False)
    _model(root, "leading_zero", py + IO, versions=("01",))
    _model(root, "zero_instances", py + IO + "instance_group [ { kind: KIND_CPU count: 0 } ]\n")
    _model(root, "preferred_too_big", py + IO + "dynamic_batching { preferred_batch_size: [ 2, 16 ] }\n")
    onnx_dir = _model(
        root,
        "onnx_mismatch",
        'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
        'output [ { name: "Z" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
        python=False,
    )
    x = helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph), str(onnx_dir / "1" / "model.onnx"))
    # several mistakes in one model: all of them are reported, not only the first
    _model(
        root,
        "several",
        'backend: "python"\n'
        "max_batch_size: 4\n"
        'colour: "blue"\n'
        "input [\n"
        '  { name: "A" data_type: TYPE_FP32 dims: [ 0 ] },\n'
        '  { name: "B" data_type: TYPE_FP32 dims: [ 2 ] reshape { shape: [ 3 ] } }\n'
        "]\n"
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "instance_group [ { kind: KIND_GPU } ]\n",
    )
    return root


def run_check(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferd", "check", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def _problems(stdout: str) -> list[dict[str, str]]:
    out = []
    for line in stdout.splitlines():
        m = LINE.match(line)
        assert m is not None, f"not file:line:column: severity: message: {line!r}"
        out.append(m.groupdict())
    return out


#: (model, file under it, line or None for a folder, severity, a piece of the message)
EXPECTED = [
    ("syntax_error", "config.pbtxt", 4, "error", 'Expected ","'),
    ("unknown_field", "config.pbtxt", 2, "error", 'has no field named "max_batch_sise"'),
    ("bad_data_type", "config.pbtxt", 3, "error", "has no value named TYPE_FLOAT32"),
    ("negative_batch", "config.pbtxt", 2, "error", "'max_batch_size' must be non-negative"),
    ("missing_dims", "config.pbtxt", 3, "error", "model input 'IN' must specify 'dims'"),
    ("duplicate_inputs", "config.pbtxt", 5, "error", "model input 'IN' is specified more than once"),
    (
        "ensemble_missing_step",
        "config.pbtxt",
        8,
        "error",
        "model 'no_such_model' is not in the model repositories",
    ),
    (
        "ensemble_unwritten",
        "config.pbtxt",
        4,
        "error",
        "ensemble output 'B' for ensemble ensemble_unwritten' is not used",
    ),
    ("leading_zero", "01", None, "warning", "version folder '01' is ignored"),
    ("leading_zero", "", None, "error", "has no version folder"),
    ("zero_instances", "config.pbtxt", 5, "warning", "has count 0"),
    ("preferred_too_big", "config.pbtxt", 5, "error", "preferred size must be <= max batch size"),
    (
        "onnx_mismatch",
        "config.pbtxt",
        3,
        "error",
        "expects datatype TYPE_INT32 for input 'X', model provides TYPE_FP32",
    ),
    (
        "onnx_mismatch",
        "config.pbtxt",
        4,
        "error",
        "configuration output 'Z' is not an output of the ONNX graph",
    ),
    ("several", "config.pbtxt", 3, "error", 'has no field named "colour"'),
    ("several", "config.pbtxt", 5, "error", "model input 'A' dimension must be integer >= 1"),
    ("several", "config.pbtxt", 6, "error", "model input 'B' has different size for dims and reshape"),
    ("several", "config.pbtxt", 9, "error", "has kind KIND_GPU but no GPUs are available"),
]


def test_check_reports_every_mistake_with_its_file_and_line(tmp_path: Path) -> None:
    repo = build_broken_repository(tmp_path / "models")
    result = run_check(repo)
    assert result.returncode == 1, result.stdout + result.stderr
    problems = _problems(result.stdout)
    for model, name, line, severity, piece in EXPECTED:
        path = str(repo / model / name) if name else str(repo / model)
        found = [
            p for p in problems if p["file"] == path and piece in p["message"] and p["severity"] == severity
        ]
        assert found, f"{model}: no {severity} {piece!r} in\n{result.stdout}"
        assert (int(found[0]["line"]) if found[0]["line"] else None) == line, found
    # nothing reported twice, nothing more than the mistakes (the good model is clean)
    assert len(problems) == len(EXPECTED), result.stdout
    assert not any("/good" in p["file"] for p in problems)
    assert "14 model(s), 16 error(s), 2 warning(s)" in result.stderr


def test_check_of_the_reference_models_is_clean() -> None:
    result = run_check(REFERENCE_MODELS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert "6 model(s), 0 error(s), 0 warning(s)" in result.stderr


def test_duplicates_across_repositories_and_a_missing_repository(tmp_path: Path) -> None:
    for repo in ("a", "b"):
        _model(tmp_path / repo, "same", 'backend: "python"\n' + IO)
    result = run_check(tmp_path / "a", tmp_path / "b", tmp_path / "missing")
    assert result.returncode == 1
    problems = _problems(result.stdout)
    assert {p["file"] for p in problems} == {
        str(tmp_path / "a" / "same"),
        str(tmp_path / "b" / "same"),
        str(tmp_path / "missing"),
    }
    assert all(p["line"] is None for p in problems)


def test_import_python_runs_auto_complete_config(tmp_path: Path) -> None:
    d = _model(tmp_path, "completes", 'backend: "python"\n', python=False)
    (d / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    @staticmethod\n"
        "    def auto_complete_config(config):\n"
        "        config.add_input({'name': 'IN', 'data_type': 'TYPE_FP32', 'dims': [0]})\n"
        "        return config\n"
    )
    assert run_check(tmp_path).returncode == 0  # not imported: nothing to check in the config
    result = run_check("--import-python", tmp_path)
    assert result.returncode == 1
    assert "model input 'IN' dimension must be integer >= 1" in result.stdout


def test_model_namespacing_checks_each_repository_s_model_and_resolves_steps_by_repository(
    tmp_path: Path,
) -> None:
    import namespacing

    addsub, subadd = namespacing.write_case(tmp_path / "dup", "duplication")
    plain = run_check(addsub, subadd)  # without the flag a name in two repositories loads nowhere
    assert plain.returncode == 1 and "appears in two or more repositories" in plain.stdout
    spaced = run_check(addsub, subadd, "--model-namespacing=true")
    assert spaced.returncode == 0, spaced.stdout
    assert "4 model(s), 0 error(s)" in spaced.stderr
    # an ensemble whose step its own repository lacks and two others hold: ambiguous, as the server says
    third = tmp_path / "dup" / "third"
    shutil.rmtree(addsub / "composing_model")
    shutil.copytree(subadd / "composing_model", third / "composing_model")
    result = run_check(addsub, subadd, third, "--model-namespacing")
    problems = [p for p in _problems(result.stdout) if "ambiguous" in p["message"]]
    assert result.returncode == 1 and {Path(p["file"]).parent.name for p in problems} == {"simple_addsub"}


def test_backend_directory_finds_python_based_backends(tmp_path: Path) -> None:
    import python_based

    models, backends = python_based.write_layout(tmp_path)
    without = run_check(models)
    assert without.returncode == 1 and "unable to find backend library for backend 'linear'" in without.stdout
    found = run_check(models, "--backend-directory", backends)
    assert "unable to find backend library for backend 'linear'" not in found.stdout, found.stdout
