"""Instance pool and batch forming, with fake backend instances and an injected clock."""

from __future__ import annotations

import asyncio
import collections
import resource
import threading
import time

import pytest
from poolkit import WAIT_S, FakeInstance, Gate, answers, request, run, submit, until, wait_event

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.stats import ModelStats
from inferd.errors import InferdError, InternalError, NotFoundError, UnavailableError
from inferd.scheduling import inline
from inferd.scheduling.instances import InstancePool
from inferd.scheduling.queue import BatchPolicy, form_batch, next_batch

# -- form_batch ----------------------------------------------------------------------------------


def _queue(*sizes: int) -> collections.deque[InferRequest]:
    return collections.deque(request(i, s) for i, s in enumerate(sizes))


def test_default_policy_takes_one() -> None:
    q = _queue(1, 1, 1)
    batch, total = form_batch(q, BatchPolicy())
    assert [r.id for r in batch] == ["0"] and total == 1
    assert len(q) == 2


def test_batching_takes_what_fits() -> None:
    q = _queue(1, 2, 2, 1)
    batch, total = form_batch(q, BatchPolicy(max_batch_size=4))
    assert [r.id for r in batch] == ["0", "1"] and total == 3  # the next (2) would make 5
    batch, total = form_batch(q, BatchPolicy(max_batch_size=4))
    assert [r.id for r in batch] == ["2", "3"] and total == 3
    assert not q


def test_batching_keeps_order() -> None:
    # a smaller request further back does not jump the queue
    q = _queue(3, 2, 1)
    batch, _ = form_batch(q, BatchPolicy(max_batch_size=4))
    assert [r.id for r in batch] == ["0"]


def test_an_oversized_first_request_goes_alone() -> None:
    q = _queue(8, 1)
    batch, total = form_batch(q, BatchPolicy(max_batch_size=4))
    assert [r.id for r in batch] == ["0"] and total == 8


PREFERRED = BatchPolicy(max_batch_size=16, preferred_batch_size=(4, 8))


@pytest.mark.parametrize(
    ("sizes", "delay_exceeded", "want"),
    [
        # a preferred size met goes at once: the largest one the queue can fill
        ([1] * 23, False, (8, True)),
        ([1] * 7, False, (4, True)),
        ([1] * 4, False, (4, True)),
        # short of every preferred size: the batch may wait for more (the queue delay)
        ([1] * 3, False, (3, False)),
        # no preferred size can be met exactly: marked where the next would pass the largest
        ([3, 3, 3, 3], False, (2, True)),
        # the oldest waited its queue delay: everything up to max_batch_size goes
        ([1] * 23, True, (16, True)),
        ([1] * 9, True, (9, True)),
        ([1] * 3, True, (3, False)),
        # an oversized first request goes alone
        ([20, 1], False, (1, True)),
    ],
)
def test_preferred_sizes_cut_batches_as_tritons_dynamic_batcher(
    sizes: list[int], delay_exceeded: bool, want: tuple[int, bool]
) -> None:
    assert next_batch(_queue(*sizes), PREFERRED, delay_exceeded) == want


def test_without_preferred_sizes_a_batch_is_complete_at_max_batch_size() -> None:
    policy = BatchPolicy(max_batch_size=4)
    assert next_batch(_queue(1, 1, 1), policy, False) == (3, False)
    assert next_batch(_queue(1, 1, 1, 1, 1), policy, False) == (4, True)


def _bringing(*names: str) -> collections.deque[InferRequest]:
    """One request per name: bringing input A, B or both (AB)."""
    inputs = {"A": ("A",), "B": ("B",), "AB": ("A", "B")}
    return collections.deque(
        InferRequest(model_name="m", inputs=dict.fromkeys(inputs[n]), id=str(i))  # type: ignore[arg-type]
        for i, n in enumerate(names)
    )


