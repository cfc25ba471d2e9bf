"""config.pbtxt parsing, auto-fill, normalisation, validation and the /config JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferd.errors import InvalidArgumentError
from inferd.repository import (
    ModelConfig,
    autofill_backend_fields,
    config_to_json,
    detect_backend,
    load_model_config,
    normalize_config,
    parse_config_text,
    require_io,
    validate_config,
)
from repo_paths import PROTOCOL, REFERENCE_MODELS

# Map-valued fields: their key order is C++ hash order in the reference, not reproducible.
_MAP_KEYS = frozenset(
    {"input_map", "output_map", "parameters", "cc_model_filenames", "metric_tags", "priority_queue_policy"}
)


def _reference_configs() -> dict[str, dict[str, Any]]:
    lines = PROTOCOL.read_text(encoding="utf-8").splitlines()
    configs: dict[str, dict[str, Any]] = {}
    for index, line in enumerate(lines):
        if line.startswith("HTTP model_config_") and "-> 200" in line:
            name = line.split()[1].removeprefix("model_config_").rstrip(":")
            configs[name] = json.loads(lines[index + 1])
    return configs


REFERENCE_CONFIGS = _reference_configs()


def _assert_same_order(got: Any, expected: Any, path: str = "") -> None:
    if isinstance(expected, dict):
        assert isinstance(got, dict)
        if path.rsplit(".", 1)[-1] in _MAP_KEYS:
            assert set(got) == set(expected), path
        else:
            assert list(got) == list(expected), path
        for key in expected:
            _assert_same_order(got[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), path
        for g, e in zip(got, expected, strict=True):
            _assert_same_order(g, e, path)


def _full_pipeline(model_dir: Path) -> ModelConfig:
    cfg, _ = load_model_config(model_dir)
    normalize_config(cfg, model_dir.name, model_dir=model_dir)
    validate_config(cfg)
    return cfg


# --------------------------------------------------------------------------------------------------
# The reference: Triton 2.51's /config output for the six shared models


def test_reference_file_has_six_models() -> None:
    assert sorted(REFERENCE_CONFIGS) == sorted(p.name for p in REFERENCE_MODELS.iterdir())
    assert len(REFERENCE_CONFIGS) == 6


@pytest.mark.parametrize("name", sorted(REFERENCE_CONFIGS))
def test_config_json_equals_triton_reference(name: str) -> None:
    cfg = _full_pipeline(REFERENCE_MODELS / name)
    got = config_to_json(cfg)
    expected = REFERENCE_CONFIGS[name]
    assert got == expected
    _assert_same_order(got, expected)
    assert json.loads(json.dumps(got)) == expected


@pytest.mark.parametrize("name", sorted(REFERENCE_CONFIGS))
def test_normalize_is_idempotent(name: str) -> None:
    cfg = _full_pipeline(REFERENCE_MODELS / name)
    before = config_to_json(cfg)
    normalize_config(cfg, name)
    normalize_config(cfg, name, model_dir=REFERENCE_MODELS / name)
    validate_config(cfg)
    assert config_to_json(cfg) == before


def test_reference_ensemble_has_no_optimization_and_no_instance_group() -> None:
    cfg = _full_pipeline(REFERENCE_MODELS / "ensemble_add_sub")
    got = config_to_json(cfg)
    assert "optimization" not in got
    assert got["instance_group"] == []
    assert got["model_transaction_policy"] == {"decoupled": False}
    assert got["default_model_filename"] == ""


# --------------------------------------------------------------------------------------------------
# Parsing and loading


def test_parse_error_names_file_line_and_column() -> None:
    text = 'name: "m"\nbackend: "python"\n  bogus: 3\n'
    with pytest.raises(InvalidArgumentError) as info:
        parse_config_text(text, "/r/m/config.pbtxt")
    assert str(info.value) == (
        "failed to parse model configuration '/r/m/config.pbtxt': 3:3 : "
        'Message type "inference.ModelConfig" has no field named "bogus".'
    )


def test_parse_error_bad_enum_value() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        parse_config_text('input [ { name: "a" data_type: TYPE_FOO } ]', "/x/config.pbtxt")
    message = str(info.value)
    assert message.startswith("failed to parse model configuration '/x/config.pbtxt': 1:32 : ")
    assert "has no value named TYPE_FOO" in message


def test_parse_error_repeated_scalar_field() -> None:
    with pytest.raises(InvalidArgumentError, match=r"2:7 : .*multiple \"name\" fields"):
        parse_config_text('name: "a"\nname: "b"\n', "p")


def test_parse_ok() -> None:
    cfg = parse_config_text(
        'name: "m" max_batch_size: 8 input [{ name: "I" data_type: TYPE_FP32 dims: [2, -1] }]', "p"
    )
    assert cfg.name == "m"
    assert cfg.max_batch_size == 8
    assert list(cfg.input[0].dims) == [2, -1]


def test_load_missing_config_gives_named_empty_config(tmp_path: Path) -> None:
    model = tmp_path / "pymodel"
    (model / "1").mkdir(parents=True)
    cfg, had_file = load_model_config(model)
    assert had_file is False
    assert cfg.name == "pymodel"
    assert cfg.backend == ""


def test_load_reads_config_file(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 2\n')
    cfg, had_file = load_model_config(model)
    assert had_file is True
    assert cfg.backend == "python"
    assert cfg.name == ""  # normalisation fills it


def test_load_parse_error_names_the_file(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: "x"\n')
    with pytest.raises(InvalidArgumentError) as info:
        load_model_config(model)
    assert str(info.value).startswith(
        f"failed to parse model configuration '{model / 'config.pbtxt'}': 2:17 : "
    )


def test_load_non_utf8_file(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.pbtxt").write_bytes(b'name: "\xff"\n')
    with pytest.raises(InvalidArgumentError, match="failed to parse model configuration"):
        load_model_config(model)


def test_load_custom_config_name(tmp_path: Path) -> None:
    model = tmp_path / "m"
    (model / "configs").mkdir(parents=True)
    (model / "config.pbtxt").write_text("max_batch_size: 1\n")
    (model / "configs" / "big.pbtxt").write_text("max_batch_size: 64\n")
    cfg, had = load_model_config(model, config_name="big")
    assert had and cfg.max_batch_size == 64
    cfg, had = load_model_config(model, config_name="absent")
    assert had and cfg.max_batch_size == 1
    cfg, had = load_model_config(model)
    assert had and cfg.max_batch_size == 1


# --------------------------------------------------------------------------------------------------
# Backend detection (core auto-fill)


def _model_with(tmp_path: Path, entry: str, *, is_dir: bool = False, name: str = "m") -> Path:
    model = tmp_path / name
    version = model / "1"
    version.mkdir(parents=True)
    if is_dir:
        (version / entry).mkdir()
    else:
        (version / entry).write_bytes(b"")
    return model


@pytest.mark.parametrize(
    ("entry", "is_dir", "expected"),
    [
        ("model.savedmodel", True, ("tensorflow", "tensorflow_savedmodel")),
        ("model.graphdef", False, ("tensorflow", "tensorflow_graphdef")),
        ("model.plan", False, ("tensorrt", "tensorrt_plan")),
        ("model.onnx", False, ("onnxruntime", "onnxruntime_onnx")),
        ("model.onnx", True, ("onnxruntime", "onnxruntime_onnx")),
        ("model.xml", False, ("openvino", "")),
        ("model.pt", False, ("pytorch", "pytorch_libtorch")),
        ("model.py", False, ("python", "")),
    ],
)
def test_detect_backend_from_file(
    tmp_path: Path, entry: str, is_dir: bool, expected: tuple[str, str]
) -> None:
    assert detect_backend(_model_with(tmp_path, entry, is_dir=is_dir)) == expected


@pytest.mark.parametrize(
    ("entry", "is_dir"),
    [("model.savedmodel", False), ("model.graphdef", True), ("model.plan", True), ("model.pt", True)],
)
def test_detect_backend_wrong_kind_of_entry_is_not_recognised(
    tmp_path: Path, entry: str, is_dir: bool
) -> None:
    with pytest.raises(InvalidArgumentError, match="Could not determine backend"):
        detect_backend(_model_with(tmp_path, entry, is_dir=is_dir))


def test_detect_backend_from_model_name(tmp_path: Path) -> None:
    model = tmp_path / "m.identity"
    (model / "1").mkdir(parents=True)
    assert detect_backend(model) == ("identity", "")
    cfg = ModelConfig()
    autofill_backend_fields(cfg, "m.identity", model)
    assert cfg.default_model_filename == "model.identity"


def test_detect_backend_error_message(tmp_path: Path) -> None:
    model = tmp_path / "x"
    (model / "1").mkdir(parents=True)
    with pytest.raises(InvalidArgumentError) as info:
        detect_backend(model)
    assert str(info.value) == (
        "Invalid model name: Could not determine backend for model 'x' with no backend in model "
        "configuration. Expected model name of the form 'model.<backend_name>'."
    )


def test_detect_backend_without_version_dirs_uses_name_only(tmp_path: Path) -> None:
    model = tmp_path / "x"
    model.mkdir()
    (model / "model.py").write_text("")  # not in a version directory: ignored
    with pytest.raises(InvalidArgumentError, match="Invalid model name"):
        detect_backend(model)


def test_detect_backend_inspects_first_version_dir_by_name(tmp_path: Path) -> None:
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    (model / "2").mkdir()
    (model / "1" / "model.py").write_text("")
    (model / "2" / "model.onnx").write_bytes(b"")
    assert detect_backend(model) == ("python", "")
    assert detect_backend(model, [model / "2"]) == ("onnxruntime", "onnxruntime_onnx")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('platform: "onnxruntime_onnx"', ("onnxruntime", "onnxruntime_onnx", "model.onnx")),
        ('platform: "pytorch_libtorch"', ("pytorch", "pytorch_libtorch", "model.pt")),
        ('platform: "tensorrt_plan"', ("tensorrt", "tensorrt_plan", "model.plan")),
        ('platform: "tensorflow_savedmodel"', ("tensorflow", "tensorflow_savedmodel", "model.savedmodel")),
        ('platform: "tensorflow_graphdef"', ("tensorflow", "tensorflow_graphdef", "model.graphdef")),
        ('backend: "onnxruntime"', ("onnxruntime", "onnxruntime_onnx", "model.onnx")),
        ('backend: "pytorch"', ("pytorch", "pytorch_libtorch", "model.pt")),
        ('backend: "pytorch" runtime: "model.py"', ("pytorch", "pytorch_libtorch", "")),
        ('backend: "tensorrt"', ("tensorrt", "tensorrt_plan", "model.plan")),
        ('backend: "openvino"', ("openvino", "", "model.xml")),
        ('backend: "python"', ("python", "", "model.py")),
        ('default_model_filename: "model.py"', ("python", "", "model.py")),
        (
            'default_model_filename: "model.savedmodel"',
            ("tensorflow", "tensorflow_savedmodel", "model.savedmodel"),
        ),
        ('backend: "custom"', ("custom", "", "")),
        ('platform: "ensemble"', ("", "ensemble", "")),
    ],
)
def test_autofill_from_config_fields(tmp_path: Path, text: str, expected: tuple[str, str, str]) -> None:
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)
    cfg = parse_config_text(text, "p")
    autofill_backend_fields(cfg, "m", model)
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == expected
    assert cfg.name == "m"


def test_autofill_tensorflow_backend_finds_platform_on_disk(tmp_path: Path) -> None:
    model = _model_with(tmp_path, "model.savedmodel", is_dir=True)
    cfg = parse_config_text('backend: "tensorflow"', "p")
    autofill_backend_fields(cfg, "m", model)
    assert (cfg.platform, cfg.default_model_filename) == ("tensorflow_savedmodel", "model.savedmodel")


def test_autofill_config_wins_over_disk(tmp_path: Path) -> None:
    model = _model_with(tmp_path, "model.onnx")
    cfg = parse_config_text('backend: "python"', "p")
    autofill_backend_fields(cfg, "m", model)
    assert (cfg.backend, cfg.platform, cfg.default_model_filename) == ("python", "", "model.py")


# --------------------------------------------------------------------------------------------------
# Normalisation


def _normalized(text: str, name: str = "m") -> ModelConfig:
    cfg = parse_config_text(text, "p")
    normalize_config(cfg, name)
    return cfg


def test_normalize_python_model_without_config(tmp_path: Path) -> None:
    model = _model_with(tmp_path, "model.py", name="auto")
    cfg, had = load_model_config(model)
    assert not had
    normalize_config(cfg, "auto", model_dir=model)
    validate_config(cfg)
    got = config_to_json(cfg)
    assert got["backend"] == "python"
    assert got["platform"] == ""
    assert got["default_model_filename"] == "model.py"
    assert got["version_policy"] == {"latest": {"num_versions": 1}}
    assert got["instance_group"][0]["name"] == "auto"  # default group: model name, no suffix
    assert got["instance_group"][0]["kind"] == "KIND_CPU"
    assert got["instance_group"][0]["count"] == 1
    assert got["optimization"]["input_pinned_memory"] == {"enable": True}
    assert got["input"] == [] and got["output"] == []


def test_normalize_sets_name() -> None:
    assert _normalized('backend: "python"').name == "m"


def test_normalize_name_mismatch() -> None:
    cfg = parse_config_text('name: "other" backend: "python"', "p")
    with pytest.raises(InvalidArgumentError) as info:
        normalize_config(cfg, "m")
    assert str(info.value) == (
        "unexpected directory name 'm' for model 'other', directory name must equal model name"
    )


def test_normalize_keeps_version_policy() -> None:
    cfg = _normalized('backend: "python" version_policy { all {} }')
    assert cfg.version_policy.WhichOneof("policy_choice") == "all"


def test_normalize_preferred_batch_size() -> None:
    assert list(
        _normalized(
            'backend: "python" max_batch_size: 8 dynamic_batching {}'
        ).dynamic_batching.preferred_batch_size
    ) == [8]
    assert (
        list(_normalized('backend: "python" dynamic_batching {}').dynamic_batching.preferred_batch_size) == []
    )
    cfg = _normalized('backend: "python" max_batch_size: 8 dynamic_batching { preferred_batch_size: [2, 4] }')
    assert list(cfg.dynamic_batching.preferred_batch_size) == [2, 4]
    assert not _normalized('backend: "python" max_batch_size: 8').HasField("dynamic_batching")


def test_normalize_pinned_memory() -> None:
    cfg = _normalized('backend: "python"')
    assert cfg.optimization.input_pinned_memory.enable
    assert cfg.optimization.output_pinned_memory.enable
    cfg = _normalized('backend: "python" optimization { input_pinned_memory { enable: false } }')
    assert not cfg.optimization.input_pinned_memory.enable
    assert cfg.optimization.output_pinned_memory.enable


def test_normalize_ensemble() -> None:
    cfg = _normalized('platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" } ] }')
    assert not cfg.HasField("optimization")
    assert len(cfg.instance_group) == 0
    assert cfg.HasField("model_transaction_policy")
    assert cfg.model_transaction_policy.decoupled is False
    assert cfg.default_model_filename == ""
    cfg = _normalized(
        'platform: "ensemble" model_transaction_policy { decoupled: true } '
        'ensemble_scheduling { step [ { model_name: "a" } ] }'
    )
    assert cfg.model_transaction_policy.decoupled is True


def test_normalize_non_ensemble_has_no_transaction_policy() -> None:
    assert not _normalized('backend: "python"').HasField("model_transaction_policy")


def test_normalize_instance_groups() -> None:
    cfg = _normalized(
        'backend: "python" instance_group [ '
        '{ count: 3 }, { name: "named" kind: KIND_CPU }, { kind: KIND_MODEL } ]'
    )
    groups = [(g.name, g.kind, g.count) for g in cfg.instance_group]
    cpu, model = 2, 3  # ModelInstanceGroup.Kind numbers
    assert groups == [("m_0", cpu, 3), ("named", cpu, 1), ("m_2", model, 1)]


@pytest.mark.parametrize(
    ("backend", "count"),
    [("onnxruntime", 2), ("tensorflow", 2), ("python", 1), ("pytorch", 1), ("openvino", 1)],
)
def test_normalize_default_cpu_instance_count(backend: str, count: int) -> None:
    platform = {"tensorflow": 'platform: "tensorflow_savedmodel" '}.get(backend, "")
    cfg = _normalized(f'{platform}backend: "{backend}"')
    assert [(g.name, g.count) for g in cfg.instance_group] == [("m", count)]
    cfg = _normalized(f'{platform}backend: "{backend}" instance_group [ {{ kind: KIND_MODEL }} ]')
    assert cfg.instance_group[0].count == 1  # the CPU default applies to KIND_CPU only


def test_normalize_sequence_batching() -> None:
    cfg = _normalized('backend: "python" max_batch_size: 4 sequence_batching { oldest { } }')
    assert cfg.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(cfg.sequence_batching.oldest.preferred_batch_size) == [4]
    cfg = _normalized('backend: "python" sequence_batching { max_sequence_idle_microseconds: 5 }')
    assert cfg.sequence_batching.max_sequence_idle_microseconds == 5


@pytest.mark.parametrize(
    ("text", "filename"),
    [
        ('backend: "python"', "model.py"),
        ('backend: "onnxruntime"', "model.onnx"),
        ('backend: "pytorch"', "model.pt"),
        ('backend: "openvino"', "model.xml"),
        ('backend: "tensorrt"', "model.plan"),
        ('platform: "tensorflow_savedmodel"', "model.savedmodel"),
        ('platform: "tensorflow_graphdef"', "model.graphdef"),
        ('backend: "python" default_model_filename: "other.py"', "other.py"),
        ('platform: "ensemble" ensemble_scheduling { step [ { model_name: "a" } ] }', ""),
    ],
)
def test_normalize_default_model_filename(text: str, filename: str) -> None:
    assert _normalized(text).default_model_filename == filename


def test_normalize_without_model_dir_does_not_guess_custom_backend() -> None:
    cfg = _normalized("max_batch_size: 1", name="m.identity")
    assert cfg.backend == ""


def test_normalize_accepts_default_max_batch_size() -> None:
    cfg = parse_config_text('backend: "python"', "p")
    normalize_config(cfg, "m", default_max_batch_size=16)
    assert cfg.max_batch_size == 0  # only backend auto-complete uses it


# --------------------------------------------------------------------------------------------------
# Validation

_PY = 'backend: "python" '
_IO = (
    'input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] } ] '
    'output [ { name: "O" data_type: TYPE_FP32 dims: [ 4 ] } ] '
)
_ENS = 'platform: "ensemble" max_batch_size: 4 ' + _IO


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" {ins} {outs} }}'


def _ensemble(*steps: str) -> str:
    return _ENS + "ensemble_scheduling { step [ " + ", ".join(steps) + " ] }"


def _control(kind: str, extra: str = "") -> str:
    return f"control [ {{ kind: {kind} {extra} }} ]"


_SEQ = _PY + "max_batch_size: 4 sequence_batching { "

VALIDATION_CASES: list[tuple[str, str]] = [
    # identity and backend
    ('platform: "foo"', "unexpected platform type 'foo' for m"),
    (
        'platform: "ensemble" backend: "python"',
        "Ensemble model 'm' must have platform type 'ensemble' and empty backend type",
    ),
    (
        'backend: "onnxruntime" platform: "pytorch_libtorch"',
        "unexpected 'platform' and 'backend' pair, got:pytorch_libtorch, onnxruntime",
    ),
    (_PY + "max_batch_size: -1", "'max_batch_size' must be non-negative value for m"),
    # dynamic batching
    (
        _PY + "max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 0 ] }",
        "dynamic batching preferred size must be positive for m",
    ),
    (
        _PY + "max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }",
        "dynamic batching preferred size must be <= max batch size for m",
    ),
    (
        _PY + "max_batch_size: 4 dynamic_batching { priority_levels: 2 }",
        "default priority level must be in range [1, 2] for m",
    ),
    (
        _PY + "max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 1 "
        "priority_queue_policy { key: 3 value: {} } }",
        "priority queue policy must have priority level in range [1, 2] for m",
    ),
    (
        _PY + "max_batch_size: 4 dynamic_batching { "
        "preserve_ordering: true priority_levels: 2 default_priority_level: 1 }",
        "Only one priority level is allowed when 'preserve_ordering' is true for m",
    ),
    (
        _PY + "max_batch_size: 4 dynamic_batching { preserve_ordering: true "
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 10 } }",
        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m",
    ),
    # sequence batching
    (
        _SEQ + "} response_cache { enable: true }",
        "Response Cache does not currently support model m with sequence batching scheduler. "
        "Please disable the response cache.",
    ),
    (_SEQ + "control_input [ { } ] }", "sequence batching control tensor must have a name for m"),
    (
        _SEQ + 'control_input [ { name: "A" }, { name: "A" } ] }',
        "sequence batching control tensor 'A' is specified for multiple control kinds for m",
    ),
    (
        _SEQ
        + 'control_input [ { name: "A" '
        + _control("CONTROL_SEQUENCE_START", "int32_false_true: [0, 1]")
        + ' }, { name: "B" '
        + _control("CONTROL_SEQUENCE_START", "int32_false_true: [0, 1]")
        + " } ] }",
        "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m",
    ),
    (
        _SEQ + 'control_input [ { name: "A" ' + _control("CONTROL_SEQUENCE_END") + " } ] }",
        "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' "
        "for CONTROL_SEQUENCE_END for m",
    ),
    (
        _SEQ
        + 'control_input [ { name: "A" '
        + _control("CONTROL_SEQUENCE_READY", "int32_false_true: [0, 1] fp32_false_true: [0, 1]")
        + " } ] }",
        "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and "
        "'bool_false_true' for CONTROL_SEQUENCE_READY for m",
    ),
    (
        _SEQ
        + 'control_input [ { name: "A" '
        + _control("CONTROL_SEQUENCE_START", "fp32_false_true: [0]")
        + " } ] }",
        "sequence batching control 'fp32_false_true' must have exactly 2 entries for "
        "CONTROL_SEQUENCE_START for m",
    ),
    (
        _SEQ
        + 'control_input [ { name: "A" '
        + _control("CONTROL_SEQUENCE_CORRID", "bool_false_true: [false, true]")
        + " } ] }",
        "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
        "'bool_false_true' for CONTROL_SEQUENCE_CORRID for m",
    ),
    (
        _SEQ
        + 'control_input [ { name: "A" '
        + _control("CONTROL_SEQUENCE_CORRID", "data_type: TYPE_FP32")
        + " } ] }",
        "unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are TYPE_UINT64, "
        "TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
    ),
    (
        _SEQ + "oldest { preferred_batch_size: [ 0 ] } }",
        "sequence batching preferred batch size must be positive for m",
    ),
    (
        _SEQ + "oldest { preferred_batch_size: [ 9 ] } }",
        "sequence batching preferred batch size must be <= max batch size for m",
    ),
    (
        _SEQ + "direct { minimum_slot_utilization: 1.5 } }",
        "sequence batching minimum slot utilization must be in range (0.0, 1.0] for m",
    ),
    # ensembles
    ('platform: "ensemble"', "ensemble scheduling must be set for ensemble m whose platform is ensemble"),
    (
        _PY + 'ensemble_scheduling { step [ { model_name: "a" } ] }',
        "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble",
    ),
    (
        _ensemble(_step("a", {"x": "I"}, {"y": "O"})) + " instance_group [ { kind: KIND_CPU } ]",
        "instance group should not be specified for ensemble 'm'",
    ),
    (
        _ensemble(_step("a", {"x": "I"}, {"y": "O"})) + " optimization { }",
        "optimization should not be specified for ensemble 'm'",
    ),
    (
        _ensemble(_step("a", {"x": "I"}, {"y": "O"})) + ' model_warmup [ { name: "w" } ]',
        "model_warmup can not be specified for ensemble 'm'",
    ),
    (_ENS + "ensemble_scheduling { }", "must specify 'step' for ensemble 'm'"),
    (_ensemble(_step("", {"x": "I"}, {"y": "O"})), "must specify 'model_name' in step 0 of ensemble 'm'"),
    (
        _ensemble(_step("a", {"x": "I"}, {"y": "T"}), _step("b", {}, {"y": "O"})),
        "must specify 'input_map' in step 1 of ensemble 'm'",
    ),
    (_ensemble(_step("a", {"x": "I"}, {})), "must specify 'output_map' in step 0 of ensemble 'm'"),
    (
        _ensemble(_step("a", {"x": "I"}, {"y": "O"}), _step("b", {"x": "I"}, {"y": "O"})),
        "ensemble tensor 'O' can appear in an output map only once for ensemble 'm' step 1",
    ),
    (_ensemble(_step("a", {"x": "Z"}, {"y": "O"})), "ensemble input 'I' for ensemble m' is not used"),
    (_ensemble(_step("a", {"x": "I"}, {"y": "T"})), "ensemble output 'O' for ensemble m' is not used"),
    (
        _ensemble(_step("a", {"x": "I", "z": "Q"}, {"y": "O"})),
        "output 'O' for ensemble 'm' is not written: "
        "at least one of its depending tensors, 'Q', is not connected",
    ),
    (
        _ensemble(_step("a", {"x": "I"}, {"y": "O", "w": "T"})),
        "ensemble tensor 'T' is unused in ensemble 'm'",
    ),
    # transaction policy, metrics
    (
        _PY + "model_transaction_policy { decoupled: true } response_cache { enable: true }",
        "Response Cache does not currently support model m with 'decoupled' transaction policy. "
        "Please disable the response cache.",
    ),
    (_PY + "model_metrics { metric_control [ { } ] }", "metric control must specify 'metric_identifier'"),
    (
        _PY + "model_metrics { metric_control [ { metric_identifier { } } ] }",
        "metric identifier must specify non-empty 'family'",
    ),
    (
        _PY + 'model_metrics { metric_control [ { metric_identifier { family: "f" } } ] }',
        "metric control must specify 'histogram_options'",
    ),
    (
        _PY
        + 'model_metrics { metric_control [ { metric_identifier { family: "f" } histogram_options { } } ] }',
        "histogram options must specify non-empty 'buckets'",
    ),
    # instance groups
    (
        _PY + 'instance_group [ { name: "g" kind: KIND_GPU } ]',
        "instance group g of model m has kind KIND_GPU but no GPUs are available",
    ),
    (
        _PY + 'instance_group [ { name: "g" kind: KIND_CPU gpus: [0] } ]',
        "instance group g of model m has kind KIND_CPU but specifies one or more GPUs",
    ),
    (
        _PY + 'instance_group [ { name: "g" kind: KIND_MODEL gpus: [0] } ]',
        "instance group g of model m has kind KIND_MODEL but specifies one or more GPUs",
    ),
    (
        _PY + 'instance_group [ { name: "g" kind: KIND_CPU profile: ["0"] } ]',
        "instance group g of model m and platform specifies profile field which is only supported "
        "for TensorRT models",
    ),
    (
        'platform: "tensorrt_plan" instance_group [ { name: "g" kind: KIND_CPU profile: ["-1"] } ]',
        "instance group g of model m and platform tensorrt_plan specifies invalid profile -1. The field "
        "should contain the string representation of a non-negative integer.",
    ),
    (
        'platform: "tensorrt_plan" instance_group [ { name: "g" kind: KIND_CPU profile: ["x"] } ]',
        "unable to parse 'x': stoi",
    ),
    (
        'platform: "tensorrt_plan" instance_group [ { name: "g" kind: KIND_CPU profile: [""] } ]',
        "profile name must not be empty",
    ),
    # inputs and outputs
    (_PY + "input [ { data_type: TYPE_FP32 dims: [1] } ]", "model input must specify 'name' for m"),
    (_PY + 'input [ { name: "I" dims: [1] } ]', "model input 'I' must specify 'data_type' for m"),
    (_PY + 'input [ { name: "I" data_type: TYPE_FP32 } ]', "model input 'I' must specify 'dims' for m"),
    (_PY + 'output [ { name: "O" data_type: TYPE_FP32 } ]', "model output 'O' must specify 'dims' for m"),
    (
        _PY + 'input [ { name: "I" data_type: TYPE_FP32 dims: [1] reshape { } } ]',
        "model input 'I' cannot have empty reshape for non-batching model as scalar tensors are "
        "not supported for m",
    ),
    (
        _PY + 'input [ { name: "I" data_type: TYPE_FP32 dims: [0] } ]',
        "model input 'I' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m",
    ),
    (
        _PY + 'output [ { name: "O" data_type: TYPE_FP32 dims: [2] reshape { shape: [0] } } ]',
        "model output 'O' reshape dimensions must be integer >= 1, or -1 to indicate a "
        "variable-size dimension for m",
    ),
    (
        _PY + 'input [ { name: "I" data_type: TYPE_FP32 dims: [2, 3] reshape { shape: [5] } } ]',
        "model input 'I' has different size for dims and reshape for m",
    ),
    (
        _PY + 'input [ { name: "I" data_type: TYPE_FP32 dims: [2, -1] reshape { shape: [-1, 2, -1] } } ]',
        "model input 'I' has different number of variable-size dimensions for dims and reshape for m",
    ),
    (
        _PY + 'input [ { name: "I" data_type: TYPE_FP32 dims: [2, -1, 3] reshape { shape: [3, -1, 2] } } ]',
        "model input 'I' has different size for dims and reshape for m",
    ),
    (
        _PY + 'input [ { name: "I" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [1, 2] } ]',
        "model input NHWC/NCHW require 3 dims for m",
    ),
    (
        _PY + 'input [ { name: "I" data_type: TYPE_FP32 dims: [1] is_shape_tensor: true } ]',
        "shape tensors are only supported for TensorRT platform for m",
    ),
    (
        _PY + 'output [ { name: "O" data_type: TYPE_FP32 dims: [1] is_non_linear_format_io: true } ]',
        "Non-linear IO format is only supported for the TensorRT platform for m",
    ),
    (
        'backend: "tensorrt" '
        'input [ { name: "I" data_type: TYPE_FP32 dims: [1] is_non_linear_format_io: true } ]',
        "Non-linear IO format input requires 3 dims for m",
    ),
    (
        _PY + 'input [ { name: "I" data_type: TYPE_FP32 dims: [1] }, '
        '{ name: "I" data_type: TYPE_INT32 dims: [1] } ]',
        "model input 'I' is specified more than once for m",
    ),
    (
        _PY + 'output [ { name: "O" data_type: TYPE_FP32 dims: [1] }, '
        '{ name: "O" data_type: TYPE_FP32 dims: [2] } ]',
        "model output 'O' is specified more than once for m",
    ),
    (
        _PY + _IO + 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_INT32 } ]',
        "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0 for m",
    ),
    (
        _PY + _IO + 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" '
        'data_type: TYPE_INT64 source_input: "I" } ]',
        "batch input data type must be TYPE_INT32 or TYPE_FP32 for m",
    ),
    (
        _PY + _IO + 'batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "B" '
        'data_type: TYPE_FP32 source_input: "X" } ]',
        "unknown source input name 'X' for m",
    ),
    (
        _PY
        + _IO
        + 'batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "Z" source_input: "I" } ]',
        "unknown target output name 'Z' for m",
    ),
    (
        _PY + _IO + "batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE "
        'target_name: ["O", "O"] source_input: "I" } ]',
        "target output name 'O' can only be specified once for m",
    ),
]


@pytest.mark.parametrize(("text", "message"), VALIDATION_CASES)
def test_validation_errors(text: str, message: str) -> None:
    cfg = _normalized(text)
    with pytest.raises(InvalidArgumentError) as info:
        validate_config(cfg)
    assert str(info.value) == message


def test_validation_requires_name() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        validate_config(ModelConfig())
    assert str(info.value) == "model configuration must specify 'name'"


def test_validation_requires_version_policy() -> None:
    cfg = parse_config_text('name: "m" backend: "python"', "p")
    with pytest.raises(InvalidArgumentError) as info:
        validate_config(cfg)
    assert str(info.value) == "must specify 'version policy' for m"


@pytest.mark.parametrize(
    "text",
    [
        _PY + _IO + "max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 2, 8 ] }",
        _PY + 'input [ { name: "I" data_type: TYPE_FP32 dims: [1] reshape { } } ] max_batch_size: 2',
        _PY
        + 'input [ { name: "I" data_type: TYPE_FP32 dims: [2, -1, 6] reshape { shape: [1, 2, -1, 3, 2] } } ]',
        _SEQ
        + 'control_input [ { name: "S" '
        + _control("CONTROL_SEQUENCE_START", "fp32_false_true: [0, 1]")
        + ' }, { name: "C" '
        + _control("CONTROL_SEQUENCE_CORRID", "data_type: TYPE_UINT64")
        + " } ] }",
        'platform: "onnxruntime_onnx" backend: "onnxruntime" ' + _IO,
        'platform: "tensorrt_plan" instance_group [ { kind: KIND_CPU profile: ["0"] } ] ' + _IO,
        'backend: "custom" platform: "anything" ' + _IO,
        _ensemble(_step("a", {"x": "I"}, {"y": "T"}), _step("b", {"x": "T"}, {"y": "O"})),
    ],
)
def test_validation_accepts(text: str) -> None:
    validate_config(_normalized(text))


def test_require_io() -> None:
    require_io(_normalized(_PY + _IO))
    with pytest.raises(InvalidArgumentError) as info:
        require_io(_normalized(_PY))
    assert str(info.value) == "model configuration for 'm' must specify one or more 'input'"
    with pytest.raises(InvalidArgumentError) as info:
        require_io(_normalized(_PY + 'input [ { name: "I" data_type: TYPE_FP32 dims: [ 4 ] } ]'))
    assert str(info.value) == "model configuration for 'm' must specify one or more 'output'"


# --------------------------------------------------------------------------------------------------
# JSON


def test_json_64_bit_fields_are_numbers() -> None:
    cfg = _normalized(
        _PY
        + 'input [ { name: "I" data_type: TYPE_FP32 dims: [ -1, 3 ] reshape { shape: [ 3, -1 ] } } ] '
        + "version_policy { specific { versions: [ 1, 3 ] } } max_batch_size: 4 "
        + "dynamic_batching { max_queue_delay_microseconds: 100 priority_levels: 2 default_priority_level: 1 "
        + "default_queue_policy { default_timeout_microseconds: 7 } "
        + "priority_queue_policy { key: 2 value: { default_timeout_microseconds: 9 } } } "
        + 'model_warmup [ { name: "w" batch_size: 1 inputs { key: "I" '
        + "value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } } ]"
    )
    got = config_to_json(cfg)
    assert got["input"][0]["dims"] == [-1, 3]
    assert got["input"][0]["reshape"] == {"shape": [3, -1]}
    assert got["version_policy"] == {"specific": {"versions": [1, 3]}}
    db = got["dynamic_batching"]
    assert db["max_queue_delay_microseconds"] == 100
    assert db["priority_levels"] == 2
    assert db["default_priority_level"] == 1
    assert db["default_queue_policy"]["default_timeout_microseconds"] == 7
    assert db["priority_queue_policy"] == {
        "2": {
            "timeout_action": "REJECT",
            "default_timeout_microseconds": 9,
            "allow_timeout_override": False,
            "max_queue_size": 0,
        }
    }
    assert got["model_warmup"][0]["inputs"]["I"]["dims"] == [3]


def test_json_sequence_and_ensemble_numbers() -> None:
    cfg = _normalized(
        _SEQ + "direct { max_queue_delay_microseconds: 5 minimum_slot_utilization: 0.5 } "
        'control_input [ { name: "S" '
        + _control("CONTROL_SEQUENCE_START", "fp32_false_true: [0, 1]")
        + ' } ] state [ { input_name: "a" output_name: "b" data_type: TYPE_FP32 dims: [ 2 ] '
        'initial_state [ { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true name: "z" } ] } ] }'
    )
    sb = config_to_json(cfg)["sequence_batching"]
    assert sb["max_sequence_idle_microseconds"] == 1_000_000
    assert sb["direct"] == {"max_queue_delay_microseconds": 5, "minimum_slot_utilization": 0.5}
    assert sb["control_input"][0]["control"][0]["fp32_false_true"] == [0, 1]
    assert all(type(v) is int for v in sb["control_input"][0]["control"][0]["fp32_false_true"])
    assert sb["state"][0]["dims"] == [2]
    assert sb["state"][0]["initial_state"][0]["dims"] == ["2"]  # Triton 2.51 leaves these as strings
    ens = config_to_json(_normalized(_ensemble(_step("a", {"x": "I"}, {"y": "O"}))))
    assert ens["ensemble_scheduling"] == {
        "step": [
            {
                "model_name": "a",
                "model_version": 0,
                "input_map": {"x": "I"},
                "output_map": {"y": "O"},
                "model_namespace": "",
            }
        ]
    }


def test_json_secondary_device_id_stays_a_string_like_triton() -> None:
    cfg = _normalized(_PY + "instance_group [ { kind: KIND_CPU secondary_devices [ { device_id: 3 } ] } ]")
    device = config_to_json(cfg)["instance_group"][0]["secondary_devices"][0]
    assert device == {"kind": "KIND_NVDLA", "device_id": "3"}


def test_json_newer_proto_fields_hidden_unless_set() -> None:
    text = _ensemble(_step("a", {"x": "I"}, {"y": "O"}))
    assert "max_inflight_requests" not in config_to_json(_normalized(text))["ensemble_scheduling"]
    text = text[: -len("}")] + " max_inflight_requests: 5 }"
    assert config_to_json(_normalized(text))["ensemble_scheduling"]["max_inflight_requests"] == 5


def test_json_prints_defaults_and_enum_names() -> None:
    got = config_to_json(_normalized(_PY + _IO))
    assert got["input"][0]["format"] == "FORMAT_NONE"
    assert got["input"][0]["data_type"] == "TYPE_FP32"
    assert got["output"][0]["label_filename"] == ""
    assert got["batch_input"] == [] and got["model_warmup"] == [] and got["metric_tags"] == {}
    assert "dynamic_batching" not in got and "sequence_batching" not in got
    assert list(got)[:4] == ["name", "platform", "backend", "runtime"]
