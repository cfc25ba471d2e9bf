"""The response cache: ``--cache-config local,size=N`` and a model's ``response_cache { enable: true }``.

One cache per server, bounded in bytes, least recently used entries evicted first, thread-safe. The
core looks a request up in ``ServerCore.submit`` before it is queued (``look_up``): a hit is
answered there and never reaches the scheduler; a miss gets a stage in its response path
(core/response_path.py) that inserts its successful response. Ensembles are cached at the top level the same way (their steps through their own models).

The key, as Triton's ``TritonCache::Hash``: the model's name and version and every input (sorted by
name) with its bytes; parameters are not part of it. Unlike 2.51 it also holds each input's datatype
and shape and the outputs asked for: the reference answers a [2,2] request from the entry of a [1,4]
one with the same bytes, and a request for every output from an entry holding one. Errors are never
inserted (2.51 caches a failed response as an empty success). What an entry costs is its outputs'
bytes plus a fixed allowance per entry and per output for the Python objects around them, so the
memory held stays within ``size``.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import re
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferd.core.response import InferResponse
from inferd.core.response_path import Post
from inferd.core.tensor import Tensor
from inferd.core.types import DataType
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.core.request import InferRequest
    from inferd.engine.model import Model

log = logging.getLogger("inferd")

#: the smallest local cache the reference creates (its buffer manager's own header)
MIN_SIZE = 192
#: bytes counted per entry and per output beyond the outputs' data: the key, the dict and LRU slot,
#: the entry's tuples, names and shapes (measured with tracemalloc in tests/unit/core/test_cache.py)
ENTRY_OVERHEAD = 320
OUTPUT_OVERHEAD = 256
_U64_MAX = 2**64 - 1
_I64_MAX = 2**63 - 1
_LEADING_INT = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_LEN = struct.Struct("<Q")


# -- the flags ---------------------------------------------------------------------------------------
def _bad_option(flag: str, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f'Bad option: "{flag}".\n{message}')


def _creating(kind: str, message: str) -> InvalidArgumentError:
    """An error the reference reports while creating the server (``error: creating server: ...``)."""
    return InvalidArgumentError(f"creating server: {kind} - {message}")


def _split_setting(arg: str) -> tuple[str, str, str]:
    """``<cache name>,<setting>=<value>`` as tritonserver's ParseCacheConfigOption splits it."""
    comma = arg.find(",")
    if comma <= 0:
        raise _bad_option(
            "--cache-config",
            f"No cache specified. --cache-config option format is <cache name>,<setting>=<value>. Got {arg}",
        )
    equal = arg.find("=", comma + 1)
    setting, value = arg[comma + 1 : equal], arg[equal + 1 :]
    if equal < 0 or not setting or not value:
        raise _bad_option(
            "--cache-config", f"--cache-config option format is '<cache name>,<setting>=<value>'. Got {arg}"
        )
    return arg[:comma], setting, value


def _stoull(text: str) -> int:
    """``std::stoull``: blanks, a sign, digits, the rest ignored; a negative value wraps."""
    m = _LEADING_INT.match(text)
    if m is None or abs(int(m.group(1))) > _U64_MAX:
        raise _creating("Internal", "Failed to initialize LocalCache: stoull")
    return int(m.group(1)) & _U64_MAX


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return _I64_MAX


def cache_size(cache_config: Sequence[str], byte_size: str | None = None) -> int | None:
    """The size in bytes of the cache the flags ask for, or None when they ask for none.

    ``cache_config``: ``--cache-config`` values; ``byte_size``: the deprecated
    ``--response-cache-byte-size`` (``--cache-config local,size=<it>``). The reference's texts for
    every refusal; a size larger than the machine's memory is refused as the reference's allocation
    fails for it.
    """
    settings: dict[str, list[tuple[str, str]]] = {}
    for arg in cache_config:
        name, setting, value = _split_setting(arg)
        settings.setdefault(name, []).append((setting, value))
    if byte_size is not None:
        m = _LEADING_INT.match(byte_size)
        if m is None:
            raise _bad_option("--response-cache-byte-size", f"Invalid option value. Got {byte_size}")
        if abs(int(m.group(1))) > _I64_MAX:
            raise _bad_option(
                "--response-cache-byte-size", f"Provided option value is out of bound. Got {byte_size}"
            )
        n = int(m.group(1))
        log.warning(
            "Warning: '--response-cache-byte-size' has been deprecated! This will default to the 'local' "
            "cache implementation with the provided byte size for its config. Please use '--cache-config' "
            "instead. The equivalent --cache-config CLI args would be: '--cache-config=local,size=%d'",
            n,
        )
        if cache_config:
            raise InvalidArgumentError(
                "Error: Incompatible flags --response-cache-byte-size and --cache-config both provided. "
                "Please provide one or the other."
            )
        settings = {"local": [("size", str(n))]}
    if not settings:
        return None
    for name in settings:
        if name != "local":
            raise _creating(
                "Invalid argument",
                f"unable to find 'libtritoncache_{name}.so' for cache. Searched: /opt/tritonserver/caches",
            )
    sizes = [value for setting, value in settings["local"] if setting == "size"]
    if not sizes:
        raise _creating(
            "Invalid argument", "Failed to initialize LocalCache: config didn't contain a valid 'size' field."
        )
    size = _stoull(sizes[0])  # the first "size" wins, as rapidjson reads a repeated member
    if size > _memory_bytes():
        raise _creating("Internal", "Failed to initialize LocalCache: failed to allocate buffer")
    if size < MIN_SIZE:
        raise _creating(
            "Internal",
            "Failed to initialize LocalCache: Could not initialize buffer in basic_managed_external_buffer "
            "constructor",
        )
    return size


