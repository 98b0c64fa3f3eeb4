"""The fleet gate's table, reports and call path on an injected clock, random source and sleep,
with no stream (docs/clients.md, "The fleet gate"); test_fleet_gate.py runs them against policyd."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Iterator

import pytest
from harness import closed_port_addr

from policyd_client import (
    SOURCE_FLEET_GATE,
    Action,
    AsyncClient,
    Client,
    FailOpenPolicy,
    FallbackHint,
    FleetGateError,
    RetryCancelled,
    RetryEvent,
    RetryStopped,
    _texts,
    policy_pb2,
)
from policyd_client._fleet import (
    MAX_CALL_INPUT_TOKENS,
    MAX_COUNT,
    MAX_TARGETS,
    FleetTable,
    GateCall,
    Target,
    assignment_of,
    gate_call,
    rate_limit_headers,
    target_of,
)
from policyd_client._gate import GateAction
from policyd_client._gen.policyd.v1 import fleet_pb2 as fpb
from policyd_client._stream import Backoff, report_interval

T = Target("openai", "gpt-4o", "k1")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def assign(table: FleetTable, target: Target = T, **fields: object) -> None:
    a = fpb.Assignment(target=fpb.BucketTarget(provider=target.provider, model=target.model, key_id=target.key_id))
    a.ttl.FromSeconds(15)
    a.admit_fraction = 1.0
    for k, v in fields.items():
        if k in ("hold", "stop", "ttl", "park_hint"):
            getattr(a, k).FromNanoseconds(int(float(v) * 1e9))  # type: ignore[arg-type]
        elif k == "fallback":
            a.fallback.CopyFrom(v)  # type: ignore[arg-type]
        else:
            setattr(a, k, v)
    table.apply(fpb.CoordinateResponse(assignments=[a]))


def usage_of(msgs: list[fpb.CoordinateRequest]) -> dict[Target, fpb.BucketUsage]:
    return {Target(u.target.provider, u.target.model, u.target.key_id): u for m in msgs for u in m.usage}


def seconds(d: object) -> float:
    return d.ToNanoseconds() / 1e9  # type: ignore[attr-defined, no-any-return]


def test_a_report_carries_each_active_targets_counts_since_its_last_report() -> None:
    clock = Clock()
    table = FleetTable(clock)
    assert table.check(T, None, False, 0.5).action is GateAction.ADMIT
    table.record(T, True)
    table.check(T, None, False, 0.5)
    table.record(T, False)
    table.failed_locally(T)
    table.retried(T)
    table.record(T, True)
    table.observe(T, {"x-ratelimit-limit-requests": "600", "server": "x"})
    clock.now += 0.8
    (msg,) = table.reports()
    assert not msg.client_id
    u = usage_of([msg])[T]
    assert (u.admitted, u.shed, u.succeeded, u.failed, u.retries) == (2, 0, 2, 1, 1)
    assert dict(u.rate_limit_headers) == {"x-ratelimit-limit-requests": "600"}
    assert seconds(u.elapsed) == pytest.approx(0.8)

    assert table.reports() == []  # nothing since
    clock.now += 2
    table.check(T, None, False, 0.5)
    u = usage_of(table.reports())[T]
    assert (u.admitted, u.succeeded, len(u.rate_limit_headers)) == (1, 0, 0)  # headers go once
    assert seconds(u.elapsed) == pytest.approx(2)


def test_elapsed_is_more_than_0_and_at_most_10_minutes() -> None:
    clock = Clock()
    table = FleetTable(clock)
    table.check(T, None, False, 0.5)
    assert seconds(usage_of(table.reports())[T].elapsed) == pytest.approx(0.001)
    clock.now += 3600
    table.check(T, None, False, 0.5)
    assert seconds(usage_of(table.reports())[T].elapsed) == 600


def test_reports_carry_at_most_256_targets_a_message_and_the_table_at_most_1024() -> None:
    table = FleetTable(Clock())
    for i in range(300):
        table.check(Target("openai", f"m{i}", ""), None, False, 0.5)
    assert [len(m.usage) for m in table.reports()] == [256, 44]
    for i in range(300, MAX_TARGETS + 10):
        assert table.check(Target("openai", f"m{i}", ""), None, False, 0.5).action is GateAction.ADMIT
    assert sum(len(m.usage) for m in table.reports()) == MAX_TARGETS - 300


def test_assignments_gate_and_abandon_forgets() -> None:
    clock = Clock()
    table = FleetTable(clock)
    table.check(T, None, False, 0.5)
    table.reports()
    assign(table, breaker=policy_pb2.BREAKER_STATE_OPEN, reason="breaker open: 24 failures")
    v = table.check(T, None, False, 0.5, 0)  # parking off
    assert (v.action, v.stop_reason, v.reason) == (GateAction.STOP, "CIRCUIT_OPEN", "breaker open: 24 failures")
    assert usage_of(table.reports())[T].shed == 1

    # Abandoned with nothing to report: gone, and not reported until a call uses it again.
    table.apply(fpb.CoordinateResponse(assignments=[fpb.Assignment(target=fpb.BucketTarget(provider="openai",
                model="gpt-4o", key_id="k1"), abandon=True)]))  # fmt: skip
    assert table.assignment(T) is None
    table.resubscribe()
    assert table.reports() == []
    assert table.check(T, None, False, 0.5).action is GateAction.ADMIT
    assert usage_of(table.reports())[T].admitted == 1

    # Abandoned with counts pending: the assignment goes, the counts are still reported.
    assign(table, breaker=policy_pb2.BREAKER_STATE_OPEN)
    table.record(T, True)
    table.apply(fpb.CoordinateResponse(assignments=[fpb.Assignment(target=fpb.BucketTarget(provider="openai",
                model="gpt-4o", key_id="k1"), abandon=True)]))  # fmt: skip
    assert table.assignment(T) is None
    assert usage_of(table.reports())[T].succeeded == 1


def test_a_new_stream_resubscribes_the_targets_with_an_assignment() -> None:
    table = FleetTable(Clock())
    other = Target("openai", "other", "")
    table.check(T, None, False, 0.5)
    table.check(other, None, False, 0.5)
    assign(table)
    table.reports()
    assert table.reports() == []
    table.resubscribe()
    u = usage_of(table.reports())
    assert list(u) == [T] and u[T].admitted == 0


def test_a_first_call_subscribes_its_target_and_is_released_by_the_assignment_or_a_break() -> None:
    table = FleetTable(Clock())
    first, other = threading.Event(), threading.Event()
    assert table.subscribe(T, first)
    assert not table.subscribe(T, threading.Event())  # known already: no second wait
    u = usage_of(table.reports())
    assert list(u) == [T] and u[T].admitted == 0  # reported at once, before any count
    assign(table)
    assert first.is_set()
    o = Target("openai", "other", "")
    assert table.subscribe(o, other)
    table.release()  # the stream broke
    assert other.is_set()


def test_a_success_while_half_open_is_reported_at_once() -> None:
    table = FleetTable(Clock())
    table.check(T, None, False, 0.5)
    assert not table.record(T, True)
    assign(table, breaker=policy_pb2.BREAKER_STATE_HALF_OPEN, probe_permits=1)
    assert table.check(T, None, False, 0.5).probe
    assert table.record(T, True)
    assert not table.record(T, False)


def test_a_disabled_table_admits_and_reports_nothing() -> None:
    table = FleetTable(Clock())
    table.check(T, None, False, 0.5)
    assign(table, breaker=policy_pb2.BREAKER_STATE_OPEN)
    table.disable()
    assert table.disabled
    assert table.check(T, None, False, 0.5).action is GateAction.ADMIT
    table.record(T, True)
    assert table.reports() == []


def test_assignment_conversion() -> None:
    a = fpb.Assignment(breaker=policy_pb2.BREAKER_STATE_HALF_OPEN, admit_fraction=math.nan, probe_permits=2)
    a.ttl.FromMilliseconds(1500)
    a.hold.FromMilliseconds(250)
    a.stop.FromSeconds(-3)
    g = assignment_of(a)
    assert (g.ttl, g.hold, g.stop, g.breaker, g.admit_fraction, g.probe_permits) == (1.5, 0.25, 0, "HALF_OPEN", 1, 2)
    assert g.fallback is None
    a = fpb.Assignment(admit_fraction=7, breaker=policy_pb2.BREAKER_STATE_UNSPECIFIED)
    a.fallback.CopyFrom(policy_pb2.Fallback(kind=policy_pb2.FALLBACK_KIND_OTHER_PROVIDER, provider="anthropic",
                                            model="claude-sonnet-4-5", reason="why"))  # fmt: skip
    g = assignment_of(a)
    assert (g.breaker, g.admit_fraction) == ("CLOSED", 1)
    assert g.fallback is not None
    assert (g.fallback.kind, g.fallback.provider, g.fallback.model, g.fallback.reason) == (
        "OTHER_PROVIDER", "anthropic", "claude-sonnet-4-5", "why"
    )  # fmt: skip
    assert g.batch_admit_fraction is None  # unset: admit_fraction for both classes
    for given, want in ((0.0, 0.0), (0.25, 0.25), (3.0, 1.0), (math.nan, None)):
        g = assignment_of(fpb.Assignment(admit_fraction=0.5, batch_admit_fraction=given))
        assert g.batch_admit_fraction == want, given
    assert (g.in_flight_lease, g.park_hint) == (None, 0)  # unset: no cap; no hint
    a = fpb.Assignment(in_flight_lease=0)
    a.park_hint.FromMilliseconds(4500)
    g = assignment_of(a)
    assert (g.in_flight_lease, g.park_hint) == (0, 4.5)  # 0: no request now
    assert assignment_of(fpb.Assignment(in_flight_lease=7)).in_flight_lease == 7
    assert g.pace_permits is None  # unset: a pace draws
    assert assignment_of(fpb.Assignment(pace_permits=0)).pace_permits == 0  # set: no grant yet
    assert assignment_of(fpb.Assignment(pace_permits=12)).pace_permits == 12


def test_rate_limit_headers_keeps_only_rate_limits_within_the_daemons_limits() -> None:
    got = rate_limit_headers(
        {
            "X-RateLimit-Limit-Requests": " 600 ",
            "anthropic-ratelimit-requests-remaining": "10",
            "x-ratelimit-": "no name",
            "ratelimit-limit": "1",
            "retry-after": "5",
            "x-ratelimit-long": "9" * 65,
            "x-ratelimit-max": "9" * 64,
        }
    )
    assert got == {
        "x-ratelimit-limit-requests": "600",
        "anthropic-ratelimit-requests-remaining": "10",
        "x-ratelimit-max": "9" * 64,
    }
    assert len(rate_limit_headers({f"x-ratelimit-{i}": "1" for i in range(40)})) == 16
    assert rate_limit_headers([("x-ratelimit-a", "1"), ("x-ratelimit-a", "2")]) == {"x-ratelimit-a": "1"}
    assert rate_limit_headers([(b"x-ratelimit-b", b"2")]) == {"x-ratelimit-b": "2"}
    for bad in (None, 3, "x-ratelimit-a", [("x-ratelimit-a",)], [object()]):
        assert rate_limit_headers(bad) == {}
    assert rate_limit_headers({"x-ratelimit-\udcff": "\udcff"}) == {"x-ratelimit-?": "?"}


def test_targets_are_what_the_daemon_accepts() -> None:
    assert target_of("", "gpt-4o", "k") is None
    t = target_of("openai\udcff", "m" * 10_000, "k" * 500)
    assert t is not None
    assert t.provider == "openai?" and len(t.model) == 8 << 10 and len(t.key_id) == 128
    assert str(Target("openai", "gpt-4o", "k1")) == "openai/gpt-4o@k1"


def test_backoff_doubles_from_1s_to_30s_with_full_jitter() -> None:
    b = Backoff(lambda: 1.0)
    assert [b.next() for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    b.reset()
    assert b.next() == 1
    assert Backoff(lambda: 0.25).next() == 0.25
    assert Backoff(lambda: math.nan).next() == 0.5
    assert report_interval(lambda: 0.0) == pytest.approx(0.9)
    assert report_interval(lambda: 1.0) == pytest.approx(1.1)


# ---- the call path


class Env:
    """A Client on an injected clock, random draw and sleep, with its stream closed (nothing is sent)."""

    def __init__(self, **options: object) -> None:
        self.clock = Clock()
        self.draw = 0.5
        self.slept: list[float] = []
        self.cancel = threading.Event()
        self.sent = 0
        fail_open = FailOpenPolicy(random=lambda: self.draw)

        def sleep(s: float) -> None:
            self.slept.append(s)
            self.clock.now += s

        self.client = Client(closed_port_addr(), park_limit=0, timeout=0.2, clock=self.clock, sleep=sleep, fail_open=fail_open,
                             **options)  # type: ignore[arg-type]  # fmt: skip
        assert self.client._stream is not None and self.client._fleet is not None
        self.client._stream.close()
        self.table = self.client._fleet

    def op(self) -> str:
        self.sent += 1
        return "sent"

    def call(self, **kw: object) -> str:
        return self.client.call(self.op, provider="openai", model="gpt-4o", key_id="k1", **kw)  # type: ignore[arg-type]


@pytest.fixture
def env() -> Iterator[Env]:
    e = Env()
    yield e
    e.client.close()


def test_a_first_attempt_parks_behind_an_open_breaker_until_it_closes_or_is_cancelled() -> None:
    events: list[RetryEvent] = []
    e = Env(on_retry=events.append)
    e.client.park_limit = None  # the default: parking on (120 s without a deadline)
    assign(e.table, breaker=policy_pb2.BREAKER_STATE_OPEN, reason="breaker open: 3 failures")
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(e.call()))
    t.start()
    deadline = time.monotonic() + 5
    while not events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert events and events[0].attempt == 0 and events[0].decision.parked
    assert events[0].decision.stop_text == "waiting for the fleet: breaker open on openai/gpt-4o@k1"
    assert e.sent == 0, "no attempt while parked"
    assign(e.table, breaker=policy_pb2.BREAKER_STATE_CLOSED)
    t.join(5)
    assert got == ["sent"] and e.sent == 1
    assert len(events) == 2 and events[1].decision.parked and events[1].decision.action is Action.RETRY

    assign(e.table, breaker=policy_pb2.BREAKER_STATE_OPEN)
    errors: list[BaseException] = []

    def cancelled() -> None:
        try:
            e.call(cancel=e.cancel)
        except RetryCancelled as err:
            errors.append(err)

    t = threading.Thread(target=cancelled)
    t.start()
    while len(events) < 3 and time.monotonic() < deadline + 5:
        time.sleep(0.01)
    e.cancel.set()
    t.join(5)
    assert len(errors) == 1 and e.sent == 1
    e.client.close()


def test_a_retry_meets_the_gate_too() -> None:
    events: list[RetryEvent] = []
    e = Env(on_retry=events.append)
    e.draw = 0.0  # fail-open delays of 0

    def flaky() -> str:
        e.sent += 1
        if e.sent == 1:
            assign(e.table, breaker=policy_pb2.BREAKER_STATE_OPEN, reason="breaker open")  # while it ran
            raise ConnectionResetError()
        return "sent"

    # Parking off: the retry the fail-open policy allowed stops at the open breaker, not sent.
    with pytest.raises(RetryStopped) as info:
        e.client.call(flaky, provider="openai", model="gpt-4o", key_id="k1", operation="chat")
    assert e.sent == 1 and info.value.attempts == 1
    assert info.value.decision is not None and info.value.decision.stop_reason == "CIRCUIT_OPEN"

    # Parking on: it waits for the breaker to close, then goes.
    e.client.park_limit = None
    e.sent = 0
    assign(e.table, breaker=policy_pb2.BREAKER_STATE_CLOSED)
    got: list[str] = []
    t = threading.Thread(
        target=lambda: got.append(
            e.client.call(flaky, provider="openai", model="gpt-4o", key_id="k1", operation="chat")
        )
    )
    t.start()
    deadline = time.monotonic() + 5
    while not any(ev.decision.parked for ev in events) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert e.sent == 1, "the retry is parked, not sent"
    assign(e.table, breaker=policy_pb2.BREAKER_STATE_CLOSED)
    t.join(5)
    assert got == ["sent"] and e.sent == 2
    e.client.close()


def test_a_call_waits_out_the_rest_of_a_hold_then_sends(env: Env) -> None:
    assign(env.table, hold=5)
    env.clock.now += 1
    assert env.call() == "sent"
    assert env.slept == [pytest.approx(4)] and env.sent == 1


def test_a_hold_past_the_deadline_stops_at_once(env: Env) -> None:
    assign(env.table, hold=5, reason="retry-after 5s")
    with pytest.raises(RetryStopped) as info:
        env.call(deadline=3)
    assert env.slept == [] and env.sent == 0
    d = info.value.decision
    assert d is not None and d.stop_reason == "DEADLINE" and d.source == SOURCE_FLEET_GATE
    assert "retry-after 5s" in str(info.value)


def test_admit_fraction_sheds_by_the_draw(env: Env) -> None:
    assign(env.table, admit_fraction=0.5)
    env.draw = 0.7
    with pytest.raises(RetryStopped) as info:
        env.call()
    assert info.value.decision is not None and info.value.decision.stop_reason == "FLEET_SHED"
    env.draw = 0.2
    assert env.call() == "sent"


def test_a_fleet_stop_falls_back_or_stops(env: Env) -> None:
    assign(env.table, stop=60, reason="invalid API key", fallback=policy_pb2.Fallback(
        kind=policy_pb2.FALLBACK_KIND_OTHER_PROVIDER, provider="anthropic", model="claude-sonnet-4-5"))  # fmt: skip
    hints: list[FallbackHint] = []
    got = env.client.call(env.op, provider="openai", model="gpt-4o", key_id="k1",
                          fallback=lambda h: hints.append(h) or "claude")  # type: ignore[func-returns-value]  # fmt: skip
    assert got == "claude" and env.sent == 0
    (h,) = hints
    assert (h.kind, h.provider, h.model, h.attempts) == ("OTHER_PROVIDER", "anthropic", "claude-sonnet-4-5", 0)
    assert h.decision.stop_reason == "FLEET_STOP"
    assert isinstance(h.error, FleetGateError) and h.error.stop_reason == "FLEET_STOP"
    with pytest.raises(RetryStopped) as info:
        env.call()
    assert "the fleet stopped calls to openai/gpt-4o@k1 for another 60.0 s: invalid API key" in str(info.value)
    env.clock.now += 60
    assert env.call() == "sent"


def test_cancel_during_a_hold_raises_retry_cancelled() -> None:
    e = Env()
    e.client._sleep = lambda s: e.cancel.set()
    assign(e.table, hold=5)
    with pytest.raises(RetryCancelled) as info:
        e.call(cancel=e.cancel)
    assert e.sent == 0 and info.value.attempts == 0
    e.client.close()


def test_a_probes_success_is_flushed(env: Env) -> None:
    flushed: list[bool] = []
    assert env.client._stream is not None
    env.client._stream.flush = lambda: flushed.append(True)  # type: ignore[method-assign]
    assign(env.table, breaker=policy_pb2.BREAKER_STATE_HALF_OPEN, admit_fraction=0.1)
    env.draw = 0.05
    assert env.call() == "sent" and flushed == [True]
    env.draw = 0.5
    with pytest.raises(RetryStopped) as info:
        env.call()
    assert info.value.decision is not None and info.value.decision.stop_reason == "CIRCUIT_OPEN"
    assert flushed == [True]


def test_calls_without_a_provider_are_not_gated(env: Env) -> None:
    assign(env.table, breaker=policy_pb2.BREAKER_STATE_OPEN)
    assert env.client.call(env.op, model="gpt-4o", key_id="k1") == "sent"
    assert env.table.reports() == []


def test_attempts_are_counted_for_the_report() -> None:
    e = Env()
    e.draw = 0.0  # fail-open delays of 0
    outcomes = iter([ConnectionResetError(), ConnectionResetError(), None])

    def flaky() -> str:
        e.sent += 1
        err = next(outcomes)
        if err is not None:
            raise err
        return "ok"

    # policyd is not there: the fail-open policy decides both failures.
    assert e.client.call(flaky, provider="openai", model="gpt-4o", key_id="k1", operation="chat") == "ok"
    u = usage_of(e.table.reports())[T]
    assert (u.admitted, u.shed, u.succeeded, u.failed, u.retries) == (1, 0, 1, 2, 2)
    e.client.close()


def test_policyd_away_limits_retries_never_first_attempts() -> None:
    e = Env(fleet_grace=2.0)
    e.draw = 0.0  # fail-open delays of 0
    assign(e.table, ttl=1, breaker=policy_pb2.BREAKER_STATE_OPEN)
    for _ in range(6):
        e.table.record(T, False)  # 10 - 6 = 4 tokens
    with pytest.raises(RetryStopped):
        e.call()  # within ttl + grace: the open breaker stops
    e.clock.now += 3.1  # past it: every first attempt goes, whatever the budget
    assert e.call() == "sent"

    def failing() -> str:
        e.sent += 1
        raise ConnectionResetError()

    with pytest.raises(RetryStopped) as info:
        e.client.call(failing, provider="openai", model="gpt-4o", key_id="k1", operation="chat")
    assert e.sent == 2  # its first attempt was sent, its retry was not: the budget (4.3 tokens) is spent
    d = info.value.decision
    assert d is not None and d.stop_reason == "RETRY_BUDGET_EXHAUSTED"
    assert d.fleet is not None and d.fleet.budget_exhausted
    assert "own retry budget for openai/gpt-4o@k1 is spent" in str(info.value)
    e.client.close()


def test_fleet_grace_is_checked() -> None:
    for bad in (-1, math.inf, math.nan, "10", True):
        with pytest.raises(ValueError, match="fleet_grace"):
            Client(closed_port_addr(), fleet_grace=bad)  # type: ignore[arg-type]


def test_async_hold_and_stop() -> None:
    clock = Clock()
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        clock.now += s

    async def op() -> str:
        return "sent"

    async def main() -> None:
        async with AsyncClient(closed_port_addr(), park_limit=0, clock=clock, sleep=sleep, fleet_grace=0) as c:
            assert c._fleet is not None
            table = c._fleet
            assign(table, hold=2)
            clock.now += 0.5
            assert await c.call(op, provider="openai", model="gpt-4o", key_id="k1") == "sent"
            assert slept == [1.5]
            assign(table, breaker=policy_pb2.BREAKER_STATE_OPEN, ttl=1)
            with pytest.raises(RetryStopped) as info:
                await c.call(op, provider="openai", model="gpt-4o", key_id="k1")
            assert info.value.decision is not None and info.value.decision.stop_reason == "CIRCUIT_OPEN"
            clock.now += 1  # ttl + grace (0) over: policyd away never stops a first attempt
            assert await c.call(op, provider="openai", model="gpt-4o", key_id="k1") == "sent"

    asyncio.run(main())


def test_breaker_counted_types() -> None:
    """Only the failures the daemon's breakers count are reported as decided locally."""
    from policyd_client import _fleet

    assert _fleet.BREAKER_COUNTED == {"OVERLOADED", "SERVER_ERROR", "TIMEOUT", "CONNECTION_ERROR"}


