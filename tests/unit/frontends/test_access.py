"""Access control: the reference's restriction syntax and messages, API keys, and both front ends'
answers (HTTP 401/403, gRPC UNAUTHENTICATED/PERMISSION_DENIED/UNAVAILABLE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from inferd.frontends.access import (
    GRPC_RESTRICTED_PREFIX,
    AccessConfigError,
    AccessPolicy,
    Category,
    Denial,
    load_keys,
    parse_keys,
    parse_restrictions,
)
from inferd.frontends.grpc.service import InferenceServicer, RpcError
from inferd.frontends.http.routes import route_category
from inferd.server_config import GrpcConfig


def test_restriction_syntax_and_the_references_messages() -> None:
    r = parse_restrictions(["health,metadata:X-Key=v1", "inference:Other=v2"], "http-restricted-api")
    assert r == {
        Category.HEALTH: ("x-key", "v1"),
        Category.METADATA: ("x-key", "v1"),
        Category.INFERENCE: ("other", "v2"),
    }
    with pytest.raises(AccessConfigError, match="unknown restricted api 'nope'"):
        parse_restrictions(["nope:k=v"], "http-restricted-api")
    with pytest.raises(AccessConfigError, match="restricted api 'health' can not be specified in multiple"):
        parse_restrictions(["health:a=1", "health:b=2"], "http-restricted-api")
    with pytest.raises(AccessConfigError, match="option format is"):
        parse_restrictions(["health=1"], "http-restricted-api")
    g = parse_restrictions(["inference:k=v"], "grpc-restricted-protocol", GRPC_RESTRICTED_PREFIX, "protocol")
    assert g == {Category.INFERENCE: ("triton-grpc-protocol-k", "v")}


def test_keys_from_a_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("# comment\nreader: metadata, health\n\nadmin: all\n")
    keys = load_keys(path, {"INFERD_API_KEYS": "infer-only: inference"})
    assert keys == {
        "reader": frozenset({Category.METADATA, Category.HEALTH}),
        "admin": frozenset(Category),
        "infer-only": frozenset({Category.INFERENCE}),
    }
    with pytest.raises(AccessConfigError, match="keys:1: expected"):
        parse_keys("no colon here", "keys")
    with pytest.raises(AccessConfigError, match="unknown API category"):
        parse_keys("k: everything", "keys")
    with pytest.raises(AccessConfigError, match="cannot read the API keys file"):
        load_keys(tmp_path / "missing", {})


def test_policy_checks() -> None:
    policy = AccessPolicy(
        {Category.INFERENCE: ("x-key", "v")},
        {"good": frozenset({Category.INFERENCE}), "meta": frozenset({Category.METADATA})},
        frozenset({Category.HEALTH}),
    )
    assert policy.check(Category.HEALTH, {}) is None  # exempt
    assert policy.check(Category.METADATA, {}) == (Denial.UNAUTHENTICATED, "")
    assert policy.check(Category.METADATA, {"authorization": "Bearer wrong"}) == (Denial.UNAUTHENTICATED, "")
    assert policy.check(Category.METADATA, {"authorization": "Basic meta"}) == (Denial.UNAUTHENTICATED, "")
    assert policy.check(Category.METADATA, {"authorization": "bearer meta"}) is None
    assert policy.check(Category.INFERENCE, {"authorization": "Bearer meta"}) == (Denial.FORBIDDEN, "")
    assert policy.check(Category.INFERENCE, {"authorization": "Bearer good"}) == (Denial.RESTRICTED, "x-key")
    assert policy.check(Category.INFERENCE, {"authorization": "Bearer good", "x-key": "v"}) is None
    assert not AccessPolicy().enabled and AccessPolicy().check(Category.INFERENCE, {}) is None


@pytest.mark.parametrize(
    ("joined", "allowed"),
    # HTTP joins a repeated header's values with commas; the reference reads the first value
    [("v", True), ("v,v", True), ("v,other", True), ("other,v", False), ("vv", False), ("", False)],
)
def test_a_repeated_restriction_header_counts_by_its_first_value(joined: str, allowed: bool) -> None:
    policy = AccessPolicy({Category.INFERENCE: ("x-key", "v")})
    assert (policy.check(Category.INFERENCE, {"x-key": joined}) is None) is allowed


@pytest.mark.parametrize(
    ("path", "category"),
    [
        ("/v2/health/live", Category.HEALTH),
        ("/v2/models/m/ready", Category.HEALTH),
        ("/v2", Category.METADATA),
        ("/v2/models/m/versions/1", Category.METADATA),
        ("/v2/models/m/config", Category.MODEL_CONFIG),
        ("/v2/models/m/stats", Category.STATISTICS),
        ("/v2/models/stats", Category.STATISTICS),
        ("/v2/models/m/infer", Category.INFERENCE),
        ("/v2/models/m/generate_stream", Category.INFERENCE),
        ("/v2/repository/index", Category.MODEL_REPOSITORY),
        ("/v2/systemsharedmemory/status", Category.SHARED_MEMORY),
        ("/v2/trace/setting", Category.TRACE),
        ("/v2/logging", Category.LOGGING),
        ("/nothing", None),
    ],
)
def test_route_categories(path: str, category: Category | None) -> None:
    assert route_category(path) == category


def test_grpc_answers(core: Any) -> None:
    servicer = InferenceServicer(
        core,
        GrpcConfig(),
        access=AccessPolicy(
            parse_restrictions(
                ["health:k=v"], "grpc-restricted-protocol", GRPC_RESTRICTED_PREFIX, "protocol"
            ),
            {"key": frozenset({Category.METADATA, Category.HEALTH})},
        ),
    )

    def code(rpc: str, metadata: tuple[tuple[str, str], ...]) -> grpc.StatusCode | None:
        try:
            servicer.authorize(rpc, metadata)
        except RpcError as e:
            return e.code
        return None

    assert code("ServerMetadata", ()) is grpc.StatusCode.UNAUTHENTICATED
    assert code("ServerMetadata", (("authorization", "Bearer key"),)) is None
    assert code("ModelInfer", (("authorization", "Bearer key"),)) is grpc.StatusCode.PERMISSION_DENIED
    assert code("ServerLive", (("authorization", "Bearer key"),)) is grpc.StatusCode.UNAVAILABLE
    assert code("ServerLive", (("authorization", "Bearer key"), ("triton-grpc-protocol-k", "v"))) is None
    key = ("authorization", "Bearer key")  # repeated metadata: the first value counts, as the reference's
    assert code("ServerLive", (key, ("triton-grpc-protocol-k", "v"), ("triton-grpc-protocol-k", "x"))) is None
    assert code("ServerLive", (key, ("triton-grpc-protocol-k", "x"), ("triton-grpc-protocol-k", "v"))) is (
        grpc.StatusCode.UNAVAILABLE
    )
    with pytest.raises(
        RpcError, match="This protocol is restricted, expecting header 'triton-grpc-protocol-k'"
    ):
        servicer.health_check(b"", (("authorization", "Bearer key"),))
