"""The Coordinate stream's I/O (docs/clients.md, "The fleet gate"): the
reconnect backoff, the report timing, the log lines, and the stream itself:
``SyncStream``, a sync :class:`~policyd_client.Client`'s on a background
thread, and ``AsyncStream``, an :class:`~policyd_client.AsyncClient`'s task
on its event loop. Both take their reports from the table (``_fleet``) and
hand it the assignments in the same steps (``Stream``); they differ only in
how they wait.
"""

import asyncio
import logging
import math
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import grpc.aio

from ._core import rpc_code, rpc_text
from ._fleet import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    FIRST_ASSIGNMENT_WAIT,
    REPORT_INTERVAL,
    REPORT_JITTER,
    FleetTable,
    Target,
    Waiter,
)
from ._gen.policyd.v1 import fleet_pb2 as fpb
from ._stubs import async_fleet_stub, fleet_stub

__all__ = ["AsyncStream", "Backoff", "Stream", "StreamLog", "StreamSettings", "SyncStream"]


class Backoff:
    """Reconnect delays: 1 s doubling to 30 s, full jitter; reset once a stream answers."""

    def __init__(self, random: Callable[[], float]) -> None:
        self._random = random
        self._n = 0

    def reset(self) -> None:
        self._n = 0

    def next(self) -> float:
        cap = min(BACKOFF_MAX, BACKOFF_INITIAL * 2.0 ** min(self._n, 16))
        self._n += 1
        return _unit(self._random) * cap


def _unit(random: Callable[[], float]) -> float:
    try:
        r = float(random())
    except Exception:
        return 0.5
    return min(max(r, 0.0), 1.0) if math.isfinite(r) else 0.5


def first_call_wait(remaining: float | None) -> float:
    """How long a target's first call waits for its first assignment: 100 ms, less before a nearer deadline."""
    return FIRST_ASSIGNMENT_WAIT if remaining is None else max(min(FIRST_ASSIGNMENT_WAIT, remaining), 0.0)


def report_interval(random: Callable[[], float]) -> float:
    """About a second: 1 s ± 10 %."""
    return REPORT_INTERVAL * (1 - REPORT_JITTER + 2 * REPORT_JITTER * _unit(random))


def hello(client_id: str, profile: str) -> fpb.CoordinateRequest:
    return fpb.CoordinateRequest(client_id=client_id, profile=profile)


def is_off(code: grpc.StatusCode | None) -> bool:
    """The daemon's answer when it runs with --fleet off (or predates the stream)."""
    return code in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED)


@dataclass
class StreamLog:
    """One line per change (broken, back, off), not one per reconnect."""

    addr: str
    logger: logging.Logger
    _last: str | None = None

    def up(self) -> None:
        if self._last is not None:
            self.logger.info("policyd fleet stream to %s is back", self.addr)
        self._last = None

    def broke(self, err: BaseException | None) -> None:
        code = rpc_code(err) if err is not None else grpc.StatusCode.OK
        kind = code.name if code else type(err).__name__
        text = rpc_text(err) if err is not None else "ended by the daemon"
        if kind == self._last:
            self.logger.debug("policyd fleet stream to %s: %s; reconnecting", self.addr, text)
            return
        self._last = kind
        level = (
            logging.WARNING
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT)
            else logging.INFO
        )
        self.logger.log(
            level,
            "policyd fleet stream to %s: %s; first attempts use the last assignments, reconnecting",
            self.addr,
            text,
        )

    def off(self, err: BaseException | None) -> None:
        self.logger.info(
            "policyd at %s has no fleet stream (%s); the fleet gate admits every call",
            self.addr,
            rpc_text(err) if err is not None else "",
        )


@dataclass(frozen=True)
class StreamSettings:
    """What a client's stream sends and how it paces and logs itself."""

    client_id: str
    profile: str
    metadata: tuple[tuple[str, str], ...] | None  # the bearer token (the channel adds it to unary calls only)
    random: Callable[[], float]  # the reconnect backoff's and the report interval's jitter
    log: StreamLog


