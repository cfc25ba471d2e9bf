"""A request's response path (core/response_path.py): its stages run in the documented order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from inferd.core.response import InferResponse, ResponseStream
from inferd.core.response_path import ResponsePath, TracedPath
from inferd.errors import InvalidArgumentError


def _path(seen: list[str]) -> ResponsePath:
    def end(name: str) -> Callable[[ResponseStream], None]:
        return lambda _stream: seen.append(name)

    def post(name: str) -> Callable[[InferResponse], None]:
        return lambda _response: seen.append(name)

    return ResponsePath(
        closed=end("closed"),
        first=lambda: seen.append("first"),
        trace_end=end("trace_end"),
        trace_post=post("trace_post"),
        cache_post=post("cache_post"),
        classify=post("classify"),
    ).tracked(end("scheduler_end"), post("scheduler_post"))


def test_the_stages_run_in_order_and_the_first_and_end_once() -> None:
    async def main() -> tuple[list[str], list[bool]]:
        seen: list[str] = []
        stream = ResponseStream(asyncio.get_running_loop())
        stream.path = _path(seen)
        got: list[bool] = []

        def consumer(_response: InferResponse | None, final: bool) -> None:
            seen.append("consumer")
            got.append(final)

        stream.set_callback(consumer)
        stream.deliver(InferResponse("m", "1"), False)
        stream.deliver(InferResponse("m", "1"), True)
        stream.deliver(InferResponse("m", "1"), True)  # after the final one: goes nowhere
        return seen, got

    seen, got = asyncio.run(main())
    posts = ["scheduler_post", "cache_post", "trace_post", "classify"]
    assert seen == [
        "first",
        *posts,
        "consumer",
        "trace_end",
        "closed",
        "scheduler_end",
        *posts,
        "consumer",
    ]
    assert got == [False, True]


def test_an_error_response_skips_post_processing_and_a_refusal_becomes_the_error() -> None:
    def refuse(_response: InferResponse) -> None:
        raise InvalidArgumentError("no such class")

    async def main() -> list[InferResponse]:
        stream = ResponseStream(asyncio.get_running_loop())
        stream.path = ResponsePath(classify=refuse)
        out: list[InferResponse] = []
        stream.set_callback(lambda r, _final: out.append(r) if r is not None else None)
        stream.deliver(InferResponse("m", "1", error=InvalidArgumentError("model failed")), False)
        stream.deliver(InferResponse("m", "1", "r1"), True)
        return out

    failed, refused = asyncio.run(main())
    assert failed.error is not None and failed.error.message == "model failed"
    assert refused.error is not None and refused.error.message == "no such class" and refused.id == "r1"


def test_a_shared_path_is_never_changed_by_a_scheduler_stage() -> None:
    closed: list[object] = []
    shared = ResponsePath(closed.append)
    mine = shared.tracked(lambda _s: None, None)
    assert mine is not shared and shared.scheduler_end is None and shared.ends == (closed.append,)
    assert len(mine.ends) == 2 and not mine.posts and not shared.posts


def test_a_traced_path_ends_as_the_response_path_with_the_same_stages() -> None:
    """TracedPath (a traced request's, built in one step): the trace's end, then closed, once, at
    the final response; a scheduler's stages added by ``tracked`` as ResponsePath adds them."""

    async def main(make: Callable[[list[str]], object]) -> list[str]:
        seen: list[str] = []
        stream = ResponseStream(asyncio.get_running_loop())
        stream.path = make(seen)  # type: ignore[assignment]
        stream.set_callback(lambda _r, final: seen.append(f"consumer {final}"))
        stream.deliver(InferResponse("m", "1"), False)
        stream.deliver(InferResponse("m", "1"), True)
        return seen

    def ends(seen: list[str]) -> tuple[Callable[[ResponseStream], None], Callable[[ResponseStream], None]]:
        return (lambda _s: seen.append("closed")), (lambda _s: seen.append("trace_end"))

    def traced(seen: list[str]) -> TracedPath:
        return TracedPath(*ends(seen))

    def full(seen: list[str]) -> ResponsePath:
        closed, trace_end = ends(seen)
        return ResponsePath(closed, trace_end=trace_end)

    assert asyncio.run(main(traced)) == asyncio.run(main(full))
    assert asyncio.run(main(traced)) == ["consumer False", "trace_end", "closed", "consumer True"]

    def tracked(seen: list[str]) -> object:
        return traced(seen).tracked(lambda _s: seen.append("scheduler_end"), lambda _r: seen.append("post"))

    assert asyncio.run(main(tracked)) == [
        "post",
        "consumer False",
        "trace_end",
        "closed",
        "scheduler_end",
        "post",
        "consumer True",
    ]
