"""``serve``: a SageMaker container's entry point, as Triton's ``docker/sagemaker/serve`` starts it.

SageMaker runs a bring-your-own-container image as ``docker run <image> serve``, with the model (a
single-model endpoint) in ``/opt/ml/model`` or an empty repository and models loaded as they are
asked for (``SAGEMAKER_MULTI_MODEL=true``). This reads the same ``SAGEMAKER_*`` variables NVIDIA's
script reads, refuses the same layouts with its messages, and runs ``inferd serve
--allow-sagemaker=true --allow-http=false --model-control-mode=explicit`` with the flags they make
(``plan``, pure; ``main`` prints and runs it). Beyond the script: ``SAGEMAKER_SINGLE_MODEL_REPO``
and ``SAGEMAKER_MULTI_MODEL_REPO`` may move the two repositories (the script fixes them), a
multi-model endpoint's ``--sagemaker-models-root`` follows ``SAGEMAKER_MODELS_ROOT`` when set, and
``SAGEMAKER_TRITON_LOG_VERBOSE=true`` reads as level 1 (inferd's ``--log-verbose`` is a number).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Plan", "ServeRefused", "main", "plan"]

SINGLE_MODEL_REPO = "/opt/ml/model/"
MULTI_MODEL_REPO = "/tmp/sagemaker"
INFERENCE_TYPES = ("infer", "generate", "generate_stream")


class ServeRefused(Exception):
    """The layout or a variable the script refuses: ``lines`` are what it prints (exit 1)."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass
class Plan:
    """What ``serve`` runs: ``inferd`` with ``argv``, the environment changed by ``env``, after
    printing ``notes``."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: a folder to make first (a multi-model endpoint's empty repository)
    make: Path | None = None


def _flag(environ: Mapping[str, str], var: str, flag: str, default: str | None = None) -> list[str]:
    value = environ.get(var, "")
    if value:
        return [f"{flag}={value}"]
    return [] if default is None else [f"{flag}={default}"]


def _verbose(value: str) -> str:
    """A log level as tritonserver's --log-verbose reads it (a number, or true/false)."""
    return {"true": "1", "false": "0"}.get(value.strip().lower(), value)


def _gpu_count() -> int:
    from inferd.gpu.devices import machine_gpus

    return len(machine_gpus())


