"""tritonserver 2.51's flags without a ServerOptions field: every one of the reference's flags parses;
the ignored ones are noted once each with why, the deprecated trace flags become --trace-config
settings (which a --trace-config of the same setting overrides), the SageMaker and Vertex AI flags are
options, and the ``tritonserver`` command runs ``inferd serve``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferd import cli, compat_flags
from inferd.cli import build_parser, options_from_args
from inferd.compat_flags import DEPRECATED_TRACE, IGNORED
from inferd.options import ServerOptions
from inferd.trace.config import TENSORS, TIMESTAMPS, parse_trace_config

_LISTED = """
--allow-cpu-metrics --allow-gpu-metrics --allow-grpc --allow-http --allow-metrics --allow-sagemaker
--allow-vertex-ai --backend-config --backend-directory --buffer-manager-thread-count --cache-config
--cache-directory --cuda-memory-pool-byte-size --cuda-virtual-address-size --disable-auto-complete-config
--enable-peer-access --exit-on-error --exit-timeout-secs --grpc-address --grpc-header-forward-pattern
--grpc-http2-max-ping-strikes --grpc-http2-max-pings-without-data
--grpc-http2-min-recv-ping-interval-without-data --grpc-infer-allocation-pool-size
--grpc-infer-response-compression-level --grpc-keepalive-permit-without-calls --grpc-keepalive-time
--grpc-keepalive-timeout --grpc-max-connection-age --grpc-max-connection-age-grace --grpc-port
--grpc-restricted-protocol --grpc-root-cert --grpc-server-cert --grpc-server-key --grpc-use-ssl
--grpc-use-ssl-mutual --host-policy --http-address --http-header-forward-pattern --http-port
--http-restricted-api --http-thread-count --id --load-model --log-error --log-file --log-format --log-info
--log-verbose --log-warning --metrics-address --metrics-config --metrics-interval-ms --metrics-port
--min-supported-compute-capability --model-config-name --model-control-mode --model-load-gpu-limit
--model-load-retry-count --model-load-thread-count --model-namespacing --model-repository --model-store
--pinned-memory-pool-byte-size --rate-limit --rate-limit-resource --repoagent-directory
--repository-poll-secs --response-cache-byte-size --reuse-grpc-port --reuse-http-port --sagemaker-port
--sagemaker-safe-port-range --sagemaker-thread-count --strict-model-config --strict-readiness
--trace-config --trace-count --trace-file --trace-level --trace-log-frequency --trace-rate
--vertex-ai-default-model --vertex-ai-port --vertex-ai-thread-count
"""
#: every flag ``tritonserver --help`` of 2.51 (CPU build) lists
TRITONSERVER_2_51_FLAGS = _LISTED.split()


def serve_flags(command: str = "serve") -> set[str]:
    sub = build_parser()._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr, index]
    return {o for a in sub._actions for o in a.option_strings if o.startswith("--")}


@pytest.mark.parametrize("command", ["serve", "tritonserver", "serve-ray"])
def test_every_flag_of_tritonserver_2_51_is_a_flag(command: str) -> None:
    assert set(TRITONSERVER_2_51_FLAGS) - serve_flags(command) == set()


def test_the_installed_reference_lists_no_other_flag() -> None:
    """Against the real binary where scripts/reference/setup.sh installed it (skipped elsewhere)."""
    anchor = Path(os.environ.get("ANCHOR_DIR") or Path(os.environ.get("TMPDIR", "/tmp")) / "inferd-reference")
    found = sorted(
        anchor.glob("venv-triton/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver")
    )
    if not found:
        pytest.skip(f"the reference is not installed under {anchor} (scripts/reference/setup.sh)")
    libs = sorted(anchor.glob("venv-triton/lib/python3*/site-packages/nvidia_pytriton.libs"))
    env = {**os.environ, "LD_LIBRARY_PATH": ":".join(str(p) for p in libs)}
    r = subprocess.run([str(found[0]), "--help"], capture_output=True, text=True, env=env, timeout=60)
    import re

    listed = set(re.findall(r"^\s*(--[a-z0-9-]+)", r.stdout + r.stderr, re.MULTILINE)) - {"--help"}
    assert listed == set(TRITONSERVER_2_51_FLAGS)


def test_each_compat_flag_is_no_options_field_and_listed_once() -> None:
    flags = [f.flag for f in (*IGNORED, *DEPRECATED_TRACE)]
    assert len(flags) == len(set(flags))
    fields = {"--" + name.replace("_", "-") for name in ServerOptions.__dataclass_fields__}
    assert set(flags) & fields == set()


def parsed(*argv: str) -> tuple[ServerOptions, list[str]]:
    args = build_parser().parse_args(["serve", "--model-repository=/m", *argv])
    notes = compat_flags.apply(args)
    return options_from_args(args), notes


def test_ignored_flags_change_nothing_and_are_each_noted_once_with_why() -> None:
    argv = (
        "--pinned-memory-pool-byte-size=268435456",
        "--cuda-memory-pool-byte-size=0:67108864",
        "--cuda-memory-pool-byte-size=1:67108864",
        "--repoagent-directory=/opt/tritonserver/repoagents",
        "--sagemaker-thread-count=8",
        "--buffer-manager-thread-count",
        "4",
        "--enable-peer-access",
        "--host-policy=gpu0,numa-node=0",
    )
    options, notes = parsed(*argv)
    assert options == ServerOptions(model_repository=[Path("/m")])
    assert notes == [
        "ignoring --repoagent-directory=/opt/tritonserver/repoagents: repository agents are Python (checksum "
        "built in, others through the inferd.repoagents entry point); C agent libraries "
        "(libtritonrepoagent_*.so) are not loaded",
        "ignoring --buffer-manager-thread-count=4: tensors stay in host memory: no buffer manager",
        "ignoring --pinned-memory-pool-byte-size=268435456: inferd runs on the CPU: no pinned memory pool",
        "ignoring --cuda-memory-pool-byte-size=0:67108864,1:67108864: inferd runs on the CPU: no CUDA memory pool",
        "ignoring --enable-peer-access=True: inferd runs on the CPU: no GPU peer access",
        "ignoring --host-policy=gpu0,numa-node=0: NUMA host policies are not applied (pin the process with "
        "numactl, taskset or Kubernetes' CPU manager)",
        "ignoring --sagemaker-thread-count=8: SageMaker's API is served on the event loop: no thread pool to "
        "size",
    ]


def test_no_compat_flag_no_note() -> None:
    assert parsed()[1] == []


@pytest.mark.parametrize(("argv", "value"), [((), True), (("--allow-gpu-metrics=false",), False)])
def test_allow_gpu_metrics_is_an_option_now(argv: tuple[str, ...], value: bool) -> None:
    """No longer ignored: the GPU families (metrics/gpu.py) where GPUs are found, default on."""
    options, notes = parsed(*argv)
    assert options.allow_gpu_metrics is value and notes == []


def test_min_supported_compute_capability_is_an_option_not_an_ignored_flag() -> None:
    """It picks the GPUs model instances may use (gpu/devices.py), the reference's default 6.0."""
    assert ServerOptions().min_supported_compute_capability == 6.0
    options, notes = parsed("--min-supported-compute-capability=8.0")
    assert (options.min_supported_compute_capability, notes) == (8.0, [])


