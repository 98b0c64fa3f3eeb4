"""The Coordinate stream's I/O (docs/clients.md, "The fleet gate"): the
reconnect backoff, the report timing, the log lines, and ``SyncStream``, the
stream of a sync :class:`~policyd_client.Client` on a background thread (the
asyncio client's task is in ``aio.py``). Both reconnect with the same
``Backoff`` and log through the same ``StreamLog``.
"""

import logging
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from ._core import rpc_code, rpc_text
from ._fleet import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    FIRST_ASSIGNMENT_WAIT,
    REPORT_INTERVAL,
    REPORT_JITTER,
    FleetTable,
    Target,
)
from ._gen.policyd.v1 import fleet_pb2 as fpb
from ._stubs import fleet_stub

__all__ = ["Backoff", "StreamLog", "SyncStream"]


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


class SyncStream:
    """The Coordinate stream of a sync client, on a daemon thread started by the first gated call."""

    def __init__(
        self,
        table: FleetTable,
        channel: grpc.Channel,
        *,
        client_id: str,
        profile: str,
        metadata: tuple[tuple[str, str], ...] | None,
        random: Callable[[], float],
        log: StreamLog,
    ) -> None:
        self._table = table
        self._stub = fleet_stub(channel)
        self._hello = hello(client_id, profile)
        self._metadata = metadata
        self._random = random
        self._log = log
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._kick = threading.Event()  # send a report now
        self._wake = threading.Event()  # stop waiting out the reconnect backoff: policyd answers again
        self._thread: threading.Thread | None = None
        self._call: Any = None
        self._reachable = True  # not known to be down: a first call may wait for its assignment

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

    def flush(self) -> None:
        """Send the pending report now rather than at the next tick."""
        self._kick.set()

    def daemon_answered(self) -> None:
        """A unary call got through: a broken stream reconnects now, not after its backoff."""
        if not self._reachable:
            self._wake.set()

    def first_call(self, target: Target, remaining: float | None) -> None:
        """A target's first call: subscribe it at once and wait (briefly) for its assignment."""
        if self._table.known(target):
            return  # not its first call: the common case, without a lock
        wait = first_call_wait(remaining)
        if wait <= 0 or not self.reachable:
            return
        answered = threading.Event()
        if self._table.subscribe(target, answered):
            self.flush()
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
            self._table.resubscribe()
            err: BaseException | None = None
            try:
                call = self._stub.Coordinate(self._requests(done), metadata=self._metadata)
                with self._lock:
                    self._call = call
                    if self._closed.is_set():
                        call.cancel()
                answered = False
                for resp in call:
                    if not answered:
                        answered = True
                        self._reachable = True
                        backoff.reset()
                        self._log.up()
                    self._table.apply(resp)
            except grpc.RpcError as e:
                err = e
            except Exception as e:  # a broken channel, a bad message: never the caller's problem
                err = e
            finally:
                done.set()
                self._kick.set()
                with self._lock:
                    self._call = None
            self._reachable = False
            self._table.release()
            if self._closed.is_set():
                return
            if is_off(rpc_code(err) if err is not None else None):
                self._table.disable()
                self._log.off(err)
                return
            self._log.broke(err)
            self._wake.clear()
            if self._wake.wait(backoff.next()):
                backoff.reset()  # policyd answered a call: it is back
            if self._closed.is_set():
                return

    def _requests(self, done: threading.Event) -> Iterator[fpb.CoordinateRequest]:
        yield self._hello
        while not done.is_set() and not self._closed.is_set():
            self._kick.clear()
            try:
                msgs = self._table.reports()
            except Exception as e:  # never expected; the stream must not die of it
                self._log.logger.debug("policyd fleet stream: building a report failed: %s", e)
                msgs = []
            yield from msgs
            self._kick.wait(report_interval(self._random))
