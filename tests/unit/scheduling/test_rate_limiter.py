"""The rate limiter alone: flags, resource accounting, global vs per device, priority, refusals."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter

import pytest

from inferd.errors import InvalidArgumentError
from inferd.repository._proto import pb2
from inferd.scheduling.rate_limiter import (
    GLOBAL,
    PER_DEVICE,
    InstanceSlot,
    RateLimiter,
    RateLimiterError,
    admit,
    demands,
    explicit_resources,
    from_flags,
    group_limits,
    open_gate,
)
from inferd.trace.config import option_int
from repo_paths import FIXTURES

REFUSED = json.loads((FIXTURES / "reference_observed_rate_limit.json").read_text())["refused_flags"]
WAIT_S = 10


def slot(name: str, resources: dict[int, dict[str, int]], priority: int = 0) -> InstanceSlot:
    return InstanceSlot(name, resources, priority)


def granted(limiter: RateLimiter, s: InstanceSlot) -> threading.Event:
    """Stage ``s`` in a thread; the event is set once it holds its resources."""
    got = threading.Event()

    def wait() -> None:
        if limiter.acquire(s):
            got.set()

    threading.Thread(target=wait, daemon=True).start()
    return got


# -- flags ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", sorted(REFUSED))
def test_refused_flags_have_the_reference_text(flag: str) -> None:
    name, _, value = flag.partition("=")
    with pytest.raises(RateLimiterError) as e:
        if name == "--rate-limit":
            from_flags(value, [], option_int)
        else:
            from_flags("off", [value], option_int)
    assert e.value.message == REFUSED[flag]


def test_mode_is_case_insensitive_and_off_makes_none() -> None:
    assert from_flags("off", ["R:1"], option_int) is None
    limiter = from_flags("EXECUTION_Count", [], option_int)
    assert isinstance(limiter, RateLimiter)


def test_resource_flags_keep_the_smaller_count_and_wrap_negative_counts() -> None:
    got = explicit_resources(["R:4", "R:2", "R:9", "gpu:3:1", "Big:-1"], option_int)
    assert got == {PER_DEVICE: {"R": 2, "Big": (1 << 64) - 1}, 1: {"gpu": 3}}


# -- configs ----------------------------------------------------------------------------------------


def test_demands_from_config_global_and_per_device() -> None:
    cfg = pb2.ModelConfig()
    g = cfg.instance_group.add(count=2, kind=pb2.ModelInstanceGroup.KIND_CPU)
    g.rate_limiter.priority = 3
    g.rate_limiter.resources.add(name="R", count=2)
    shared = g.rate_limiter.resources.add(name="G", count=1)
    setattr(shared, "global", True)
    cfg.instance_group.add(count=1, kind=pb2.ModelInstanceGroup.KIND_CPU)
    limits = group_limits(cfg)
    assert len(limits) == 3
    s = demands("m_0", 0, limits[0])
    assert (s.resources, s.priority) == ({0: {"R": 2}, GLOBAL: {"G": 1}}, 3)
    assert demands("m_2", 0, limits[2]).resources == {}
    assert group_limits(pb2.ModelConfig()) == [None]
    gpu = pb2.ModelConfig()
    gpu.instance_group.add(count=2, kind=pb2.ModelInstanceGroup.KIND_GPU, gpus=[0, 1])
    assert len(group_limits(gpu)) == 4  # count instances on each of its GPUs


def test_open_gate_registers_each_instance_on_its_device() -> None:
    cfg = pb2.ModelConfig()
    g = cfg.instance_group.add(count=2, kind=pb2.ModelInstanceGroup.KIND_CPU)
    g.rate_limiter.resources.add(name="R", count=1)
    limiter = RateLimiter()
    gate = open_gate(limiter, cfg, [("m_0", 0), ("m_1", 1)])
    assert gate is not None and [s.resources for s in gate.slots] == [{0: {"R": 1}}, {1: {"R": 1}}]
    assert limiter.limits() == {0: {"R": 1}, 1: {"R": 1}}
    gate.close()
    assert limiter.limits() == {}
    assert open_gate(None, cfg, [("m_0", 0)]) is None


def test_gates_grow_retire_and_leave_with_an_instance_update() -> None:
    limiter = RateLimiter()
    gate = admit(limiter, [("m_0", 0, None)])
    added = admit(limiter, [("m_1", 0, _limits(R1=3))])
    assert gate is not None and added is not None
    gate.extend(added)
    assert limiter.limits() == {0: {"R1": 3}}
    gate.retire([1])  # a worker of the removed instance waiting for a turn stops waiting
    assert not limiter.acquire(gate.slots[1])
    gate.leave([1])
    assert limiter.limits() == {}
    assert admit(None, [("m_2", 0, None)]) is None


def _limits(**counts: int) -> pb2.ModelRateLimiter:
    msg = pb2.ModelRateLimiter()
    for name, count in counts.items():
        msg.resources.add(name=name, count=count)
    return msg


# -- the counts logged at --log-verbose 1 -----------------------------------------------------------
# reference_observed_instance_update_rate_limit.json holds what Triton 2.51 logged
# (rate_limiter.cc's UpdateResourceLimits) as each step's instances registered and left

RECORDED = {
    s["id"]: s["observed"]
    for run in json.loads((FIXTURES / "reference_observed_instance_update_rate_limit.json").read_text())
    for s in run["steps"]
}


def _logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The counts logged, as the log line writes the message (quoted, escaped: logs.py)."""
    return [json.dumps(r.getMessage()) for r in caplog.records if "Max Resource Map" in r.getMessage()]


