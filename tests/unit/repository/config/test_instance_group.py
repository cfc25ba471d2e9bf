"""Instance groups against the GPUs the server may use (repository/config/instance_group.py): Triton
core's NormalizeInstanceGroup and ValidateInstanceGroup, with GPU lists handed in, so every rule runs
here without a GPU. The texts without GPUs were read off the reference (tritonserver 2.51 on this
CPU machine, 2026-11-28: a Python model per case, loaded through the repository API)."""

from __future__ import annotations

from typing import Any

import pytest

from inferd.errors import InvalidArgumentError
from inferd.gpu.devices import NO_GPUS, Gpu, SupportedGpus
from inferd.repository import config_to_json, normalize_config, parse_config_text, validate_config

GPU, CPU, MODEL = "KIND_GPU", "KIND_CPU", "KIND_MODEL"


def gpus(*ids: int, min_cc: float = 6.0) -> SupportedGpus:
    """GPUs with these CUDA ids (an H100's particulars, which the rules do not read)."""
    return SupportedGpus(
        tuple(Gpu(i, i, f"GPU-{i:08x}", "NVIDIA H100 80GB HBM3", 85_899_345_920, (9, 0)) for i in ids), min_cc
    )


def config(text: str, backend: str = "python", name: str = "m") -> Any:
    return parse_config_text(f'name: "{name}" backend: "{backend}" {text}', "test")


def placed(text: str, available: SupportedGpus, backend: str = "python", auto_gpu: bool = True) -> list[Any]:
    """The normalised, validated groups as ``/config`` prints them."""
    cfg = config(text, backend)
    normalize_config(cfg, "m", gpus=available, auto_gpu=auto_gpu)
    validate_config(cfg, available)
    return [(g["name"], g["kind"], g["count"], g["gpus"]) for g in config_to_json(cfg)["instance_group"]]


def refused(text: str, available: SupportedGpus, name: str = "m") -> str:
    cfg = config(text, name=name)
    normalize_config(cfg, name, gpus=available)
    with pytest.raises(InvalidArgumentError) as e:
        validate_config(cfg, available)
    return e.value.message


# -- normalisation -------------------------------------------------------------------------------


def test_without_gpus_nothing_changes() -> None:
    assert placed("", NO_GPUS) == [("m", CPU, 1, [])]
    assert placed("instance_group [ { kind: KIND_AUTO count: 3 } ]", NO_GPUS) == [("m_0", CPU, 3, [])]
    assert placed("", NO_GPUS, backend="onnxruntime") == [("m", CPU, 2, [])]


def test_a_model_without_groups_gets_one_instance_on_every_gpu() -> None:
    assert placed("", gpus(0, 1)) == [("m", GPU, 1, [0, 1])]
    # the CPU default of 2 instances is for KIND_CPU groups only
    assert placed("", gpus(0), backend="onnxruntime") == [("m", GPU, 1, [0])]


def test_kind_gpu_without_gpus_means_all_of_them() -> None:
    assert placed("instance_group [ { kind: KIND_GPU count: 2 } ]", gpus(0, 1)) == [("m_0", GPU, 2, [0, 1])]
    assert placed("instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]", gpus(0, 1)) == [("m_0", GPU, 1, [1])]


def test_kind_auto_is_gpu_only_where_every_gpu_it_names_is_there() -> None:
    assert placed("instance_group [ { kind: KIND_AUTO gpus: [ 1 ] } ]", gpus(0, 1)) == [("m_0", GPU, 1, [1])]
    assert placed("instance_group [ { kind: KIND_AUTO } ]", gpus(0, 1)) == [("m_0", GPU, 1, [0, 1])]
    # a GPU it names is missing: KIND_CPU, which then may name none (the reference's text, as without GPUs)
    assert refused("instance_group [ { kind: KIND_AUTO gpus: [ 0, 7 ] } ]", gpus(0, 1)) == (
        "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs"
    )