@pytest.mark.parametrize(
    "argv",
    [
        ["--pinned-memory-pool-byte-size=lots"],
        ["--min-supported-compute-capability=x"],
        ["--allow-gpu-metrics=maybe"],
        ["--trace-rate=often"],
    ],
)
def test_a_malformed_value_still_stops_the_start(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["serve", "--model-repository=/m", *argv])
    assert e.value.code == 2
    assert argv[0].split("=")[0] in capsys.readouterr().err


def test_the_sagemaker_and_vertex_ai_flags_are_options() -> None:
    """Their front ends are served (frontends/sagemaker.py, vertex.py); only the thread counts are ignored."""
    options, notes = parsed(
        "--allow-sagemaker=true",
        "--sagemaker-port=9000",
        "--sagemaker-safe-port-range=8000-9000",
        "--allow-vertex-ai",
        "--vertex-ai-port=9001",
        "--vertex-ai-default-model=m",
    )
    assert notes == []
    assert (options.allow_sagemaker, options.sagemaker_port, options.sagemaker_safe_port_range) == (
        True,
        9000,
        "8000-9000",
    )
    assert (options.allow_vertex_ai, options.vertex_ai_port, options.vertex_ai_default_model) == (
        True,
        9001,
        "m",
    )


def test_deprecated_trace_flags_are_trace_config_settings() -> None:
    options, notes = parsed(
        "--trace-file=/tmp/t.json",
        "--trace-level=TIMESTAMPS",
        "--trace-level=TENSORS",
        "--trace-rate=10",
        "--trace-count=5",
        "--trace-log-frequency=50",
    )
    assert options.trace_config == [
        "triton,file=/tmp/t.json",
        "level=TIMESTAMPS",
        "level=TENSORS",
        "rate=10",
        "count=5",
        "triton,log-frequency=50",
    ]
    assert notes[0] == "--trace-file is deprecated: read as --trace-config triton,file=/tmp/t.json"
    cfg = parse_trace_config(options.trace_config)
    assert cfg.level == TIMESTAMPS | TENSORS and cfg.rate == 10 and cfg.count == 5
    assert cfg.file == "/tmp/t.json" and cfg.log_frequency == 50


