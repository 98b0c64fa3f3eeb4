"""The fleet gate for one target: docs/clients.md, "The fleet gate".

Pure logic over a monotonic clock in seconds, shared by the sync and asyncio
clients (through the table in ``_fleet``) and replayed against
clients/testdata/gate.json. The Go reference is internal/refgate/gate.go. Not
thread-safe: the table serialises access.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

__all__ = ["GRACE", "Fallback", "Gate", "GateAction", "GateAssignment", "GateVerdict"]

#: How long an assignment is kept past its ttl (policyd unreachable) before
#: the gate admits every first attempt, seconds.
GRACE = 10.0
# The process's own budget: gRPC A6's retry throttling (10 tokens, admit above
# half), with a refill by time so that a process that sends nothing tries again.
OWN_MAX_TOKENS = 10.0
OWN_THRESHOLD = OWN_MAX_TOKENS / 2
OWN_SUCCESS_GAIN = 0.1
OWN_REFILL = 0.1  # tokens a second

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


class GateAction(str, enum.Enum):
    """What the gate does with a first attempt."""

    ADMIT = "admit"
    WAIT = "wait"
    FALL_BACK = "fall_back"
    STOP = "stop"


@dataclass(frozen=True)
class GateVerdict:
    """The gate's answer: ``wait`` seconds before sending (WAIT), ``probe`` when
    a half-open permit was spent, ``stop_reason`` (a StopReason name without
    its prefix) and ``reason`` when not admitted, ``fallback`` for FALL_BACK."""

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


_ADMIT = GateVerdict()


class Gate:
    """One target's entry: its assignment (timed from receipt), the half-open
    permits left, the process's own budget, and the first attempts admitted
    and shed."""

    __slots__ = ("assignment", "received_at", "permits", "tokens", "tokens_at", "grace", "admitted", "shed")

    def __init__(self, grace: float = GRACE) -> None:
        self.assignment: GateAssignment | None = None
        self.received_at = 0.0
        self.permits = 0
        self.tokens = OWN_MAX_TOKENS
        self.tokens_at: float | None = None
        self.grace = grace
        self.admitted = 0
        self.shed = 0

    def assign(self, now: float, a: GateAssignment | None) -> None:
        """Receive an assignment (None: abandon), replacing the previous one."""
        self.assignment, self.received_at = a, now
        if a is not None:
            self.permits = a.probe_permits

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

    def check(self, now: float, deadline: float | None, can_fall_back: bool, draw: float) -> GateVerdict:
        """Gate a first attempt. ``deadline``: seconds left before the caller's
        deadline (None: none); ``draw``: uniform in [0, 1)."""
        v = self._check(now, deadline, draw)
        if v.action is GateAction.STOP:
            self.shed += 1
            a = self.assignment
            if can_fall_back and a is not None and a.fallback is not None:
                return replace(v, action=GateAction.FALL_BACK, fallback=a.fallback)
        else:
            self.admitted += 1
        return v

    def _check(self, now: float, deadline: float | None, draw: float) -> GateVerdict:
        self._refill(now)
        a = self.assignment
        if a is None:
            return _ADMIT
        age = now - self.received_at
        if age >= a.ttl + self.grace:
            # policyd away never stops an agent: the process's own budget
            # limits its retries (allow_retry), never its first attempts.
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
            )

        if a.stop > age:
            return stop("FLEET_STOP")
        if a.breaker == OPEN:
            return stop("CIRCUIT_OPEN")
        if a.breaker == HALF_OPEN:
            if self.permits > 0:
                self.permits -= 1
                return GateVerdict(probe=True)
            if draw < a.admit_fraction:  # the fleet's share of probes
                return GateVerdict(probe=True)
            return stop("CIRCUIT_OPEN")
        if a.admit_fraction < 1 and draw >= a.admit_fraction:
            return stop("FLEET_SHED")
        if a.hold > age:
            left = a.hold - age
            if deadline is not None and left > deadline:
                return stop("DEADLINE")
            return GateVerdict(GateAction.WAIT, wait=left)
        return _ADMIT
