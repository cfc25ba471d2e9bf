"""``inferd serve-ray``'s flags: what the Serve deployment gets (no cluster needed)."""

from __future__ import annotations

import pytest

from inferd.cli import build_parser
from inferd.rayserve.deploy import deployment_options


def _args(*flags: str) -> object:
    return build_parser().parse_args(["serve-ray", "--model-repository=s3://b/p", *flags])


def test_fixed_replicas_without_autoscaling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("HOME_SECRET", "not forwarded")
    out = deployment_options(_args("--min-replicas=2", "--replica-cpus=0.5"))  # type: ignore[arg-type]
    assert out["num_replicas"] == 2 and "autoscaling_config" not in out
    env = out["ray_actor_options"]["runtime_env"]["env_vars"]
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9" and "HOME_SECRET" not in env
    assert out["ray_actor_options"]["num_cpus"] == 0.5


def test_autoscaling_between_min_and_max() -> None:
    out = deployment_options(_args("--max-replicas=3", "--target-ongoing-requests=2"))  # type: ignore[arg-type]
    auto = out["autoscaling_config"]
    assert (auto["min_replicas"], auto["max_replicas"], auto["target_ongoing_requests"]) == (1, 3, 2.0)


def test_bad_replica_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="--min-replicas <= --max-replicas"):
        deployment_options(_args("--min-replicas=3", "--max-replicas=2"))  # type: ignore[arg-type]