def test_each_registration_and_removal_logs_the_counts_as_the_reference(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="inferd.scheduling")
    limiter = RateLimiter()
    counted = [slot("counted_0_0", {0: {"R1": 3}})]
    limiter.register(counted)
    (only_r1,) = RECORDED["r1_3_to_two"]["resource_maps"]
    assert _logged(caplog) == [only_r1]
    both = {GLOBAL: {"RG": 2}, 0: {"B": 5, "A": 3}}
    limiter.register([slot("counted_0_0", both), slot("counted_0_1", both)])
    limiter.unregister(counted)
    # global ones first, as GLOBAL; then the device's, by name
    assert _logged(caplog) == [only_r1, *RECORDED["global_and_two_more"]["resource_maps"]]


def test_a_refused_registration_logs_the_counts_it_leaves(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="inferd.scheduling")
    limiter = RateLimiter({PER_DEVICE: {"R1": 10}})
    limiter.register([slot("a", {0: {"R1": 2}})])
    with pytest.raises(InvalidArgumentError):
        limiter.register([slot("b", {0: {"R1": 32}})])
    (ten,) = RECORDED["explicit_above_the_count"]["resource_maps"]
    assert _logged(caplog) == [ten, ten]
    assert RECORDED["explicit_first_load"]["resource_maps"] == [ten]


def test_without_verbose_logging_nothing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inferd.scheduling")
    limiter = RateLimiter()
    limiter.register([slot("a", {0: {"R1": 2}})])
    assert _logged(caplog) == []


# -- accounting -------------------------------------------------------------------------------------


def test_default_counts_are_the_most_any_instance_asks_for() -> None:
    limiter = RateLimiter()
    a, b = slot("a", {0: {"R": 2}}), slot("b", {0: {"R": 3}, GLOBAL: {"G": 1}})
    limiter.register([a])
    limiter.register([b])
    assert limiter.limits() == {0: {"R": 3}, GLOBAL: {"G": 1}}
    limiter.unregister([b])
    assert limiter.limits() == {0: {"R": 2}}


def test_an_instance_waits_until_the_resources_it_asks_for_are_free() -> None:
    limiter = RateLimiter()
    a, b = slot("a", {0: {"R": 1}}), slot("b", {0: {"R": 1}})
    limiter.register([a, b])
    assert limiter.acquire(a)
    assert limiter.held() == {0: {"R": 1}}
    b_got = granted(limiter, b)
    assert not b_got.wait(0.05)  # R is held by a
    limiter.release(a)
    assert b_got.wait(WAIT_S)
    assert limiter.held() == {0: {"R": 1}}
    limiter.release(b)
    limiter.release(b)  # idempotent: the watchdog and the worker may both release
    assert limiter.held() == {}


def test_per_device_resources_do_not_block_other_devices() -> None:
    limiter = RateLimiter()
    on0, other0, on1 = slot("a", {0: {"R": 1}}), slot("b", {0: {"R": 1}}), slot("c", {1: {"R": 1}})
    limiter.register([on0, other0, on1])
    assert limiter.acquire(on0)
    assert limiter.acquire(on1)  # device 1 has its own R
    waits = granted(limiter, other0)
    assert not waits.wait(0.05)
    limiter.release(on0)
    assert waits.wait(WAIT_S)


