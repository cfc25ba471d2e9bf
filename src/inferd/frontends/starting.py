"""What starting a front end shares between the composition root (``runtime.py``) and the cloud
front ends it starts (``cloud.py``): the error of a front end that cannot start, and the HTTP
connection limits the options set. Imports no front end's server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.frontends.http.head import HttpLimits

if TYPE_CHECKING:
    from inferd.options import ServerOptions


class FrontendError(Exception):
    """A front end could not start; the message is what ``inferd serve`` prints."""


def http_limits(options: ServerOptions) -> HttpLimits:
    """The HTTP connection limits the options set."""
    return HttpLimits(
        max_body=options.http_max_input_size,
        max_url=options.http_max_url_size,
        max_header_bytes=options.http_max_header_size,
        max_headers=options.http_max_header_count,
        max_connections=options.max_connections,
        header_timeout_s=options.http_header_timeout_secs,
        idle_timeout_s=options.http_idle_timeout_secs,
    )
