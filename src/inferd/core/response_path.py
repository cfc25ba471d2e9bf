"""The response path of one request: every stage its responses pass, in one order, assembled in one place.

A response sent by a backend (from any thread, ``ResponseStream.send``, or a worker's batch hand-off,
``deliver``: one thread hop per batch, no task per request) passes, on the event loop, in this order:

1. **ordering**: under ``preserve_ordering`` the pool's completion queue (scheduling/ordering.py) holds
   it until the requests ahead of it ended (``ResponseStream.hold``). The one stage set after the
   request is queued: a request's place exists only once its batch forms.
2. **flow window**: a decoupled model's stream bounds the bytes sent and not yet taken
   (core/stream_flow.py; ``ResponseStream.limit``).
3. **first response**: ``first`` observes the first one (the first-response histogram), once.
4. **end**, at the final flag, once, in order: the trace's end (``trace_end``), the server's count
   of open requests (``closed``), the scheduler's (``scheduler_end``: a sequence slot goes to the
   sequence's next request). Before post-processing: a consumer that sees the final response sees
   the request closed.
5. **post-processing** of each successful response, in order: the sequence batcher takes its states
   out (``scheduler_post``), the response cache inserts it (``cache_post``), the trace copies its
   outputs (``trace_post``: the backend's, before classification), the classification extension
   (``classify``). An ``InferdError`` raised there becomes that response's error.
6. **consumer**: a front end's callback (``set_callback``), or the caller iterating the stream.

``ResponsePath`` is that list for one request, built once by ``ServerCore`` before the request is
queued (``build``): each layer hands it its stage (the trace, the cache, the scheduler's part from
``Tracked.track``); none wraps another's. What a request needs nothing from stays None and costs a
test per response.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from inferd.core.response import InferResponse
from inferd.errors import InferdError

if TYPE_CHECKING:
    from inferd.core.response import ResponseStream

End = Callable[["ResponseStream"], None]
Post = Callable[[InferResponse], None]


class ResponsePath:
    """The stages 3 to 5 of one request's responses (see the module docstring)."""

    __slots__ = (
        "cache_post",
        "classify",
        "closed",
        "first",
        "posts",
        "scheduler_end",
        "scheduler_post",
        "trace_end",
        "trace_post",
    )

    def __init__(
        self,
        closed: End | None = None,
        first: Callable[[], None] | None = None,
        trace_end: End | None = None,
        trace_post: Post | None = None,
        cache_post: Post | None = None,
        classify: Post | None = None,
    ) -> None:
        self.first = first
        self.trace_end = trace_end
        self.closed = closed
        self.scheduler_end: End | None = None
        self.scheduler_post: Post | None = None
        self.cache_post = cache_post
        self.trace_post = trace_post
        self.classify = classify
        #: whether any post-processing stage is set (one test per response when none is)
        self.posts = cache_post is not None or trace_post is not None or classify is not None

    def track(self, end: End | None, post: Post | None) -> None:
        """The scheduler's stages (a sequence batcher's, as it queues the request)."""
        self.scheduler_end = end
        if post is not None:
            self.scheduler_post = post
            self.posts = True

    def end(self, stream: ResponseStream) -> None:
        """Stage 4: the final flag passed (called once)."""
        trace_end = self.trace_end
        if trace_end is not None:
            trace_end(stream)
        closed = self.closed
        if closed is not None:
            closed(stream)
        scheduler_end = self.scheduler_end
        if scheduler_end is not None:
            scheduler_end(stream)

    def post(self, response: InferResponse) -> InferResponse:
        """Stage 5: a successful response made into what the consumer gets (an error response when
        a stage refuses it)."""
        try:
            for stage in (self.scheduler_post, self.cache_post, self.trace_post, self.classify):
                if stage is not None:
                    stage(response)
        except InferdError as e:
            return InferResponse(response.model_name, response.model_version, response.id, error=e)
        return response
