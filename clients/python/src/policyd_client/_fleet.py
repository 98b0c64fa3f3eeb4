"""The fleet gate's table (docs/clients.md, "The fleet gate").

``FleetTable`` is what the sync and asyncio clients share: one ``Gate`` per
target (provider, model, key id), the counts each target's next report
carries, the reports, and the assignments received. It is thread-safe and
never blocks on the daemon. The fleet side has four parts, as in the Go and
TypeScript clients: the gate (``_gate``), this table, the texts the caller
sees (``_texts``) and the stream's I/O (``_stream``).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

from ._gate import (
    CLOSED,
    GRACE,
    HALF_OPEN,
    OPEN,
    Fallback,
    Gate,
    GateAssignment,
    GateCounts,
    GateVerdict,
    Parked,
)
from ._gen.policyd.v1 import fleet_pb2 as fpb
from ._gen.policyd.v1 import policy_pb2 as pb
from .decision import _enum_name
from .failure import _FIELD_BYTES, _clip, clip_label

__all__ = ["FleetTable", "GateCall", "Priority", "Target", "gate_call", "rate_limit_headers", "target_of"]

T = TypeVar("T")

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
# The most of each count one report carries, and of admitted and shed together
# (policyd allows 1,000 a second of the report's interval, at least a second);
# the rest waits.
MAX_COUNT = 1000
# The most input tokens one call counts, and a report's token counts carry for
# each call it counts (first attempts: admitted, shed and parked_new; retries):
# policyd's limit.
MAX_CALL_INPUT_TOKENS = 2_000_000

#: A call's priority class: someone waits for an interactive call's answer; nobody
#: waits on a batch call (a nightly job, an eval run), so the fleet sheds it first
#: when it paces a target (the assignment's batch_admit_fraction).
Priority = Literal["interactive", "batch"]

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


@functools.lru_cache(maxsize=1024)  # every call asks; a process calls a few targets
def target_of(provider: str, model: str, key_id: str) -> Target | None:
    """The target of a call as the daemon takes it (provider and model at most 8 KiB, key id
    128 bytes), None when it names no provider (not gated, not reported)."""
    if not provider:
        return None
    return Target(
        _clip(_utf8(provider), _FIELD_BYTES), _clip(_utf8(model or ""), _FIELD_BYTES), clip_label(_utf8(key_id or ""))
    )


class GateCall(NamedTuple):  # a tuple, not a frozen dataclass: every call makes one
    """What the gate counts of a call besides its target: its class and its input tokens."""

    batch: bool = False
    input_tokens: int = 0


_PLAIN_CALL = GateCall()  # interactive, its input tokens unknown


def gate_call(priority: str, input_tokens: int) -> GateCall:
    """The priority and input_tokens options of a call, checked."""
    if priority not in ("interactive", "batch"):
        raise ValueError(f"policyd: priority must be 'interactive' (the default) or 'batch', not {priority!r}")
    if isinstance(input_tokens, bool) or not isinstance(input_tokens, int) or input_tokens < 0:
        raise ValueError(f"policyd: input_tokens must be a whole number of tokens >= 0, not {input_tokens!r}")
    return GateCall(priority == "batch", min(input_tokens, MAX_CALL_INPUT_TOKENS))


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


def _valid_utf8(s: str) -> str:
    """s with any lone surrogate replaced, so that it can be sent (an ASCII string as it is)."""
    return s if s.isascii() else s.encode("utf-8", "replace").decode("utf-8")


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode())


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
            name = _text(k).strip().lower()
            # Other headers are passed over before any more work (the prefixes are ASCII: making
            # the name valid UTF-8 cannot change whether it starts with one).
            if not name.startswith(RATE_LIMIT_PREFIXES) or name in RATE_LIMIT_PREFIXES:
                continue
            name = _valid_utf8(name)
            value = _valid_utf8(_text(v).strip())
        except Exception:
            continue
        if name in out:
            continue
        if _utf8_len(name) > MAX_RATE_LIMIT_NAME_BYTES or _utf8_len(value) > MAX_RATE_LIMIT_VALUE_BYTES:
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
    batch_fraction: float | None = None
    if a.HasField("batch_admit_fraction") and math.isfinite(a.batch_admit_fraction):
        batch_fraction = min(max(a.batch_admit_fraction, 0.0), 1.0)
    fallback = None
    if a.HasField("fallback") and (a.fallback.kind or a.fallback.provider or a.fallback.model):
        fb = a.fallback
        kind = _enum_name(pb.FallbackKind.Name, fb.kind, "FALLBACK_KIND_")
        fallback = Fallback(kind=kind, provider=fb.provider, model=fb.model, reason=fb.reason)
    lease = a.in_flight_lease if a.HasField("in_flight_lease") else None
    pace_permits = a.pace_permits if a.HasField("pace_permits") else None
    return GateAssignment(
        ttl=_seconds(a.ttl),
        breaker=_BREAKERS.get(a.breaker, CLOSED),
        hold=_seconds(a.hold),
        stop=_seconds(a.stop),
        admit_fraction=min(max(fraction, 0.0), 1.0),
        probe_permits=a.probe_permits,
        reason=a.reason,
        fallback=fallback,
        park_hint=_seconds(a.park_hint),
        batch_admit_fraction=batch_fraction,
        in_flight_lease=lease,
        pace_permits=pace_permits,
    )


class Waiter(Protocol):
    """What a target's first call waits on (a threading.Event or an asyncio.Event)."""

    def set(self) -> None: ...


