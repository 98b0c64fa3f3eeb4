"""The fleet gate's table and the Coordinate stream (docs/clients.md, "The fleet gate").

``FleetTable`` is what the sync and asyncio clients share: one ``Gate`` per
target (provider, model, key id), the counts each target's next report
carries, the reports, and the assignments received. It is thread-safe and
never blocks on the daemon. ``SyncStream`` runs the stream on a background
thread for :class:`~policyd_client.Client`; the asyncio client's task is in
``aio.py``. Both reconnect with the same ``Backoff`` and log through the same
``StreamLog``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import grpc

from ._core import rpc_code, rpc_text
from ._gate import CLOSED, GRACE, HALF_OPEN, OPEN, Fallback, Gate, GateAction, GateAssignment, GateVerdict, Parked
from ._gen.policyd.v1 import fleet_pb2 as fpb
from ._gen.policyd.v1 import policy_pb2 as pb
from ._stubs import fleet_stub
from .decision import SOURCE_FLEET_GATE, Action, Decision, FallbackHint, FleetState, _enum_name
from .errors import FleetGateError, RetryCancelled, RetryStopped
from .failure import _FIELD_BYTES, _clip, clip_label

__all__ = ["FleetTable", "SyncStream", "Target", "rate_limit_headers", "target_of"]

# Reports: about once a second (± 10 %), at most 256 targets a message, an
# interval of more than 0 and at most 10 minutes.
REPORT_INTERVAL = 1.0
REPORT_JITTER = 0.1
MAX_USAGES = 256
MIN_ELAPSED = 0.001
MAX_ELAPSED = 600.0
# The failures decided locally that a report counts: the types the daemon's
# breakers count (docs/clients.md), so that a bad request or a bad key
# decided while policyd was away cannot open one.
BREAKER_COUNTED = frozenset({"OVERLOADED", "SERVER_ERROR", "TIMEOUT", "CONNECTION_ERROR"})
# How long a target's first call waits for the target's first assignment.
FIRST_ASSIGNMENT_WAIT = 0.1
# Reconnecting: 1 s doubling to 30 s, full jitter.
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 30.0
# The rate-limit headers a report carries.
RATE_LIMIT_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
MAX_RATE_LIMIT_HEADERS = 16
MAX_RATE_LIMIT_VALUE_BYTES = 64
MAX_RATE_LIMIT_NAME_BYTES = 128
# The most targets the table keeps (the daemon's limit for one stream): past
# it, new targets are not gated until the daemon abandons idle ones.
MAX_TARGETS = 1024
# The most of each count one report carries (the daemon's limit); the rest waits.
MAX_COUNT = 1 << 30

_ADMIT = GateVerdict()
_BREAKERS = {pb.BREAKER_STATE_OPEN: OPEN, pb.BREAKER_STATE_HALF_OPEN: HALF_OPEN}


class Target(NamedTuple):
    """What a call is about: the gate's key, and a report's and an assignment's target."""

    provider: str
    model: str
    key_id: str

    def __str__(self) -> str:
        s = f"{self.provider}/{self.model}" if self.model else self.provider
        return f"{s}@{self.key_id}" if self.key_id else s


def _utf8(s: str) -> str:
    """s as valid UTF-8 (a lone surrogate cannot be sent)."""
    if not isinstance(s, str):
        s = str(s)
    return s.encode("utf-8", "replace").decode("utf-8")


def target_of(provider: str, model: str, key_id: str) -> Target | None:
    """The target of a call as the daemon takes it (provider and model at most 8 KiB, key id
    128 bytes), None when it names no provider (not gated, not reported)."""
    if not provider:
        return None
    return Target(
        _clip(_utf8(provider), _FIELD_BYTES), _clip(_utf8(model or ""), _FIELD_BYTES), clip_label(_utf8(key_id or ""))
    )


def check_grace(grace: float) -> float:
    """The fleet_grace option, checked."""
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < math.inf:
        raise ValueError(f"policyd: fleet_grace must be a number of seconds >= 0, not {grace!r}")
    return float(grace)