class _Event(Protocol):
    """What the streams' kick and wake are (a threading.Event or an asyncio.Event)."""

    def set(self) -> None: ...
    def clear(self) -> None: ...


class Stream:
    """What the sync and asyncio streams share: the table they report from and apply to, the
    first message, the log, and the steps that do not wait."""

    _kick: _Event  # send a report now
    _wake: _Event  # stop waiting out the reconnect backoff: policyd answers again

    def __init__(self, table: FleetTable, settings: StreamSettings) -> None:
        self._table = table
        self._hello = hello(settings.client_id, settings.profile)
        self._metadata = settings.metadata
        self._random = settings.random
        self._log = settings.log
        self._reachable = True  # not known to be down: a first call may wait for its assignment
        self._heard = False  # the daemon answered on the current stream

    def flush(self) -> None:
        """Send the pending report now rather than at the next tick."""
        self._kick.set()

    def daemon_answered(self) -> None:
        """A unary call got through: a broken stream reconnects now, not after its backoff."""
        if not self._reachable:
            self._wake.set()

    def _open(self) -> bool:
        """Whether the stream is up or being opened: a first call may wait for its assignment."""
        return self._reachable

    def _subscribe(self, target: Target, remaining: float | None, answered: Waiter) -> float:
        """A target's first call: subscribe it at once, and return how long the call waits for
        answered (set at its first assignment); 0 when it does not wait."""
        wait = first_call_wait(remaining)
        if wait <= 0 or not self._open() or not self._table.subscribe(target, answered):
            return 0.0
        self.flush()
        return wait

    def _opening(self) -> None:
        """A new stream: it knows no target yet, and has not answered."""
        self._table.resubscribe()
        self._heard = False

    def _received(self, resp: fpb.CoordinateResponse, backoff: Backoff) -> None:
        """Apply the assignments of one message; the stream's first answer says policyd is back."""
        if not self._heard:
            self._heard = True
            self._reachable = True
            backoff.reset()
            self._log.up()
        self._table.apply(resp)

    def _reports(self) -> list[fpb.CoordinateRequest]:
        """The next reports, taken out of the table."""
        self._kick.clear()
        try:
            return self._table.reports()
        except Exception as e:  # never expected; the stream must not die of it
            self._log.logger.debug("policyd fleet stream: building a report failed: %s", e)
            return []

    def _broken(self) -> None:
        """A stream ended: first calls stop waiting for it."""
        self._reachable = False
        self._table.release()

    def _given_up(self, err: BaseException | None) -> bool:
        """Whether the daemon has no fleet stream (--fleet off): then the gate admits every call
        and the stream is not reopened. Otherwise the break is logged, to try again."""
        if is_off(rpc_code(err) if err is not None else None):
            self._table.disable()
            self._log.off(err)
            return True
        self._log.broke(err)
        return False


