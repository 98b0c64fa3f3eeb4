"""What to do after a failed attempt, in plain Python values.

A :class:`Decision` comes from the daemon's ``NextDelay`` answer or, when the
daemon cannot be reached, from the client's :class:`~policyd_client.FailOpenPolicy`;
``source`` says which. Enum values are the proto names without their prefix
(``"RATE_LIMIT"``, ``"ATTEMPTS_EXHAUSTED"``, ``"OTHER_PROVIDER"``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import cast

from ._gen.policyd.v1 import policy_pb2 as pb

__all__ = [
    "Action",
    "Decision",
    "FallbackHint",
    "FleetState",
    "RetryEvent",
    "SOURCE_POLICYD",
    "SOURCE_FAIL_OPEN",
    "SOURCE_FLEET_GATE",
]

#: Decision.source of an answer from the daemon.
SOURCE_POLICYD = "policyd"
#: Decision.source of an answer from the built-in fail-open policy.
SOURCE_FAIL_OPEN = "fail-open"
#: Decision.source of the fleet gate's answer for a first attempt it did not send.
SOURCE_FLEET_GATE = "fleet-gate"


class Action(str, enum.Enum):
    """What the caller should do next."""

    RETRY = "RETRY"
    STOP = "STOP"
    FALL_BACK = "FALL_BACK"


@dataclass(frozen=True)
class FleetState:
    """What policyd's fleet memory knows about a failure's bucket: the
    failures of every agent on the same provider, model and key.

    ``bucket`` names it, e.g. ``"availability:openai/gpt-4o"``; ``breaker`` is
    ``"CLOSED"``, ``"OPEN"`` or ``"HALF_OPEN"``. ``hold_remaining`` is the
    shared cooldown left and ``open_remaining`` how much longer the breaker
    stays open or the key stopped, both in seconds. ``budget_tokens`` is the
    retry budget left, ``budget_exhausted`` says it is spent. ``stopped``:
    another agent's failure stopped this key. ``changed``: the fleet changed
    this decision (a longer wait, a stop or a fallback); ``reason`` says why.
    """

    bucket: str = ""
    breaker: str = ""
    hold_remaining: float = 0.0
    open_remaining: float = 0.0
    budget_tokens: float = 0.0
    budget_exhausted: bool = False
    stopped: bool = False
    changed: bool = False
    reason: str = ""

    @classmethod
    def from_proto(cls, fs: pb.FleetState) -> FleetState:
        return cls(
            bucket=fs.bucket,
            breaker=_enum_name(pb.BreakerState.Name, fs.breaker, "BREAKER_STATE_"),
            hold_remaining=fs.hold_remaining.ToTimedelta().total_seconds(),
            open_remaining=fs.open_remaining.ToTimedelta().total_seconds(),
            budget_tokens=fs.budget_tokens,
            budget_exhausted=fs.budget_exhausted,
            stopped=fs.stopped,
            changed=fs.changed,
            reason=fs.reason,
        )


@dataclass(frozen=True)
class Decision:
    """What to do after a failed attempt, and why.

    ``delay`` is in seconds. ``failure_type``, ``stop_reason`` and
    ``fallback`` are proto enum names without their prefix, "" when unset;
    the fleet's stop reasons are ``CIRCUIT_OPEN``, ``RETRY_BUDGET_EXHAUSTED``,
    ``FLEET_STOP`` and (from the fleet gate) ``FLEET_SHED``. ``source`` is
    ``policyd``, ``fail-open``, ``client`` or ``fleet-gate`` (the gate did not
    send a first attempt). ``fallback_provider`` and ``fallback_model`` name the
    FALL_BACK target from the policy's fallback chains ("" when it names
    none). ``fleet`` is what the daemon's fleet memory knew and did, None when
    the failure's bucket had no state (or the fleet is off). ``raw`` is the
    daemon's message (None for fail-open decisions).
    """

    action: Action
    delay: float = 0.0
    failure_type: str = ""
    retryable: bool = False
    rule: str = ""
    reason: str = ""
    recovery_action: str = ""
    retry_after: float | None = None
    continuation_prompt: str = ""
    attempts_left: int = 0
    stop_reason: str = ""
    stop_text: str = ""
    fallback: str = ""
    fallback_reason: str = ""
    strategy: str = ""
    journaled: bool = False
    source: str = SOURCE_POLICYD
    # Fleet memory's additions, last so that positional arguments keep their meaning.
    fallback_provider: str = ""
    fallback_model: str = ""
    fleet: FleetState | None = None
    raw: pb.Decision | None = field(default=None, repr=False, compare=False)
    #: Set on what ``on_retry`` sees of a call the fleet gate parks (attempt 0): as it parks
    #: (``stop_text`` "waiting for the fleet: …") and as it leaves (``waited``: seconds parked).
    parked: bool = False
    waited: float = 0.0

    def explain(self) -> str:
        """Return the decision in a sentence, e.g. for a log line or an error."""
        parts: list[str] = []
        if self.action is Action.STOP:
            parts.append(self.stop_text or self.reason or "not retried")
        elif self.action is Action.FALL_BACK:
            parts.append(f"fall back ({self.fallback or 'unspecified'})")
            if self.fallback_reason or self.stop_text:
                parts.append(self.fallback_reason or self.stop_text)
        else:
            parts.append(f"retry in {self.delay:.3g}s")
        return " ".join(parts) + self.explain_tail()

    def explain_tail(self) -> str:
        """Return what closes explain(): the failure type and rule, and who decided when not policyd."""
        parts: list[str] = []
        if self.failure_type:
            parts.append(f"[{self.failure_type}{', rule ' + self.rule if self.rule else ''}]")
        if self.source != SOURCE_POLICYD:
            parts.append(f"({self.source})")
        return "".join(" " + p for p in parts)

    def fallback_target(self) -> str:
        """Name where a FALL_BACK points: its kind and the chain's provider and model, if named.

        E.g. ``OTHER_PROVIDER (anthropic/claude-haiku-4-5)``.
        """
        kind = self.fallback or "UNSPECIFIED"
        named = "/".join(p for p in (self.fallback_provider, self.fallback_model) if p)
        return f"{kind} ({named})" if named else kind

    @classmethod
    def from_proto(cls, d: pb.Decision) -> Decision:
        """Return the Decision of a NextDelay answer."""
        c = d.classification
        action = {pb.ACTION_RETRY: Action.RETRY, pb.ACTION_FALL_BACK: Action.FALL_BACK}.get(d.action, Action.STOP)
        return cls(
            action=action,
            delay=d.delay.ToTimedelta().total_seconds() if d.HasField("delay") else 0.0,
            failure_type=_enum_name(pb.FailureType.Name, c.failure_type, "FAILURE_TYPE_"),
            retryable=c.retryable,
            rule=c.rule,
            reason=c.reason,
            recovery_action=c.recovery_action,
            retry_after=c.retry_after.ToTimedelta().total_seconds() if c.HasField("retry_after") else None,
            continuation_prompt=c.continuation_prompt,
            attempts_left=d.attempts_left,
            stop_reason=_enum_name(pb.StopReason.Name, d.stop_reason, "STOP_REASON_"),
            stop_text=d.stop_text,
            fallback=_enum_name(pb.FallbackKind.Name, d.fallback.kind, "FALLBACK_KIND_"),
            fallback_reason=d.fallback.reason,
            strategy=d.strategy.name,
            journaled=d.journaled,
            source=SOURCE_POLICYD,
            fallback_provider=d.fallback.provider,
            fallback_model=d.fallback.model,
            fleet=FleetState.from_proto(d.fleet) if d.HasField("fleet") else None,
            raw=d,
        )

    def to_proto(self) -> pb.Decision:
        """Return the proto form (the daemon's own message when there is one)."""
        if self.raw is not None:
            return self.raw
        d = pb.Decision(
            action={Action.RETRY: pb.ACTION_RETRY, Action.FALL_BACK: pb.ACTION_FALL_BACK}.get(
                self.action, pb.ACTION_STOP
            ),
            attempts_left=self.attempts_left,
            stop_text=self.stop_text,
        )
        d.delay.FromNanoseconds(int(self.delay * 1e9))
        d.classification.retryable = self.retryable
        d.classification.rule = self.rule
        d.classification.reason = self.reason
        d.classification.recovery_action = self.recovery_action
        if self.failure_type:
            d.classification.failure_type = cast(
                pb.FailureType, pb.FailureType.Value("FAILURE_TYPE_" + self.failure_type)
            )
        if self.stop_reason:
            d.stop_reason = cast(pb.StopReason, pb.StopReason.Value("STOP_REASON_" + self.stop_reason))
        if self.fallback:
            d.fallback.kind = cast(pb.FallbackKind, pb.FallbackKind.Value("FALLBACK_KIND_" + self.fallback))
            d.fallback.reason = self.fallback_reason
            d.fallback.provider = self.fallback_provider
            d.fallback.model = self.fallback_model
        d.strategy.name = self.strategy
        return d


def _enum_name(name_of: object, value: int, prefix: str) -> str:
    if value == 0:
        return ""
    try:
        name = name_of(value)  # type: ignore[operator]
    except ValueError:
        return str(value)
    return str(name).removeprefix(prefix)


@dataclass(frozen=True)
class FallbackHint:
    """What the caller's fallback function is handed on ACTION_FALL_BACK.

    ``kind`` is ``"LARGER_CONTEXT_MODEL"``, ``"OTHER_PROVIDER"`` or
    ``"OTHER_MODEL"``; ``error`` the last attempt's exception. ``provider``
    and ``model`` name the target from policyd's fallback chains (the policy
    file's fallbacks), "" when the policy names none.
    """

    kind: str
    reason: str
    error: BaseException
    decision: Decision
    attempts: int
    context_id: str | None = None
    provider: str = ""
    model: str = ""


@dataclass(frozen=True)
class RetryEvent:
    """One retry about to happen: handed to ``on_retry`` before the sleep."""

    attempt: int
    delay: float
    error: BaseException
    failure: pb.Failure
    decision: Decision
    context_id: str | None = None
