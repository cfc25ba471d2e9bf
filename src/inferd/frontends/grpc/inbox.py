"""A ModelStreamInfer call's request messages as the servicer reads them (``inbox_messages``).

An async generator, so it stays interpreted: mypyc 2.4 compiles no async generators, and
``h2server.py``, which feeds the inbox, is compiled (``hotpath.MODULES``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

#: request messages of a ModelStreamInfer call not taken yet past which its data is not acknowledged
#: (HTTP/2 flow control then stops the client once it sent ``STREAM_WINDOW`` more)
INBOX_HIGH = 1 << 22


async def inbox_messages(
    st: Any, inbox: asyncio.Queue[bytes | None], ack: Callable[[Any], None]
) -> AsyncIterator[bytes]:
    """The messages of ``st`` (h2server's ``_Call``) until its client half-closed; the stream's data
    is acknowledged again (``ack``) once the messages waiting fell to half of ``INBOX_HIGH``."""
    while True:
        item = await inbox.get()
        if item is None:
            return
        st.inbox_bytes -= len(item)
        if st.hold_acks and st.inbox_bytes <= INBOX_HIGH // 2:
            st.hold_acks = False
            ack(st)
        yield item