class SyncStream(Stream):
    """The Coordinate stream of a sync client, on a daemon thread started by the first gated call."""

    _kick: threading.Event
    _wake: threading.Event

    def __init__(self, table: FleetTable, channel: grpc.Channel, settings: StreamSettings) -> None:
        super().__init__(table, settings)
        self._stub = fleet_stub(channel)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._kick = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._call: Any = None

    def start(self) -> None:
        """Open the stream unless it is open, closed, or the daemon has no fleet memory."""
        if self._thread is not None or self._closed.is_set() or self._table.disabled:
            return
        with self._lock:
            if self._thread is not None or self._closed.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="policyd-fleet-stream", daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    @property
    def reachable(self) -> bool:
        """Open, or opening (not closed, not broken since it last answered)."""
        return self._reachable and not self._closed.is_set() and not self._table.disabled

    def _open(self) -> bool:
        return self.reachable

    def first_call(self, target: Target, remaining: float | None) -> None:
        """A target's first call: subscribe it at once and wait (briefly) for its assignment."""
        if self._table.known(target):
            return  # not its first call: the common case, without a lock or an event
        answered = threading.Event()
        wait = self._subscribe(target, remaining, answered)
        if wait > 0:
            answered.wait(wait)

    def close(self, timeout: float = 5.0) -> None:
        """End the stream and its thread."""
        with self._lock:
            self._closed.set()
            self._kick.set()
            self._wake.set()
            call, thread = self._call, self._thread
        if call is not None:
            call.cancel()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        backoff = Backoff(self._random)
        while not self._closed.is_set():
            done = threading.Event()
            self._opening()
            err: BaseException | None = None
            try:
                call = self._stub.Coordinate(self._requests(done), metadata=self._metadata)
                with self._lock:
                    self._call = call
                    if self._closed.is_set():
                        call.cancel()
                for resp in call:
                    self._received(resp, backoff)
            except grpc.RpcError as e:
                err = e
            except Exception as e:  # a broken channel, a bad message: never the caller's problem
                err = e
            finally:
                done.set()
                self._kick.set()
                with self._lock:
                    self._call = None
            self._broken()
            if self._closed.is_set() or self._given_up(err):
                return
            self._wake.clear()
            if self._wake.wait(backoff.next()):
                backoff.reset()  # policyd answered a call: it is back
            if self._closed.is_set():
                return

    def _requests(self, done: threading.Event) -> Iterator[fpb.CoordinateRequest]:
        yield self._hello
        while not done.is_set() and not self._closed.is_set():
            yield from self._reports()
            self._kick.wait(report_interval(self._random))


class AsyncStream(Stream):
    """The Coordinate stream of an AsyncClient: one task on the loop that started it."""

    _kick: asyncio.Event
    _wake: asyncio.Event

    def __init__(self, table: FleetTable, channel: grpc.aio.Channel, settings: StreamSettings) -> None:
        super().__init__(table, settings)
        self._stub = async_fleet_stub(channel)
        self._loop = asyncio.get_running_loop()
        self._kick = asyncio.Event()
        self._wake = asyncio.Event()
        self._task = self._loop.create_task(self._run(), name="policyd-fleet-stream")

    def _open(self) -> bool:
        return self._reachable and not self._task.done()

    async def first_call(self, target: Target, remaining: float | None) -> None:
        """A target's first call: subscribe it at once and wait (briefly) for its assignment."""
        if self._table.known(target):
            return  # not its first call: the common case, without a lock or an event
        answered = asyncio.Event()
        wait = self._subscribe(target, remaining, answered)
        if wait > 0:
            try:
                await asyncio.wait_for(answered.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def alive(self) -> bool:
        """Running, or ended for good (the daemon has no fleet memory); not when its loop is gone."""
        return not self._loop.is_closed() and (not self._task.done() or self._table.disabled)

    async def close(self) -> None:
        if self._task.done() or self._loop.is_closed():
            return
        if asyncio.get_running_loop() is not self._loop:  # closed from another loop: cancel only
            self._loop.call_soon_threadsafe(self._task.cancel)
            return
        self._task.cancel()
        await asyncio.wait([self._task])  # raises only when close() itself is cancelled

    async def _run(self) -> None:
        backoff = Backoff(self._random)
        while True:
            self._opening()
            err: BaseException | None = None
            call: Any = None
            try:
                call = self._stub.Coordinate(self._requests(), metadata=self._metadata)
                async for resp in call:
                    self._received(resp, backoff)
            except grpc.RpcError as e:
                err = e
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except Exception as e:  # a broken channel, a bad message: never the caller's problem
                err = e
            self._broken()
            if self._given_up(err):
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), backoff.next())
                backoff.reset()  # policyd answered a call: it is back
            except asyncio.TimeoutError:
                pass

    async def _requests(self) -> AsyncIterator[fpb.CoordinateRequest]:
        yield self._hello
        while True:
            for m in self._reports():
                yield m
            try:
                await asyncio.wait_for(self._kick.wait(), report_interval(self._random))
            except asyncio.TimeoutError:
                pass
