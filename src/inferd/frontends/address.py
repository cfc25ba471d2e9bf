"""The address flags (``--http-address``, ``--grpc-address``, ``--metrics-address``) as a socket binds
them. Triton's docs write IPv6 addresses as gRPC does, ``ipv6:[::1]`` (and ``ipv4:127.0.0.1``); a bare
``::1``, ``[::1]`` or a host name work too. Log lines keep the address as given."""

from __future__ import annotations


def bind_host(address: str) -> str | None:
    """The host to bind for ``address`` (None: every interface, for an empty address)."""
    host = address.strip()
    for scheme in ("ipv4:", "ipv6:"):
        if host.startswith(scheme):
            host = host[len(scheme) :]
            break
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or None


def grpc_target(address: str, port: int) -> str:
    """``address`` and ``port`` as grpcio's ``add_*_port`` takes them (an IPv6 host in brackets)."""
    host = bind_host(address) or "0.0.0.0"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
