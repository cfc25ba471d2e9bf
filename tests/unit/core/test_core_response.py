"""ResponseStream: thread-safe sends, unary first(), async iteration and callback mode."""

from __future__ import annotations

import asyncio
import threading

import pytest

from inferd.core.response import InferResponse, ResponseStream
from inferd.errors import InternalError, NotFoundError


def _resp(i: int = 0) -> InferResponse:
    return InferResponse("m", "1", id=str(i))


def test_infer_response_defaults() -> None:
    r = InferResponse("m", "1")
    assert r.id == "" and r.outputs == [] and r.parameters == {} and r.error is None
    assert InferResponse("m", "1").outputs is not r.outputs


def test_send_from_another_thread_then_first() -> None:
    async def main() -> InferResponse:
        stream = ResponseStream(asyncio.get_running_loop())
        worker = threading.Thread(target=stream.send, args=(_resp(7), True))
        worker.start()
        resp = await asyncio.wait_for(stream.first(), 5)
        worker.join()
        assert stream.done
        return resp

    assert asyncio.run(main()).id == "7"


def test_first_waits_past_empty_non_final_sends() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        stream.send(None, False)
        stream.send(_resp(1), True)
        assert (await asyncio.wait_for(stream.first(), 5)).id == "1"

    asyncio.run(main())


def test_first_of_a_stream_without_responses() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        stream.send(None, True)
        with pytest.raises(InternalError, match="model produced no response"):
            await asyncio.wait_for(stream.first(), 5)

    asyncio.run(main())


def test_async_iteration_ends_at_final() -> None:
    async def main() -> list[tuple[str | None, bool]]:
        stream = ResponseStream(asyncio.get_running_loop())

        def produce() -> None:
            for i in range(3):
                stream.send(_resp(i))
            stream.send(None, True)
            stream.send(_resp(99), True)  # after the final flag: dropped

        worker = threading.Thread(target=produce)
        worker.start()
        got = []
        async for resp, final in stream:
            got.append((None if resp is None else resp.id, final))
        worker.join()
        await asyncio.sleep(0)
        return got

    assert asyncio.run(main()) == [("0", False), ("1", False), ("2", False), (None, True)]


def test_deliver_after_final_is_ignored() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        stream.deliver(_resp(1), True)
        stream.deliver(_resp(2), True)
        items = [item async for item in stream]
        assert [(r.id if r else None, f) for r, f in items] == [("1", True)]

    asyncio.run(main())


def test_errors_travel_as_responses() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        stream.send(InferResponse("m", "1", error=NotFoundError("gone")), True)
        resp = await asyncio.wait_for(stream.first(), 5)
        assert isinstance(resp.error, NotFoundError)

    asyncio.run(main())


def test_callback_mode() -> None:
    async def main() -> list[tuple[str | None, bool]]:
        loop = asyncio.get_running_loop()
        stream = ResponseStream(loop)
        got: list[tuple[str | None, bool]] = []
        done = loop.create_future()
        loop_thread = threading.current_thread()

        def callback(resp: InferResponse | None, final: bool) -> None:
            assert threading.current_thread() is loop_thread  # always on the loop
            got.append((None if resp is None else resp.id, final))
            if final:
                done.set_result(None)

        stream.set_callback(callback)

        def produce() -> None:
            stream.send(_resp(1))
            stream.send(_resp(2), True)

        worker = threading.Thread(target=produce)
        worker.start()
        await asyncio.wait_for(done, 5)
        worker.join()
        return got

    assert asyncio.run(main()) == [("1", False), ("2", True)]


def test_callback_set_late_gets_what_was_queued() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        stream.deliver(_resp(1), False)
        stream.deliver(_resp(2), True)
        got: list[tuple[str | None, bool]] = []
        stream.set_callback(lambda r, f: got.append((None if r is None else r.id, f)))
        assert got == [("1", False), ("2", True)]

    asyncio.run(main())


def test_many_threads_one_stream_each() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        streams = [ResponseStream(loop) for _ in range(50)]
        threads = [threading.Thread(target=s.send, args=(_resp(i), True)) for i, s in enumerate(streams)]
        for t in threads:
            t.start()
        resps = await asyncio.wait_for(asyncio.gather(*(s.first() for s in streams)), 5)
        for t in threads:
            t.join()
        assert [r.id for r in resps] == [str(i) for i in range(50)]

    asyncio.run(main())


def test_cancelled_flag() -> None:
    async def main() -> None:
        stream = ResponseStream(asyncio.get_running_loop())
        assert stream.cancelled is False
        assert stream.done is False

    asyncio.run(main())
