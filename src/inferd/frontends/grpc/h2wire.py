"""HTTP/2 wire pieces for the lean gRPC server: frame headers, HPACK integers and literals, fixed
header blocks, gRPC message framing. Pure functions and constants (RFC 9113, RFC 7541, gRPC over
HTTP/2), and the plain state ``h2conn`` keeps: a connection's limits, a stream's windows and queue, its
header blocks' HPACK decoding (``HeaderBlocks``)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

from hpack import Decoder
from hpack.exceptions import HPACKError

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# frame types
DATA: Final = 0
HEADERS: Final = 1
PRIORITY: Final = 2
RST_STREAM: Final = 3
SETTINGS: Final = 4
PUSH_PROMISE: Final = 5
PING: Final = 6
GOAWAY: Final = 7
WINDOW_UPDATE: Final = 8
CONTINUATION: Final = 9
# flags
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20
# error codes
NO_ERROR: Final = 0
PROTOCOL_ERROR: Final = 1
FLOW_CONTROL_ERROR: Final = 3
FRAME_SIZE_ERROR: Final = 6
REFUSED_STREAM: Final = 7
CANCEL: Final = 8
COMPRESSION_ERROR: Final = 0x9
ENHANCE_YOUR_CALM: Final = 0xB
# settings
S_HEADER_TABLE_SIZE: Final = 1
S_ENABLE_PUSH: Final = 2
S_MAX_CONCURRENT: Final = 3
S_INITIAL_WINDOW: Final = 4
S_MAX_FRAME: Final = 5
S_MAX_HEADER_LIST: Final = 6

MAX_WINDOW: Final = 2**31 - 1
#: what we accept in one frame (advertised in our SETTINGS)
RECV_MAX_FRAME: Final = 1 << 20

FRAME_HEADER: Final = struct.Struct(">BHBBI")


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame."""
    n = len(payload)
    return FRAME_HEADER.pack(n >> 16, n & 0xFFFF, ftype, flags, sid) + payload


def hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer with an N-bit prefix (``first`` holds the pattern bits of the first byte)."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """A header field as a literal without indexing, new name, no Huffman (no dynamic table use)."""
    return b"\x00" + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


_UNRESERVED = frozenset(range(0x20, 0x7F)) - {ord("%")}


def percent_encode(message: str) -> bytes:
    """``grpc-message`` as gRPC encodes it: UTF-8, bytes outside printable ASCII and '%' as %XX."""
    data = message.encode("utf-8")
    if all(b in _UNRESERVED for b in data):
        return data
    return b"".join(bytes((b,)) if b in _UNRESERVED else b"%%%02X" % b for b in data)


#: ``:status 200`` (static index 8) and ``content-type: application/grpc`` (indexed name 31)
RESPONSE_HEADERS: Final = b"\x88" + hpack_int(31, 4) + hpack_int(16, 7) + b"application/grpc"
TRAILERS_OK: Final = literal(b"grpc-status", b"0")


def status_block(code: int, message: str) -> bytes:
    """The ``grpc-status`` / ``grpc-message`` fields of a trailer block."""
    block = literal(b"grpc-status", str(code).encode())
    if message:
        block += literal(b"grpc-message", percent_encode(message)[:8000])
    return block


def length_prefixed(message: bytes) -> bytes:
    """A gRPC message on the wire: uncompressed flag, big-endian length, the message."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


@dataclass(slots=True, frozen=True)
class H2Limits:
    """What one client may make a connection hold (0 turns a timeout off)."""

    max_concurrent_streams: int = 256
    max_header_list: int = 16384
    preface_timeout_s: float = 30.0
    keepalive_time_s: float = 7200.0
    keepalive_timeout_s: float = 20.0


class H2Stream:
    """One HTTP/2 stream's transport state."""

    __slots__ = (
        "closed",
        "conn",
        "headers_sent",
        "hold_acks",
        "id",
        "outq",
        "recv_unacked",
        "remote_closed",
        "send_window",
        "trailer",
    )

    def __init__(self, conn: Any, sid: int, send_window: int) -> None:
        self.conn = conn
        self.id = sid
        self.send_window = send_window
        self.recv_unacked = 0
        self.hold_acks = False  # the request data is not taken as fast as it comes: no WINDOW_UPDATE
        self.outq: bytearray | None = None  # data waiting for flow-control window (made when needed)
        self.trailer: bytes | None = None  # the last header block, sent once outq is empty
        self.headers_sent = False
        self.closed = False  # we ended it (END_STREAM or reset): nothing more is sent
        self.remote_closed = False  # the client half-closed it


class HeaderBlocks:
    """A connection's HPACK decoding of header blocks. A block that left the dynamic table as it was
    decodes the same next time: what ``parse`` made of its header list is kept with it, so that a
    client's repeated calls are read once."""

    __slots__ = ("_cache", "_decoder", "_mark", "_parse")

    def __init__(self, max_header_list: int, parse: Callable[[list[tuple[str, str]]], Any]) -> None:
        dec = self._decoder = Decoder()
        dec.max_allowed_table_size = 4096
        dec.max_header_list_size = max_header_list
        self._parse = parse
        self._cache: dict[bytes, Any] = {}
        self._mark: tuple[int, int, Any] = (0, 0, None)

    def decode(self, block: bytes) -> Any:
        """``parse`` of the block's header list; None when the block is not valid HPACK."""
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        dec = self._decoder
        try:
            headers = cast("list[tuple[str, str]]", dec.decode(block))
        except HPACKError:
            return None
        parsed = self._parse(headers)
        table = dec.header_table
        entries = table.dynamic_entries
        mark = (len(entries), table._maxsize, entries[0] if entries else None)
        if mark != self._mark:
            self._cache.clear()
            self._mark = mark
        elif len(self._cache) < 256:
            self._cache[block] = parsed
        return parsed