# ---- priority classes, input tokens and calls in flight


def test_batch_calls_draw_against_the_batch_share_and_are_counted_apart(env: Env) -> None:
    assign(env.table, admit_fraction=0.8, batch_admit_fraction=0.2, reason="pacing")
    env.draw = 0.5
    assert env.call() == "sent"  # interactive: 0.5 < 0.8
    with pytest.raises(RetryStopped) as info:
        env.call(priority="batch")  # batch: 0.5 >= 0.2
    d = info.value.decision
    assert d is not None and d.stop_reason == "FLEET_SHED"
    assert d.stop_text == "the fleet admits 20% of batch first attempts to openai/gpt-4o@k1, not this one: pacing"
    env.draw = 0.1
    assert env.call(priority="batch") == "sent"
    u = usage_of(env.table.reports())[T]
    assert (u.admitted, u.shed, u.batch_first_attempts) == (2, 1, 2)  # batch: counted at its first check


def test_without_a_batch_share_both_classes_draw_against_admit_fraction(env: Env) -> None:
    assign(env.table, admit_fraction=0.5)
    env.draw = 0.4
    assert env.call(priority="batch") == "sent"
    env.draw = 0.6
    with pytest.raises(RetryStopped) as info:
        env.call(priority="batch")
    assert info.value.decision is not None
    assert info.value.decision.stop_text.startswith("the fleet admits 50% of first attempts")


