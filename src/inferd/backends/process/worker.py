"""A model instance in its own process: ``python -m inferd.backends.process.worker <fd>``.

The server starts one per process instance (``instance.py``) with one end of a socketpair as
``<fd>``. The worker loads the model with the backend its config names (``registry.get_backend``),
the same code that runs it in the server's process (a Python model's ``PythonModel``,
``PythonInstance``, ``pb_utils``; a native backend's session), so everything a model does behaves
alike in both places; only the edges differ:

- a request's responses (response senders, decoupled models) go to the server through a
  ``ProxyStream`` standing in for its ResponseStream;
- BLS requests (``exec``, ``async_exec``, decoupled or not) are sent to the server, which runs
  them; their responses come back one message each as the callee sends them (``ServerLinks.
  infer_async`` here, so ``hooks.py`` treats them as in a thread instance), and a request the
  model abandons is cancelled there (``relay.py`` is the server's half);
- the server's ``cancel`` makes ``is_cancelled()`` true.

A worker may instead be asked for one auto-complete (``("complete", ...)``: the backend's
``auto_complete`` of a model whose files a client uploaded, which reads them or imports its code),
answered with the completed config; then it exits.

Two threads read the channel, one at a time (``ipc.ReadRole``), and an execute runs on the thread
that read it: a request crosses no hand-off between threads here. While it runs, the other thread
takes over reading when the model waits for an answer (BLS, a server link), asks ``is_cancelled()``,
or when the execute has run ``TAKE_OVER_S``: then readiness checks and cancellations are read while
a model executes. Executes run one at a time. The worker dies with the server
(``PR_SET_PDEATHSIG``; and the channel's end of file).

What the worker asks of the server (``_ask``, ``_send_ask``) is ``(kind, id, *payload)``; each
answer is ``(kind + "_resp", id, value)`` and goes to the handler registered under ``id``: one
answer for a link call, one per response for BLS (``("bls_resp", id, response, final)``).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from inferd.backends.base import (
    BackendInstance,
    InstanceSpec,
    LoadContext,
    MetricError,
    Reschedulable,
    ResponseCallback,
    ServerLinks,
)
from inferd.backends.process import IN_WORKER, mark_worker_process
from inferd.backends.process.ipc import (
    Channel,
    ChannelClosed,
    ReadRole,
    ShmNames,
    pack_error,
    pack_request,
    pack_response,
    release_unmapped,
    unpack_request,
    unpack_response,
)
from inferd.backends.python.fork_signals import default_signals_in_forks
from inferd.backends.tritonc.search import set_backend_directory
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.errors import ErrorCode, error_for_code

log = logging.getLogger("inferd.process.worker")
_PR_SET_PDEATHSIG = 1
#: an execute running this long has the other thread read meanwhile (readiness checks, cancellations)
TAKE_OVER_S = 0.25


class ProxyStream(ResponseStream):
    """A request's ResponseStream in the worker: what the model sends goes to the server."""

    __slots__ = ("_channel", "_key", "_need_reader", "_shm")

    def __init__(
        self, channel: Channel, key: int, shm: ShmNames, need_reader: Callable[[], None] | None = None
    ) -> None:
        self._loop = None  # type: ignore[assignment]  # no event loop here: senders call deliver
        self._done = False
        self._cancel_reason = None
        self._callback = None
        self._window = None  # the server's stream bounds the responses
        self.path = None
        self.on_cancel = None
        self._channel = channel
        self._key = key
        self._shm = shm
        self._need_reader = need_reader

    @property
    def cancelled(self) -> bool:
        """Whether the server cancelled the request: asking has its cancellation read promptly."""
        if self._cancel_reason is None and self._need_reader is not None:
            self._need_reader()
        return self._cancel_reason is not None

    def send(self, response: InferResponse | None, final: bool = False) -> None:
        if self._done:
            return
        if final:
            self._done = True
        packed = None if response is None else pack_response(response, self._shm)
        try:
            self._channel.send(("resp", self._key, packed, final))
        except ChannelClosed:
            pass  # the server is gone: this process is about to follow

    def deliver(self, response: InferResponse | None, final: bool, cost: int = -1) -> None:
        self.send(response, final)


class ForwardedMetrics:
    """The server's MetricRegistry, called across the channel (its calls take plain values)."""

    def __init__(self, call: Any) -> None:
        self._call = call

    def family_new(self, owner: str, name: str, description: str, kind: int) -> None:
        self._call("metrics.family_new", owner, name, description, kind)

    def family_delete(self, owner: str, name: str) -> None:
        self._call("metrics.family_delete", owner, name)

    def metric_new(
        self, owner: str, family: str, labels: tuple[tuple[str, str], ...], buckets: tuple[float, ...] | None
    ) -> int:
        return int(self._call("metrics.metric_new", owner, family, labels, buckets))

    def metric_delete(self, owner: str, metric: int) -> None:
        self._call("metrics.metric_delete", owner, metric)

    def metric_op(self, metric: int, op: str, value: float = 0.0) -> float:
        return float(self._call("metrics.metric_op", metric, op, value))

    def release_owner(self, owner: str) -> None:
        """Not forwarded: the server releases the model's metrics when its last process unloads."""