@pytest.mark.parametrize("preferred", [(), (4,)])
def test_with_optional_inputs_a_request_bringing_other_inputs_sends_the_batch(
    preferred: tuple[int, ...],
) -> None:
    """The reference's RequiredEqualInputs (Triton's qa L0_optional_input): the batch ends before
    the request and goes at once, however far from a preferred size it is."""
    policy = BatchPolicy(max_batch_size=4, preferred_batch_size=preferred, optional_inputs=True)
    assert next_batch(_bringing("A", "A", "B", "B"), policy, False) == (2, True)
    assert next_batch(_bringing("AB", "A"), policy, False) == (1, True)
    assert next_batch(_bringing("B", "B", "B"), policy, False) == (3, False)  # may wait for more
    q = _bringing("A", "B", "A")
    assert [[r.id for r in form_batch(q, policy)[0]] for _ in range(3)] == [["0"], ["1"], ["2"]]
    # a model without optional inputs batches them as before
    q = _bringing("A", "B", "A")
    assert [
        r.id for r in form_batch(q, BatchPolicy(max_batch_size=4, preferred_batch_size=preferred))[0]
    ] == ["0", "1", "2"]


def test_form_batch_cuts_at_the_preferred_size_until_the_delay_passed() -> None:
    policy = BatchPolicy(max_batch_size=16, max_queue_delay_ns=1000, preferred_batch_size=(4, 8))
    q = _queue(*[1] * 11)  # queued at t=0
    _, total = form_batch(q, policy, lambda: 10)
    assert total == 8 and len(q) == 3
    _, total = form_batch(q, policy, lambda: 5000)  # the delay passed: what is left goes
    assert total == 3 and not q


def test_batch_policy() -> None:
    assert not BatchPolicy().batching
    assert BatchPolicy(max_batch_size=1).batching


# -- the pool ------------------------------------------------------------------------------------


def test_requests_are_answered_and_counted() -> None:
    inst = FakeInstance()
    stats = ModelStats()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), stats, loop)
        resps = await answers(submit(pool, loop, request("a"), request("b", 3)))
        assert [r.id for r in resps] == ["a", "b"]
        assert all(r.error is None for r in resps)
        assert pool.inflight() == 0
        assert pool.stats() == {"queued": 0, "executing": 0}
        await pool.stop(WAIT_S)

    run(main)
    doc = stats.to_json("m", "1")
    assert doc["execution_count"] == 2
    assert doc["inference_count"] == 4
    assert doc["inference_stats"]["success"]["count"] == 2
    assert inst.unloaded


def test_two_instances_run_in_parallel() -> None:
    barrier = threading.Barrier(2, timeout=WAIT_S)  # breaks unless both executes overlap
    a, b = FakeInstance(lambda _: barrier.wait()), FakeInstance(lambda _: barrier.wait())

    async def main(loop: asyncio.AbstractEventLoop) -> list[InferResponse]:
        pool = InstancePool("m", "1", [("m_0", a), ("m_1", b)], BatchPolicy(), ModelStats(), loop)
        resps = await answers(submit(pool, loop, request(1), request(2)))
        await pool.stop(WAIT_S)
        return resps

    resps = run(main)
    assert all(r.error is None for r in resps)
    assert len(a.calls) == len(b.calls) == 1
    assert a.calls[0][1] != b.calls[0][1]


def test_one_request_at_a_time_stays_on_the_first_instance() -> None:
    # concurrency 1: the lowest idle worker is woken (its caches are warm, and ONNX Runtime gives its
    # first instance every core), not the other instances in turn
    insts = [FakeInstance() for _ in range(3)]

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool(
            "m", "1", [(f"m_{i}", x) for i, x in enumerate(insts)], BatchPolicy(), ModelStats(), loop
        )
        await until(lambda: pool.idle_workers() == 3)
        for i in range(12):
            await answers(submit(pool, loop, request(i)))
            await until(lambda: pool.idle_workers() == 3)  # the worker is back waiting
        await pool.stop(WAIT_S)

    run(main)
    counts = [len(x.calls) for x in insts]
    assert counts == [12, 0, 0], counts