def test_priority_and_input_tokens_are_checked(env: Env) -> None:
    with pytest.raises(ValueError, match="priority must be 'interactive' .* or 'batch', not 'urgent'"):
        env.call(priority="urgent")
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="input_tokens must be a whole number of tokens >= 0"):
            env.call(input_tokens=bad)
    assert env.sent == 0


def test_input_tokens_of_first_attempts_and_retries_are_reported() -> None:
    e = Env()
    e.draw = 0.0  # fail-open delays of 0
    outcomes = iter([ConnectionResetError(), None])

    def flaky() -> str:
        err = next(outcomes)
        if err is not None:
            raise err
        return "ok"

    got = e.client.call(flaky, provider="openai", model="gpt-4o", key_id="k1", operation="chat", input_tokens=300)
    assert got == "ok"
    assign(e.table, breaker=policy_pb2.BREAKER_STATE_OPEN)
    with pytest.raises(RetryStopped):  # a shed first attempt's tokens count too
        e.call(input_tokens=40)
    u = usage_of(e.table.reports())[T]
    assert (u.first_attempt_input_tokens, u.retry_input_tokens) == (340, 300)
    e.client.close()


def test_a_reports_tokens_are_at_most_the_limit_for_each_call_it_counts() -> None:
    clock = Clock()
    table = FleetTable(clock)
    big = GateCall(input_tokens=MAX_CALL_INPUT_TOKENS)
    for _ in range(MAX_COUNT + 1):
        table.check(T, None, False, 0.5, None, big)
    clock.now += 2
    u = usage_of(table.reports())[T]  # a report's counts are at most 1,000: the tokens of the rest wait
    assert (u.admitted, u.first_attempt_input_tokens) == (MAX_COUNT, MAX_COUNT * MAX_CALL_INPUT_TOKENS)
    u = usage_of(table.reports())[T]
    assert (u.admitted, u.first_attempt_input_tokens) == (1, MAX_CALL_INPUT_TOKENS)
    assert gate_call("interactive", 10**9).input_tokens == MAX_CALL_INPUT_TOKENS