def check_park_limit(limit: float | None) -> float | None:
    """The park_limit option: None (the default, 120 s), or seconds ≥ 0 (0: parking off)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit < 0:
        raise ValueError(f"policyd: park_limit must be None or seconds >= 0, not {limit!r}")
    return float(limit)


def stream_metadata(token: str) -> tuple[tuple[str, str], ...] | None:
    """The stream's metadata: the bearer token (the channel's interceptor adds it to unary calls only)."""
    return (("authorization", "Bearer " + token),) if token else None


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("latin-1")
    return v if isinstance(v, str) else str(v)


def rate_limit_headers(headers: Any) -> dict[str, str]:
    """The headers a report carries: only ``x-ratelimit-*`` and ``anthropic-ratelimit-*``
    (names in lower case), at most 16, values of at most 64 bytes (longer ones are dropped).

    ``headers`` is a mapping (a dict, httpx's or requests' headers) or pairs;
    anything else gives no headers.
    """
    out: dict[str, str] = {}
    try:
        items = list(headers.items()) if hasattr(headers, "items") else list(headers)
    except Exception:
        return out
    for item in items:
        try:
            k, v = item
            name = _text(k).strip().lower().encode("utf-8", "replace").decode("utf-8")
            value = _text(v).strip().encode("utf-8", "replace").decode("utf-8")
        except Exception:
            continue
        if not any(name.startswith(p) and len(name) > len(p) for p in RATE_LIMIT_PREFIXES) or name in out:
            continue
        if len(name.encode()) > MAX_RATE_LIMIT_NAME_BYTES or len(value.encode()) > MAX_RATE_LIMIT_VALUE_BYTES:
            continue
        out[name] = value
        if len(out) == MAX_RATE_LIMIT_HEADERS:
            break
    return out


def _seconds(d: Any) -> float:
    s = float(d.seconds) + d.nanos / 1e9
    return s if s > 0 else 0.0


def assignment_of(a: fpb.Assignment) -> GateAssignment:
    """The gate's view of an assignment."""
    fraction = a.admit_fraction
    if not math.isfinite(fraction):
        fraction = 1.0
    fallback = None
    if a.HasField("fallback") and (a.fallback.kind or a.fallback.provider or a.fallback.model):
        fb = a.fallback
        kind = _enum_name(pb.FallbackKind.Name, fb.kind, "FALLBACK_KIND_")
        fallback = Fallback(kind=kind, provider=fb.provider, model=fb.model, reason=fb.reason)
    return GateAssignment(
        ttl=_seconds(a.ttl),
        breaker=_BREAKERS.get(a.breaker, CLOSED),
        hold=_seconds(a.hold),
        stop=_seconds(a.stop),
        admit_fraction=min(max(fraction, 0.0), 1.0),
        probe_permits=a.probe_permits,
        reason=a.reason,
        fallback=fallback,
    )


class Waiter(Protocol):
    """What a target's first call waits on (a threading.Event or an asyncio.Event)."""

    def set(self) -> None: ...


class _Entry:
    """One target: its gate and what its next report carries."""

    __slots__ = (
        "gate",
        "since",
        "admitted",
        "shed",
        "succeeded",
        "failed",
        "retries",
        "headers",
        "fresh",
        "waiter",
        "parked",
    )

    def __init__(self, now: float, grace: float, target: str = "") -> None:
        self.gate = Gate(grace, target)
        self.since = now  # the last report, or the first use
        self.admitted = self.shed = self.succeeded = self.failed = self.retries = 0
        self.headers: dict[str, str] | None = None
        self.fresh = False  # report even without counts: subscribe it on a new stream
        self.waiter: Waiter | None = None  # a first call waiting for the first assignment
        self.parked: list[Waiter] = []  # parked calls, woken at the next assignment

    def counts(self) -> bool:
        return bool(self.admitted or self.shed or self.succeeded or self.failed or self.retries or self.headers)

    def active(self) -> bool:
        return self.fresh or self.counts()


