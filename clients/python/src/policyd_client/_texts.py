"""What the caller sees of the fleet gate (docs/clients.md, "The fleet gate"):
the sentence of a first attempt the gate did not admit, the decision and
errors it carries with the fleet's fields, a parked call's reports, and the
stop of a retry the process's own budget refused. clients/testdata/gate.json
pins the texts; the Go and TypeScript clients render the same.
"""

import dataclasses
import math

from ._fleet import Target
from ._gate import HALF_OPEN, GateAction, GateVerdict
from .decision import SOURCE_FLEET_GATE, Action, Decision, FallbackHint, FleetState
from .errors import FleetGateError, RetryCancelled, RetryStopped


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
    elif v.stop_reason == "FLEET_SHED" and v.at_lease:
        text = f"this process has {v.in_flight} requests in flight to {t}, its lease of the fleet's cap"
    elif v.stop_reason == "FLEET_SHED":
        attempts = "batch first attempts" if v.batch_share else "first attempts"
        text = f"the fleet admits {math.floor(v.admit_fraction * 100 + 0.5)}% of {attempts} to {t}, not this one"
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