def test_a_parked_first_attempt_is_reported_parked_new_then_released() -> None:
    clock = Clock()
    table = FleetTable(clock)
    assign(table, breaker=policy_pb2.BREAKER_STATE_OPEN)
    table.reports()
    call = GateCall(batch=True, input_tokens=MAX_CALL_INPUT_TOKENS)
    v = table.check(T, None, False, 0.5, None, call)
    assert v.action is GateAction.PARK and v.parked is not None
    u = usage_of(table.reports())[T]
    # Counted at its first check: its tokens and class go with parked_new, as the daemon bounds them.
    assert (u.admitted, u.shed, u.parked, u.parked_new, u.released) == (0, 0, 1, 1, 0)
    assert (u.batch_first_attempts, u.first_attempt_input_tokens) == (1, MAX_CALL_INPUT_TOKENS)
    clock.now += 1
    assert table.resume(T, v.parked, 0.5).action is GateAction.PARK
    u = usage_of(table.reports())[T]  # still parked: reported each interval, nothing counted again
    assert (u.admitted, u.parked, u.parked_new, u.batch_first_attempts, u.first_attempt_input_tokens) == (0, 1, 0, 0, 0)
    assign(table)
    assert table.resume(T, v.parked, 0.5).action is GateAction.ADMIT
    u = usage_of(table.reports())[T]
    assert (u.admitted, u.parked, u.parked_new, u.released, u.batch_first_attempts) == (1, 0, 0, 1, 0)
    assert table.reports() == []

    # A parked call its caller cancels: shed, out of the park, its class not counted again.
    assign(table, breaker=policy_pb2.BREAKER_STATE_OPEN)
    v = table.check(T, None, False, 0.5, None, GateCall(batch=True))
    assert v.parked is not None
    table.reports()
    table.park_cancelled(T, v.parked)
    u = usage_of(table.reports())[T]
    assert (u.admitted, u.shed, u.parked, u.parked_new, u.released, u.batch_first_attempts) == (0, 1, 0, 0, 0, 0)

    # A parked retry is in the gauge, never in the first attempts' counts.
    r = table.check_retry(T, None)
    assert r.action is GateAction.PARK and r.parked is not None
    u = usage_of(table.reports())[T]
    assert (u.parked, u.parked_new, u.shed) == (1, 0, 0)
    table.park_cancelled(T, r.parked)
    u = usage_of(table.reports())[T]
    assert (u.parked, u.shed) == (0, 0)