def test_a_backlog_wakes_as_many_workers_as_it_needs() -> None:
    # three requests queued behind one lock hold: each idle worker is woken, none waits for the next
    barrier = threading.Barrier(3, timeout=WAIT_S)  # breaks unless the three executes overlap
    insts = [FakeInstance(lambda _: barrier.wait()) for _ in range(3)]

    async def main(loop: asyncio.AbstractEventLoop) -> list[InferResponse]:
        pool = InstancePool(
            "m", "1", [(f"m_{i}", x) for i, x in enumerate(insts)], BatchPolicy(), ModelStats(), loop
        )
        await until(lambda: pool.idle_workers() == 3)
        reqs = [request(i) for i in range(3)]
        for r in reqs:
            r.stream = ResponseStream(loop)
        with pool._lock:  # the requests land together, with one wake-up
            for r in reqs:
                pool._queue.append(r)
            pool._workers.wake_one()
        resps = await answers([r.stream for r in reqs if r.stream is not None])
        await pool.stop(WAIT_S)
        return resps

    run(main)
    assert sorted(len(x.calls) for x in insts) == [1, 1, 1]


def test_default_scheduler_executes_one_request_at_a_time() -> None:
    gate = Gate()
    inst = FakeInstance(gate)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        streams = submit(pool, loop, request(0))
        await wait_event(gate.started)
        streams += submit(pool, loop, request(1), request(2))
        gate.release.set()
        await answers(streams)
        await pool.stop(WAIT_S)

    run(main)
    assert inst.batches == [["0"], ["1"], ["2"]]


def test_dynamic_batching_gathers_queued_requests() -> None:
    gate = Gate()
    inst = FakeInstance(gate)
    stats = ModelStats()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(max_batch_size=8), stats, loop)
        streams = submit(pool, loop, request(0))
        await wait_event(gate.started)
        streams += submit(pool, loop, request(1), request(2, 2), request(3))
        assert pool.inflight() == 4
        assert pool.stats() == {"queued": 3, "executing": 1}
        gate.release.set()
        resps = await answers(streams)
        assert [r.id for r in resps] == ["0", "1", "2", "3"]
        await pool.stop(WAIT_S)

    run(main)
    assert inst.batches == [["0"], ["1", "2", "3"]]
    doc = stats.to_json("m", "1")
    assert doc["execution_count"] == 2
    assert doc["inference_count"] == 5
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in doc["batch_stats"]] == [(1, 1), (4, 1)]


def test_dynamic_batching_respects_max_batch_size() -> None:
    gate = Gate()
    inst = FakeInstance(gate)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(max_batch_size=4), ModelStats(), loop)
        streams = submit(pool, loop, request(0))
        await wait_event(gate.started)
        streams += submit(pool, loop, *(request(i, 2) for i in range(1, 6)))
        gate.release.set()
        await answers(streams)
        await pool.stop(WAIT_S)

    run(main)
    assert inst.batches == [["0"], ["1", "2"], ["3", "4"], ["5"]]


def test_stop_drains_in_flight_requests() -> None:
    inst = FakeInstance(lambda _: time.sleep(0.001))

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(max_batch_size=2), ModelStats(), loop)
        streams = submit(pool, loop, *(request(i) for i in range(6)))
        await pool.stop(WAIT_S)
        assert inst.unloaded
        resps = await answers(streams)
        assert all(r.error is None for r in resps)
        with pytest.raises(UnavailableError, match="Server is stopping"):
            pool.enqueue(request("late"))

    run(main)
    assert sorted(i for ids in inst.batches for i in ids) == [str(i) for i in range(6)]


def test_stop_fails_what_is_left_after_the_timeout() -> None:
    gate = Gate()
    inst = FakeInstance(gate)

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        running = submit(pool, loop, request(0))
        await wait_event(gate.started)
        left = submit(pool, loop, request(1), request(2))
        stopping = asyncio.ensure_future(pool.stop(0.05))
        failed = await answers(left)
        for r in failed:
            assert isinstance(r.error, UnavailableError)
            assert r.error.message == "Server is stopping"
            assert r.model_name == "m" and r.model_version == "1"
        assert not stopping.done()  # waits for the executing batch before unloading
        assert not inst.unloaded
        gate.release.set()
        await asyncio.wait_for(stopping, WAIT_S)
        assert inst.unloaded
        (done,) = await answers(running)
        assert done.error is None

    run(main)
    assert inst.batches == [["0"]]