# -- the key -----------------------------------------------------------------------------------------
def request_key(model_name: str, version: str, request: InferRequest) -> bytes:
    """The cache key of ``request`` to model version ``version``: a 128-bit BLAKE2b digest."""
    h = hashlib.blake2b(digest_size=16)
    update = h.update

    def field(data: bytes | memoryview) -> None:
        update(_LEN.pack(len(data) if isinstance(data, bytes) else data.nbytes))
        update(data)

    field(model_name.encode())
    field(version.encode())
    for name in sorted(request.inputs):
        t = request.inputs[name]
        field(name.encode())
        field(t.datatype.wire.encode())
        field(repr(t.shape).encode())
        data = t.to_bytes()
        field(data if isinstance(data, bytes) else memoryview(data).cast("B"))
    if request.outputs is None:
        field(b"*")
    else:
        for out in sorted({o.name for o in request.outputs}):
            field(out.encode())
    return h.digest()


# -- the cache ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Entry:
    """A cached response: its outputs as (name, datatype, shape, bytes), and what it is counted as."""

    outputs: tuple[tuple[str, DataType, tuple[int, ...], bytes], ...]
    cost: int

    def tensors(self) -> list[Tensor]:
        """Fresh tensors over the stored bytes (read-only views: no copy, nothing shared is mutable)."""
        return [Tensor(name, dt, shape, raw=data) for name, dt, shape, data in self.outputs]


def entry_of(outputs: Sequence[Tensor]) -> Entry:
    """The entry of a response's outputs (their bytes copied)."""
    stored = tuple((t.name, t.datatype, t.shape, bytes(t.to_bytes())) for t in outputs)
    cost = ENTRY_OVERHEAD + sum(OUTPUT_OVERHEAD + len(n) + 8 * len(s) + len(d) for n, _, s, d in stored)
    return Entry(stored, cost)


class ResponseCache:
    """LRU entries within ``size`` bytes, shared by every cached model of one server; thread-safe."""

    INSERTED, EXISTS, TOO_LARGE = "inserted", "exists", "too large"

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[bytes, Entry] = collections.OrderedDict()
        self.used = 0
        self.hits = self.misses = self.evictions = 0
        self.lookup_ns = self.insert_ns = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: bytes) -> Entry | None:
        t0 = time.monotonic_ns()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
                self._entries.move_to_end(key)
            self.lookup_ns += time.monotonic_ns() - t0
        return entry

    def insert(self, key: bytes, entry: Entry) -> str:
        """Store ``entry`` under ``key``, evicting the least recently used ones to make room."""
        t0 = time.monotonic_ns()
        with self._lock:
            try:
                if key in self._entries:
                    return self.EXISTS
                if entry.cost > self.size:
                    return self.TOO_LARGE
                while self.used + entry.cost > self.size:
                    _, old = self._entries.popitem(last=False)
                    self.used -= old.cost
                    self.evictions += 1
                self._entries[key] = entry
                self.used += entry.cost
                return self.INSERTED
            finally:
                self.insert_ns += time.monotonic_ns() - t0


# -- the request lifecycle's part ------------------------------------------------------------------------
def look_up(
    cache: ResponseCache, model: Model, request: InferRequest
) -> tuple[InferResponse | None, Post | None]:
    """Look ``request`` to a model that enables the cache up before it is queued: on a hit, the
    answer (the core delivers it, never queueing the request); on a miss, the stage of its response
    path (core/response_path.py) that inserts its successful response when it comes. (None, None)
    where the model does not enable the cache.

    Statistics as the reference's: a hit is a success with its queue time (until the lookup) and its
    lookup time, and no inference, execution or compute; a miss counts its lookup and insertion time
    (into the request's duration too) once its response was inserted, or refused for its size (an
    entry another request inserted meanwhile is not counted, as 2.51's batcher; its ensembles count it).
    """
    if not model.config.response_cache.enable:
        return None, None
    t_queue = time.monotonic_ns()
    key = request_key(model.name, model.version_str, request)
    t0 = time.monotonic_ns()
    entry = cache.lookup(key)
    t1 = time.monotonic_ns()
    if entry is not None:
        model.stats.record_cache_hit(t1 - request.t_start_ns, t0 - t_queue, t1 - t0)
        return InferResponse(model.name, model.version_str, request.id, entry.tensors()), None
    ensemble = model.platform == "ensemble"
    inserted = False

    def insert(response: InferResponse) -> None:
        nonlocal inserted
        if inserted:  # one response: a non-decoupled model's
            return
        inserted = True
        t2 = time.monotonic_ns()
        try:
            new: Entry | None = entry_of(response.outputs)
        except Exception:  # outputs that do not serialise: answered, not cached
            log.exception("the response of model '%s' could not be cached", model.name)
            new = None
        result = cache.insert(key, new) if new is not None else cache.EXISTS
        if result == cache.TOO_LARGE and new is not None:
            log.error(
                "Failed to insert key [%s] into response cache: Requested byte_size: %d is greater than "
                "total cache size: %d",
                key.hex(),
                new.cost,
                cache.size,
            )
        if result != cache.EXISTS or ensemble:
            model.stats.record_cache_miss(t1 - t0 + time.monotonic_ns() - t2)

    return None, insert
