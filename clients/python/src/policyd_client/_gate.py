"""The fleet gate for one target: docs/clients.md, "The fleet gate".

Pure logic over a monotonic clock in seconds, shared by the sync and asyncio
clients (through the table in ``_fleet``) and replayed against
clients/testdata/gate.json. The Go reference is internal/refgate/gate.go. Not
thread-safe: the table serialises access.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import NamedTuple

__all__ = [
    "GRACE",
    "PARK_LIMIT",
    "Fallback",
    "Gate",
    "GateAction",
    "GateAssignment",
    "GateCounts",
    "GateVerdict",
    "Parked",
]

#: How long an assignment is kept past its ttl (policyd unreachable) before
#: the gate admits every first attempt, seconds.
GRACE = 10.0
# The process's own budget: gRPC A6's retry throttling (10 tokens, admit above
# half), with a refill by time so that a process that sends nothing tries again.
OWN_MAX_TOKENS = 10.0
OWN_THRESHOLD = OWN_MAX_TOKENS / 2
OWN_SUCCESS_GAIN = 0.1
OWN_REFILL = 0.1  # tokens a second

#: The longest a call without a deadline parks, seconds: two of the breaker's
#: longest open periods (60 s), so that a call outlives an open period that
#: doubled once, and a caller that gave no deadline still gets an answer
#: within two minutes.
PARK_LIMIT = 120.0
#: How often a parked call is checked again when no assignment arrives, and
#: how often a call parked by a pace draws again, seconds.
PARK_RECHECK = 1.0

OPEN = "OPEN"
HALF_OPEN = "HALF_OPEN"
CLOSED = "CLOSED"


@dataclass(frozen=True)
class Fallback:
    """Where an assignment sends a caller that can fall back (kind: ``OTHER_MODEL``, ...)."""

    kind: str
    provider: str = ""
    model: str = ""
    reason: str = ""


@dataclass(frozen=True)
class GateAssignment:
    """An assignment as the gate keeps it; durations in seconds from receipt."""

    ttl: float = 0.0
    breaker: str = CLOSED
    hold: float = 0.0
    stop: float = 0.0
    admit_fraction: float = 1.0
    probe_permits: int = 0
    reason: str = ""
    fallback: Fallback | None = None
    #: The daemon's estimate of how long until the gate admits again (0: unknown).
    park_hint: float = 0.0
    #: The share of batch-class first attempts to admit while the bucket is paced or slow-starting
    #: (batch yields first); None: admit_fraction for both classes.
    batch_admit_fraction: float | None = None
    #: The most requests the process may have in flight on the target, its lease of the fleet's
    #: cap; first attempts past it park. None: no cap.
    in_flight_lease: int | None = None
    #: While a pace binds: the running count of first attempts the daemon granted this process
    #: (docs/clients.md, "Grants"); the gate admits a first attempt only against a grant it has not
    #: used. None: a pace admits admit_fraction of first attempts by draws.
    pace_permits: int | None = None


class GateAction(str, enum.Enum):
    """What the gate does with a first attempt."""

    ADMIT = "admit"
    WAIT = "wait"
    FALL_BACK = "fall_back"
    STOP = "stop"
    PARK = "park"


@dataclass
class Parked:
    """A call the gate holds: when it parked, when it must have an answer by."""

    at: float
    until: float
    can_fall_back: bool = False
    draw_at: float = 0.0
    #: A retry, not a first attempt: not counted as one.
    retry: bool = False
    #: A batch-class first attempt: it re-draws against the batch share.
    batch: bool = False


@dataclass(frozen=True)
class GateVerdict:
    """The gate's answer: ``wait`` seconds before sending (WAIT), ``probe`` when
    a half-open permit was spent, ``stop_reason`` (a StopReason name without
    its prefix) and ``reason`` when not admitted, ``fallback`` for FALL_BACK.
    ``admit_fraction`` is the share the call drew against; ``batch_share`` says
    it was the batch class's own."""

    action: GateAction = GateAction.ADMIT
    wait: float = 0.0
    probe: bool = False
    stop_reason: str = ""
    reason: str = ""
    fallback: Fallback | None = None
    # What the assignment said when the attempt was not admitted (the texts and fleet fields).
    breaker: str = ""
    admit_fraction: float = 1.0
    hold_left: float = 0.0
    stop_left: float = 0.0
    #: PARK: the call to resume; waited: how long it was parked before this verdict.
    parked: Parked | None = None
    waited: float = 0.0
    #: The assignment's reason (``reason`` is the park text while parked).
    assignment_reason: str = ""
    batch_share: bool = False
    #: FLEET_SHED at the lease: the process had ``in_flight`` requests in flight, its lease.
    at_lease: bool = False
    in_flight: int = 0
    #: A pace with grants parked the call for want of one.
    ungranted: bool = False


