"""TLS for every port: one way to build a server's SSL context from certificate files.

HTTP and metrics take ``--http-ssl-cert/--http-ssl-key`` (``--http-ssl-root-cert``: clients must
present a certificate that CA signed: mutual TLS); gRPC takes the reference's ``--grpc-use-ssl``
flags and, on the lean server, negotiates ``h2`` by ALPN as gRPC clients require.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.options import ServerOptions


def server_context(
    cert: str | None, key: str | None, client_ca: str | None = None, alpn: tuple[str, ...] = ()
) -> ssl.SSLContext:
    """A TLS 1.2+ server context; InvalidArgumentError naming the file that cannot be used."""
    if not cert or not key:
        raise InvalidArgumentError("TLS needs both a certificate and a private key file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise InvalidArgumentError(f"cannot use the certificate '{cert}' with the key '{key}': {e}") from e
    if client_ca:
        try:
            ctx.load_verify_locations(client_ca)
        except (OSError, ssl.SSLError) as e:
            raise InvalidArgumentError(f"cannot use the client CA certificate '{client_ca}': {e}") from e
        ctx.verify_mode = ssl.CERT_REQUIRED
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def check_flags(options: ServerOptions) -> list[str]:
    """The TLS flags read together, before anything loads: InvalidArgumentError for a combination
    that would serve with less protection than it names (mutual TLS with no CA to check clients
    against: grpc.aio refuses it, the lean server would accept anyone; a client CA for a port that
    serves no TLS at all). Returns warnings for files that are given but not used."""
    if options.grpc_use_ssl_mutual and not options.grpc_root_cert:
        raise InvalidArgumentError(
            "--grpc-use-ssl-mutual needs --grpc-root-cert: the CA certificate that client certificates "
            "are checked against (without it no client could be verified)"
        )
    if options.http_ssl_root_cert and not (options.http_ssl_cert and options.http_ssl_key):
        raise InvalidArgumentError(
            "--http-ssl-root-cert needs --http-ssl-cert and --http-ssl-key: mutual TLS is TLS "
            "with client certificates, and HTTP would otherwise be served in plain text"
        )
    if bool(options.http_ssl_cert) != bool(options.http_ssl_key):
        given, missing = (
            ("--http-ssl-cert", "--http-ssl-key")
            if options.http_ssl_cert
            else ("--http-ssl-key", "--http-ssl-cert")
        )
        raise InvalidArgumentError(f"{given} needs {missing}: TLS needs both a certificate and a private key")
    if options.grpc_use_ssl and not (options.grpc_server_cert and options.grpc_server_key):
        missing = "--grpc-server-cert" if not options.grpc_server_cert else "--grpc-server-key"
        raise InvalidArgumentError(
            f"--grpc-use-ssl needs {missing}: TLS needs both a certificate and a private key"
        )
    warnings = []
    if not options.grpc_use_ssl:
        unused = [
            flag
            for flag, value in (
                ("--grpc-server-cert", options.grpc_server_cert),
                ("--grpc-server-key", options.grpc_server_key),
                ("--grpc-root-cert", options.grpc_root_cert),
            )
            if value
        ]
        if unused:
            warnings.append(f"{', '.join(unused)} given without --grpc-use-ssl: gRPC is served in plain text")
    elif options.grpc_root_cert and not options.grpc_use_ssl_mutual:
        warnings.append(
            "--grpc-root-cert given without --grpc-use-ssl-mutual: gRPC clients are not asked for a "
            "certificate"
        )
    return warnings