def test_first_attempts_sent_to_the_fallback_are_shed_and_fell_back_at_most_shed_a_report() -> None:
    clock = Clock()
    table = FleetTable(clock)
    fallback = policy_pb2.Fallback(kind=policy_pb2.FALLBACK_KIND_OTHER_MODEL, provider="openai", model="gpt-4o-mini")
    assign(table, breaker=policy_pb2.BREAKER_STATE_OPEN, fallback=fallback)
    table.reports()
    assert table.check(T, None, True, 0.5, None).action is GateAction.FALL_BACK
    assert table.check(T, None, False, 0.5, 0).action is GateAction.STOP  # no fallback for the caller, parking off
    clock.now += 1
    u = usage_of(table.reports())[T]
    assert (u.admitted, u.shed, u.fell_back) == (0, 2, 1)
    # 600 admitted, then 900 to the fallback: the report carries 1,000 first attempts, fell_back
    # within its shed; the rest waits for the next report.
    assign(table)
    for _ in range(600):
        table.check(T, None, False, 0.5, None)
    assign(table, breaker=policy_pb2.BREAKER_STATE_OPEN, fallback=fallback)
    for _ in range(900):
        table.check(T, None, True, 0.5, None)
    clock.now += 1
    u = usage_of(table.reports())[T]
    assert (u.admitted, u.shed, u.fell_back) == (600, MAX_COUNT - 600, MAX_COUNT - 600)
    u = usage_of(table.reports())[T]
    assert (u.admitted, u.shed, u.fell_back) == (0, 500, 500)