_ADMIT = GateVerdict()


class GateCounts(NamedTuple):
    """A gate's counts of first attempts since it began (a report carries their growth)."""

    admitted: int = 0
    shed: int = 0
    #: Parked at their first check; parked and later admitted (also in admitted).
    parked_new: int = 0
    released: int = 0
    #: The batch class's first attempts at their first check (admitted, shed or parked).
    batch_first: int = 0
    #: Of shed, the first attempts sent to the assignment's fallback.
    fell_back: int = 0


class Gate:
    """One target's entry: its assignment (timed from receipt), the half-open
    permits left, the process's own budget, its requests in flight and parked
    calls now, and its counts of first attempts."""

    __slots__ = (
        "assignment",
        "received_at",
        "permits",
        "tokens",
        "tokens_at",
        "grace",
        "admitted",
        "shed",
        "fell_back",
        "parks",
        "parked_new",
        "released",
        "batch_first",
        "parked",
        "in_flight",
        "target",
        "grants",
        "grant_count",
    )

    def __init__(self, grace: float = GRACE, target: str = "") -> None:
        self.assignment: GateAssignment | None = None
        self.received_at = 0.0
        self.permits = 0
        self.tokens = OWN_MAX_TOKENS
        self.tokens_at: float | None = None
        self.grace = grace
        self.admitted = 0
        self.shed = 0
        #: Of shed, the first attempts sent to the assignment's fallback.
        self.fell_back = 0
        #: Checks that parked a call (re-checks included); first attempts parked; parked calls admitted.
        self.parks = 0
        self.parked_new = 0
        self.released = 0
        self.batch_first = 0
        #: Calls parked now, first attempts and retries (a gauge).
        self.parked = 0
        #: The process's requests in flight on the target now: the caller keeps it; a first
        #: attempt parks while it is at the assignment's lease.
        self.in_flight = 0
        #: The target as the park text names it (``openai/gpt-4o``).
        self.target = target
        #: The pace's grants not yet used, and the last running count an assignment carried.
        self.grants = 0
        self.grant_count: int | None = None

    def counts(self) -> GateCounts:
        return GateCounts(self.admitted, self.shed, self.parked_new, self.released, self.batch_first, self.fell_back)

    def assign(self, now: float, a: GateAssignment | None) -> None:
        """Receive an assignment (None: abandon), replacing the previous one."""
        self.assignment, self.received_at = a, now
        if a is not None:
            self.permits = a.probe_permits
        self._take_grants(a)

    def _take_grants(self, a: GateAssignment | None) -> None:
        """Add the grants a's running count gives: its rise since the last count seen, or all of it
        when it went down (a new count, from another replica or a restarted one). The first count
        the gate sees grants nothing: it is what the daemon gave this client before (an entry made
        anew). A pace that ends takes the unused grants with it."""
        if a is None or a.pace_permits is None:
            self.grants = 0
            return
        n, last = a.pace_permits, self.grant_count
        if last is not None:
            self.grants += n - last if n >= last else n
        self.grant_count = n

    def record(self, now: float, ok: bool) -> None:
        """Count an attempt's outcome in the process's own budget."""
        self._refill(now)
        if ok:
            self.tokens = min(OWN_MAX_TOKENS, self.tokens + OWN_SUCCESS_GAIN)
        else:
            self.tokens = max(0.0, self.tokens - 1)

    def _refill(self, now: float) -> None:
        if self.tokens_at is not None and now > self.tokens_at:
            self.tokens = min(OWN_MAX_TOKENS, self.tokens + OWN_REFILL * (now - self.tokens_at))
        if self.tokens_at is None or now > self.tokens_at:
            self.tokens_at = now

    def allow_retry(self, now: float) -> bool:
        """Whether a retry decided without policyd (the fail-open policy) may go:
        the process's own budget has more than half its tokens (gRPC A6)."""
        self._refill(now)
        return self.tokens > OWN_THRESHOLD

    def check(
        self,
        now: float,
        deadline: float | None,
        can_fall_back: bool,
        draw: float,
        park_limit: float | None = None,
        batch: bool = False,
    ) -> GateVerdict:
        """Gate a first attempt. ``deadline``: seconds left before the caller's
        deadline (None: none); ``draw``: uniform in [0, 1); ``park_limit``: how
        long a call without a deadline may park (None: PARK_LIMIT; 0: parking off);
        ``batch``: the call is of the batch class (it draws against ``batch_admit_fraction``)."""
        if batch:
            self.batch_first += 1
        v = self._check(now, deadline, draw, False, batch)
        if v.action is GateAction.PARK:
            a = self.assignment
            assert a is not None
            limit = PARK_LIMIT if park_limit is None else park_limit
            until = now + (deadline if deadline is not None else limit)
            if (can_fall_back and a.fallback is not None) or limit <= 0 or until <= now + self._hint_left(now):
                # Somewhere else to go, parking off, or no wait can fit: the answer is now. A call
                # that will not park is never granted (grants go to parked calls): it draws against
                # the pace's share, as without grants.
                if v.ungranted:
                    v = self._check(now, deadline, draw, False, batch, drawn=True)
                    if v.action is not GateAction.PARK:
                        return self._count(v, can_fall_back)
                return self._count(replace(v, action=GateAction.STOP, reason=a.reason), can_fall_back)
            self.parks += 1
            self.parked_new += 1
            self.parked += 1
            return replace(v, parked=Parked(now, until, can_fall_back, now + PARK_RECHECK, batch=batch))
        return self._count(v, can_fall_back)

    def check_retry(self, now: float, deadline: float | None, park_limit: float | None = None) -> GateVerdict:
        """Gate a retry that NextDelay allowed, before it is sent: a stopped key stops it, an open
        breaker (or a probing one without a permit) parks it; otherwise it goes (a pace or a hold
        does not hold it: its delay already waited). Not counted as a first attempt."""
        v = self._check(now, deadline, 0.0, True, False)
        if v.action is GateAction.WAIT or (v.action is GateAction.PARK and v.stop_reason == "FLEET_SHED"):
            return _ADMIT
        if v.action is not GateAction.PARK:
            return v
        a = self.assignment
        assert a is not None
        limit = PARK_LIMIT if park_limit is None else park_limit
        until = now + (deadline if deadline is not None else limit)
        if limit <= 0 or until <= now + self._hint_left(now):
            return replace(v, action=GateAction.STOP, reason=a.reason)
        self.parks += 1
        self.parked += 1
        return replace(v, parked=Parked(now, until, False, now + PARK_RECHECK, retry=True))

    def resume(self, now: float, p: Parked, draw: float) -> GateVerdict:
        """Check a parked call again: admitted (``waited`` says how long it was
        parked), parked again, or stopped (DEADLINE) as soon as the time it has
        left is no longer than the fleet's estimate of the wait."""
        if now < p.draw_at:
            draw = 1.0  # a pace's draw is not due: only a full share admits
        else:
            p.draw_at = now + PARK_RECHECK
        v = replace(self._check(now, None, draw, True, p.batch), waited=now - p.at)
        left = p.until - now
        a = self.assignment
        reason = a.reason if a is not None else ""
        if v.action is GateAction.PARK:
            if left <= self._hint_left(now) or left <= 0:
                text = f"gave up waiting for the fleet after {_go_seconds(v.waited)}: {reason}"
                v = replace(v, action=GateAction.STOP, stop_reason="DEADLINE", reason=text, parked=None)
                self._unpark()
                return v if p.retry else self._count(v, p.can_fall_back)
            self.parks += 1
            return replace(v, parked=p)
        self._unpark()
        if v.action is GateAction.WAIT and v.wait > left and a is not None:
            v = GateVerdict(
                GateAction.STOP,
                stop_reason="DEADLINE",
                reason=reason,
                breaker=a.breaker,
                admit_fraction=a.admit_fraction,
                hold_left=v.wait,
                waited=v.waited,
                assignment_reason=reason,
            )
        if p.retry:
            return replace(v, action=GateAction.ADMIT, wait=0.0) if v.action is GateAction.WAIT else v
        v = self._count(v, p.can_fall_back)
        if v.action in (GateAction.ADMIT, GateAction.WAIT):
            self.released += 1
        return v

    def cancelled(self, p: Parked) -> None:
        """Take a parked call its caller cancelled out of the park: a first attempt counts as shed
        (its first check counted it already, class and all)."""
        self._unpark()
        if not p.retry:
            self.shed += 1

    def _unpark(self) -> None:
        self.parked = max(0, self.parked - 1)

    def _count(self, v: GateVerdict, can_fall_back: bool) -> GateVerdict:
        """Count a first attempt's verdict that is not PARK; a stop becomes the assignment's
        fallback when the caller can take it."""
        if v.action is GateAction.STOP:
            self.shed += 1
            a = self.assignment
            if can_fall_back and a is not None and a.fallback is not None:
                self.fell_back += 1
                return replace(v, action=GateAction.FALL_BACK, fallback=a.fallback)
        else:
            self.admitted += 1
            a = self.assignment
            if a is not None and a.pace_permits is not None and self.grants > 0:
                self.grants -= 1  # a first attempt admitted spends one of the pace's grants
        return v

    def _hint_left(self, now: float) -> float:
        a = self.assignment
        return 0.0 if a is None else max(0.0, a.park_hint - (now - self.received_at))

    def _park(self, now: float, reason: str, cause: str, base: GateVerdict) -> GateVerdict:
        text = f"waiting for the fleet: {cause} on {self.target}"
        hint = self._hint_left(now)
        if hint > 0:
            text += f", ~{int(hint + 0.5)} s"
        return replace(base, action=GateAction.PARK, stop_reason=reason, reason=text)

    def _check(
        self, now: float, deadline: float | None, draw: float, resumed: bool, batch: bool, drawn: bool = False
    ) -> GateVerdict:
        self._refill(now)
        a = self.assignment
        if a is None:
            return _ADMIT
        age = now - self.received_at
        if age >= a.ttl + self.grace:
            # policyd away never stops an agent: the process's own budget
            # limits its retries (allow_retry), never its first attempts; a
            # parked call goes (the daemon that would wake it is away).
            return _ADMIT

        def stop(reason: str) -> GateVerdict:
            return GateVerdict(
                GateAction.STOP,
                stop_reason=reason,
                reason=a.reason,
                breaker=a.breaker,
                admit_fraction=a.admit_fraction,
                hold_left=max(0.0, a.hold - age),
                stop_left=max(0.0, a.stop - age),
                assignment_reason=a.reason,
            )

        if a.stop > age:
            return stop("FLEET_STOP")
        if a.breaker == OPEN:
            return self._park(now, "CIRCUIT_OPEN", "breaker open", stop("CIRCUIT_OPEN"))
        if a.breaker == HALF_OPEN:
            if self.permits > 0:
                self.permits -= 1
                return GateVerdict(probe=True)
            if not resumed and draw < a.admit_fraction:  # the fleet's share of probes
                return GateVerdict(probe=True)
            return self._park(now, "CIRCUIT_OPEN", "breaker probing", stop("CIRCUIT_OPEN"))
        own = a.batch_admit_fraction if batch else None  # the batch class's own share, when paced apart
        share = a.admit_fraction if own is None else own
        if a.pace_permits is not None and not drawn:
            if self.grants == 0:  # granted, not drawn: no grant left parks the call whatever its draw
                return replace(self._park(now, "FLEET_SHED", "paced", stop("FLEET_SHED")), ungranted=True)
        elif share < 1 and draw >= share:
            shed = replace(stop("FLEET_SHED"), admit_fraction=share, batch_share=own is not None)
            return self._park(now, "FLEET_SHED", "paced", shed)
        if a.in_flight_lease is not None and self.in_flight >= a.in_flight_lease:
            shed = replace(stop("FLEET_SHED"), at_lease=True, in_flight=self.in_flight)
            return self._park(now, "FLEET_SHED", "at its lease of requests in flight", shed)
        if a.hold > age:
            left = a.hold - age
            if deadline is not None and left > deadline:
                return stop("DEADLINE")
            return GateVerdict(GateAction.WAIT, wait=left)
        return _ADMIT


def _go_seconds(s: float) -> str:
    """Whole seconds as Go's Duration prints them ("5s", "2m0s"), as the shared texts do."""
    sec = int(s + 0.5)
    h, rest = divmod(sec, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"
