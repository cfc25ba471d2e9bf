"""The address flags as a socket binds them (frontends/address.py)."""

from __future__ import annotations

import pytest

from inferd.frontends.address import bind_host, grpc_target


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("0.0.0.0", "0.0.0.0"),
        ("ipv4:127.0.0.1", "127.0.0.1"),
        ("ipv6:[::1]", "::1"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("::", "::"),
        ("localhost", "localhost"),
        ("", None),
    ],
)
def test_bind_host(address: str, host: str | None) -> None:
    assert bind_host(address) == host


def test_grpc_target_brackets_an_ipv6_host() -> None:
    assert grpc_target("ipv6:[::1]", 8001) == "[::1]:8001"
    assert grpc_target("0.0.0.0", 8001) == "0.0.0.0:8001"
    assert grpc_target("", 8001) == "0.0.0.0:8001"