def test_a_reports_class_and_released_counts_are_within_the_first_attempts_it_carries() -> None:
    clock = Clock()
    table = FleetTable(clock)
    assign(table, breaker=policy_pb2.BREAKER_STATE_OPEN)
    parked = []
    for _ in range(MAX_COUNT + 5):
        v = table.check(T, None, False, 0.5, None, GateCall(batch=True))
        assert v.parked is not None
        parked.append(v.parked)
    clock.now += 2
    u = usage_of(table.reports())[T]
    assert (u.parked, u.parked_new, u.batch_first_attempts) == (MAX_COUNT + 5, MAX_COUNT, MAX_COUNT)
    assign(table)
    for p in parked[:3]:
        table.resume(T, p, 0.5)
    u = usage_of(table.reports())[T]  # the rest of the earlier counts, and the 3 released
    assert (u.admitted, u.released, u.parked_new, u.batch_first_attempts) == (3, 3, 5, 5)


def test_in_flight_is_a_gauge_whose_change_is_reported() -> None:
    clock = Clock()
    table = FleetTable(clock)
    seen: list[int] = []

    def op() -> str:
        seen.append(usage_of(table.reports())[T].in_flight)
        return "done"

    assert table.in_flight(T, op)() == "done"
    assert seen == [1]
    u = usage_of(table.reports())[T]
    assert u.in_flight == 0  # back to 0: a change, so reported
    assert table.reports() == []  # no change since

    async def aop() -> str:
        seen.append(usage_of(table.reports())[T].in_flight)
        raise ConnectionResetError

    with pytest.raises(ConnectionResetError):
        asyncio.run(table.in_flight_async(T, aop)())
    assert seen == [1, 1] and usage_of(table.reports())[T].in_flight == 0


