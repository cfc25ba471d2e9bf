"""BLS from the processes a model forks (``multiprocessing.Pool`` with the fork start method).

Triton's models may fork and call ``exec`` in the children: the stub's children share its channel to
the server. A child of inferd's server process has a copy of the server's loop that nothing runs, so
its requests would wait forever. At the first fork from a model's thread the server opens a Unix
socket (abstract namespace, named after its pid) and remembers whose hooks forked; a child that calls
BLS connects, names those hooks (the same object id in both processes), and speaks what a worker
process speaks (``worker.Worker`` on its side, ``relay.BlsRelay`` on the server's): the request, then
each response as the callee sends it. Grandchildren connect to the same socket. Only BLS crosses;
what else a child asks of the server (metrics, model readiness) is not served there. When the server
ends, the child's BLS requests still waiting fail with UNAVAILABLE.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from inferd.backends.base import LoadContext, ResponseCallback, ServerLinks
from inferd.backends.process.ipc import Channel, ChannelClosed, ShmNames
from inferd.backends.python import pb_context
from inferd.core.request import InferRequest

if TYPE_CHECKING:
    from collections.abc import Callable

    from inferd.backends.process.relay import BlsRelay
    from inferd.backends.process.worker import Worker
    from inferd.backends.python.hooks import InstanceHooks

_lock = threading.Lock()
_listener: socket.socket | None = None
_address = b""
_serving = False
#: the hooks of the model threads that forked, by id (the child names them)
_forkers: weakref.WeakValueDictionary[int, InstanceHooks] = weakref.WeakValueDictionary()
_child: _ChildLink | None = None
_pool: ThreadPoolExecutor | None = None


def links_for(hooks: InstanceHooks, links: ServerLinks) -> ServerLinks:
    """The links a BLS request of ``hooks`` goes through: the server's, or in a forked child its
    way to the server."""
    child = _child
    if child is None:
        return links
    return dataclasses.replace(links, infer_async=partial(child.infer_async, id(hooks)))


class _ChildLink:
    """A forked child's connections to the server, one per forking instance, made at first use."""

    def __init__(self, address: bytes) -> None:
        self.address = address
        self._lock = threading.Lock()
        self._workers: dict[int, Worker] = {}

    def infer_async(
        self, token: int, request: InferRequest, callback: ResponseCallback, decoupled_error: str | None
    ) -> Callable[[str], None]:
        return self._worker(token).infer_async(request, callback, decoupled_error)

    def _worker(self, token: int) -> Worker:
        from inferd.backends.process.worker import Worker

        with self._lock:
            worker = self._workers.get(token)
            if worker is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(self.address)
                chan = Channel(sock)
                chan.send(("hello", token))
                worker = self._workers[token] = Worker(chan)
                threading.Thread(target=_read_answers, args=(worker,), daemon=True).start()
                threading.Thread(target=worker.run_cancels, daemon=True).start()
        return worker


def _read_answers(worker: Worker) -> None:
    try:
        while True:
            worker._reply(worker.channel.recv())
    except ChannelClosed:
        # the server ended: what the child still waits for fails, rather than waiting forever
        worker.fail_asks("the inferd server this process was forked from has gone away")


# -- the server's side -----------------------------------------------------------------------------
def _before_fork() -> None:
    global _listener, _address
    if _child is not None:
        return  # a child forking: its children reach the server's socket too
    hooks = pb_context._hooks()
    if hooks is pb_context._default_hooks:
        return  # a thread acting for no instance (any other hooks are an instance's: hooks.InstanceHooks)
    with _lock:
        _forkers[id(hooks)] = cast("InstanceHooks", hooks)
        if _listener is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address = f"\0inferd-bls-{os.getpid()}".encode()
            sock.bind(address)
            sock.listen(64)
            _listener, _address = sock, address


def _after_in_parent() -> None:
    global _serving
    with _lock:
        if _listener is None or _serving:
            return
        _serving = True
    threading.Thread(target=_accept, args=(_listener,), name="inferd-fork-bls", daemon=True).start()


def _after_in_child() -> None:
    global _child, _listener, _serving
    if not _address:
        return
    if _listener is not None:
        _listener.close()  # the child's copy; the server's stays open
        _listener, _serving = None, False
    _child = _ChildLink(_address)


def _accept(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_serve_child, args=(conn,), name="inferd-fork-bls-relay", daemon=True).start()


def _relay_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(2, thread_name_prefix="inferd-fork-bls")
        return _pool


def _serve_child(conn: socket.socket) -> None:
    """One child's requests, until it closes the connection (it ended)."""
    from inferd.backends.process.relay import BlsRelay

    pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
    chan = Channel(conn)
    relay: BlsRelay | None = None
    try:
        kind, token = chan.recv()
        hooks = _forkers.get(token) if kind == "hello" else None
        if hooks is None:
            return
        inst = hooks.instance
        ctx: LoadContext = inst.model.ctx
        relay = BlsRelay(ctx, chan, ShmNames(f"f{pid}"), _relay_pool, f"{inst.name}-fork")
        relay.loop = inst.server_loop
        while True:
            msg: Any = chan.recv()
            if msg[0] == "bls":
                relay.start(msg[1], msg[2], msg[3])
            elif msg[0] == "bls_cancel":
                relay.cancel(msg[1], msg[2])
    except ChannelClosed:
        return
    finally:
        if relay is not None:
            relay.close()
        chan.close()
        ShmNames.for_pid(pid, "w").cleanup()  # what the child sent and nobody mapped
        ShmNames(f"f{pid}").cleanup()  # what it was sent and never mapped


os.register_at_fork(before=_before_fork, after_in_parent=_after_in_parent, after_in_child=_after_in_child)
