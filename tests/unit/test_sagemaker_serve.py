"""``serve`` (inferd/sagemaker_serve.py): the command line and environment NVIDIA's docker/sagemaker/serve
makes of the SAGEMAKER_* variables, and its refusals with its messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.cli import build_parser, options_from_args
from inferd.sagemaker_serve import ServeRefused, plan


def repo(root: Path, *names: str) -> Path:
    for n in names:
        (root / n).mkdir(parents=True)
    return root


def test_the_only_model_of_a_single_model_endpoint(tmp_path: Path) -> None:
    r = repo(tmp_path / "model", "m")
    p = plan({"SAGEMAKER_SINGLE_MODEL_REPO": str(r)})
    assert p.argv == [
        "serve",
        "--allow-sagemaker=true",
        "--allow-http=false",
        "--model-control-mode=explicit",
        f"--model-repository={r}",
        "--model-namespacing=true",
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--log-verbose=1",
        "--backend-config=python,shm-default-byte-size=16777216",
        "--backend-config=python,shm-growth-byte-size=1048576",
        "--load-model=m",
    ]
    assert p.env == {"SAGEMAKER_TRITON_PING_MODE": "ready", "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m"}
    assert p.notes == [
        "WARNING: No SAGEMAKER_TRITON_DEFAULT_MODEL_NAME provided.",
        "         Starting with the only existing model directory m",
    ]
    options = options_from_args(build_parser().parse_args(p.argv))  # every flag is inferd's
    assert options.allow_sagemaker and not options.allow_http and options.load_model == ["m"]


def test_every_variable_becomes_its_flag(tmp_path: Path) -> None:
    r = repo(tmp_path / "model", "a", "b")
    env = {
        "SAGEMAKER_SINGLE_MODEL_REPO": str(r),
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "b",
        "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING": "false",
        "SAGEMAKER_BIND_TO_PORT": "9000",
        "SAGEMAKER_SAFE_PORT_RANGE": "8000-9999",
        "SAGEMAKER_TRITON_ALLOW_GRPC": "true",
        "SAGEMAKER_TRITON_ALLOW_METRICS": "true",
        "SAGEMAKER_TRITON_METRICS_PORT": "8002",
        "SAGEMAKER_TRITON_GRPC_PORT": "8001",
        "SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT": "2",
        "SAGEMAKER_TRITON_THREAD_COUNT": "4",
        "SAGEMAKER_TRITON_LOG_VERBOSE": "false",
        "SAGEMAKER_TRITON_LOG_INFO": "true",
        "SAGEMAKER_TRITON_LOG_WARNING": "true",
        "SAGEMAKER_TRITON_LOG_ERROR": "true",
        "SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE": "1000",
        "SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE": "10",
        "SAGEMAKER_TRITON_TENSORFLOW_VERSION": "2",
        "SAGEMAKER_TRITON_OVERRIDE_PING_MODE": "live",
        "SAGEMAKER_TRITON_ADDITIONAL_ARGS": "--exit-timeout-secs=5 --id 'my server'",
    }
    p = plan(env)
    assert p.argv[4:] == [
        f"--model-repository={r}",
        "--model-namespacing=false",
        "--sagemaker-port=9000",
        "--sagemaker-safe-port-range=8000-9999",
        "--allow-grpc=true",
        "--allow-metrics=true",
        "--metrics-port=8002",
        "--grpc-port=8001",
        "--buffer-manager-thread-count=2",
        "--sagemaker-thread-count=4",
        "--log-verbose=0",
        "--log-info=true",
        "--log-warning=true",
        "--log-error=true",
        "--backend-config=python,shm-default-byte-size=1000",
        "--backend-config=python,shm-growth-byte-size=10",
        "--backend-config=tensorflow,version=2",
        "--exit-timeout-secs=5",
        "--id",
        "my server",
        "--load-model=b",
    ]
    assert p.env == {"SAGEMAKER_TRITON_PING_MODE": "live"}
    options_from_args(build_parser().parse_args(p.argv))


def test_a_multi_model_endpoint(tmp_path: Path) -> None:
    p = plan({"SAGEMAKER_MULTI_MODEL": "true", "SAGEMAKER_MULTI_MODEL_REPO": str(tmp_path / "mme")})
    assert p.make == tmp_path / "mme"
    assert f"--model-repository={tmp_path / 'mme'}" in p.argv and not any("--load-model" in a for a in p.argv)
    assert p.env == {"SAGEMAKER_TRITON_PING_MODE": "live"}
    assert p.notes == ['Triton is running in SageMaker MME mode. Using Triton ping mode: "live"']
    default = plan({"SAGEMAKER_MULTI_MODEL": "true"})
    assert "--model-repository=/tmp/sagemaker" in default.argv


@pytest.mark.parametrize(
    ("layout", "env", "lines"),
    [
        (
            ["config.pbtxt"],
            {},
            (
                "ERROR: Incorrect directory structure.",
                "       Model directory needs to contain the top level folder",
            ),
        ),
        ([], {}, ("ERROR: No model found in model repository",)),
        (
            ["a/", "b/"],
            {},
            (
                "ERROR: More than 1 model directory found in model repository.",
                "       Either provide a single directory or set SAGEMAKER_TRITON_DEFAULT_MODEL_NAME to run the "
                "ensemble backend.",
                "       Directories found in model repository: a b",
            ),
        ),
        (
            ["a/"],
            {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "z"},
            ("ERROR: Directory with provided SAGEMAKER_TRITON_DEFAULT_MODEL_NAME z does not exist",),
        ),
        (
            ["a/"],
            {"SAGEMAKER_TRITON_INFERENCE_TYPE": "x"},
            (
                "ERROR: Invalid SAGEMAKER_TRITON_INFERENCE_TYPE 'x'",
                "       Must be one of: infer, generate, generate_stream",
            ),
        ),
    ],
)
def test_the_scripts_refusals(
    tmp_path: Path, layout: list[str], env: dict[str, str], lines: tuple[str, ...]
) -> None:
    r = tmp_path / "model"
    r.mkdir()
    for entry in layout:
        (r / entry).mkdir() if entry.endswith("/") else (r / entry).write_text("")
    with pytest.raises(ServeRefused) as e:
        plan({"SAGEMAKER_SINGLE_MODEL_REPO": str(r), **env})
    assert e.value.lines == lines
