"""TLS for every port: one way to build a server's SSL context from certificate files.

HTTP and metrics take ``--http-ssl-cert/--http-ssl-key`` (``--http-ssl-root-cert``: clients must
present a certificate that CA signed: mutual TLS); gRPC takes the reference's ``--grpc-use-ssl``
flags and, on the lean server, negotiates ``h2`` by ALPN as gRPC clients require.
"""

from __future__ import annotations

import ssl

from inferd.errors import InvalidArgumentError


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