def test_a_global_resource_is_shared_by_every_device() -> None:
    limiter = RateLimiter()
    a, b = slot("a", {GLOBAL: {"G": 1}}), slot("b", {GLOBAL: {"G": 1}})
    limiter.register([a, b])
    assert limiter.acquire(a)
    waits = granted(limiter, b)
    assert not waits.wait(0.05)
    limiter.release(a)
    assert waits.wait(WAIT_S)


def test_explicit_counts_let_instances_run_together() -> None:
    limiter = RateLimiter({PER_DEVICE: {"R": 2}})
    a, b = slot("a", {0: {"R": 1}}), slot("b", {0: {"R": 1}})
    limiter.register([a, b])
    assert limiter.limits() == {0: {"R": 2}}
    assert limiter.acquire(a) and limiter.acquire(b)
    assert limiter.held() == {0: {"R": 2}}


def test_explicit_global_count_is_the_largest_given_on_any_device() -> None:
    limiter = RateLimiter({PER_DEVICE: {"G": 1}, 3: {"G": 4}})
    limiter.register([slot("a", {GLOBAL: {"G": 3}})])
    assert limiter.limits() == {GLOBAL: {"G": 4}}


def test_explicit_device_count_applies_to_that_device_only() -> None:
    limiter = RateLimiter({1: {"R": 2}})
    limiter.register([slot("a", {1: {"R": 2}})])
    with pytest.raises(InvalidArgumentError) as e:
        limiter.register([slot("b", {0: {"R": 1}})])
    assert "is limited to 0 " in e.value.message


def test_the_order_is_strict_an_instance_waits_behind_one_that_cannot_fit() -> None:
    """As the reference: the staged instance with the fewest weighted executions goes first, and one
    behind it waits even when its own resources are free."""
    limiter = RateLimiter()
    big, small, free = slot("big", {0: {"R": 2}}), slot("small", {0: {"R": 1}}), slot("free", {})
    limiter.register([big, small, free])
    limiter.release(small)  # nothing held: no effect
    assert limiter.acquire(small)
    big_got = granted(limiter, big)  # needs 2 of R: waits for small
    assert not big_got.wait(0.05)
    free.exec_count = 5  # behind big in the order
    free_got = granted(limiter, free)
    assert not free_got.wait(0.05)
    limiter.release(small)
    assert big_got.wait(WAIT_S) and free_got.wait(WAIT_S)


# -- priority ---------------------------------------------------------------------------------------


def test_priority_weights_the_turns_over_many_grants() -> None:
    """Two instances always wanting one resource of count 1: priority 1 gets twice the turns of 2."""
    limiter = RateLimiter()
    one, two = slot("one", {0: {"R": 1}}, priority=1), slot("two", {0: {"R": 1}}, priority=2)
    gate = slot("gate", {0: {"R": 1}})
    limiter.register([one, two, gate])
    # the resource held until both threads wait for it: a thread that starts late (a busy machine)
    # would find the other thousands of turns ahead (it then takes turns in a row to catch up)
    assert limiter.acquire(gate)
    turns: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def worker(s: InstanceSlot) -> None:
        while not stop.is_set():
            if not limiter.acquire(s):
                return
            with lock:
                turns.append(s.name)
                if len(turns) >= 3000:
                    stop.set()
            limiter.release(s, again=True)  # more work: staged again before the next grant (the pool)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (one, two)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + WAIT_S
    while not (one.staged and two.staged):  # both wait for the resource
        assert time.monotonic() < deadline
        time.sleep(0.001)
    limiter.release(gate, executed=False)
    limiter.withdraw(gate)
    assert stop.wait(60)
    limiter.withdraw(one)
    limiter.withdraw(two)
    for t in threads:
        t.join(WAIT_S)
    counts = Counter(turns[:3000])
    assert 1.9 < counts["one"] / counts["two"] < 2.1, counts
    # every grant counted once; not "level within 2": the limiter does not hold the resource back
    # for an instance that is not waiting yet (its thread preempted on a busy machine), so the
    # weighted counts drift by as many grants as the other instance was late for
    assert one.exec_count + two.exec_count == len(turns)


def test_priority_zero_counts_as_one() -> None:
    assert slot("a", {}, priority=0).scaled_priority() == 0
    s = slot("a", {}, priority=0)
    s.exec_count = 7
    assert s.scaled_priority() == 7