class Worker:
    """The worker's side of the channel."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.shm = ShmNames("w")
        self.instance: BackendInstance | None = None
        self.streams: dict[int, ProxyStream] = {}
        #: which of the two reading threads reads now (``serve``)
        self.role = ReadRole()
        self._exec_lock = threading.Lock()
        #: executes read while another ran (the server sends the next one ahead, instance.py): the
        #: thread running now runs them next, in order, rather than the reading thread waiting for
        #: it while it holds the role (a BLS answer the running execute waits for would go unread)
        self._next: collections.deque[tuple[int, list[InferRequest]]] = collections.deque()
        #: when the execute running now began (monotonic seconds; 0: none runs)
        self._busy_since = 0.0
        #: the execute running now waits for something read from the channel
        self._want_reader = False
        #: the server closed the channel
        self.lost = False
        self._ask_ids = iter(range(1, 1 << 62))
        self._ask_lock = threading.Lock()
        #: what waits for the answers of each request sent to the server: (answer, final) -> None
        self._asks: dict[int, Callable[[Any, bool], None]] = {}
        #: the kind of each request waiting ("bls" or "call"): what ``fail_asks`` answers it with
        self._ask_kinds: dict[int, str] = {}
        #: BLS requests the model abandoned (id, reason), put from any thread, finalizers included
        self.cancels: queue.SimpleQueue[tuple[int, str] | None] = queue.SimpleQueue()
        #: whether the main thread runs the read loop (else a call reads its own answer)
        self.reading = False

    # -- start -------------------------------------------------------------------------------------
    def start(self, init: dict[str, Any]) -> None:
        from inferd.backends.registry import get_backend
        from inferd.repository import ModelConfig

        config = ModelConfig.FromString(init["config"])
        ctx = LoadContext(
            init["model_name"],
            init["version"],
            Path(init["model_dir"]),
            Path(init["version_dir"]),
            config,
            None,
            ServerLinks(
                infer_async=self.infer_async,
                model_ready=lambda name, version: bool(self.call("model_ready", name, version)),
                model_control=lambda *args: self.call("model_control", *args),
                metrics=ForwardedMetrics(self.call),
            ),
            {
                **init.get("backend_config", {}),
                IN_WORKER: "1",
            },  # here the instance is a thread of this process
            uploaded=bool(init.get("uploaded")),
        )
        model = get_backend(config.backend).load(ctx)
        self.instance = model.create_instance(InstanceSpec(*init["spec"]))
        if isinstance(self.instance, Reschedulable):  # the server reschedules (or refuses) them
            self.instance.rescheduler = self._rescheduled

    def _rescheduled(self, request: InferRequest) -> None:
        """The model released ``request`` for another execute: it comes back under a new key."""
        stream = request.stream
        if isinstance(stream, ProxyStream):
            self.streams.pop(stream._key, None)
            with contextlib.suppress(ChannelClosed):
                self.channel.send(("resched", stream._key))

    # -- what the model asks of the server --------------------------------------------------------
    def infer_async(
        self, request: InferRequest, callback: ResponseCallback, decoupled_error: str | None
    ) -> Callable[[str], None]:
        """Run ``request`` on the server (BLS): each response goes to ``callback`` on the read
        thread as the callee sends it, the last with ``final``; returns what abandons it."""

        def answered(packed: Any, final: bool) -> None:
            callback(None if packed is None else unpack_response(packed), final)

        ask_id = self._send_ask("bls", answered, pack_request(0, request, self.shm), decoupled_error)
        return partial(self._abandon, ask_id)

    def _abandon(self, ask_id: int, reason: str) -> None:
        """The model let go of a BLS request's responses. Only queued here (this runs in finalizers,
        which must not take the channel's lock); ``run_cancels`` tells the server."""
        self.cancels.put((ask_id, reason))

    def run_cancels(self) -> None:
        """The cancel thread: forget each abandoned BLS request (what still comes for it is
        dropped) and have the server cancel it."""
        while True:
            item = self.cancels.get()
            if item is None:
                return
            ask_id, reason = item
            with self._ask_lock:
                self._asks.pop(ask_id, None)
                self._ask_kinds.pop(ask_id, None)
            try:
                self.channel.send(("bls_cancel", ask_id, reason))
            except ChannelClosed:
                return

    def call(self, name: str, *args: Any) -> Any:
        """One of the server's links (relay.FORWARDED), answered by the server."""
        kind, value = self._ask("call", name, args)
        if kind == "ok":
            return value
        if kind == "metric_error":
            raise MetricError(*value)
        code, message = value
        raise error_for_code(ErrorCode[code], message)

    def _send_ask(self, kind: str, handler: Callable[[Any, bool], None], *payload: Any) -> int:
        """Send ``(kind, id, *payload)``; its answers go to ``handler``. The id."""
        with self._ask_lock:
            ask_id = next(self._ask_ids)
            self._asks[ask_id] = handler
            self._ask_kinds[ask_id] = kind
        self.channel.send((kind, ask_id, *payload))
        self.need_reader()
        return ask_id

    def need_reader(self) -> None:
        """Something waits for what the server sends: while an execute runs, the other thread reads."""
        if self._busy_since and not self._want_reader:
            self._want_reader = True
            self.role.wake()

    def fail_asks(self, message: str) -> None:
        """The server went away: every request still waiting for answers ends with an UNAVAILABLE
        error (a BLS request's final response, a link call's exception) instead of waiting forever."""
        with self._ask_lock:
            asks, kinds = self._asks, self._ask_kinds
            self._asks, self._ask_kinds = {}, {}
        error = (ErrorCode.UNAVAILABLE.name, message)
        for ask_id, handler in asks.items():
            if kinds.get(ask_id) == "bls":
                handler(("", "", "", [], {}, error), True)
            else:
                handler(("error", error), True)

    def _ask(self, kind: str, *payload: Any) -> Any:
        """Send ``(kind, id, *payload)`` and wait for its one answer. Before the read loop runs
        (``initialize``) and after it ended (``finalize``) the asking thread reads the answer itself:
        nothing else comes meanwhile, the server waits for us."""
        done = threading.Event()
        slot: list[Any] = []

        def answered(value: Any, final: bool) -> None:
            slot.append(value)
            done.set()

        self._send_ask(kind, answered, *payload)
        while not self.reading and not done.is_set():
            self._reply(self.channel.recv())
        done.wait()
        return slot[0]

    def _reply(self, msg: Any) -> bool:
        """An answer: hand it to what waits for it (False: not an answer). A BLS request's handler
        goes with its final response; one the model abandoned is gone, and what comes is dropped."""
        kind = msg[0]
        if kind == "call_resp":
            final = True
        elif kind == "bls_resp":
            final = msg[3]
        else:
            return False
        with self._ask_lock:
            if final:
                handler = self._asks.pop(msg[1], None)
                self._ask_kinds.pop(msg[1], None)
            else:
                handler = self._asks.get(msg[1])
        if handler is not None:
            handler(msg[2], final)
        elif kind == "bls_resp" and msg[2] is not None:
            release_unmapped(msg[2][3])  # its tensors' shared memory: nobody will map it
        return True

    # -- the loops -----------------------------------------------------------------------------------
    def _due(self, now: float) -> bool:
        """Whether a thread waiting to read should read now (the role is free)."""
        busy = self._busy_since
        return not busy or self._want_reader or now - busy >= TAKE_OVER_S

    def serve(self) -> None:
        """Each of the two reading threads: messages from the server until it stops us or goes away.
        An execute runs on the thread that read it; the other one reads meanwhile when needed."""
        role = self.role
        try:
            self._serve(role)
        except ChannelClosed:
            self.lost = True
        except BaseException:
            self.lost = True
            raise
        finally:
            role.close()  # the other thread returns too

    def _serve(self, role: ReadRole) -> None:
        while role.wait_turn(self._due, TAKE_OVER_S):
            while True:  # holding the role
                msg = self.channel.recv()
                if self._reply(msg):
                    continue
                kind = msg[0]
                if kind == "exec":
                    requests = self._requests(msg[2])
                    with self._exec_lock:
                        if self._busy_since:  # the other thread executes: it runs this one next
                            self._next.append((msg[1], requests))
                            del msg, requests
                            continue
                        self._want_reader = False
                        self._busy_since = time.monotonic()
                    role.release()
                    self._run(msg[1], requests)
                    del msg, requests  # not held while this thread waits: inputs may map shared memory
                    break
                if kind == "is_ready":
                    threading.Thread(target=self.answer_ready, args=(msg[1],), daemon=True).start()
                elif kind == "cancel":
                    target = self.streams.get(msg[1])
                    if target is not None:
                        target.cancel(msg[2])
                elif kind == "stop":
                    return

    def _run(self, exec_id: int, requests: list[InferRequest]) -> None:
        """Execute, then each execute read meanwhile (``_next``), at once: no round trip between them."""
        following: tuple[int, list[InferRequest]] | None = (exec_id, requests)
        del requests  # (the next batch's requests are not held past their execute)
        while following is not None:
            try:
                self._execute(*following)
            finally:
                with self._exec_lock:
                    following = self._next.popleft() if self._next and not self.lost else None
                    if following is not None:
                        self._want_reader = False
                        self._busy_since = time.monotonic()
                    else:
                        self._busy_since = 0.0

    def _requests(self, packed: list[Any]) -> list[InferRequest]:
        requests = []
        for p in packed:
            key, request = unpack_request(p)
            stream = ProxyStream(self.channel, key, self.shm, self.need_reader)
            self.streams[key] = stream
            request.stream = stream
            requests.append(request)
        return requests

    def answer_ready(self, ask_id: int) -> None:
        """The model's ``is_ready()`` (engine/readiness.py), in a thread of its own: it may block."""
        check = getattr(self.instance, "is_ready", None)
        try:
            answer: tuple[str, Any] = ("ok", True if check is None else bool(check()))
        except Exception as e:
            answer = ("error", pack_error(e))
        try:
            self.channel.send(("is_ready_resp", ask_id, answer))
        except ChannelClosed:
            return

    def _execute(self, exec_id: int, requests: list[InferRequest]) -> None:
        """One batch, answered with ``done`` or ``exec_error``."""
        inst = self.instance
        assert inst is not None
        try:
            responses = inst.execute(requests)
            packed = None if responses is None else [pack_response(r, self.shm) for r in responses]
            # the requests a C backend reported failed (ReportStatistics): the server's pool counts them
            failed = tuple(getattr(inst, "last_failed", ()))
            self.channel.send(("done", exec_id, packed, inst.last_timings, failed))
        except ChannelClosed:
            return
        except BaseException as e:  # SystemExit from a model included: answer, serve on
            with contextlib.suppress(ChannelClosed):
                self.channel.send(("exec_error", exec_id, pack_error(e)))
        finally:
            for r in requests:  # streams of decoupled requests live until their final flag
                s = r.stream
                if isinstance(s, ProxyStream) and s.done:
                    self.streams.pop(s._key, None)


