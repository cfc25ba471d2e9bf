"""check/config.py and runner.py in-process: every problem of a config, placed, and nothing imported."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from inferd.check import CheckOptions, Problem, check_repositories
from inferd.errors import InvalidArgumentError
from inferd.repository import ModelConfig, normalize_config, validate_config
from inferd.repository.config.validate import config_checks

NEVER_IMPORTED = "raise SystemExit('imported')\n"


def _model(root: Path, name: str, config: str | None, versions: tuple[str, ...] = ("1",)) -> Path:
    d = root / name
    d.mkdir(parents=True)
    if config is not None:
        (d / "config.pbtxt").write_text(config)
    for v in versions:
        (d / v).mkdir()
        (d / v / "model.py").write_text(NEVER_IMPORTED)
    return d


def _check(root: Path, **options: object) -> list[Problem]:
    problems, _ = check_repositories([root], CheckOptions(**options))  # type: ignore[arg-type]
    return problems


def _where(problems: list[Problem]) -> list[tuple[str, int | None, str]]:
    return [(p.path.name, p.line, p.severity) for p in problems]


def test_config_checks_run_one_by_one_and_validate_config_raises_the_first() -> None:
    cfg = ModelConfig()
    text_format.Parse(
        'name: "m" backend: "python" max_batch_size: -1 '
        'input [ { name: "A" data_type: TYPE_FP32 }, { name: "B" data_type: TYPE_FP32 dims: [ 0 ] } ] '
        'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] }, { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]',
        cfg,
    )
    normalize_config(cfg, "m")
    failed = []
    for path, check in config_checks(cfg):
        try:
            check()
        except InvalidArgumentError as e:
            failed.append((path, e.message))
    assert [path for path, _ in failed] == [("max_batch_size",), ("input", 0), ("input", 1), ("output", 1)]
    assert failed[1][1] == "model input 'A' must specify 'dims' for m"
    assert failed[3][1] == "model output 'O' is specified more than once for m"
    with pytest.raises(InvalidArgumentError, match="'max_batch_size' must be non-negative value for m"):
        validate_config(cfg)


def test_parse_errors_are_all_reported_and_the_rest_is_still_checked(tmp_path: Path) -> None:
    _model(
        tmp_path,
        "m",
        'backend: "python"\n'
        "max_batch_sise: 4\n"
        'input [ { name: "A" data_type: TYPE_FLOAT32 dims: [ 4 ] } ]\n'
        'output [ { name: "O" data_type: TYPE_FP32 dims: [ 4 ] colour: 1 } ]\n'
        "max_batch_size: -1\n",
    )
    problems = _check(tmp_path)
    assert [(p.line, p.column) for p in problems] == [(2, 1), (3, 32), (4, 55), (5, 1)]
    assert 'no field named "max_batch_sise"' in problems[0].message
    assert "has no value named TYPE_FLOAT32" in problems[1].message
    assert not problems[1].message.startswith("'")  # text_format's echo of the line is left out
    assert 'no field named "colour"' in problems[2].message
    # validation still ran; input A's data_type was blanked out, and its "must specify 'data_type'"
    # (a consequence) is not reported
    assert "'max_batch_size' must be non-negative" in problems[3].message
    assert not any("must specify 'data_type'" in p.message for p in problems)


def test_a_name_that_is_not_the_folders_is_reported_and_the_rest_checked(tmp_path: Path) -> None:
    _model(
        tmp_path,
        "m",
        'name: "other"\nbackend: "python"\ninput [ { name: "A" data_type: TYPE_FP32 } ]\n',
    )
    problems = _check(tmp_path)
    assert [(p.line, p.column) for p in problems] == [(1, 1), (3, 11)]
    assert "unexpected directory name 'm' for model 'other'" in problems[0].message
    assert "must specify 'dims'" in problems[1].message


def test_versions_and_instance_counts(tmp_path: Path) -> None:
    _model(
        tmp_path,
        "m",
        'backend: "python"\n'
        "instance_group [ { count: 2 }, { count: 0 } ]\n"
        "version_policy { specific { versions: [ 1, 7 ] } }\n",
        versions=("1", "007", "latest"),
    )
    problems = _check(tmp_path)
    assert [(str(p), p.severity) for p in problems] == [
        (
            f"{tmp_path / 'm' / '007'}: warning: version folder '007' is ignored: a version is a number "
            "without leading zeros (1, 2, ...) up to 2^63-1",
            "warning",
        ),
        (
            f"{tmp_path / 'm' / 'config.pbtxt'}:2:34: warning: instance group m_1 of model m has count 0, "
            "which the server reads as the default (1 instance(s)): write the number of instances (>= 1)",
            "warning",
        ),
        (
            f"{tmp_path / 'm' / 'config.pbtxt'}:3:44: warning: version 7 of the version policy has no folder "
            "'7' (the server skips it)",
            "warning",
        ),
    ]  # "latest" is not a number: not a version, and not a mistake


def test_a_policy_that_selects_nothing_is_an_error_at_the_policy(tmp_path: Path) -> None:
    _model(tmp_path, "m", 'backend: "python"\nversion_policy { specific { versions: [ 3 ] } }\n')
    problems = [p for p in _check(tmp_path) if p.severity == "error"]
    assert _where(problems) == [("config.pbtxt", 2, "error")]
    assert (
        "at least one version must be available under the version policy of model 'm'" in problems[0].message
    )


def test_models_without_config_and_unknown_backends(tmp_path: Path) -> None:
    (tmp_path / "plan" / "1").mkdir(parents=True)
    (tmp_path / "plan" / "1" / "model.plan").write_bytes(b"")
    (tmp_path / "nothing" / "1").mkdir(parents=True)
    problems = _check(tmp_path)
    assert _where(problems) == [("nothing", None, "error"), ("plan", None, "error")]
    assert "Could not determine backend for model 'nothing'" in problems[0].message
    assert "unable to find backend library for backend 'tensorrt'" in problems[1].message


def test_python_models_are_not_imported_unless_asked(tmp_path: Path) -> None:
    _model(tmp_path, "m", 'backend: "python"\n')
    assert _check(tmp_path) == []  # model.py would raise SystemExit if imported
    problems = _check(tmp_path, import_python=True)
    assert _where(problems) == [("model.py", None, "error")]
    assert "imported" in problems[0].message


def test_strict_model_config_skips_auto_complete(tmp_path: Path) -> None:
    d = tmp_path / "onnx_model"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").write_bytes(b"not a graph")
    problems = _check(tmp_path)  # auto-complete reads the graph
    assert _where(problems) == [("onnx_model", None, "error")]
    assert "failed to load" in problems[0].message
    problems = _check(tmp_path, strict_model_config=True)  # no inputs listed: require_io's error
    assert problems[0].message == "model configuration for 'onnx_model' must specify one or more 'input'"


def test_ensembles_against_the_models_they_run(tmp_path: Path) -> None:
    _model(
        tmp_path,
        "p",
        'backend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "IN2" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 4 ] } ]\n',
    )
    _model(
        tmp_path,
        "e",
        'platform: "ensemble"\n'
        "max_batch_size: 8\n"
        'input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "ensemble_scheduling {\n"
        "  step [\n"
        "    {\n"
        '      model_name: "p"\n'
        "      model_version: 2\n"
        '      input_map { key: "IN" value: "A" }\n'
        '      input_map { key: "NOPE" value: "A" }\n'
        '      output_map { key: "OUT" value: "B" }\n'
        "    }\n"
        "  ]\n"
        "}\n",
    )
    problems = _check(tmp_path)
    assert [(p.line, p.column, p.message) for p in problems] == [
        (
            8,
            7,
            "ensemble e allows maximum batch size 8, but it contains model p which only allows maximum batch size to be 4",
        ),
        (8, 7, "ensemble 'e' step 0: input 'IN2' of model 'p' is not in the step's input_map"),
        (9, 7, "ensemble 'e' step 0: version 2 of model 'p' is not served (versions: 1)"),
        (11, 19, "ensemble 'e' step 0: 'NOPE' is not an input of model 'p', whose inputs are: IN, IN2"),
        (
            12,
            7,
            "in ensemble e, ensemble tensor B: inconsistent data type: TYPE_FP32 is inferred from ensemble 'e' "
            "while TYPE_INT64 is inferred from model p",
        ),
    ]


def test_circular_ensembles(tmp_path: Path) -> None:
    for name, other in (("a", "b"), ("b", "a")):
        d = tmp_path / name
        (d / "1").mkdir(parents=True)
        (d / "config.pbtxt").write_text(
            'platform: "ensemble"\n'
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
            f'ensemble_scheduling {{ step [ {{ model_name: "{other}" input_map {{ key: "X" value: "X" }} '
            'output_map { key: "Y" value: "Y" } } ] }\n'
        )
    problems = _check(tmp_path)
    assert [p.message for p in problems] == [
        "circular dependency between ensembles: a -> b -> a",
        "circular dependency between ensembles: b -> a -> b",
    ]
    assert [(p.path.parent.name, p.line) for p in problems] == [("a", 4), ("b", 4)]


def test_kind_gpu_is_checked_against_the_gpus_given(tmp_path: Path) -> None:
    """``inferd check`` passes this machine's GPUs (none here); any list checks as the server would."""
    from inferd.gpu.devices import Gpu, SupportedGpus

    _model(tmp_path, "ok", 'backend: "python"\ninstance_group [ { kind: KIND_GPU } ]\n')
    _model(tmp_path, "bad", 'backend: "python"\ninstance_group [ { kind: KIND_GPU gpus: [ 0, 3 ] } ]\n')
    two = SupportedGpus(tuple(Gpu(i, i, f"GPU-{i}", "a GPU", 1 << 34, (8, 0)) for i in (0, 1)))
    assert [(str(p), p.severity) for p in _check(tmp_path, gpus=two)] == [
        (
            f"{tmp_path / 'bad' / 'config.pbtxt'}:2:43: error: instance group bad_0 of model bad specifies invalid or "
            "unsupported gpu id 3. GPUs with at least the minimum required CUDA compute compatibility of 6.000000 "
            "are: 0, 1",
            "error",
        )
    ]
    without = [p.message for p in _check(tmp_path) if p.severity == "error"]
    assert without == [
        "instance group bad_0 of model bad specifies invalid or unsupported gpu id 0. GPUs with at least the "
        "minimum required CUDA compute compatibility of 6.000000 are: ",
        "instance group ok_0 of model ok has kind KIND_GPU but no GPUs are available",
    ]
