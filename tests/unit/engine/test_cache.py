"""The response cache (engine/cache.py): flags, keys, LRU within a byte budget, threads, the lifecycle's part."""

from __future__ import annotations

import asyncio
import gc
import threading
import tracemalloc
from typing import Any

import numpy as np
import pytest

from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.response_path import ResponsePath
from inferd.core.stats import ModelStats
from inferd.core.tensor import Tensor
from inferd.engine.cache import (
    MIN_SIZE,
    Entry,
    ResponseCache,
    cache_size,
    entry_of,
    look_up,
    request_key,
)
from inferd.errors import InvalidArgumentError


def _request(
    data: np.ndarray[Any, Any], name: str = "INPUT0", outputs: list[str] | None = None
) -> InferRequest:
    return InferRequest(
        "m",
        {name: Tensor.from_array(name, data)},
        outputs=None if outputs is None else [RequestedOutput(o) for o in outputs],
    )


def _entry(nbytes: int) -> Entry:
    return entry_of([Tensor.from_array("OUT", np.zeros(nbytes, dtype=np.uint8))])


# -- flags ---------------------------------------------------------------------------------------------
def test_no_flags_no_cache() -> None:
    assert cache_size([]) is None


@pytest.mark.parametrize(
    ("flags", "size"),
    [(["local,size=1048576"], 1048576), (["local,size= +4096xyz"], 4096), (["local,size=192"], 192)],
)
def test_sizes(flags: list[str], size: int) -> None:
    assert cache_size(flags) == size


def test_the_first_size_wins_and_other_settings_are_ignored() -> None:
    assert cache_size(["local,size=1000", "local,size=2000", "local,other=x"]) == 1000


def test_deprecated_byte_size(caplog: pytest.LogCaptureFixture) -> None:
    assert cache_size([], "2048") == 2048
    assert "'--cache-config=local,size=2048'" in caplog.text


@pytest.mark.parametrize(
    ("flags", "byte_size", "text"),
    [
        (["local"], None, "No cache specified. --cache-config option format is"),
        (
            ["local,size"],
            None,
            "--cache-config option format is '<cache name>,<setting>=<value>'. Got local,size",
        ),
        (["local,size=abc"], None, "creating server: Internal - Failed to initialize LocalCache: stoull"),
        (["local,size=-1"], None, "Failed to initialize LocalCache: failed to allocate buffer"),
        (["local,foo=1"], None, "config didn't contain a valid 'size' field."),
        (
            ["local,size=191"],
            None,
            "Could not initialize buffer in basic_managed_external_buffer constructor",
        ),
        (["redis,host=x"], None, "unable to find 'libtritoncache_redis.so' for cache"),
        ([], "abc", 'Bad option: "--response-cache-byte-size".\nInvalid option value. Got abc'),
        (
            ["local,size=1024"],
            "1024",
            "Error: Incompatible flags --response-cache-byte-size and --cache-config",
        ),
    ],
)
def test_refusals(flags: list[str], byte_size: str | None, text: str) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        cache_size(flags, byte_size)
    assert text in e.value.message


# -- keys ----------------------------------------------------------------------------------------------
def test_equal_requests_have_equal_keys() -> None:
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    assert request_key("m", "1", _request(a)) == request_key("m", "1", _request(a.copy()))
    raw = InferRequest(
        "m", {"INPUT0": Tensor("INPUT0", Tensor.from_array("x", a).datatype, (1, 4), raw=a.tobytes())}
    )
    assert request_key("m", "1", raw) == request_key("m", "1", _request(a))


def test_keys_differ() -> None:
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    base = request_key("m", "1", _request(a))
    others = [
        request_key("m", "1", _request(a.reshape(2, 2))),  # same bytes, another shape
        request_key("m", "1", _request(a.view(np.int32))),  # same bytes, another datatype
        request_key("m", "1", _request(a + 1)),
        request_key("m", "1", _request(a, "INPUT1")),
        request_key("m", "2", _request(a)),
        request_key("n", "1", _request(a)),
        request_key("m", "1", _request(a, outputs=["OUTPUT0"])),
    ]
    assert len({base, *others}) == len(others) + 1


def test_key_ignores_parameters_and_output_order() -> None:
    a = np.arange(4, dtype=np.float32)
    r1, r2 = _request(a, outputs=["A", "B"]), _request(a, outputs=["B", "A"])
    r2.parameters = {"custom": 1}
    assert request_key("m", "1", r1) == request_key("m", "1", r2)