def complete(request: dict[str, Any]) -> bytes:
    """One auto-complete: the backend's ``auto_complete`` of the config, serialised."""
    from inferd.backends.registry import get_backend
    from inferd.repository import ModelConfig

    config = ModelConfig.FromString(request["config"])
    version_dir = request["version_dir"]
    get_backend(config.backend).auto_complete(
        config,
        Path(request["model_dir"]),
        None if version_dir is None else Path(version_dir),
        default_max_batch_size=request["default_max_batch_size"],
    )
    return bytes(config.SerializeToString())


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the channel's end of file still ends the worker
    if os.getppid() == 1:  # the server died before the line above ran
        os._exit(1)


def main(argv: list[str]) -> int:
    fd = int(argv[1])
    _die_with_parent()
    mark_worker_process()
    sys.argv = []  # a model sees no server command line (the reference's models see an empty list)
    # the server decides when its workers stop: a Ctrl-C in a terminal, or a SIGTERM sent to the whole
    # process group or cgroup (systemd, a benchmark's killpg), reaches the server, which drains and then
    # stops its workers; a worker that ended first would fail the requests it still held
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    default_signals_in_forks()  # not in the processes its model forks: a pool's workers end with SIGTERM
    channel = Channel(socket.socket(fileno=fd))
    try:
        kind, init = channel.recv()
        from inferd.logs import in_worker

        in_worker(init.get("log", {}), init.get("log_verbose", 0))  # the server's file and format
        set_backend_directory(init.get("backend_directory", ""))  # the server's --backend-directory
        if kind == "complete":
            try:
                channel.send(("completed", complete(init)))
            except BaseException as e:
                channel.send(("init_error", pack_error(e)))
            return 0
        worker = Worker(channel)
        t0 = time.monotonic()
        try:
            worker.start(init)
        except BaseException as e:
            channel.send(("init_error", pack_error(e)))
            return 1
        has_is_ready = hasattr(getattr(worker.instance, "obj", None), "is_ready")
        channel.send(("ready", os.getpid(), time.monotonic() - t0, has_is_ready))
        threading.Thread(target=worker.run_cancels, name="inferd-bls-cancel", daemon=True).start()
        worker.reading = True
        other = threading.Thread(target=worker.serve, name="inferd-read", daemon=True)
        other.start()
        worker.serve()
        if worker.lost:
            return 0  # the server went away
        other.join()  # it read "stop", or it ends now: nobody reads any more
        worker.reading = False
        worker.cancels.put(None)
        inst = worker.instance
        if inst is not None:
            inst.unload()  # finalize
        channel.send(("stopped",))
    except ChannelClosed:
        return 0
    finally:
        worker_shm = ShmNames("w")
        worker_shm.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