class _Entry:
    """One target: its gate and what its next report carries."""

    __slots__ = (
        "gate",
        "since",
        "reported",
        "succeeded",
        "failed",
        "retries",
        "first_tokens",
        "retry_tokens",
        "used_tokens",
        "used_estimated",
        "output_tokens",
        "output_calls",
        "reported_in_flight",
        "reported_parked",
        "headers",
        "fresh",
        "waiter",
        "wakes",
    )

    def __init__(self, now: float, grace: float, target: str = "") -> None:
        self.gate = Gate(grace, target)
        self.since = now  # the last report, or the first use
        # The gate's counts of first attempts that reports carried so far.
        self.reported = GateCounts()
        self.succeeded = self.failed = self.retries = 0
        # Input tokens of first attempts at their first check, and of retries sent.
        self.first_tokens = self.retry_tokens = 0
        # Input tokens the responses said their calls used, and those calls' estimates: they ride
        # with the reports that count calls (their growth alone is not activity, so that a usage
        # read after its call was reported does not keep an idle target reporting).
        self.used_tokens = self.used_estimated = 0
        # Output tokens the responses said their calls produced, and how many calls: alike.
        self.output_tokens = self.output_calls = 0
        # What the last report said of the gate's gauges (requests in flight, calls parked).
        self.reported_in_flight = self.reported_parked = 0
        self.headers: dict[str, str] | None = None
        self.fresh = False  # report even without counts: subscribe it on a new stream
        self.waiter: Waiter | None = None  # a first call waiting for the first assignment
        # Parked calls, woken at the next assignment, or when a request ends while leased.
        self.wakes: list[Waiter] = []

    def counts(self) -> bool:
        g = self.gate
        return bool(
            g.counts() != self.reported
            or self.succeeded
            or self.failed
            or self.retries
            or self.first_tokens
            or self.retry_tokens
            or self.headers
            or g.in_flight != self.reported_in_flight  # a change of a gauge is activity
            or g.parked != self.reported_parked
            # Calls parked: reported each interval, as their re-checks are, so that the daemon
            # keeps counting the process on the target (its lease, its probe permits).
            or g.parked
        )

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

    def _entry(self, target: Target, now: float | None = None) -> _Entry | None:
        """target's entry, made (at now, else the clock's time) when it is new; None past MAX_TARGETS."""
        e = self._entries.get(target)
        if e is None:
            if len(self._entries) >= MAX_TARGETS:
                return None
            e = self._entries[target] = _Entry(self._clock() if now is None else now, self._grace, str(target))
        return e

    # ---- the callers' side

    def known(self, target: Target) -> bool:
        """Whether the table has target (a read without the lock: a hint, subscribe decides)."""
        return target in self._entries

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
        self,
        target: Target,
        remaining: float | None,
        can_fall_back: bool,
        draw: float,
        park_limit: float | None = None,
        call: GateCall = _PLAIN_CALL,
    ) -> GateVerdict:
        """Gate a first attempt to target; ``remaining``: seconds before the caller's deadline;
        ``park_limit``: how long a call without a deadline may park (None: the default; 0: off);
        ``call``: its class and input tokens (counted here, whatever the verdict)."""
        with self._lock:
            if self._disabled:
                return _ADMIT
            now = self._clock()
            e = self._entry(target, now)
            if e is None:
                return _ADMIT
            deadline = None if remaining is None else max(remaining, 0.0)
            e.first_tokens += call.input_tokens
            return e.gate.check(now, deadline, can_fall_back, draw, park_limit, call.batch)

    def resume(self, target: Target, p: Parked, draw: float) -> GateVerdict:
        """Check a call parked on target again (Gate.resume)."""
        with self._lock:
            now = self._clock()
            e = None if self._disabled else self._entry(target, now)
            if e is None:
                return _ADMIT
            return e.gate.resume(now, p, draw)

    def check_retry(self, target: Target, remaining: float | None, park_limit: float | None = None) -> GateVerdict:
        """Gate a retry to target (Gate.check_retry)."""
        with self._lock:
            now = self._clock()
            e = None if self._disabled else self._entry(target, now)
            if e is None:
                return _ADMIT
            return e.gate.check_retry(now, None if remaining is None else max(remaining, 0.0), park_limit)

    def park_wait(self, target: Target, waiter: Waiter) -> None:
        """Set waiter at target's next assignment (or abandon), or when a request to target ends
        while its assignment leases requests in flight."""
        with self._lock:
            e = self._entries.get(target)
            if e is None or self._disabled:
                waiter.set()
            else:
                e.wakes.append(waiter)

    def park_cancelled(self, target: Target, p: Parked) -> None:
        """A parked call's caller cancelled it (or it raised): out of the park; a first attempt
        is counted as shed."""
        with self._lock:
            e = self._entries.get(target)
            if e is not None:
                e.gate.cancelled(p)

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
            e = self._entry(target)
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

    def retried(self, target: Target, input_tokens: int = 0) -> None:
        """Count a retry sent, of input_tokens."""
        with self._lock:
            if self._disabled:
                return
            e = self._entry(target)
            if e is not None:
                e.retries += 1
                e.retry_tokens += input_tokens

    def record_usage(self, target: Target, used: int, estimated: int) -> None:
        """Count what a success's response said its call used (input tokens), with the estimate
        the call was counted at; each at most MAX_CALL_INPUT_TOKENS. A call estimated at 0 is
        not counted: the daemon compares the two."""
        if estimated <= 0:
            return
        with self._lock:
            if self._disabled:
                return
            e = self._entry(target)
            if e is not None:
                e.used_tokens += min(max(used, 0), MAX_CALL_INPUT_TOKENS)
                e.used_estimated += min(max(estimated, 0), MAX_CALL_INPUT_TOKENS)

    def record_output(self, target: Target, output: int) -> None:
        """Count the output tokens a success's response said its call produced (the last count
        its body said), at most MAX_CALL_INPUT_TOKENS: one call's."""
        with self._lock:
            if self._disabled:
                return
            e = self._entry(target)
            if e is not None:
                _count_output(e, output)

    def flight(self, target: Target, delta: int) -> None:
        """An attempt to target starts (+1) or ends (-1): the report's in_flight gauge, and what
        the assignment's lease caps. A request ending wakes the calls parked at the lease."""
        with self._lock:
            if self._disabled:
                return
            e = self._entry(target)
            if e is not None:
                _fly(e, delta)

    def body_ended(self, target: Target, output: int | None) -> None:
        """A success's body ended, broke off or was closed: out of flight (flight -1) and, when
        it said one, its output count (record_output), in one step."""
        with self._lock:
            if self._disabled:
                return
            e = self._entry(target)
            if e is not None:
                _fly(e, -1)
                if output is not None:
                    _count_output(e, output)

    def in_flight(self, target: Target, fn: Callable[[], T]) -> Callable[[], T]:
        """fn, counted in flight on target while it runs."""

        def counted() -> T:
            self.flight(target, 1)
            try:
                return fn()
            finally:
                self.flight(target, -1)

        return counted

    def in_flight_async(self, target: Target, fn: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """The coroutine function fn, counted in flight on target while it runs."""

        async def counted() -> T:
            self.flight(target, 1)
            try:
                return await fn()
            finally:
                self.flight(target, -1)

        return counted

    def observe(self, target: Target, headers: object) -> None:
        """Keep a success's rate-limit headers for the target's next report."""
        kept = rate_limit_headers(headers)
        if not kept:
            return
        with self._lock:
            if self._disabled:
                return
            e = self._entry(target)
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
                g, done = e.gate, e.reported
                due = GateCounts(*(n - r for n, r in zip(g.counts(), done, strict=True)))
                admitted, parked_new, succeeded, failed, retries = (
                    min(n, MAX_COUNT) for n in (due.admitted, due.parked_new, e.succeeded, e.failed, e.retries)
                )
                shed = min(due.shed, MAX_COUNT - admitted)
                fell_back = min(due.fell_back, shed)
                # The first attempts counted: admitted, shed and parked at their first check. The
                # released are among admitted, the batch class's among those counted; tokens at
                # most the limit for each call counted. What is over waits for the next report.
                first = admitted + shed + parked_new
                released, batch_first = min(due.released, admitted), min(due.batch_first, first)
                first_tokens = min(e.first_tokens, MAX_CALL_INPUT_TOKENS * first)
                retry_tokens = min(e.retry_tokens, MAX_CALL_INPUT_TOKENS * retries)
                used_limit = MAX_CALL_INPUT_TOKENS * (admitted + retries)  # policyd's: a call's at most
                used_tokens, used_estimated = min(e.used_tokens, used_limit), min(e.used_estimated, used_limit)
                # The calls whose output is counted, at most the attempts counted (policyd's
                # bound), with their share of the output: the average a call is what it reads.
                output_calls = min(e.output_calls, admitted + retries)
                output_tokens = e.output_tokens
                if output_calls < e.output_calls:
                    output_tokens = output_tokens * output_calls // e.output_calls
                output_tokens = min(output_tokens, MAX_CALL_INPUT_TOKENS * output_calls)
                u = fpb.BucketUsage(
                    target=fpb.BucketTarget(provider=t.provider, model=t.model, key_id=t.key_id),
                    admitted=admitted,
                    shed=shed,
                    fell_back=fell_back,
                    succeeded=succeeded,
                    failed=failed,
                    retries=retries,
                    rate_limit_headers=e.headers or {},
                    parked=g.parked,
                    parked_new=parked_new,
                    released=released,
                    batch_first_attempts=batch_first,
                    first_attempt_input_tokens=first_tokens,
                    retry_input_tokens=retry_tokens,
                    input_tokens_used=used_tokens,
                    input_tokens_estimated_for_used=used_estimated,
                    output_tokens_used=output_tokens,
                    output_tokens_used_calls=output_calls,
                    in_flight=g.in_flight,
                )
                elapsed = now - e.since
                elapsed = MIN_ELAPSED if not elapsed >= MIN_ELAPSED else min(elapsed, MAX_ELAPSED)
                u.elapsed.FromNanoseconds(int(elapsed * 1e9))
                usages.append(u)
                e.reported = GateCounts(
                    done.admitted + admitted,
                    done.shed + shed,
                    done.parked_new + parked_new,
                    done.released + released,
                    done.batch_first + batch_first,
                    done.fell_back + fell_back,
                )
                e.succeeded -= succeeded
                e.failed -= failed
                e.retries -= retries
                e.first_tokens -= first_tokens
                e.retry_tokens -= retry_tokens
                e.used_tokens -= used_tokens
                e.used_estimated -= used_estimated
                e.output_tokens -= output_tokens
                e.output_calls -= output_calls
                e.reported_in_flight, e.reported_parked = g.in_flight, g.parked
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
                        if not e.counts() and not e.gate.in_flight:
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


def _fly(e: _Entry, delta: int) -> None:
    g = e.gate
    g.in_flight = max(0, g.in_flight + delta)
    if delta < 0 and g.assignment is not None and g.assignment.in_flight_lease is not None:
        _wake_parked(e)


def _count_output(e: _Entry, output: int) -> None:
    e.output_tokens += min(max(output, 0), MAX_CALL_INPUT_TOKENS)
    e.output_calls += 1


def _wake_parked(e: _Entry) -> None:
    for w in e.wakes:
        w.set()
    e.wakes.clear()