class FleetTable:
    """The gate table of one client object, shared by the callers' threads and the stream.

    ``clock`` is the client's monotonic clock in seconds; ``grace`` how long an
    expired assignment is kept.
    """

    def __init__(self, clock: Callable[[], float], grace: float = GRACE) -> None:
        self._clock = clock
        self._grace = grace
        self._lock = threading.Lock()
        self._entries: dict[Target, _Entry] = {}
        self._disabled = False

    @property
    def disabled(self) -> bool:
        """True once the daemon said it has no fleet memory: the gate admits everything."""
        return self._disabled

    def disable(self) -> None:
        with self._lock:
            self._disabled = True
            self._entries.clear()

    def _entry(self, target: Target, now: float) -> _Entry | None:
        e = self._entries.get(target)
        if e is None:
            if len(self._entries) >= MAX_TARGETS:
                return None
            e = self._entries[target] = _Entry(now, self._grace, str(target))
        return e

    # ---- the callers' side

    def subscribe(self, target: Target, waiter: Waiter) -> bool:
        """Before a target's first call: report it at once (subscribe it) and return True, so that
        the call waits on waiter (set when the first assignment arrives or the stream breaks);
        False when the target is known already (or not tracked)."""
        with self._lock:
            if self._disabled or target in self._entries:
                return False
            e = self._entry(target, self._clock())
            if e is None:
                return False
            e.fresh = True
            e.waiter = waiter
            return True

    def release(self) -> None:
        """The stream broke: no first call waits for an assignment any longer."""
        with self._lock:
            for e in self._entries.values():
                if e.waiter is not None:
                    e.waiter.set()
                    e.waiter = None

    def check(
        self, target: Target, remaining: float | None, can_fall_back: bool, draw: float, park_limit: float | None = None
    ) -> GateVerdict:
        """Gate a first attempt to target; ``remaining``: seconds before the caller's deadline;
        ``park_limit``: how long a call without a deadline may park (None: the default; 0: off)."""
        with self._lock:
            if self._disabled:
                return _ADMIT
            now = self._clock()
            e = self._entry(target, now)
            if e is None:
                return _ADMIT
            v = e.gate.check(now, None if remaining is None else max(remaining, 0.0), can_fall_back, draw, park_limit)
            self._count(e, v)
            return v

    @staticmethod
    def _count(e: _Entry, v: GateVerdict) -> None:
        if v.action in (GateAction.ADMIT, GateAction.WAIT):
            e.admitted += 1
        elif v.action is not GateAction.PARK:
            e.shed += 1

    def resume(self, target: Target, p: Parked, draw: float) -> GateVerdict:
        """Check a call parked on target again (Gate.resume)."""
        with self._lock:
            now = self._clock()
            e = None if self._disabled else self._entry(target, now)
            if e is None:
                return _ADMIT
            v = e.gate.resume(now, p, draw)
            self._count(e, v)
            return v

    def park_wait(self, target: Target, waiter: Waiter) -> None:
        """Set waiter at target's next assignment (or abandon)."""
        with self._lock:
            e = self._entries.get(target)
            if e is None or self._disabled:
                waiter.set()
            else:
                e.parked.append(waiter)

    def park_cancelled(self, target: Target) -> None:
        """A parked call's caller cancelled it: counted as shed."""
        with self._lock:
            e = self._entries.get(target)
            if e is not None:
                e.gate.cancelled()
                e.shed += 1

    def record(self, target: Target, ok: bool) -> bool:
        """Count an attempt's outcome (a success for the report; both in the own budget). True
        for a success while the target's breaker is half-open: a probe's answer, to report at once."""
        with self._lock:
            if self._disabled:
                return False
            now = self._clock()
            e = self._entry(target, now)
            if e is None:
                return False
            e.gate.record(now, ok)
            if ok:
                e.succeeded += 1
            a = e.gate.assignment
            return ok and a is not None and a.breaker == HALF_OPEN

    def failed_locally(self, target: Target) -> None:
        """Count a failure the fail-open policy decided (policyd unreachable)."""
        with self._lock:
            if self._disabled:
                return
            e = self._entry(target, self._clock())
            if e is not None:
                e.failed += 1

    def allow_retry(self, target: Target) -> bool:
        """Whether a retry the fail-open policy decided may go: the process's own
        budget for the target allows it (policyd away limits retries, never first attempts)."""
        with self._lock:
            if self._disabled:
                return True
            now = self._clock()
            e = self._entry(target, now)
            return e is None or e.gate.allow_retry(now)

    def retried(self, target: Target) -> None:
        """Count a retry sent."""
        with self._lock:
            if self._disabled:
                return
            e = self._entry(target, self._clock())
            if e is not None:
                e.retries += 1

    def observe(self, target: Target, headers: object) -> None:
        """Keep a success's rate-limit headers for the target's next report."""
        kept = rate_limit_headers(headers)
        if not kept:
            return
        with self._lock:
            if self._disabled:
                return
            e = self._entry(target, self._clock())
            if e is not None:
                e.headers = kept

    def assignment(self, target: Target) -> GateAssignment | None:
        """The target's assignment as received (None: none)."""
        with self._lock:
            e = self._entries.get(target)
            return None if e is None else e.gate.assignment

    # ---- the stream's side

    def resubscribe(self) -> None:
        """On a new stream: report every target that holds an assignment, counts or not."""
        with self._lock:
            for e in self._entries.values():
                if e.gate.assignment is not None:
                    e.fresh = True

    def reports(self) -> list[fpb.CoordinateRequest]:
        """Take the counts of every target with activity since its last report, as messages."""
        with self._lock:
            if self._disabled:
                return []
            now = self._clock()
            usages: list[fpb.BucketUsage] = []
            for t, e in self._entries.items():
                if not e.active():
                    continue
                admitted, shed, succeeded, failed, retries = (
                    min(n, MAX_COUNT) for n in (e.admitted, e.shed, e.succeeded, e.failed, e.retries)
                )
                u = fpb.BucketUsage(
                    target=fpb.BucketTarget(provider=t.provider, model=t.model, key_id=t.key_id),
                    admitted=admitted,
                    shed=shed,
                    succeeded=succeeded,
                    failed=failed,
                    retries=retries,
                    rate_limit_headers=e.headers or {},
                )
                elapsed = now - e.since
                elapsed = MIN_ELAPSED if not elapsed >= MIN_ELAPSED else min(elapsed, MAX_ELAPSED)
                u.elapsed.FromNanoseconds(int(elapsed * 1e9))
                usages.append(u)
                e.admitted -= admitted
                e.shed -= shed
                e.succeeded -= succeeded
                e.failed -= failed
                e.retries -= retries
                e.headers = None
                e.fresh = False
                e.since = now
        return [fpb.CoordinateRequest(usage=usages[i : i + MAX_USAGES]) for i in range(0, len(usages), MAX_USAGES)]

    def apply(self, resp: fpb.CoordinateResponse) -> None:
        """Receive assignments: each replaces its target's, timed from now; abandon forgets the target."""
        with self._lock:
            if self._disabled:
                return
            now = self._clock()
            for a in resp.assignments:
                t = Target(a.target.provider, a.target.model, a.target.key_id)
                if a.abandon:
                    e = self._entries.get(t)
                    if e is not None:
                        _wake_parked(e)
                        e.gate.assign(now, None)
                        e.fresh = False
                        if not e.counts():
                            del self._entries[t]
                    continue
                if not t.provider:
                    continue
                e = self._entry(t, now)
                if e is not None:
                    e.gate.assign(now, assignment_of(a))
                    _wake_parked(e)
                    if e.waiter is not None:
                        e.waiter.set()
                        e.waiter = None