def test_without_staging_again_two_busy_instances_alternate() -> None:
    """Priority weighs only instances staged together: one released and staged afterwards waits
    behind the other, whatever the priorities."""
    limiter = RateLimiter()
    one, two = slot("one", {0: {"R": 1}}, priority=1), slot("two", {0: {"R": 1}}, priority=5)
    limiter.register([one, two])
    assert limiter.acquire(one)
    two_got = granted(limiter, two)
    limiter.release(one)
    assert two_got.wait(WAIT_S)


def test_unstage_leaves_the_order_or_gives_the_turn_back() -> None:
    limiter = RateLimiter()
    a, b = slot("a", {0: {"R": 1}}), slot("b", {0: {"R": 1}})
    limiter.register([a, b])
    assert limiter.acquire(a)
    limiter.release(a, again=True)  # staged again and, nothing else waiting, granted at once
    assert a.allocated and limiter.held() == {0: {"R": 1}}
    limiter.unstage(a)  # it found no work: the turn goes back, uncounted
    assert not a.allocated and a.exec_count == 1 and limiter.held() == {}
    assert limiter.acquire(b)
    limiter.release(a, again=True)  # not allocated: nothing happens
    assert not a.staged
    limiter.release(b, again=True)
    assert b.allocated
    b.exec_count = 0
    with limiter._lock:
        limiter._stage(a)  # what the pool's release(again=True) leaves: a waits behind b
    assert a.staged and not a.allocated
    limiter.unstage(a)
    assert not a.staged
    limiter.release(b)
    assert not a.allocated and limiter.held() == {}  # a left the order: nobody took the turn


def test_unused_turns_do_not_count() -> None:
    limiter = RateLimiter()
    a = slot("a", {0: {"R": 1}})
    limiter.register([a])
    assert limiter.acquire(a)
    limiter.release(a, executed=False)
    assert a.exec_count == 0 and limiter.held() == {}


# -- refusals and withdrawal ------------------------------------------------------------------------


def test_more_than_the_flags_allow_is_refused_with_the_reference_text() -> None:
    limiter = RateLimiter({PER_DEVICE: {"R": 1}})
    limiter.register([slot("ok", {0: {"R": 1}})])
    with pytest.raises(InvalidArgumentError) as e:
        limiter.register([slot("greedy", {0: {"R": 2}})])
    assert e.value.message == (
        'Resource count for "R" is limited to 1 which will prevent scheduling of one or more model '
        "instances, the minimum required count is 2"
    )
    assert limiter.limits() == {0: {"R": 1}}  # the refused model left nothing behind


def test_one_resource_both_global_and_per_device_is_refused() -> None:
    limiter = RateLimiter()
    limiter.register([slot("a", {0: {"R": 1}})])
    with pytest.raises(InvalidArgumentError) as e:
        limiter.register([slot("b", {GLOBAL: {"R": 1}})])
    assert e.value.message == (
        'Resource "R" is present as both global and device-specific resource in the model configuration.'
    )


def test_withdraw_wakes_a_waiting_instance_without_a_grant() -> None:
    limiter = RateLimiter()
    a, b = slot("a", {0: {"R": 1}}), slot("b", {0: {"R": 1}})
    limiter.register([a, b])
    assert limiter.acquire(a)
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(limiter.acquire(b)))
    t.start()
    limiter.withdraw(b)
    t.join(WAIT_S)
    assert result == [False]
    assert not limiter.acquire(b)  # and later too
    limiter.release(a)
    assert limiter.held() == {}


def test_unregister_withdraws_waiting_instances_and_lets_the_rest_go() -> None:
    limiter = RateLimiter()
    a, b, c = slot("a", {0: {"R": 2}}), slot("b", {0: {"R": 2}}), slot("c", {0: {"R": 1}})
    limiter.register([a, b, c])
    assert limiter.acquire(a)
    b_result: list[bool] = []
    tb = threading.Thread(target=lambda: b_result.append(limiter.acquire(b)))
    tb.start()
    while not b.staged:
        threading.Event().wait(0.001)
    c.exec_count = 9  # behind b
    c_got = granted(limiter, c)
    limiter.unregister([b])
    tb.join(WAIT_S)
    assert b_result == [False]
    assert not c_got.wait(0.05)  # a still holds both units
    limiter.release(a)
    assert c_got.wait(WAIT_S)
