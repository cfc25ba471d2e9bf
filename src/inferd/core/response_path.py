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
queued: each layer hands it its stage (the trace, the response cache; a sequence batcher adds its own
as it queues the request, ``tracked``); none wraps another's. A stage a request does not need is
absent and costs nothing per response; a request that needs none but ``closed`` shares the server's
one path.
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
    """The stages 3 to 5 of one request's responses (see the module docstring). Not changed once
    a stream has it (``tracked`` makes a new one), so that the requests that need nothing but
    ``closed`` share one: no allocation per request on the plain path. ``first`` is the exception:
    cleared once it fired, on a path of its own (it holds the request's start)."""

    __slots__ = (
        "cache_post",
        "classify",
        "closed",
        "ends",
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
        scheduler_end: End | None = None,
        scheduler_post: Post | None = None,
    ) -> None:
        self.first = first
        self.trace_end = trace_end
        self.closed = closed
        self.scheduler_end = scheduler_end
        self.scheduler_post = scheduler_post
        self.cache_post = cache_post
        self.trace_post = trace_post
        self.classify = classify
        #: stage 4, in order (what the stream calls at the final flag)
        self.ends: tuple[End, ...] = tuple(e for e in (trace_end, closed, scheduler_end) if e is not None)
        #: stage 5, in order (empty: one test per response)
        self.posts: tuple[Post, ...] = tuple(
            p for p in (scheduler_post, cache_post, trace_post, classify) if p is not None
        )

    def tracked(self, end: End | None, post: Post | None) -> ResponsePath:
        """This path with the scheduler's stages (a sequence batcher's, as it queues the request)."""
        return ResponsePath(
            self.closed,
            self.first,
            self.trace_end,
            self.trace_post,
            self.cache_post,
            self.classify,
            end,
            post,
        )

    def post(self, response: InferResponse) -> InferResponse:
        """Stage 5: a successful response made into what the consumer gets (an error response when
        a stage refuses it)."""
        try:
            for stage in self.posts:
                stage(response)
        except InferdError as e:
            return InferResponse(response.model_name, response.model_version, response.id, error=e)
        return response


class TracedPath:
    """The path of a request that needs the trace's end and ``closed`` alone (a traced request
    whose trace copies no outputs, no first-response histogram, no cache, no classification): the
    same stages as ``ResponsePath(closed, trace_end=trace_end)`` gives, built in one step (a
    ResponsePath of its own was a fifth of what tracing cost a request, measured)."""

    __slots__ = ("ends",)

    #: (stages 3 and 5: none)
    first: Callable[[], None] | None = None
    posts: tuple[Post, ...] = ()

    def __init__(self, closed: End, trace_end: End) -> None:
        self.ends: tuple[End, ...] = (trace_end, closed)

    def tracked(self, end: End | None, post: Post | None) -> ResponsePath:
        """As ``ResponsePath.tracked``."""
        trace_end, closed = self.ends
        return ResponsePath(closed, None, trace_end, None, None, None, end, post)

    def post(self, response: InferResponse) -> InferResponse:
        return response  # (never called: no stage 5)
