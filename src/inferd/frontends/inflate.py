"""gzip and deflate inflated within a limit, in bounded memory: what the HTTP and gRPC front ends share.

A compression bomb (1 MB of gzip that would inflate to 1 GiB) is refused once ``limit`` bytes came
out, in pieces of ``PIECE`` bytes: the memory it takes is the limit and one piece, never the limit
twice (inflating in one call with ``max_length`` builds its output in blocks and then copies them
into one bytes object). zlib lets go of the GIL while it inflates, so a front end may run a large
one on a worker thread (``OFF_LOOP_MIN``) and keep its event loop serving meanwhile.
"""

from __future__ import annotations

import zlib

#: the Content-Encoding / grpc-encoding names -> zlib's wbits
WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
#: compressed data larger than this inflates on a worker thread
OFF_LOOP_MIN = 1 << 16
PIECE = 1 << 20


class TooLarge(Exception):
    """The data inflates to more than the limit."""


def inflate(data: bytes, encoding: str, limit: int) -> tuple[bytes, bool]:
    """``data`` (``encoding``: a key of WBITS) inflated, and whether the compressed stream ended
    (False: it was cut short). Raises TooLarge past ``limit`` bytes, zlib.error when corrupt."""
    d = zlib.decompressobj(WBITS[encoding])
    parts: list[bytes] = []
    total = 0
    tail = data
    while True:
        out = d.decompress(tail, PIECE)
        total += len(out)
        if total > limit:
            raise TooLarge
        if out:
            parts.append(out)
        tail = d.unconsumed_tail
        if d.eof or (not tail and len(out) < PIECE):  # the end, or nothing more to give
            break
    body = parts[0] if len(parts) == 1 else b"".join(parts)
    return body, d.eof