def _wake_parked(e: _Entry) -> None:
    for w in e.parked:
        w.set()
    e.parked.clear()


def park_decision(target: Target, v: GateVerdict) -> Decision:
    """What the on_retry hook sees of a parked call (attempt 0): as it parks ("waiting for the fleet:
    breaker open on openai/gpt-4o, ~4 s"), and as it leaves (``waited``)."""
    leaving = v.action is not GateAction.PARK
    admitted = v.action in (GateAction.ADMIT, GateAction.WAIT)
    if leaving and not admitted:
        d = gate_decision(target, v)
    else:
        text = f"released by the fleet after {v.waited:.3g}s" if leaving else v.reason
        d = Decision(
            Action.RETRY,
            delay=v.wait,
            reason=text,
            stop_reason="" if leaving else v.stop_reason,
            stop_text=text,
            strategy="fleet-gate",
            source=SOURCE_FLEET_GATE,
            fleet=gate_fleet(v) if not leaving else None,
        )
    return dataclasses.replace(d, parked=True, waited=v.waited)


# ---- what a call does with a verdict that is not "admit"


def _seconds_text(s: float) -> str:
    return f"{max(s, 0.0):.1f} s"


def stop_text(target: Target, v: GateVerdict) -> str:
    """Why the gate did not admit a first attempt, in a sentence (docs/clients.md,
    "What the caller sees"; clients/testdata/gate.json pins it): what the fleet
    does, then the assignment's reason."""
    t = str(target)
    if v.stop_reason == "DEADLINE" and v.waited > 0 and v.reason.startswith("gave up waiting"):
        return v.reason  # a parked call whose deadline can no longer be met
    if v.stop_reason == "FLEET_STOP":
        text = f"the fleet stopped calls to {t} for another {_seconds_text(v.stop_left)}"
    elif v.stop_reason == "CIRCUIT_OPEN":
        text = f"the fleet's circuit breaker for {t} is " + (
            "half-open and this process has no probe permit left" if v.breaker == HALF_OPEN else "open"
        )
    elif v.stop_reason == "FLEET_SHED":
        text = f"the fleet admits {math.floor(v.admit_fraction * 100 + 0.5)}% of first attempts to {t}, not this one"
    elif v.stop_reason == "DEADLINE":
        text = f"the fleet holds first attempts to {t} for another {_seconds_text(v.hold_left)}, past the deadline"
    else:
        text = f"the fleet did not admit a first attempt to {t}"
    return f"{text}: {v.reason}" if v.reason else text


