"""The wire between the server and a Python model's worker process: frames, requests, responses.

A ``Channel`` carries pickled messages over a socketpair, each behind its 8-byte length. Tensors
travel as their wire bytes (row-major little endian; BYTES length-prefixed, as ``Tensor.to_bytes``
writes them): small ones inside the message, large ones through a fresh POSIX shared-memory object
that the sender fills (the one copy) and the receiver maps, then unlinks at once, so an object
never outlives both sides. The receiver's arrays are views over its mapping (no second copy); the
mapping goes when the last view does.

A channel is read by one thread at a time, not always the same one: ``ReadRole`` says which.
Each side lets the thread that waits for an answer read it itself (the server's execute thread its
batch's end; the worker's reading thread runs the execute it read), so that a request crosses no
thread hand-off in either process; a standby thread reads when nobody else does (see ``ReadRole``).
Reads take what the socket holds at once (one system call for the usual message, or several).
"""

from __future__ import annotations

import itertools
import mmap
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE, BYTES
from inferd.errors import ErrorCode, InferdError, InternalError, error_for_code

SHM_DIR = "/dev/shm"
#: tensors this large or larger go through shared memory, smaller ones inside the message
INLINE_MAX = 64 * 1024
_LEN = struct.Struct(">Q")
#: what one read asks the socket for at most (a message larger than this is read into its own buffer)
_READ_SIZE = 256 * 1024

#: (name, wire datatype, shape, bytes | ("shm", object name, byte size))
PackedTensor = tuple[str, str, tuple[int, ...], Any]


class ChannelClosed(Exception):
    """The other side is gone (its process exited, or the socket was closed)."""


class Channel:
    """Length-prefixed pickled messages over a socket; ``send`` is thread-safe, ``recv`` is for one
    reader at a time (``ReadRole``)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        #: what was read and not consumed yet: ``_in[_start:_end]``
        self._in = bytearray(_READ_SIZE)
        self._view = memoryview(self._in)
        self._start = 0
        self._end = 0

    def send(self, message: Any) -> None:
        data = pickle.dumps(message, protocol=5)
        try:
            with self._send_lock:
                self.sock.sendall(_LEN.pack(len(data)) + data)
        except OSError as e:
            raise ChannelClosed(str(e)) from e

    def recv(self) -> Any:
        """The next message: from what an earlier read brought, else read (blocking)."""
        if self._end - self._start < _LEN.size:
            self._fill(_LEN.size)
        n = _LEN.unpack_from(self._in, self._start)[0]
        need = _LEN.size + n
        if need > _READ_SIZE:
            return pickle.loads(self._large(need))
        if self._end - self._start < need:
            self._fill(need)
        begin = self._start + _LEN.size
        self._start = begin + n
        if self._start == self._end:
            self._start = self._end = 0
        with self._view[begin : begin + n] as body:
            return pickle.loads(body)

    def _fill(self, need: int) -> None:
        """Read until ``need`` bytes are buffered (``need`` <= the buffer's size)."""
        have = self._end - self._start
        if self._start + need > _READ_SIZE:  # no room after what is buffered: move it to the front
            self._in[:have] = bytes(self._view[self._start : self._end])
            self._start, self._end = 0, have
        while self._end - self._start < need:
            self._end += self._read_into(self._view[self._end :])

    def _large(self, need: int) -> memoryview:
        """A message larger than the buffer: read into its own (what is buffered is its start)."""
        buf = bytearray(need)
        have = self._end - self._start
        buf[:have] = self._view[self._start : self._end]
        self._start = self._end = 0
        view = memoryview(buf)
        while have < need:
            have += self._read_into(view[have:])
        return view[_LEN.size :]

    def _read_into(self, view: memoryview) -> int:
        try:
            k = self.sock.recv_into(view)
        except TimeoutError:
            raise
        except OSError as e:
            raise ChannelClosed(str(e)) from e
        if k == 0:
            raise ChannelClosed("the other side closed the channel")
        return k

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class ReadRole:
    """Which thread reads a channel: the one holding the role, at most one at a time.

    A thread that waits for an answer (an execute's end) takes the role if it is free and reads
    the answer itself, which saves a hand-off between threads; it releases the role when it has
    it, without waking anyone. A standby thread waits in ``wait_turn`` and takes the role when it
    is free and its ``due`` check says someone must read (others wait for answers nobody reads, or
    the role has been free for a while); it checks when woken (``wake``) and every ``poll_s``.
    """

    __slots__ = ("_cond", "closed", "held", "released_at")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.held = False
        self.closed = False
        #: when the role was last released (monotonic seconds)
        self.released_at = time.monotonic()

    def take(self) -> bool:
        """Take the role if it is free, never waiting; whether it was taken."""
        with self._cond:
            if self.held or self.closed:
                return False
            self.held = True
            return True

    def release(self, wake: bool = False) -> None:
        """Give the role up; ``wake``: have a waiting thread check at once whether it should read."""
        with self._cond:
            self.held = False
            self.released_at = time.monotonic()
            if wake:
                self._cond.notify_all()

    def wake(self) -> None:
        """Have the waiting threads check at once whether they should read."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Nobody reads any more (the channel ended): waiting threads return."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def wait_turn(self, due: Callable[[float], bool], poll_s: float) -> bool:
        """Wait until the role is free and ``due(now)`` is true, then take it: True; False once the
        role is closed. ``due`` runs under the role's lock: it must only read state."""
        with self._cond:
            while True:
                if self.closed:
                    return False
                if not self.held and due(time.monotonic()):
                    self.held = True
                    return True
                self._cond.wait(poll_s)


class ShmNames:
    """Names of the shared-memory objects one side creates: ``inferd-<pid>-<tag>-<n>``."""

    def __init__(self, tag: str, pid: int = 0) -> None:
        self.prefix = f"inferd-{pid or os.getpid()}-{tag}-"
        self._n = itertools.count()

    @classmethod
    def for_pid(cls, pid: int, tag: str) -> ShmNames:
        """The names another process creates (to clean up after it died)."""
        return cls(tag, pid)

    def write(self, data: bytes | memoryview) -> str:
        """A new object holding ``data`` (the one copy of the tensor); its name."""
        name = f"{self.prefix}{next(self._n)}"
        fd = os.open(os.path.join(SHM_DIR, name), os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data).cast("B")
            done = 0
            while done < view.nbytes:
                done += os.write(fd, view[done:])
        finally:
            os.close(fd)
        return name

    def cleanup(self) -> None:
        """Remove the objects this side created that nobody mapped (the other side died)."""
        try:
            names = os.listdir(SHM_DIR)
        except OSError:
            return
        for name in names:
            if name.startswith(self.prefix):
                try:
                    os.unlink(os.path.join(SHM_DIR, name))
                except OSError:
                    pass


def _map(name: str, size: int) -> memoryview:
    """Map the object ``name`` and unlink it (the mapping stays valid until its last view goes)."""
    if "/" in name or not name.startswith("inferd-"):
        raise InternalError(f"invalid shared-memory object name '{name}'")
    path = os.path.join(SHM_DIR, name)
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.unlink(path)
        if size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(fd, size))
    finally:
        os.close(fd)