# -- the cache -----------------------------------------------------------------------------------------
def test_hit_returns_copies_of_the_outputs() -> None:
    cache = ResponseCache(1 << 20)
    out = np.arange(3, dtype=np.float32)
    assert cache.insert(b"k", entry_of([Tensor.from_array("OUT", out)])) == cache.INSERTED
    out[:] = 7  # the model's array changing later does not change the entry
    entry = cache.lookup(b"k")
    assert entry is not None
    (t,) = entry.tensors()
    assert t.name == "OUT" and t.shape == (3,) and t.array.tolist() == [0.0, 1.0, 2.0]
    assert not t.array.flags.writeable
    assert cache.lookup(b"nope") is None
    assert (cache.hits, cache.misses) == (1, 1)
    assert cache.insert(b"k", entry) == cache.EXISTS


def test_lru_eviction_within_the_size() -> None:
    cost = _entry(1000).cost
    cache = ResponseCache(3 * cost)
    for k in (b"a", b"b", b"c"):
        cache.insert(k, _entry(1000))
    assert cache.lookup(b"a") is not None  # a is now the most recently used
    cache.insert(b"d", _entry(1000))
    assert cache.lookup(b"b") is None and cache.lookup(b"a") is not None
    assert len(cache) == 3 and cache.used == 3 * cost <= cache.size and cache.evictions == 1


def test_an_entry_larger_than_the_cache_is_not_inserted() -> None:
    cache = ResponseCache(MIN_SIZE * 10)
    cache.insert(b"small", _entry(10))
    assert cache.insert(b"big", _entry(MIN_SIZE * 10)) == cache.TOO_LARGE
    assert cache.lookup(b"big") is None and cache.lookup(b"small") is not None


def test_memory_stays_within_the_size() -> None:
    """What the entries really hold (tracemalloc) stays within what they are counted as."""
    size = 2 << 20
    cache = ResponseCache(size)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(5000):  # many small entries: the per-entry allowance matters most
            key = request_key("m", "1", _request(np.array([i], dtype=np.int64)))
            cache.insert(key, entry_of([Tensor.from_array("OUTPUT0", np.full(4, i, dtype=np.float32))]))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.used <= size
    assert held <= cache.used, (held, cache.used)


def test_threads() -> None:
    cache = ResponseCache(50 * _entry(100).cost)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(2000):
                k = bytes([n, i % 97])
                if cache.lookup(k) is None:
                    cache.insert(k, _entry(100))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.used == sum(e.cost for e in cache._entries.values()) <= cache.size
    assert cache.hits + cache.misses == 8 * 2000


# -- the lifecycle's part --------------------------------------------------------------------------------
class _Config:
    class response_cache:  # the ModelConfig field's name
        enable = True


class _Model:
    name, version_str, platform = "m", "1", "python"
    config = _Config()

    def __init__(self) -> None:
        self.stats = ModelStats()


def _watched(
    loop: asyncio.AbstractEventLoop, cache: ResponseCache, model: _Model, request: InferRequest
) -> ResponseStream:
    """A stream whose response path inserts into ``cache`` (a miss)."""
    hit, post = look_up(cache, model, request)  # type: ignore[arg-type]
    assert hit is None and post is not None
    stream = ResponseStream(loop)
    stream.path = ResponsePath(cache_post=post)
    return stream


def test_miss_then_hit_on_the_stream() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        cache, model = ResponseCache(1 << 20), _Model()
        a = np.arange(4, dtype=np.float32)
        s1 = _watched(loop, cache, model, _request(a))
        s1.deliver(InferResponse("m", "1", outputs=[Tensor.from_array("OUT", a * 2)]), True)
        assert (await s1.first()).outputs[0].array.tolist() == [0, 2, 4, 6]
        hit, post = look_up(cache, model, _request(a))  # type: ignore[arg-type]
        assert hit is not None and post is None
        assert hit.outputs[0].array.tolist() == [0, 2, 4, 6]
        s3 = _watched(loop, cache, model, _request(a + 1))  # an error is answered and never cached
        s3.deliver(InferResponse("m", "1", error=InvalidArgumentError("no")), True)
        assert look_up(cache, model, _request(a + 1))[0] is None  # type: ignore[arg-type]
        inf = model.stats.to_json("m", "1")
        assert inf["inference_stats"]["cache_hit"]["count"] == 1
        assert inf["inference_stats"]["cache_miss"]["count"] == 1
        assert inf["inference_stats"]["success"]["count"] == 1 and inf["inference_count"] == 0

    asyncio.run(run())
