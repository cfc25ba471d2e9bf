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


def test_the_proxies_answer_within_the_request_timeout() -> None:
    """Serve's proxies hold a request for ever by default (with Ray's object store down, every one
    hung 90 s and more): serve-ray gives them --request-timeout-s, 60 s unless told."""
    from inferd.cli import options_from_args
    from inferd.rayserve.deploy import proxy_options

    args = _args()
    http, grpc = proxy_options(args, options_from_args(args))  # type: ignore[arg-type]
    assert http["request_timeout_s"] == 60.0 and grpc is not None and grpc["request_timeout_s"] == 60.0
    args = _args("--request-timeout-s=0", "--allow-grpc=false")
    http, grpc = proxy_options(args, options_from_args(args))  # type: ignore[arg-type]
    assert http["request_timeout_s"] is None and grpc is None
    args = _args("--request-timeout-s=-1")
    with pytest.raises(ValueError, match="--request-timeout-s must be 0"):
        proxy_options(args, options_from_args(args))  # type: ignore[arg-type]