def test_an_exception_in_execute_answers_the_whole_batch() -> None:
    gate = Gate()

    def fn(requests: list[InferRequest]) -> None:
        gate(requests)
        if any(r.id.startswith("bad") for r in requests):
            raise RuntimeError("kaput")

    inst = FakeInstance(fn)
    stats = ModelStats()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(max_batch_size=4), stats, loop)
        first = submit(pool, loop, request("ok0"))
        await wait_event(gate.started)
        bad = submit(pool, loop, request("bad1"), request("bad2"))
        gate.release.set()
        await answers(first)
        for r in await answers(bad):
            assert isinstance(r.error, InternalError)
            assert r.error.message == "RuntimeError: kaput"
        # the pool keeps working
        (again,) = await answers(submit(pool, loop, request("ok3")))
        assert again.error is None
        await pool.stop(WAIT_S)

    run(main)
    assert inst.batches == [["ok0"], ["bad1", "bad2"], ["ok3"]]
    doc = stats.to_json("m", "1")["inference_stats"]
    assert doc["fail"]["count"] == 2
    assert doc["success"]["count"] == 2


def test_an_inferd_error_in_execute_is_passed_on() -> None:
    def fn(requests: list[InferRequest]) -> None:
        raise NotFoundError("no such thing")

    async def main(loop: asyncio.AbstractEventLoop) -> InferdError | None:
        pool = InstancePool("m", "1", [("m_0", FakeInstance(fn))], BatchPolicy(), ModelStats(), loop)
        (resp,) = await answers(submit(pool, loop, request(1)))
        await pool.stop(WAIT_S)
        return resp.error

    error = run(main)
    assert type(error) is NotFoundError
    assert error.message == "no such thing"


def test_an_instance_answering_through_streams() -> None:
    class Streaming(FakeInstance):
        def execute(self, requests: list[InferRequest]) -> None:
            for r in requests:
                assert r.stream is not None
                r.stream.send(InferResponse("m", "1", r.id + "!"), True)

    stats = ModelStats()

    async def main(loop: asyncio.AbstractEventLoop) -> list[InferResponse]:
        pool = InstancePool("m", "1", [("m_0", Streaming())], BatchPolicy(), stats, loop)
        resps = await answers(submit(pool, loop, request("a")))
        await pool.stop(WAIT_S)
        return resps

    assert [r.id for r in run(main)] == ["a!"]
    assert stats.to_json("m", "1")["execution_count"] == 1


# -- max_queue_delay, on an injected clock --------------------------------------------------------