def test_kind_auto_stays_on_the_cpu_for_a_backend_that_cannot_use_the_gpus() -> None:
    groups = placed("instance_group [ { kind: KIND_AUTO } ]", gpus(0), backend="onnxruntime", auto_gpu=False)
    assert groups == [("m_0", CPU, 2, [])]
    assert placed("", gpus(0), backend="openvino", auto_gpu=False) == [("m", CPU, 1, [])]
    # an explicit KIND_GPU is left to the backend (which says why it cannot)
    assert placed("instance_group [ { kind: KIND_GPU } ]", gpus(0), auto_gpu=False) == [("m_0", GPU, 1, [0])]


def test_cpu_and_model_groups_are_untouched_by_gpus() -> None:
    groups = placed("instance_group [ { kind: KIND_CPU count: 2 }, { kind: KIND_MODEL } ]", gpus(0, 1))
    assert groups == [("m_0", CPU, 2, []), ("m_1", MODEL, 1, [])]


def test_normalisation_is_idempotent() -> None:
    cfg = config("instance_group [ { kind: KIND_AUTO }, { kind: KIND_GPU count: 2 } ]")
    normalize_config(cfg, "m", gpus=gpus(0, 1))
    once = config_to_json(cfg)
    normalize_config(cfg, "m", gpus=gpus(0, 1))
    assert config_to_json(cfg) == once
    assert [g["gpus"] for g in once["instance_group"]] == [[0, 1], [0, 1]]


# -- validation ----------------------------------------------------------------------------------


def test_without_gpus_kind_gpu_is_refused_with_the_references_texts() -> None:
    assert refused("instance_group [ { kind: KIND_GPU } ]", NO_GPUS, "m_gpu") == (
        "instance group m_gpu_0 of model m_gpu has kind KIND_GPU but no GPUs are available"
    )
    # observed on the reference: naming a GPU on a machine without one says which GPUs there are (none)
    assert refused("instance_group [ { kind: KIND_GPU gpus: [ 7 ] } ]", NO_GPUS, "m_gpu7") == (
        "instance group m_gpu7_0 of model m_gpu7 specifies invalid or unsupported gpu id 7. GPUs with at least "
        "the minimum required CUDA compute compatibility of 6.000000 are: "
    )


def test_a_gpu_that_is_not_there_is_refused_naming_those_that_are() -> None:
    assert refused("instance_group [ { kind: KIND_GPU gpus: [ 0, 7 ] } ]", gpus(0, 1)) == (
        "instance group m_0 of model m specifies invalid or unsupported gpu id 7. GPUs with at least "
        "the minimum required CUDA compute compatibility of 6.000000 are: 0, 1"
    )
    # the minimum as C++ prints a double (observed: --min-supported-compute-capability=7.5)
    assert refused("instance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]", gpus(2, min_cc=7.5)).endswith(
        "compute compatibility of 7.500000 are: 2"
    )


def test_a_gpu_group_left_empty_where_gpus_exist_is_refused() -> None:
    cfg = config('instance_group [ { name: "g" kind: KIND_GPU count: 1 } ]')
    normalize_config(cfg, "m")  # normalised without the GPUs: its gpus stay empty
    with pytest.raises(InvalidArgumentError) as e:
        validate_config(cfg, gpus(0))
    assert e.value.message == "instance group g of model m has kind KIND_GPU but specifies no GPUs"


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ("{ kind: KIND_CPU gpus: [ 0 ] }", "has kind KIND_CPU but specifies one or more GPUs"),
        ("{ kind: KIND_MODEL gpus: [ 0 ] }", "has kind KIND_MODEL but specifies one or more GPUs"),
    ],
)
def test_other_kinds_name_no_gpu_where_gpus_exist_too(group: str, message: str) -> None:
    assert refused(f"instance_group [ {group} ]", gpus(0)) == f"instance group m_0 of model m {message}"


def test_the_gpus_ids_are_sorted_as_the_references_set() -> None:
    assert SupportedGpus(gpus(2, 0, 1).gpus).ids == (0, 1, 2)