def test_trace_config_overrides_the_deprecated_flag() -> None:
    options, _ = parsed(
        "--trace-config=rate=3", "--trace-rate=10", "--trace-config=triton,file=/b", "--trace-file=/a"
    )
    cfg = parse_trace_config(options.trace_config)
    assert cfg.rate == 3 and cfg.file == "/b"


def test_the_ignored_flags_are_logged_once_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def fake_serve(options: ServerOptions, logs: object = None) -> int:
        return 0

    monkeypatch.setattr(cli, "serve", fake_serve)
    monkeypatch.setattr(cli, "hard_exit", lambda code: None)
    monkeypatch.setattr(cli, "from_options", lambda options: None)
    with caplog.at_level(logging.WARNING, logger="inferd"):
        cli.main(
            [
                "serve",
                f"--model-repository={tmp_path}",
                "--repoagent-directory=/opt/b",
                "--http-thread-count=8",
            ]
        )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ignoring")]
    assert lines == [
        "ignoring --repoagent-directory=/opt/b: repository agents are Python (checksum built in, others "
        "through the inferd.repoagents entry point); C agent libraries (libtritonrepoagent_*.so) are not loaded",
        "ignoring --http-thread-count=8: HTTP is served on the event loop: no thread pool to size",
    ]


def test_tritonserver_command_is_inferd_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_main(argv: list[str] | None = None) -> int:
        assert argv is None  # it parses sys.argv, as `inferd` does: models then see Triton's argv
        seen.append(sys.argv[1:])
        return 7

    monkeypatch.setattr(sys, "argv", ["tritonserver", "--model-store=/m", "--log-verbose=1"])
    monkeypatch.setattr(cli, "main", fake_main)
    assert cli.tritonserver() == 7
    assert seen == [["serve", "--model-store=/m", "--log-verbose=1"]]


def test_inferd_tritonserver_parses_as_serve() -> None:
    """An image whose ENTRYPOINT is ``inferd`` runs a container's ``args: [tritonserver, ...]``."""
    argv = ["tritonserver", "--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080"]
    options = options_from_args(build_parser().parse_args(argv))
    assert options.model_repository == [Path("/mnt/models")]
    assert (options.http_port, options.grpc_port) == (8080, 9000)


def test_tritonserver_refuses_an_unknown_flag_as_the_reference(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recorded on Triton 2.51: ``tritonserver --bogus=1`` prints ``<argv0>: unrecognized option
    '--bogus=1'`` and its usage, exit status 1, before it looks at any other flag."""
    monkeypatch.setattr(sys, "argv", ["tritonserver", "--bogus=1"])
    assert cli.tritonserver() == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "tritonserver: unrecognized option '--bogus=1'"
    assert err[1].startswith("Usage: tritonserver --model-repository PATH")


@pytest.mark.parametrize(
    ("argv", "unknown"),
    [
        (["--model-store=/m", "--log-verbose=1"], None),
        (["--model-repository", "/m", "--exit-timeout-secs", "-1"], None),  # a negative value, not a flag
        (["--model-repository", "/m", "--", "--bogus"], None),
        (["--model-repository=/m", "--grpc-use-ssl=true", "--bogus", "x"], "--bogus"),
        (["-x"], "-x"),
    ],
)
def test_unknown_option(argv: list[str], unknown: str | None) -> None:
    assert cli.unknown_option(argv) == unknown