class Clock:
    """A clock that only moves when told."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


HOUR_NS = 3600 * 10**9


def _delay_pool(
    loop: asyncio.AbstractEventLoop, inst: FakeInstance, clock: Clock, preferred: tuple[int, ...] = ()
) -> InstancePool:
    policy = BatchPolicy(max_batch_size=4, max_queue_delay_ns=HOUR_NS, preferred_batch_size=preferred)
    return InstancePool("m", "1", [("m_0", inst)], policy, ModelStats(), loop, clock=clock)


def test_queue_delay_waits_for_a_full_batch() -> None:
    inst = FakeInstance()
    clock = Clock()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _delay_pool(loop, inst, clock)
        streams = []
        for i in range(4):  # the clock never moves: only a full batch may start an execute
            streams += submit(pool, loop, request(i))
            if i < 3:
                await until(lambda: pool.holding_workers() == 1)
        await answers(streams)
        await pool.stop(WAIT_S)

    run(main)
    assert inst.batches == [["0", "1", "2", "3"]]


def test_queue_delay_stops_at_the_preferred_batch_size() -> None:
    inst = FakeInstance()
    clock = Clock()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _delay_pool(loop, inst, clock, preferred=(2,))
        await answers(submit(pool, loop, request(0), request(1)))
        await pool.stop(WAIT_S)

    run(main)
    assert inst.batches == [["0", "1"]]


def test_queue_delay_expires_on_the_clock() -> None:
    inst = FakeInstance()
    clock = Clock()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _delay_pool(loop, inst, clock)
        streams = submit(pool, loop, request(0))
        await until(lambda: pool.holding_workers() == 1)
        assert not streams[0].done  # held for more
        clock.now = HOUR_NS + 1  # the oldest request's delay is over: go with what is there
        streams += submit(pool, loop, request(1))
        resps = await answers(streams)
        assert [r.id for r in resps] == ["0", "1"]
        await pool.stop(WAIT_S)

    run(main)
    assert inst.batches == [["0", "1"]]


def test_queue_delay_records_queue_time_from_the_clock() -> None:
    inst = FakeInstance()
    clock = Clock()
    stats = ModelStats()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        policy = BatchPolicy(max_batch_size=2, max_queue_delay_ns=HOUR_NS)
        pool = InstancePool("m", "1", [("m_0", inst)], policy, stats, loop, clock=clock)
        streams = submit(pool, loop, request(0))
        clock.now = 500
        streams += submit(pool, loop, request(1))
        await answers(streams)
        await pool.stop(WAIT_S)

    run(main)
    assert inst.batches == [["0", "1"]]
    assert stats.to_json("m", "1")["inference_stats"]["queue"] == {"count": 2, "ns": 500}


def test_stop_while_a_worker_waits_for_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    crashes: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashes.append(args.exc_value))
    inst = FakeInstance()
    clock = Clock()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        pool = _delay_pool(loop, inst, clock)
        (stream,) = submit(pool, loop, request(0))
        await until(lambda: pool.holding_workers() == 1)  # waiting for three more
        await pool.stop(0)
        (resp,) = await answers([stream])
        assert isinstance(resp.error, UnavailableError)
        assert inst.unloaded

    run(main)
    assert inst.batches == []
    assert crashes == []  # the worker thread ended cleanly


def test_two_workers_waiting_for_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    crashes: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashes.append(args.exc_value))
    a, b = FakeInstance(), FakeInstance()
    clock = Clock()

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        policy = BatchPolicy(max_batch_size=4, max_queue_delay_ns=HOUR_NS)
        pool = InstancePool("m", "1", [("m_0", a), ("m_1", b)], policy, ModelStats(), loop, clock=clock)
        streams = []
        for i in range(8):
            streams += submit(pool, loop, request(i))
            if i % 4 != 3:  # a short batch: a worker holds it open
                await until(lambda: pool.holding_workers() >= 1)
        resps = await answers(streams)
        assert all(r.error is None for r in resps)
        await pool.stop(WAIT_S)

    run(main)
    assert sorted(len(ids) for ids in a.batches + b.batches) == [4, 4]
    assert crashes == []


# -- inline mode ---------------------------------------------------------------------------------


def test_small_executes_move_onto_the_loop() -> None:
    inst = FakeInstance(inline_ok=True)

    async def main(loop: asyncio.AbstractEventLoop) -> int:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 3):
            (resp,) = await answers(submit(pool, loop, request(i)))
            assert resp.error is None
        await pool.stop(WAIT_S)
        return threading.get_ident()

    loop_thread = run(main)
    threads = [t for _, t in inst.calls]
    assert loop_thread not in threads[: inline.INLINE_AFTER]  # warm-up in the worker thread
    assert threads[-1] == loop_thread
    assert inst.unloaded


def test_an_execute_that_blocks_goes_back_to_threads() -> None:
    block = threading.Event()
    inst = FakeInstance(lambda _: time.sleep(0.01) if block.is_set() else None, inline_ok=True)

    async def main(loop: asyncio.AbstractEventLoop) -> int:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 1):
            await answers(submit(pool, loop, request(i)))
        block.set()
        for i in range(3):
            await answers(submit(pool, loop, request(f"slow{i}")))
        await pool.stop(WAIT_S)
        return threading.get_ident()

    loop_thread = run(main)
    threads = [t for _, t in inst.calls]
    assert loop_thread in threads
    assert threads[-1] != loop_thread


def test_rusage_ticks_do_not_send_short_executes_back_to_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """An inline execute's CPU comes from the thread's CPU clock. A thread's rusage times are split
    from scheduler ticks and can jump by a whole tick (4 ms at HZ=250) across a 100 us execute: read
    as CPU, three such in a row looked like slow executes and sent the pool back to threads."""

    def spin(_: object) -> None:  # busy longer than SMALL_NS (the wall time then is not enough)
        end = time.monotonic_ns() + 2 * inline.SMALL_NS
        spins = 0
        while time.monotonic_ns() < end:
            spins += 1

    inst = FakeInstance(spin, inline_ok=True)
    utime = [0.0]

    def ticking(who: int) -> resource.struct_rusage:
        utime[0] += 0.004  # a tick between each two readings
        # a real struct_rusage: the compiled hot path (inferd/hotpath.py) checks the type it declares
        return resource.struct_rusage((utime[0], 0.0, *[0] * 14))

    async def main(loop: asyncio.AbstractEventLoop) -> int:
        pool = InstancePool("m", "1", [("m_0", inst)], BatchPolicy(), ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 1):
            await answers(submit(pool, loop, request(i)))
        monkeypatch.setattr(resource, "getrusage", ticking)  # what the pool reads (execute.py)
        for i in range(inline.SLOW_RUN + 2):
            await answers(submit(pool, loop, request(f"ticked{i}")))
        await pool.stop(WAIT_S)
        return threading.get_ident()

    loop_thread = run(main)
    threads = [t for _, t in inst.calls]
    assert utime[0] > 0.004 * inline.SLOW_RUN  # (the ticking rusage was read)
    assert threads[-(inline.SLOW_RUN + 2) :] == [loop_thread] * (inline.SLOW_RUN + 2)


@pytest.mark.parametrize("why", ["no inline_ok", "queue delay", "bls"])
def test_no_inline_mode(why: str) -> None:
    inst = FakeInstance(inline_ok=why != "no inline_ok")
    if why == "bls":
        inst.uses_bls = True
    delay = 1 if why == "queue delay" else 0

    async def main(loop: asyncio.AbstractEventLoop) -> int:
        policy = BatchPolicy(max_batch_size=1 if delay else 0, max_queue_delay_ns=delay)
        pool = InstancePool("m", "1", [("m_0", inst)], policy, ModelStats(), loop)
        for i in range(inline.INLINE_AFTER + 3):
            await answers(submit(pool, loop, request(i)))
        await pool.stop(WAIT_S)
        return threading.get_ident()

    loop_thread = run(main)
    assert loop_thread not in [t for _, t in inst.calls]


def test_long_threaded_executes_never_probe_inline() -> None:
    """A backend that may run inline still stays in threads when its executes are long."""
    import asyncio
    import time as _time

    from inferd.core.request import InferRequest
    from inferd.core.response import ResponseStream
    from inferd.core.stats import ModelStats
    from inferd.scheduling.inline import INLINE_AFTER
    from inferd.scheduling.queue import BatchPolicy

    class Slow:
        inline_ok = True
        uses_bls = False
        last_timings = None

        def execute(self, requests: list[InferRequest]) -> list[object]:
            _time.sleep(0.003)  # longer than INLINE_MAX_NS
            from inferd.core.response import InferResponse

            return [InferResponse("m", "1", r.id) for r in requests]

        def unload(self) -> None:
            """Nothing to release."""

    async def run() -> bool:
        loop = asyncio.get_running_loop()
        pool = InstancePool("m", "1", [("m_0", Slow())], BatchPolicy(), ModelStats(), loop)  # type: ignore[list-item]
        for _ in range(INLINE_AFTER + 2):
            r = InferRequest("m", {})
            r.stream = ResponseStream(loop)
            pool.enqueue(r)
            await r.stream.first()
        inline = pool.executing_inline
        await pool.stop(1)
        return inline

    assert asyncio.run(run()) is False
