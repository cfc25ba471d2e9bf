"""The TLS flags read together before a server starts (frontends/tls.py ``check_flags``): every
combination that would protect less than it names is refused with the missing flag, files given but
unused are warned about."""

from __future__ import annotations

import pytest

from inferd.errors import InvalidArgumentError
from inferd.frontends.tls import check_flags
from inferd.options import ServerOptions

REFUSED = [
    # mutual TLS with no CA: grpc.aio refuses it, the lean server would accept every client
    ({"grpc_use_ssl_mutual": True, "grpc_server_cert": "c", "grpc_server_key": "k"}, "--grpc-root-cert"),
    ({"grpc_use_ssl": True, "grpc_use_ssl_mutual": True}, "--grpc-root-cert"),
    ({"grpc_use_ssl": True, "grpc_server_key": "k"}, "--grpc-server-cert"),
    ({"grpc_use_ssl": True, "grpc_server_cert": "c"}, "--grpc-server-key"),
    ({"grpc_use_ssl": True}, "--grpc-server-cert"),
    # a client CA on an HTTP port with no TLS: it would be served in plain text
    ({"http_ssl_root_cert": "ca"}, "--http-ssl-cert"),
    ({"http_ssl_root_cert": "ca", "http_ssl_cert": "c"}, "--http-ssl-key"),
    ({"http_ssl_cert": "c"}, "--http-ssl-key"),
    ({"http_ssl_key": "k"}, "--http-ssl-cert"),
]


@pytest.mark.parametrize(("flags", "missing"), REFUSED)
def test_a_combination_that_protects_less_than_it_names_is_refused(
    flags: dict[str, object], missing: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=f"needs.*{missing}"):
        check_flags(ServerOptions(**flags))  # type: ignore[arg-type]


ACCEPTED = [
    ({}, []),
    ({"http_ssl_cert": "c", "http_ssl_key": "k"}, []),
    ({"http_ssl_cert": "c", "http_ssl_key": "k", "http_ssl_root_cert": "ca"}, []),
    ({"grpc_use_ssl": True, "grpc_server_cert": "c", "grpc_server_key": "k"}, []),
    (
        {
            "grpc_use_ssl_mutual": True,
            "grpc_server_cert": "c",
            "grpc_server_key": "k",
            "grpc_root_cert": "ca",
        },
        [],
    ),
    # files given but not used: served, with a warning that says so
    (
        {"grpc_server_cert": "c", "grpc_server_key": "k"},
        ["--grpc-server-cert, --grpc-server-key given without"],
    ),
    ({"grpc_root_cert": "ca"}, ["--grpc-root-cert given without --grpc-use-ssl"]),
    (
        {"grpc_use_ssl": True, "grpc_server_cert": "c", "grpc_server_key": "k", "grpc_root_cert": "ca"},
        ["--grpc-root-cert given without --grpc-use-ssl-mutual"],
    ),
]


@pytest.mark.parametrize(("flags", "warnings"), ACCEPTED)
def test_a_combination_that_means_what_it_says_starts(flags: dict[str, object], warnings: list[str]) -> None:
    got = check_flags(ServerOptions(**flags))  # type: ignore[arg-type]
    assert len(got) == len(warnings)
    for line, start in zip(got, warnings, strict=True):
        assert line.startswith(start)
