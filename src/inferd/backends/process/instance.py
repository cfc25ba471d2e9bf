"""Process instances: a model instance, of any backend, in its own worker process (``worker.py``).

Why: Python model instances that are threads share one interpreter lock, so a model whose
``execute`` is Python work uses one core whatever its ``instance_group`` asks; and a model that
crashes (``os._exit``, a segfault in an extension, a native backend's parser meeting a hostile file)
would take the server with it. In a worker process an instance has a core of its own, and its death
fails only the requests it held. The worker loads the model with its own backend
(``registry.get_backend``), so a process instance behaves as that backend's thread instance.

The server side of one instance is a ``ProcessInstance``: ``execute`` (in the pool's worker thread)
sends the batch and reads what the worker sends until the execute's end comes, so a batch crosses
no hand-off between the server's threads; a reader thread reads when no execute does (``ipc.
ReadRole``): at once while requests still wait for responses (decoupled models, response senders)
or a readiness check waits, else once the channel has been left unread ``IDLE_READ_S``. What the
worker sends: each request's responses (delivered on the request's ResponseStream at once), the
execute's end (its responses and timings, or its error), BLS requests (``relay.py``: submitted to
the server, each response relayed back as it comes) and calls of the server's links (``FORWARDED``,
run on a small thread pool, answered back). A cancelled request is told to the worker, where the
model sees ``is_cancelled()``. The pool may send a busy instance its next batch ahead (``reserve``,
scheduling/ahead.py): the worker runs it once the current one ends; executes are told apart by id.

Faults: when the worker dies (a signal, ``os._exit``, the kernel's OOM killer), the execute in
flight fails with UNAVAILABLE naming the model, the instance and how the process ended, so do the
requests still open in it, the event is logged and counted (the server's ``WorkerProcesses``, backends/base.py, exported on /metrics), and
the next execute starts a new worker (``initialize`` again) before it runs; a worker that cannot
start fails the batch with the reason and is tried again a second later. A worker whose start
(``initialize``, reading the model) passes its deadline, or its memory limit, is killed
(``spawn.Starting``). Workers die with the server (``PR_SET_PDEATHSIG``), also when it is killed
with SIGKILL (``spawn.py`` says why one thread starts them all).
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.process.executes import NOT_RUN_TRIES, Executes, NotRun, Pending, not_running
from inferd.backends.process.ipc import (
    Channel,
    ChannelClosed,
    ReadRole,
    ShmNames,
    release_unmapped,
    unpack_response,
)
from inferd.backends.process.memory import WATCH, over_limit, rss_bytes
from inferd.backends.process.relay import BlsRelay, answer, answer_call
from inferd.backends.process.spawn import Starting, how_it_ended, start_worker
from inferd.backends.python.sending import release  # (only a Python model releases a request)
from inferd.backends.tritonc.search import backend_directory
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.errors import ErrorCode, InferdError, UnavailableError, error_for_code

log = logging.getLogger("inferd.process")

#: a worker that failed to start is not tried again sooner than this
RESTART_BACKOFF_S = 1.0
STOP_TIMEOUT_S = 5.0
#: the reader thread reads once no execute has read the channel for this long (what a model sends
#: outside any request: BLS and calls from threads of its own, its death)
IDLE_READ_S = 0.05


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Wait for a worker that is ending; kill it if it takes longer than ``STOP_TIMEOUT_S``."""
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class ProcessInstance:
    """One model instance in a worker process (a ``BackendInstance``)."""

    def __init__(
        self,
        ctx: LoadContext,
        spec: InstanceSpec,
        start_timeout_s: float = 0.0,
        memory_limit: int = 0,
        limit_name: str = "memory_limit_bytes",
        first_deadline: float | None = None,
    ) -> None:
        """``start_timeout_s``: how long a worker may take to start (0: no limit); ``memory_limit``:
        bytes of resident memory past which the worker is killed (memory.py; 0: no limit), set by
        ``limit_name``; ``first_deadline``: when the first worker must have started (monotonic
        seconds; its load's deadline), else ``start_timeout_s`` from now."""
        self._ctx = ctx
        self._spec = spec
        self._start_timeout_s = start_timeout_s
        self._memory_limit = memory_limit
        self._limit_name = limit_name
        self._lock = threading.Lock()
        self._shm = ShmNames(f"p{id(self):x}")
        #: what was sent to the worker and is still owed: executes, requests (executes.py)
        self._ex = Executes(self._lock)
        self._chan: Channel | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        #: the BLS requests of the current worker
        self._relay: BlsRelay | None = None
        #: which thread reads the current worker's channel
        self._role: ReadRole | None = None
        self._stopping = False
        self._failed_at = 0.0
        self._failure: InferdError | None = None
        #: why the worker was killed on purpose (the execute watchdog), "" when it was not
        self._abort_reason = ""
        self._bls_pool: ThreadPoolExecutor | None = None
        self._last_timings: tuple[int, int, int] | None = None
        #: the requests of the last batch the model reported as failed (the pool counts them)
        self.last_failed: tuple[int, ...] = ()
        self._uses_bls = False
        self.pid = 0
        #: the worker's model defines ``is_ready`` (told when the worker started)
        self.has_is_ready = False
        #: readiness checks sent to the worker: id -> [event, answer]
        self._ready_asks: dict[int, list[Any]] = {}
        #: the execute in flight waits for its end without reading the channel itself
        self._unread = False
        #: told once this instance unloaded (ProcessModel counts its live instances)
        self.on_unload: Callable[[], None] | None = None
        #: takes back the requests the model releases for another execute (reschedule.py)
        self.rescheduler: Callable[[InferRequest], None] | None = None
        self._start(first_deadline if first_deadline is not None else self._deadline())
        if memory_limit:
            WATCH.add(self)

    # -- BackendInstance ---------------------------------------------------------------------------
    @property
    def inline_ok(self) -> bool:
        return False  # the work is in another process: the loop must never wait for it

    @property
    def uses_bls(self) -> bool:
        return self._uses_bls

    @property
    def last_timings(self) -> tuple[int, int, int] | None:
        return self._last_timings

    def execute(self, requests: list[InferRequest]) -> list[InferResponse] | None:
        pending = self._ex.adopt(requests) if self._ex.ahead else None
        for attempt in range(1, NOT_RUN_TRIES + 1):
            if pending is None:
                pending = self._begin(requests)
            try:
                return self._await(pending)
            except NotRun:
                if attempt == NOT_RUN_TRIES:
                    raise
                pending = None  # never begun: to the restarted worker
        raise AssertionError("unreachable")  # (the loop returns or raises)

    def _begin(self, requests: list[InferRequest]) -> Pending:
        if self._chan is None:
            self._restart()
        with self._lock:
            chan = self._chan
            pending = self._register(requests, chan) if chan is not None else None
        if pending is None:  # died meanwhile
            raise self._failure or not_running(self._who())
        self._ex.send(pending, self._shm)
        return pending

    def _await(self, pending: Pending) -> list[InferResponse] | None:
        """Read (or let the reader thread read) until the execute's end; its responses, or its error."""
        with self._lock:
            chan, proc, relay, role = self._chan, self._proc, self._relay, self._role
            self._ex.current = pending
        self.last_failed = ()
        reading = False
        if (
            not pending.done.is_set()
            and chan is not None
            and chan is pending.chan
            and proc
            and relay
            and role
        ):
            self._unread = True
            reading = role.take()  # read the answer here: no hand-off from the reader thread
            if not reading:
                role.wake()  # the reader thread reads it (``_expecting``)
            elif not self._read_until(pending, chan, relay):
                reading = False
                self._ended(chan, proc, relay, role)
        try:
            pending.done.wait()
            with self._lock:
                self._ex.current = None
                self._unread = False
            if pending.error is not None:
                if isinstance(pending.error, UnavailableError):  # died: the worker never mapped them
                    for p in pending.packed:
                        release_unmapped(p[11])
                raise pending.error
            self._last_timings, self.last_failed = pending.timings, pending.failed
            if self._memory_limit:  # (after: a worker killed now fails only what it still holds)
                self.check_memory()
            return pending.responses
        finally:
            if role is not None:
                if reading:  # the reader thread reads at once if responses or answers are still due
                    role.release(wake=self._expecting())
                elif self._expecting():
                    role.wake()

    # -- the next batch, sent ahead (the pool's pipelining: scheduling/instances.py) ------------------------
    @property
    def pipelines(self) -> bool:
        """Whether the pool may send this instance its next batch while one runs: not a decoupled
        model's (its responses come after its execute: the pool would hold it past them)."""
        return not self._ctx.config.model_transaction_policy.decoupled

    def reserve(self, requests: list[InferRequest]) -> Pending:
        """Register the pool's next batch for this instance (cheap: under the pool's lock);
        ``send_ahead`` sends it then, outside that lock. With no worker running (it died just now)
        it ends not begun, and the pool's execute() of it starts a worker for it."""
        with self._lock:
            chan = self._chan
            pending = self._register(requests, chan)
            self._ex.ahead.append(pending)
        if self._stopping:
            self._end(pending.exec_id, error=not_running(self._who()))
        elif chan is None:
            self._end(pending.exec_id, error=NotRun(not_running(self._who()).message))
        return pending

    def send_ahead(self, pending: Pending) -> None:
        """Send a reserved batch: the worker runs it as soon as the one it runs ends (worker.py)."""
        if not pending.done.is_set() and pending.chan is self._chan:  # (else it died: it ended)
            self._ex.send(pending, self._shm)

    def forget(self, pending: Pending) -> None:
        """The pool is done with a batch it reserved and no execute() adopted (the runner dropped its
        cancelled requests): its end is read and dropped when it comes."""
        self._ex.forget(pending)

    def _register(self, requests: list[InferRequest], chan: Channel | None) -> Pending:
        """A new execute (lock held); the BLS relay learns the loop its responses go to."""
        pending = self._ex.register(requests, chan, self._cancel)
        relay = self._relay
        if relay is not None and relay.loop is None and requests and requests[0].stream is not None:
            relay.loop = requests[0].stream.loop
        return pending

    def _read_until(self, pending: Pending, chan: Channel, relay: BlsRelay) -> bool:
        """The execute's thread reads until its end comes: True; False: the worker ended first."""
        try:
            while not pending.done.is_set():
                if self._dispatch(chan.recv(), chan, relay):
                    return False
        except ChannelClosed:
            return False
        return True

    def _expecting(self) -> bool:
        """Whether something waits for what the worker sends next and does not read it (the reader
        thread reads at once): an execute whose thread did not get the role, requests answered after
        their execute ended (decoupled models, response senders), a readiness check, "stopped"."""
        return (
            self._unread
            # (not for a batch sent ahead: the pool's thread reads its end when it adopts it)
            or self._ex.unanswered()
            or bool(self._ready_asks)
            or self._stopping
        )

    def abort(self, reason: str) -> None:
        """The execute watchdog gave up on the execute in flight: the worker is killed, and the next
        execute starts a new one, as after a crash."""
        with self._lock:
            proc = self._proc
            self._abort_reason = reason
        if proc is not None:
            proc.kill()

    def check_memory(self) -> None:
        """Kill the worker if it uses more resident memory than the model's limit (memory.py)."""
        with self._lock:
            proc = self._proc
        if proc is None or self._stopping:
            return
        used = rss_bytes(proc.pid)
        if used > self._memory_limit:
            with self._lock:
                if self._proc is not proc or self._abort_reason:
                    return  # restarted meanwhile, or already being killed
                self._abort_reason = over_limit(used, self._memory_limit)
            proc.kill()

    def unload(self) -> None:
        """``finalize`` in the worker, then its exit (killed if it takes longer than a few seconds)."""
        self._stopping = True
        WATCH.discard(self)
        chan, proc, role = self._chan, self._proc, self._role
        if chan is not None and proc is not None:
            try:
                chan.send(("stop",))
                if role is not None:
                    role.wake()  # the reader thread reads its "stopped"
                proc.wait(STOP_TIMEOUT_S)
            except (ChannelClosed, subprocess.TimeoutExpired):
                log.warning("the process of %s did not stop: killing it", self._who())
                proc.kill()
                proc.wait()
        self._fail_open(UnavailableError(f"{self._who()} was unloaded"))
        if self._bls_pool is not None:
            self._bls_pool.shutdown(wait=False, cancel_futures=True)
        self._shm.cleanup()
        if self.on_unload is not None:
            self.on_unload()

    # -- the worker process -------------------------------------------------------------------------
    def _who(self) -> str:
        return f"model '{self._ctx.model_name}' instance '{self._spec.name}'"

    def _deadline(self) -> float | None:
        return time.monotonic() + self._start_timeout_s if self._start_timeout_s else None

    def _start(self, deadline: float | None) -> Channel:
        """A new worker, its instance created there (``initialize``) by ``deadline``."""
        ctx, spec = self._ctx, self._spec
        proc, chan = start_worker()
        init = {
            "model_name": ctx.model_name,
            "version": ctx.version,
            "model_dir": str(ctx.model_dir),
            "version_dir": str(ctx.version_dir),
            "config": ctx.config.SerializeToString(),
            "spec": (spec.name, spec.kind, spec.device_id),
            "log_verbose": 1 if log.isEnabledFor(logging.DEBUG) else 0,
            "log": ctx.links.log_settings() if ctx.links.log_settings is not None else {},
            "backend_config": dict(ctx.backend_config),
            "uploaded": ctx.uploaded,
            "backend_directory": backend_directory(),  # a backend's library or model.py is found there
        }
        starting = Starting(proc, chan, deadline, self._memory_limit, self._limit_name)
        try:
            with starting:
                chan.send(("init", init))
                reply = starting.recv()
                while reply[0] == "call":  # initialize creating its metrics: no reader thread yet
                    chan.send(("call_resp", reply[1], answer_call(ctx, reply[2], reply[3])))
                    reply = starting.recv()
            if reply[0] == "init_error":
                chan.close()
                _reap(proc)
                code, message = reply[1]
                raise error_for_code(ErrorCode[code], message)
        except (ChannelClosed, TimeoutError, OSError) as e:
            proc.kill()
            code = proc.wait()
            chan.close()
            if starting.reason:
                raise UnavailableError(f"the process of {self._who()} was killed: {starting.reason}") from e
            if isinstance(e, TimeoutError):
                raise UnavailableError(
                    f"{self._who()}: initialize did not finish within {self._start_timeout_s:g} s"
                ) from e
            raise UnavailableError(
                f"the process of {self._who()} ended while it started ({how_it_ended(code)})"
            ) from e
        self.pid = int(reply[1])
        self.has_is_ready = bool(reply[3])
        log.info("%s runs in process %d (started in %.0f ms)", self._who(), self.pid, reply[2] * 1000)
        relay = BlsRelay(ctx, chan, self._shm, self._pool, spec.name)
        role = ReadRole()
        with self._lock:
            self._chan, self._proc, self._relay, self._role = chan, proc, relay, role
        threading.Thread(
            target=self._read, args=(chan, proc, relay, role), name=f"inferd-{spec.name}-reader", daemon=True
        ).start()
        return chan

    def _restart(self) -> Channel:
        """A new worker after the last one died (the caller's batch waits for it)."""
        with self._lock:
            if self._chan is not None:
                return self._chan
            if self._failure is not None and time.monotonic() - self._failed_at < RESTART_BACKOFF_S:
                raise self._failure
        try:
            chan = self._start(self._deadline())
        except InferdError as e:
            self._failed_at, self._failure = time.monotonic(), e
            raise UnavailableError(f"{self._who()} could not be restarted: {e.message}") from e
        self._failure = None
        self._ctx.links.processes.count(self._ctx.model_name, self._ctx.version, "restarted")
        return chan

    def running_pid(self) -> int:
        """Its worker's process id while one runs, else 0 (``WorkerProcesses.pids``)."""
        return self.pid if self.pid and self._proc is not None else 0

    def is_ready(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """The model's ``is_ready()`` in the worker (True without one); a worker that is not running
        is not ready, one that does not answer in time neither."""
        chan = self._chan
        if not self.has_is_ready:
            return True
        if chan is None:
            return False
        ask_id = self._ex.key()
        ask: list[Any] = [threading.Event(), None]
        self._ready_asks[ask_id] = ask
        try:
            chan.send(("is_ready", ask_id))
            if (role := self._role) is not None:
                role.wake()  # the reader thread reads the answer
            if not ask[0].wait(timeout_s):
                return False
        except ChannelClosed:
            return False
        finally:
            self._ready_asks.pop(ask_id, None)
        kind, value = ask[1]
        if kind == "error":
            raise error_for_code(ErrorCode[value[0]], value[1])
        return bool(value)

    def _cancel(self, chan: Channel, key: int, reason: str) -> None:
        try:
            chan.send(("cancel", key, reason))
        except ChannelClosed:
            pass

    # -- reading ---------------------------------------------------------------------------------------
    def _read(self, chan: Channel, proc: subprocess.Popen[bytes], relay: BlsRelay, role: ReadRole) -> None:
        """The reader thread: reads when no execute does (``_expecting``, or nobody read for
        ``IDLE_READ_S``) until an execute's end comes (the next execute's thread reads its own)."""
        due = partial(self._due, role)
        try:
            while role.wait_turn(due, IDLE_READ_S):
                while True:  # holding the role
                    msg = chan.recv()
                    if self._dispatch(msg, chan, relay):
                        raise ChannelClosed("the worker stopped")
                    if msg[0] == "done" or msg[0] == "exec_error":
                        break
                role.release()
            return  # an execute's thread saw the worker end
        except ChannelClosed:
            pass
        self._ended(chan, proc, relay, role)

    def _due(self, role: ReadRole, now: float) -> bool:
        return self._expecting() or now - role.released_at >= IDLE_READ_S

    def _dispatch(self, msg: Any, chan: Channel, relay: BlsRelay) -> bool:
        """One message from the worker, read by whoever holds the role; True: it stopped."""
        kind = msg[0]
        if kind == "resp":
            self._response(msg[1], msg[2], msg[3])
        elif kind == "resched":  # released for another execute: no final response comes this time
            with self._lock:
                request = self._ex.open.pop(msg[1], None)
            if request is not None:
                release(self.rescheduler, request, str(self._ctx.version))
        elif kind == "done":
            self._end(
                msg[1],
                responses=None if msg[2] is None else [unpack_response(p) for p in msg[2]],
                timings=msg[3],
                failed=tuple(msg[4]),
            )
        elif kind == "exec_error":
            code, message = msg[2]
            self._end(msg[1], error=error_for_code(ErrorCode[code], message))
        elif kind == "bls":
            self._uses_bls = True
            relay.start(msg[1], msg[2], msg[3])
        elif kind == "bls_cancel":
            relay.cancel(msg[1], msg[2])
        elif kind == "call":
            self._pool().submit(self._call, chan, msg[1], msg[2], msg[3])
        elif kind == "is_ready_resp":
            ask = self._ready_asks.pop(msg[1], None)
            if ask is not None:
                ask[1] = msg[2]
                ask[0].set()
        elif kind == "stopped":
            return True
        return False

    def _ended(self, chan: Channel, proc: subprocess.Popen[bytes], relay: BlsRelay, role: ReadRole) -> None:
        """The worker stopped or died (seen by whoever held the role): nobody reads any more."""
        role.close()
        chan.close()
        relay.close()
        if not self._stopping:
            self._died(proc)

    def _response(self, key: int, packed: Any, final: bool) -> None:
        with self._lock:
            request = self._ex.open.pop(key, None) if final else self._ex.open.get(key)
        if request is not None and request.stream is not None:
            request.stream.send(None if packed is None else unpack_response(packed), final)

    def _end(
        self,
        exec_id: int,
        responses: list[InferResponse] | None = None,
        timings: tuple[int, int, int] | None = None,
        error: InferdError | None = None,
        failed: tuple[int, ...] = (),
    ) -> None:
        with self._lock:
            pending = self._ex.pop(exec_id, answered=responses is not None)
            if pending is None:
                return
            if pending is self._ex.current:  # before the role is released: the reader need not read on
                self._unread = False
        pending.responses, pending.timings, pending.error, pending.failed = responses, timings, error, failed
        pending.done.set()

    def _pool(self) -> ThreadPoolExecutor:
        """Runs what the worker asks of the server (BLS, calls) off the reader thread."""
        if self._bls_pool is None:
            self._bls_pool = ThreadPoolExecutor(4, thread_name_prefix=f"inferd-{self._spec.name}-bls")
        return self._bls_pool

    def _call(self, chan: Channel, call_id: int, name: str, args: tuple[Any, ...]) -> None:
        """One of the server's links the worker's model called (``FORWARDED``), answered back."""
        answer(chan, ("call_resp", call_id, answer_call(self._ctx, name, args)))

    def _died(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            code: int | None = proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = None
        how = how_it_ended(code)
        with self._lock:
            self._chan = None
            self._proc = None
            self._relay = None
            self._role = None
            reason, self._abort_reason = self._abort_reason, ""
        if reason:
            error = UnavailableError(f"the process of {self._who()} was killed: {reason}")
            log.error("the process %d of %s was killed: %s", proc.pid, self._who(), reason)
        else:
            error = UnavailableError(
                f"the process of {self._who()} exited unexpectedly ({how}); the requests it held failed and "
                "the instance restarts"
            )
            log.error("the process %d of %s exited unexpectedly (%s)", proc.pid, self._who(), how)
        self._ctx.links.processes.count(self._ctx.model_name, self._ctx.version, "exited")
        with self._lock:  # (what it never began goes again to the restarted worker: executes.py)
            ran, not_run = self._ex.after_death()
        if ran is not None:
            self._end(ran.exec_id, error=error)
        for p in not_run:
            self._end(p.exec_id, error=NotRun(error.message))
        self._fail_open(error)
        self._shm.cleanup()
        ShmNames.for_pid(proc.pid, "w").cleanup()

    def _fail_open(self, error: InferdError) -> None:
        with self._lock:
            open_requests = self._ex.take_open()
        for r in open_requests:
            if r.stream is not None:
                r.stream.send(InferResponse(r.model_name, str(self._ctx.version), r.id, error=error), True)