def budget_text(target: Target) -> str:
    """The stop text of a retry the process's own budget refused."""
    return f"policyd is unreachable and this process's own retry budget for {target} is spent"


def budget_stop(target: Target, d: Decision) -> Decision:
    """The fail-open policy's retry turned into a stop: the process's own budget is spent."""
    text = budget_text(target)
    return dataclasses.replace(
        d,
        action=Action.STOP,
        delay=0.0,
        attempts_left=0,
        stop_reason="RETRY_BUDGET_EXHAUSTED",
        stop_text=text,
        fleet=FleetState(budget_exhausted=True, changed=True, reason=text),
    )


def gate_fleet(v: GateVerdict) -> FleetState:
    """The decision's fleet fields for a first attempt the gate did not send."""
    return FleetState(
        breaker=v.breaker,
        hold_remaining=v.hold_left,
        open_remaining=v.stop_left,
        stopped=v.stop_reason == "FLEET_STOP",
        changed=True,
        reason=v.assignment_reason,
    )


def gate_decision(target: Target, v: GateVerdict) -> Decision:
    """The Decision of a first attempt the gate did not send (STOP, or FALL_BACK with its fallback)."""
    text = stop_text(target, v)
    fb = v.fallback if v.action is GateAction.FALL_BACK else None
    return Decision(
        Action.FALL_BACK if fb is not None else Action.STOP,
        reason=text,
        stop_reason=v.stop_reason,
        stop_text=text,
        fallback=fb.kind if fb else "",
        fallback_reason=(fb.reason or text) if fb else "",
        strategy="fleet-gate",
        source=SOURCE_FLEET_GATE,
        fallback_provider=fb.provider if fb else "",
        fallback_model=fb.model if fb else "",
        fleet=gate_fleet(v),
    )


def gate_error(target: Target, v: GateVerdict) -> FleetGateError:
    return FleetGateError(
        target.provider, target.model, target.key_id, stop_reason=v.stop_reason, reason=stop_text(target, v)
    )


def gate_stopped(target: Target, v: GateVerdict) -> RetryStopped:
    """The error a call raises when the gate stops its first attempt."""
    return RetryStopped(gate_error(target, v), gate_decision(target, v), attempts=0)


def gate_fallback(target: Target, v: GateVerdict) -> FallbackHint:
    """What the caller's fallback function gets when the gate falls back."""
    d = gate_decision(target, v)
    return FallbackHint(
        kind=d.fallback,
        reason=d.fallback_reason,
        error=gate_error(target, v),
        decision=d,
        attempts=0,
        provider=d.fallback_provider,
        model=d.fallback_model,
    )


def gate_cancelled(target: Target) -> RetryCancelled:
    """The error of a call cancelled while it waited out a hold."""
    err = FleetGateError(
        target.provider, target.model, target.key_id, stop_reason="", reason="cancelled while waiting out a hold"
    )
    d = Decision(
        Action.STOP, reason="cancelled by the caller", stop_text="cancelled by the caller", source=SOURCE_FLEET_GATE
    )
    return RetryCancelled(err, d, attempts=0, reason="cancelled by the caller")


# ---- the stream, shared parts


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