# -- tensors -----------------------------------------------------------------------------------------
def pack_tensor(t: Tensor, shm: ShmNames) -> PackedTensor:
    raw = t.raw
    if raw is None:
        if t.datatype is not BYTES:  # the usual small output: its bytes in one call
            arr = t.array
            if arr.nbytes < INLINE_MAX and arr.dtype.byteorder != ">":
                return (t.name, t.datatype.wire, t.shape, arr.tobytes())
    elif type(raw) is bytes and len(raw) < INLINE_MAX:
        return (t.name, t.datatype.wire, t.shape, raw)
    data = t.to_bytes()
    size = len(data) if isinstance(data, bytes) else data.nbytes
    if size >= INLINE_MAX:
        return (t.name, t.datatype.wire, t.shape, ("shm", shm.write(data), size))
    return (t.name, t.datatype.wire, t.shape, bytes(data))


def unpack_tensor(packed: PackedTensor) -> Tensor:
    name, wire, shape, payload = packed
    raw: bytes | memoryview = payload if type(payload) is bytes else _map(payload[1], payload[2])
    return Tensor(name, BY_WIRE[wire], shape if type(shape) is tuple else tuple(shape), None, raw)


def release_unmapped(packed: list[PackedTensor]) -> None:
    """Unlink the shared-memory objects of tensors the other side will never map."""
    for _, _, _, payload in packed:
        if isinstance(payload, tuple) and "/" not in payload[1] and payload[1].startswith("inferd-"):
            try:
                os.unlink(os.path.join(SHM_DIR, payload[1]))
            except OSError:
                pass


# -- requests and responses ----------------------------------------------------------------------------
def pack_request(key: int, r: InferRequest, shm: ShmNames) -> tuple[Any, ...]:
    outputs = None if r.outputs is None else [(o.name, o.classification, o.parameters) for o in r.outputs]
    return (
        key,
        r.model_name,
        r.model_version,
        r.id,
        r.parameters,
        outputs,
        r.correlation_id,
        r.flags,
        r.priority,
        r.timeout_us,
        r.batch_size,
        [pack_tensor(t, shm) for t in r.inputs.values()],
    )


def unpack_request(packed: tuple[Any, ...]) -> tuple[int, InferRequest]:
    key, name, version, rid, params, outputs, corr, flags, priority, timeout, batch, inputs = packed
    request = InferRequest(
        model_name=name,
        inputs={t.name: t for t in map(unpack_tensor, inputs)},
        model_version=version,
        id=rid,
        parameters=params,
        outputs=None if outputs is None else [RequestedOutput(n, c, p) for n, c, p in outputs],
        correlation_id=corr,
        flags=flags,
        priority=priority,
        timeout_us=timeout,
    )
    if request.outputs is not None:
        request.output_names = frozenset(o.name for o in request.outputs)
    request.batch_size = batch
    return key, request


def pack_response(r: InferResponse, shm: ShmNames) -> tuple[Any, ...]:
    error = None if r.error is None else (r.error.code.name, r.error.message)
    return (
        r.model_name,
        r.model_version,
        r.id,
        [pack_tensor(t, shm) for t in r.outputs],
        r.parameters,
        error,
    )


def unpack_response(packed: tuple[Any, ...]) -> InferResponse:
    name, version, rid, outputs, params, error = packed
    err: InferdError | None = None if error is None else error_for_code(ErrorCode[error[0]], error[1])
    return InferResponse(name, version, rid, [unpack_tensor(t) for t in outputs], params, err)


def pack_error(e: BaseException) -> tuple[str, str]:
    if isinstance(e, InferdError):
        return e.code.name, e.message
    return ErrorCode.INTERNAL.name, f"{type(e).__name__}: {e}"