def test_a_calls_attempt_is_in_flight_while_it_runs(env: Env) -> None:
    def op() -> int:
        (u,) = [u for m in env.table.reports() for u in m.usage]
        return u.in_flight

    assert env.client.call(op, provider="openai", model="gpt-4o", key_id="k1") == 1
    (u,) = [u for m in env.table.reports() for u in m.usage]
    assert u.in_flight == 0


# ---- leases and park hints


def test_a_first_attempt_parks_at_its_lease_and_a_finished_request_wakes_it() -> None:
    table = FleetTable(Clock())
    assign(table, in_flight_lease=1, reason="a lease of 1 of the 4 requests in flight the target allows")
    table.flight(T, 1)
    v = table.check(T, None, False, 0.5)
    assert (v.action, v.stop_reason) == (GateAction.PARK, "FLEET_SHED")
    assert v.reason == "waiting for the fleet: at its lease of requests in flight on openai/gpt-4o@k1"
    woken = threading.Event()
    table.park_wait(T, woken)
    table.flight(T, 1)
    assert not woken.is_set()
    table.flight(T, -1)  # a request ends: the parked calls check again
    assert woken.is_set()
    assert v.parked is not None and table.resume(T, v.parked, 0.5).action is GateAction.PARK  # still at it
    table.flight(T, -1)
    assert table.resume(T, v.parked, 0.5).action is GateAction.ADMIT

    # Parking off: the call stops at once, with the count in flight and the assignment's reason.
    table.flight(T, 1)
    v = table.check(T, None, False, 0.5, 0)
    assert (v.action, v.stop_reason) == (GateAction.STOP, "FLEET_SHED")
    d = _texts.gate_decision(T, v)
    assert d.stop_text == (
        "this process has 1 requests in flight to openai/gpt-4o@k1, its lease of the fleet's cap: "
        "a lease of 1 of the 4 requests in flight the target allows"
    )
    # A retry is not held by the lease: the daemon's budget paces retries.
    assert table.check_retry(T, None).action is GateAction.ADMIT


