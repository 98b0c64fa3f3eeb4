"""OpenTelemetry (docs/clients.md, "Tracing and metrics"; clients/testdata/otel.json names all
of it): every decision a call makes is one ``policyd.decision`` event on the caller's current
span, the retries it sent go on that span as ``http.request.resend_count``, and the retries and
the waits are recorded through the global meter.

OpenTelemetry is optional (the ``otel`` extra: opentelemetry-api). Whether it is importable is
decided once, here: without it ``ENABLED`` is False and the clients' hooks cost that one check.
With the API but no SDK configured the current span is not recording, so no event's attributes
are built, and the global meter is a no-op. The meter's instruments are made at import: before
an SDK sets the global meter provider they are the API's proxies, which start recording once it
is set.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import _texts
from ._core import SOURCE_CLIENT
from ._fleet import Target
from ._gate import GateAction, GateVerdict
from .decision import SOURCE_FAIL_OPEN, SOURCE_FLEET_GATE, SOURCE_POLICYD, Action, Decision

try:
    from opentelemetry import metrics, trace
except ImportError:  # the otel extra is not installed: nothing is recorded
    ENABLED = False
else:
    ENABLED = True

EVENT = "policyd.decision"
ATTEMPT = "policyd.attempt"
ERROR_TYPE = "error.type"
ACTION = "policyd.action"
DELAY_MS = "policyd.delay_ms"
STOP_REASON = "policyd.stop_reason"
FLEET_REASON = "policyd.fleet.reason"
FALLBACK_TARGET = "policyd.fallback.target"
PARKED_MS = "policyd.parked_ms"
DECIDED_BY = "policyd.decided_by"
RESEND_COUNT = "http.request.resend_count"
RETRIES = "policyd.client.retries"
WAIT = "policyd.client.wait"
WAIT_KIND = "policyd.wait.kind"
PROVIDER = "policyd.provider"
MODEL = "policyd.model"

#: policyd.decided_by of each Decision.source. The stops the client makes without asking (a
#: deadline already past, its attempt guard) are its built-in policy's, fail_open: the Go client's
#: expired context reaches its fail-open policy, which stops the same call the same way.
DECIDED_BY_SOURCE = {
    SOURCE_POLICYD: "policyd",
    SOURCE_FAIL_OPEN: "fail_open",
    SOURCE_FLEET_GATE: "gate",
    SOURCE_CLIENT: "fail_open",
}

# Waits run from a jittered retry's fraction of a second to the longest park (two minutes).
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

if ENABLED:
    _meter = metrics.get_meter("policyd_client")
    _retries = _meter.create_counter(RETRIES, unit="{retry}", description="Retries the client sent.")
    _wait = _meter.create_histogram(
        WAIT,
        unit="s",
        description="Time a call waited before an attempt: policyd.wait.kind is retry (a decision's delay) "
        "or park (the fleet gate).",
        explicit_bucket_boundaries_advisory=WAIT_BUCKETS,
    )


@dataclass(frozen=True)
class Retry:
    """A retry being waited for: what it is counted with when it is sent."""

    error_type: str
    provider: str
    model: str


def _ms(seconds: float) -> int:
    return round(max(seconds, 0.0) * 1000)


def _target_attrs(provider: str, model: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    if provider:
        attrs[PROVIDER] = provider
    if model:
        attrs[MODEL] = model
    return attrs


def decision_attributes(attempt: int, d: Decision, delay: float) -> dict[str, str | int]:
    """The event's attributes: ``attempt`` is the attempt the decision follows (0: a first attempt
    the gate decided), ``delay`` the wait before the next attempt (RETRY)."""
    attrs: dict[str, str | int] = {ATTEMPT: attempt, ACTION: d.action.value}
    if d.failure_type:  # none for the gate's decisions
        attrs[ERROR_TYPE] = d.failure_type
    if d.action is Action.RETRY:
        attrs[DELAY_MS] = _ms(delay)
    elif d.stop_reason:
        attrs[STOP_REASON] = d.stop_reason
    if d.fleet is not None and d.fleet.changed and d.fleet.reason:
        attrs[FLEET_REASON] = d.fleet.reason
    if d.action is Action.FALL_BACK:
        target = "/".join(p for p in (d.fallback_provider, d.fallback_model) if p)
        if target:
            attrs[FALLBACK_TARGET] = target
    if d.parked:
        attrs[PARKED_MS] = _ms(d.waited)
    attrs[DECIDED_BY] = DECIDED_BY_SOURCE.get(d.source, d.source)
    return attrs


def decided(attempt: int, d: Decision, delay: float = 0.0) -> None:
    """A decision after failed attempt ``attempt``: one event on the caller's span."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(EVENT, decision_attributes(attempt, d, delay))


def retry_decided(attempt: int, d: Decision, delay: float, provider: str, model: str) -> Retry:
    """A RETRY after attempt ``attempt`` of a call to provider/model, waiting ``delay`` seconds:
    its event and its wait, and what the retry is counted with once sent (:func:`retry_sent`)."""
    decided(attempt, d, delay)
    _wait.record(delay, {WAIT_KIND: "retry", **_target_attrs(provider, model)})
    return Retry(d.failure_type, provider, model)


def retry_sent(attempt: int, r: Retry) -> None:
    """Attempt ``attempt`` (a retry) is sent: counted, and the call's retries so far on the
    caller's span (so that it holds the call's count when the call ends). A retry whose wait was
    cancelled, or that the gate stopped, never gets here."""
    attrs = _target_attrs(r.provider, r.model)
    if r.error_type:
        attrs[ERROR_TYPE] = r.error_type
    _retries.add(1, attrs)
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute(RESEND_COUNT, attempt - 1)


def gate_checked(attempt: int, target: Target, v: GateVerdict) -> None:
    """The gate's verdict on a first attempt (``attempt`` 0) or a retry (the attempt it follows),
    before any park: a stop or a fallback is a decision (a hold the gate waits out is none). A
    park is recorded when it ends (:func:`park_ended`)."""
    if v.action in (GateAction.STOP, GateAction.FALL_BACK):
        if attempt > 0:  # a retry the gate refused stops, as its error says
            v = dataclasses.replace(v, action=GateAction.STOP)
        decided(attempt, _texts.gate_decision(target, v))


def park_ended(attempt: int, target: Target, v: GateVerdict) -> None:
    """A park ended with verdict ``v`` (released, stopped or sent to the fallback): one decision,
    and the time parked as the wait."""
    _wait.record(v.waited, {WAIT_KIND: "park", **_target_attrs(target.provider, target.model)})
    hold = v.wait if v.action is GateAction.WAIT else 0.0  # released into a hold: the wait before sending
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(EVENT, decision_attributes(attempt, _texts.park_decision(target, v), hold))