def plan(environ: Mapping[str, str] = os.environ) -> Plan:
    """The command line and environment ``docker/sagemaker/serve`` would make of ``environ``
    (ServeRefused with its messages where it exits 1). Reads the single-model repository's folder."""
    override_ping = environ.get("SAGEMAKER_TRITON_OVERRIDE_PING_MODE", "")
    ping_mode = override_ping or "ready"
    repo = environ.get("SAGEMAKER_SINGLE_MODEL_REPO") or SINGLE_MODEL_REPO
    out = Plan([])
    multi_model = environ.get("SAGEMAKER_MULTI_MODEL", "") == "true"
    if multi_model:
        repo = environ.get("SAGEMAKER_MULTI_MODEL_REPO") or MULTI_MODEL_REPO
        out.make = Path(repo)
        ping_mode = override_ping or "live"
        out.notes.append(f'Triton is running in SageMaker MME mode. Using Triton ping mode: "{ping_mode}"')
    out.env["SAGEMAKER_TRITON_PING_MODE"] = ping_mode
    args = [f"--model-repository={repo}"]
    args += _flag(environ, "SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING", "--model-namespacing", "true")
    args += _flag(environ, "SAGEMAKER_BIND_TO_PORT", "--sagemaker-port")
    args += _flag(environ, "SAGEMAKER_SAFE_PORT_RANGE", "--sagemaker-safe-port-range")
    args += _flag(environ, "SAGEMAKER_TRITON_ALLOW_GRPC", "--allow-grpc", "false")
    args += _flag(environ, "SAGEMAKER_TRITON_ALLOW_METRICS", "--allow-metrics", "false")
    args += _flag(environ, "SAGEMAKER_TRITON_METRICS_PORT", "--metrics-port")
    args += _flag(environ, "SAGEMAKER_TRITON_GRPC_PORT", "--grpc-port")
    args += _flag(environ, "SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT", "--buffer-manager-thread-count")
    args += _flag(environ, "SAGEMAKER_TRITON_THREAD_COUNT", "--sagemaker-thread-count")
    args.append(f"--log-verbose={_verbose(environ.get('SAGEMAKER_TRITON_LOG_VERBOSE', '') or 'true')}")
    args += _flag(environ, "SAGEMAKER_TRITON_LOG_INFO", "--log-info")
    args += _flag(environ, "SAGEMAKER_TRITON_LOG_WARNING", "--log-warning")
    args += _flag(environ, "SAGEMAKER_TRITON_LOG_ERROR", "--log-error")
    shm = environ.get("SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE", "") or "16777216"  # 16 MB
    args.append(f"--backend-config=python,shm-default-byte-size={shm}")
    growth = environ.get("SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE", "") or "1048576"  # 1 MB
    args.append(f"--backend-config=python,shm-growth-byte-size={growth}")
    if environ.get("SAGEMAKER_TRITON_TENSORFLOW_VERSION"):
        args.append(f"--backend-config=tensorflow,version={environ['SAGEMAKER_TRITON_TENSORFLOW_VERSION']}")
    limit = environ.get("SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT", "")
    if limit:
        args += [f"--model-load-gpu-limit={i}:{limit}" for i in range(_gpu_count())]
    if environ.get("SAGEMAKER_MODELS_ROOT"):
        args.append(f"--sagemaker-models-root={environ['SAGEMAKER_MODELS_ROOT']}")
    args += shlex.split(environ.get("SAGEMAKER_TRITON_ADDITIONAL_ARGS", ""))

    folder = Path(repo)
    if not multi_model and (folder / "config.pbtxt").is_file():
        raise ServeRefused(
            "ERROR: Incorrect directory structure.",
            "       Model directory needs to contain the top level folder",
        )
    kind = environ.get("SAGEMAKER_TRITON_INFERENCE_TYPE", "")
    if kind and kind not in INFERENCE_TYPES:
        raise ServeRefused(
            f"ERROR: Invalid SAGEMAKER_TRITON_INFERENCE_TYPE '{kind}'",
            "       Must be one of: infer, generate, generate_stream",
        )
    default = environ.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", "")
    if not multi_model and default:
        if not (folder / default).is_dir():
            raise ServeRefused(
                f"ERROR: Directory with provided SAGEMAKER_TRITON_DEFAULT_MODEL_NAME {default} does not exist"
            )
        args.append(f"--load-model={default}")
    elif not multi_model:
        try:
            models = sorted(e.name for e in os.scandir(folder) if e.is_dir())
        except OSError:
            models = []
        if not models:
            raise ServeRefused("ERROR: No model found in model repository")
        if len(models) > 1:
            raise ServeRefused(
                "ERROR: More than 1 model directory found in model repository.",
                "       Either provide a single directory or set SAGEMAKER_TRITON_DEFAULT_MODEL_NAME to run the "
                "ensemble backend.",
                f"       Directories found in model repository: {' '.join(models)}",
            )
        out.notes += [
            "WARNING: No SAGEMAKER_TRITON_DEFAULT_MODEL_NAME provided.",
            f"         Starting with the only existing model directory {models[0]}",
        ]
        out.env["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] = models[0]
        args.append(f"--load-model={models[0]}")
    out.argv = [
        "serve",
        "--allow-sagemaker=true",
        "--allow-http=false",
        "--model-control-mode=explicit",
        *args,
    ]
    return out


def main() -> int:
    """The ``serve`` console script (any arguments are ignored, as SageMaker passes only ``serve``)."""
    try:
        p = plan()
    except ServeRefused as e:
        print("\n".join(e.lines), flush=True)
        return 1
    for note in p.notes:
        print(note, flush=True)
    if p.make is not None:
        p.make.mkdir(parents=True, exist_ok=True)
    os.environ.update(p.env)
    from inferd.cli import main as inferd_main

    sys.argv[:] = [""]  # what models see (cli.main does the same for its own command line)
    return inferd_main(p.argv)


if __name__ == "__main__":
    sys.exit(main())