def test_without_a_lease_requests_in_flight_neither_park_nor_wake() -> None:
    table = FleetTable(Clock())
    assign(table)
    for _ in range(500):
        table.flight(T, 1)
    assert table.check(T, None, False, 0.5).action is GateAction.ADMIT
    woken = threading.Event()
    table.park_wait(T, woken)
    table.flight(T, -1)
    assert not woken.is_set()  # nothing parks at a lease: nothing to wake


def test_a_call_parked_at_its_lease_goes_when_the_request_in_flight_ends() -> None:
    events: list[RetryEvent] = []
    e = Env(on_retry=events.append)
    e.client.park_limit = None
    assign(e.table, in_flight_lease=1)
    running, finish = threading.Event(), threading.Event()

    def long() -> str:
        running.set()
        finish.wait(10)
        return "long"

    got: list[str] = []
    first = threading.Thread(
        target=lambda: got.append(e.client.call(long, provider="openai", model="gpt-4o", key_id="k1"))
    )
    first.start()
    assert running.wait(5)
    second = threading.Thread(target=lambda: got.append(e.call()))
    second.start()
    deadline = time.monotonic() + 5
    while not events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert events and events[0].decision.parked and e.sent == 0
    assert (
        events[0].decision.stop_text == "waiting for the fleet: at its lease of requests in flight on openai/gpt-4o@k1"
    )
    # A parked call re-checks every second: only the wake of the finished request lets it go sooner.
    finish.set()
    start = time.monotonic()
    second.join(5)
    first.join(5)
    assert sorted(got) == ["long", "sent"] and e.sent == 1
    assert time.monotonic() - start < 0.5, "the finished request did not wake the parked call"
    e.client.close()


# ---- the pace's grants


def test_a_paced_first_attempt_goes_only_against_a_grant_whatever_its_draw() -> None:
    table = FleetTable(Clock())
    assign(table, admit_fraction=0.25, pace_permits=0, reason="pacing")
    v = table.check(T, None, False, 0.0)  # a draw that admit_fraction would admit
    assert (v.action, v.stop_reason, v.reason) == (
        GateAction.PARK,
        "FLEET_SHED",
        "waiting for the fleet: paced on openai/gpt-4o@k1",
    )
    assert v.parked is not None
    woken = threading.Event()
    table.park_wait(T, woken)
    assign(table, admit_fraction=0.25, pace_permits=1, reason="pacing")  # one grant: it wakes the parked call
    assert woken.is_set()
    assert table.resume(T, v.parked, 0.99).action is GateAction.ADMIT
    assert table.check(T, None, False, 0.0).action is GateAction.PARK  # the grant is spent
    # A retry is neither parked by the grants nor spends one: the daemon's budget paces retries.
    assert table.check_retry(T, None).action is GateAction.ADMIT
    assign(table, admit_fraction=0.25, pace_permits=2, reason="pacing")
    assert table.check_retry(T, None).action is GateAction.ADMIT
    assert table.check(T, None, False, 0.99).action is GateAction.ADMIT


def test_a_call_whose_deadline_comes_before_the_park_hint_does_not_park(env: Env) -> None:
    env.client.park_limit = None
    assign(env.table, breaker=policy_pb2.BREAKER_STATE_OPEN, park_hint=30.0, reason="breaker open")
    with pytest.raises(RetryStopped) as info:
        env.call(deadline=20)
    d = info.value.decision
    assert d is not None and d.stop_reason == "CIRCUIT_OPEN" and env.sent == 0
    assert d.stop_text == "the fleet's circuit breaker for openai/gpt-4o@k1 is open: breaker open"
    v = env.table.check(T, 40.0, False, 0.5)
    assert v.action is GateAction.PARK and v.reason == "waiting for the fleet: breaker open on openai/gpt-4o@k1, ~30 s"
    assert v.parked is not None
    env.table.park_cancelled(T, v.parked)
