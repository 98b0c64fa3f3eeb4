"""The fleet gate against a real policyd: the Coordinate stream's reports reach the daemon, its
assignments stop, fall back or hold first attempts, and a daemon that is down, hung, killed or
running with --fleet off never blocks a call (docs/clients.md, "The fleet gate").

Each test uses its own model (a breaker is per provider and model) and key id."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from harness import TOKEN, WRONG_TOKEN, BlackHole, CountingInterceptor, Daemon, closed_port_addr

from policyd_client import (
    SOURCE_FLEET_GATE,
    AsyncClient,
    Client,
    FailOpenPolicy,
    FallbackHint,
    FleetGateError,
    RetryEvent,
    RetryStopped,
    policy_pb2,
)
from policyd_client._fleet import Target
from policyd_client._gate import GateAssignment
from policyd_client._gen.policyd.v1 import fleet_pb2, fleet_pb2_grpc
from policyd_client._gen.policyd.v1 import policy_pb2_grpc as policy_grpc

# A breaker that opens on three failures from one client and stays open through a test, and a
# fallback chain for openai/gpt-4o.
POLICY = """
fleet:
  breaker: {min_volume: 3, min_clients: 1, open_for: 30s}
fallbacks:
  openai/gpt-4o: [openai/gpt-4o-mini]
"""
# The expiry test's daemon: assignments live 1 s.
SHORT_TTL_POLICY = """
fleet:
  breaker: {min_volume: 3, min_clients: 1, open_for: 30s}
  stream: {ttl: 1s}
"""


# The lease test's daemon: openai/py-lease allows one request in flight, leased to the gates.
LEASE_POLICY = """
fleet:
  max_in_flight: {openai/py-lease: 1}
"""


def start_daemon(binary: str, directory: Path, policy: str) -> Daemon:
    path = directory / "policy.yaml"
    path.write_text(policy)
    return Daemon(binary, args=("--fleet", "on", "--policy", str(path)))


@pytest.fixture(scope="module")
def fleet(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(binary, tmp_path_factory.mktemp("gate"), POLICY)
    yield d
    d.stop()


def wait_for(what: str, cond: Callable[[], object], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def next_delay(addr: str, failure: policy_pb2.Failure, times: int = 1) -> None:
    """NextDelay calls from another agent (their own channel, not the client under test's)."""
    with grpc.insecure_channel(addr) as ch:
        stub = policy_grpc.PolicyServiceStub(ch)
        for _ in range(times):
            stub.NextDelay(policy_pb2.NextDelayRequest(failure=failure, attempt=1, client_id="other-agent"), timeout=10)


def open_breaker(addr: str, model: str) -> None:
    next_delay(addr, policy_pb2.Failure(provider="openai", model=model, http_status=503), times=3)


def buckets(addr: str, model: str) -> dict[str, fleet_pb2.Bucket]:
    """The buckets of openai/model by scope."""
    with grpc.insecure_channel(addr) as ch:
        resp = fleet_pb2_grpc.FleetServiceStub(ch).ListBuckets(
            fleet_pb2.ListBucketsRequest(provider="openai", model=model), timeout=10
        )
    return {b.scope: b for b in resp.buckets}


def assignment(c: Client | AsyncClient, model: str, key_id: str = "") -> GateAssignment | None:
    assert c._fleet is not None
    return c._fleet.assignment(Target("openai", model, key_id))


class Op:
    """The operation under test: counts its calls, returns "sent"."""

    def __init__(self) -> None:
        self.at: list[float] = []

    def __call__(self) -> str:
        self.at.append(time.monotonic())
        return "sent"

    async def aio(self) -> str:
        return self()


def test_admits_without_an_assignment_and_reports_to_the_daemon(fleet: Daemon) -> None:
    op = Op()
    with Client(fleet.addr, park_limit=0, timeout=10) as c:
        for _ in range(3):
            assert c.call(op, provider="openai", model="py-report", key_id="k-report") == "sent"
        assert len(op.at) == 3  # no assignment yet: admitted, nothing waited for the stream

        def reported() -> bool:
            b = buckets(fleet.addr, "py-report").get("availability")
            return b is not None and b.first_attempts_admitted == 3 and b.successes == 3

        wait_for("the report of 3 admitted, successful first attempts", reported)
        b = buckets(fleet.addr, "py-report")["availability"]
        assert b.reports >= 1 and b.first_attempts_shed == 0
        wait_for("the first assignment", lambda: assignment(c, "py-report", "k-report") is not None)
        a = assignment(c, "py-report", "k-report")
        assert a is not None and a.breaker == "CLOSED" and a.admit_fraction == 1 and a.ttl == 15


def test_an_open_breaker_stops_the_first_attempt_without_an_rpc(fleet: Daemon) -> None:
    interceptor = CountingInterceptor()
    channel = grpc.intercept_channel(grpc.insecure_channel(fleet.addr), interceptor)
    op = Op()
    with Client(fleet.addr, park_limit=0, timeout=10, channel=channel) as c:
        c.call(op, provider="openai", model="py-breaker")  # subscribes the target
        wait_for("the first assignment", lambda: assignment(c, "py-breaker") is not None)
        open_breaker(fleet.addr, "py-breaker")
        wait_for("the OPEN assignment", lambda: getattr(assignment(c, "py-breaker"), "breaker", "") == "OPEN")

        with pytest.raises(RetryStopped) as info:
            c.call(op, provider="openai", model="py-breaker", operation="chat")
        assert len(op.at) == 1  # the stopped call's operation never ran
        assert interceptor.methods == []  # no NextDelay, no RPC at all: only the stream
        e = info.value
        assert e.attempts == 0
        assert e.decision is not None and e.decision.stop_reason == "CIRCUIT_OPEN"
        assert e.decision.source == SOURCE_FLEET_GATE
        assert isinstance(e.error, FleetGateError) and e.error.stop_reason == "CIRCUIT_OPEN"
        assert (e.error.provider, e.error.model) == ("openai", "py-breaker")
        assert "circuit breaker for openai/py-breaker is open" in str(e)
        assert "breaker open" in str(e)  # the assignment's reason
        assert e.__cause__ is e.error

        # The daemon hears of the shed first attempt.
        wait_for("the shed report", lambda: buckets(fleet.addr, "py-breaker")["availability"].first_attempts_shed == 1)
    channel.close()


def test_the_fallback_function_gets_the_assignments_fallback(fleet: Daemon) -> None:
    op = Op()
    hints: list[FallbackHint] = []

    def fallback(h: FallbackHint) -> str:
        hints.append(h)
        return f"from {h.model}"

    with Client(fleet.addr, park_limit=0, timeout=10) as c:
        c.call(op, provider="openai", model="gpt-4o", key_id="k-fb")
        wait_for("the first assignment", lambda: assignment(c, "gpt-4o", "k-fb") is not None)
        open_breaker(fleet.addr, "gpt-4o")
        wait_for("the OPEN assignment", lambda: getattr(assignment(c, "gpt-4o", "k-fb"), "breaker", "") == "OPEN")

        got = c.call(op, provider="openai", model="gpt-4o", key_id="k-fb", fallback=fallback)
        assert got == "from gpt-4o-mini"
        assert len(op.at) == 1
        (h,) = hints
        assert (h.kind, h.provider, h.model) == ("OTHER_MODEL", "openai", "gpt-4o-mini")
        assert h.attempts == 0 and isinstance(h.error, FleetGateError)
        assert h.decision.source == SOURCE_FLEET_GATE and h.decision.stop_reason == "CIRCUIT_OPEN"
        assert (h.decision.fallback_provider, h.decision.fallback_model) == ("openai", "gpt-4o-mini")

        # Without a fallback function the same call stops.
        with pytest.raises(RetryStopped):
            c.call(op, provider="openai", model="gpt-4o", key_id="k-fb")
        assert len(op.at) == 1


def test_a_targets_first_call_waits_briefly_for_its_assignment(fleet: Daemon) -> None:
    # A short-lived process (a CLI run) is gated too: the breaker is open before the client exists.
    open_breaker(fleet.addr, "py-cli")
    op = Op()
    with Client(fleet.addr, park_limit=0, timeout=10) as c:
        start = time.monotonic()
        with pytest.raises(RetryStopped) as info:
            c.call(op, provider="openai", model="py-cli")
        assert time.monotonic() - start < 0.5
        assert info.value.decision is not None and info.value.decision.stop_reason == "CIRCUIT_OPEN"
        assert op.at == []

    async def main() -> None:
        async with AsyncClient(fleet.addr, park_limit=0, timeout=10) as c:
            with pytest.raises(RetryStopped) as info:
                await c.call(op.aio, provider="openai", model="py-cli")
            assert info.value.decision is not None and info.value.decision.stop_reason == "CIRCUIT_OPEN"

    asyncio.run(main())
    assert op.at == []


def test_a_hold_delays_the_first_attempt(fleet: Daemon) -> None:
    op = Op()
    with Client(fleet.addr, park_limit=0, timeout=10) as c:
        c.call(op, provider="openai", model="py-hold", key_id="k-hold")
        wait_for("the first assignment", lambda: assignment(c, "py-hold", "k-hold") is not None)
        # Another agent's 429 with Retry-After: 2 holds the key's rate-limit bucket.
        failure = policy_pb2.Failure(
            provider="openai", model="py-hold", key_id="k-hold", http_status=429, headers={"retry-after": "2"}
        )
        next_delay(fleet.addr, failure)
        wait_for("the hold", lambda: getattr(assignment(c, "py-hold", "k-hold"), "hold", 0) > 0)
        a = assignment(c, "py-hold", "k-hold")
        assert a is not None and 1.5 <= a.hold <= 2 * 2.5 + 0.5

        # A deadline the hold does not fit stops at once, without sending.
        start = time.monotonic()
        with pytest.raises(RetryStopped) as info:
            c.call(op, provider="openai", model="py-hold", key_id="k-hold", deadline=0.5)
        assert info.value.decision is not None and info.value.decision.stop_reason == "DEADLINE"
        assert time.monotonic() - start < 0.5 and len(op.at) == 1

        # Without a deadline the call waits out the rest of the hold, then sends.
        start = time.monotonic()
        assert c.call(op, provider="openai", model="py-hold", key_id="k-hold") == "sent"
        waited = op.at[-1] - start
        assert a.hold - 1 <= waited <= a.hold + 0.5, (waited, a.hold)


@pytest.mark.parametrize("down", ["closed-port", "black-hole"])
def test_a_daemon_that_is_down_or_hung_blocks_nothing(down: str) -> None:
    hole = BlackHole() if down == "black-hole" else None
    addr = hole.addr if hole else closed_port_addr()
    op = Op()
    try:
        c = Client(addr, park_limit=0, timeout=0.5)
        start = time.monotonic()
        for i in range(20):
            assert c.call(op, provider="openai", model=f"py-down-{i % 2}") == "sent"
        assert time.monotonic() - start < 0.5
        assert len(op.at) == 20
        assert c._stream is not None and c._stream.running  # still trying, in the background
        start = time.monotonic()
        c.close()
        assert time.monotonic() - start < 2
        assert not c._stream.running
        assert not [t for t in threading.enumerate() if t.name == "policyd-fleet-stream"]
    finally:
        if hole:
            hole.close()


def test_an_expired_assignment_is_kept_for_the_grace_then_first_attempts_go(binary: str, tmp_path: Path) -> None:
    d = start_daemon(binary, tmp_path, SHORT_TTL_POLICY)
    op = Op()
    try:
        with Client(d.addr, park_limit=0, timeout=1, fleet_grace=1.0) as c:
            c.call(op, provider="openai", model="py-expiry")
            wait_for("the first assignment", lambda: assignment(c, "py-expiry") is not None)
            open_breaker(d.addr, "py-expiry")
            wait_for("the OPEN assignment", lambda: getattr(assignment(c, "py-expiry"), "breaker", "") == "OPEN")
            d.proc.kill()
            d.proc.wait()
            killed = time.monotonic()

            # Within ttl (1 s) + grace (1 s) of its receipt, the assignment still stops.
            with pytest.raises(RetryStopped) as info:
                c.call(op, provider="openai", model="py-expiry")
            assert info.value.decision is not None and info.value.decision.stop_reason == "CIRCUIT_OPEN"
            assert len(op.at) == 1

            # Then every first attempt goes: policyd away never stops an agent.
            while len(op.at) == 1:
                assert time.monotonic() - killed < 3, "still stopped 3 s after the daemon died"
                try:
                    c.call(op, provider="openai", model="py-expiry")
                except RetryStopped as e:
                    assert e.decision is not None and e.decision.stop_reason == "CIRCUIT_OPEN"
                time.sleep(0.05)
            assert op.at[-1] - killed <= 2.2
    finally:
        d.stop()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_policyd_restarted_on_its_address_stops_no_call_and_the_stream_is_back_within_2s(
    binary: str, tmp_path: Path, kind: str
) -> None:
    """policyd killed for a while and restarted on the same address, while a provider fails every
    call's first attempt: no first attempt is refused by the gate, and the stream is back (the
    daemon counts the client as streaming) within 2 s of the restart."""
    model = f"py-restart-{kind}"
    policy = tmp_path / "policy.yaml"
    policy.write_text(SHORT_TTL_POLICY)
    d = Daemon(binary, args=("--fleet", "on", "--policy", str(policy)))
    addr = d.addr
    refused: list[str] = []
    budget_stops = 0
    calls = 0
    attempts = 0

    def provider() -> Callable[[], str]:
        first = True

        def op() -> str:
            nonlocal first, attempts
            attempts += 1
            if first:
                first = False
                raise ConnectionResetError("the provider drops every call's first attempt")
            return "ok"

        return op

    def outcome(err: RetryStopped | None) -> None:
        nonlocal calls, budget_stops
        calls += 1
        if err is None:
            return
        assert err.decision is not None
        if err.decision.source == SOURCE_FLEET_GATE:
            refused.append(err.decision.stop_text)
        elif err.decision.stop_reason == "RETRY_BUDGET_EXHAUSTED":
            budget_stops += 1

    def streaming() -> bool:
        try:
            return any(b.streaming_clients >= 1 for b in buckets(addr, model).values())
        except grpc.RpcError:
            return False

    async def run_async(until: Callable[[], bool], c: AsyncClient) -> None:
        while not until():
            try:
                await c.call(provider(), provider="openai", model=model, operation="chat")
                outcome(None)
            except RetryStopped as e:
                outcome(e)
            await asyncio.sleep(0.05)

    def run_sync(until: Callable[[], bool], c: Client) -> None:
        while not until():
            try:
                c.call(provider(), provider="openai", model=model, operation="chat")
                outcome(None)
            except RetryStopped as e:
                outcome(e)
            time.sleep(0.05)

    d2: Daemon | None = None
    sleeps: list[float] = []
    try:

        def phases(run: Callable[[Callable[[], bool]], object]) -> float:
            nonlocal d2
            run(streaming)  # subscribed: the daemon counts the stream
            d.proc.kill()
            d.proc.wait()
            killed = time.monotonic()
            run(lambda: time.monotonic() - killed > 4)  # away past ttl (1 s) + grace (1 s)
            d2 = Daemon(binary, args=("--fleet", "on", "--policy", str(policy), "--listen", addr))
            back = time.monotonic()
            run(lambda: streaming() or time.monotonic() - back > 15)
            return time.monotonic() - back

        # The reconnect backoff's draws near their top (1, 2, 4 s...): the stream is back within 2 s
        # only because a call that gets through ends the backoff. The calls' own sleeps are recorded.
        late = FailOpenPolicy(random=lambda: 0.99)
        if kind == "sync":
            with Client(addr, park_limit=0, timeout=0.5, fleet_grace=1.0, sleep=sleeps.append, fail_open=late) as c:
                took = phases(lambda until: run_sync(until, c))
        else:

            async def main() -> float:
                async def no_sleep(s: float) -> None:
                    sleeps.append(s)

                async with AsyncClient(
                    addr, park_limit=0, timeout=0.5, fleet_grace=1.0, sleep=no_sleep, fail_open=late
                ) as c:
                    loop = asyncio.get_running_loop()
                    return await loop.run_in_executor(
                        None,
                        lambda: phases(
                            lambda until: asyncio.run_coroutine_threadsafe(run_async(until, c), loop).result()
                        ),
                    )

            took = asyncio.run(main())
        print(f"{kind}: {calls} calls, {attempts} attempts, {budget_stops} retries refused by the own budget; "
              f"stream back {took:.2f} s after the restart")  # fmt: skip
        assert refused == [], "first attempts refused by the gate while policyd was away"
        assert took <= 2.0, f"the stream was back {took:.2f} s after policyd; want within 2 s"
    finally:
        d.stop()
        if d2 is not None:
            d2.stop()


def test_a_lease_parks_a_first_attempt_until_the_request_in_flight_ends(
    binary: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="policyd_client")
    d = start_daemon(binary, tmp_path, LEASE_POLICY)
    events: list[RetryEvent] = []
    op = Op()
    running, finish = threading.Event(), threading.Event()

    def long() -> str:
        running.set()
        finish.wait(10)
        return "long"

    try:
        with Client(d.addr, timeout=10, on_retry=events.append) as c:
            c.call(op, provider="openai", model="py-lease")  # subscribes the target
            wait_for("the lease", lambda: getattr(assignment(c, "py-lease"), "in_flight_lease", None) == 1)
            got: list[str] = []
            first = threading.Thread(target=lambda: got.append(c.call(long, provider="openai", model="py-lease")))
            first.start()
            assert running.wait(5)
            second = threading.Thread(target=lambda: got.append(c.call(op, provider="openai", model="py-lease")))
            second.start()
            wait_for("the second call parked", lambda: events)
            assert events[0].decision.parked and len(op.at) == 1, "no attempt while parked"
            assert events[0].decision.stop_text == (
                "waiting for the fleet: at its lease of requests in flight on openai/py-lease"
            )
            finish.set()
            ended = time.monotonic()
            first.join(5)
            second.join(5)
            assert sorted(got) == ["long", "sent"] and len(op.at) == 2
            # The request's end woke the parked call: it did not wait for its re-check a second later.
            assert op.at[-1] - ended < 0.5
            assert len(events) == 2 and events[1].decision.parked and events[1].decision.waited > 0

            # The daemon takes the reports of the parked call (parked, parked_new, released): three
            # first attempts admitted, none shed.
            def reported() -> bool:
                b = buckets(d.addr, "py-lease").get("availability")
                return b is not None and b.first_attempts_admitted == 3 and b.successes == 3

            wait_for("the reports of 3 admitted first attempts", reported)
            assert buckets(d.addr, "py-lease")["availability"].first_attempts_shed == 0
    finally:
        finish.set()
        d.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]


def test_fleet_off_stops_the_stream_and_logs_once(daemon: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="policyd_client")
    op = Op()
    with Client(daemon.addr, park_limit=0, timeout=10) as c:  # the session daemon runs --fleet off
        c.call(op, provider="openai", model="py-off")
        assert c._fleet is not None and c._stream is not None
        wait_for("the stream to give up", lambda: c._fleet is not None and c._fleet.disabled)
        wait_for("its thread to end", lambda: c._stream is not None and not c._stream.running)
        for _ in range(5):
            c.call(op, provider="openai", model="py-off")
        assert len(op.at) == 6
        assert not c._stream.running
    lines = [r for r in caplog.records if "fleet" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO, [r.getMessage() for r in lines]
    assert "FAILED_PRECONDITION" in lines[0].getMessage()


def test_the_stream_sends_the_token(auth_daemon: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    # auth_daemon runs --fleet off: past authentication, the stream gets FAILED_PRECONDITION.
    caplog.set_level(logging.INFO, logger="policyd_client")
    with Client(auth_daemon.addr, park_limit=0, timeout=10, token=TOKEN) as c:
        c.call(Op(), provider="openai", model="py-token")
        wait_for("FAILED_PRECONDITION, past authentication", lambda: c._fleet is not None and c._fleet.disabled)
    with Client(auth_daemon.addr, park_limit=0, timeout=10, token=WRONG_TOKEN) as c:
        c.call(Op(), provider="openai", model="py-token")
        wait_for("the refusal's warning", lambda: [r for r in caplog.records if "UNAUTHENTICATED" in r.getMessage()])
        assert c._fleet is not None and not c._fleet.disabled
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "fleet stream" in warning.getMessage() and WRONG_TOKEN not in warning.getMessage()


def test_the_gate_can_be_turned_off(fleet: Daemon) -> None:
    op = Op()
    with (
        Client(fleet.addr, park_limit=0, timeout=10) as gated,
        Client(fleet.addr, park_limit=0, timeout=10, fleet_gate=False) as ungated,
    ):
        gated.call(op, provider="openai", model="py-gate-off")
        wait_for("the first assignment", lambda: assignment(gated, "py-gate-off") is not None)
        open_breaker(fleet.addr, "py-gate-off")
        wait_for("the OPEN assignment", lambda: getattr(assignment(gated, "py-gate-off"), "breaker", "") == "OPEN")
        with pytest.raises(RetryStopped):
            gated.call(op, provider="openai", model="py-gate-off")
        assert ungated.call(op, provider="openai", model="py-gate-off") == "sent"
        assert len(op.at) == 2
        assert ungated._stream is None and ungated._fleet is None


def test_rate_limit_headers_reach_the_daemon(fleet: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="policyd_client")
    op = Op()
    with Client(fleet.addr, park_limit=0, timeout=10) as c:
        c.call(op, provider="openai", model="py-rl", key_id="k-rl")
        c.observe_rate_limits(
            {"X-RateLimit-Limit-Requests": "600", "x-ratelimit-remaining-requests": "599", "content-type": "json"},
            provider="openai",
            model="py-rl",
            key_id="k-rl",
        )
        wait_for(
            "the request limit read from the headers",
            lambda: getattr(buckets(fleet.addr, "py-rl").get("rate_limit"), "requests_per_minute", 0) == 600,
        )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_bad_input_never_breaks_a_call_or_the_stream(fleet: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="policyd_client")
    op = Op()
    with Client(fleet.addr, park_limit=0, timeout=10) as c:
        many = {f"x-ratelimit-h{i}": str(i) for i in range(40)}
        odd: dict[object, object] = {
            "x-ratelimit-": "no name",
            "x-ratelimit-long": "9" * 65,
            b"x-ratelimit-bytes": b"5",
            "x-ratelimit-\udcff": "\udcff",
            "anthropic-ratelimit-requests-limit": 7,
        }
        for headers in (None, 42, "x-ratelimit-a", [("x-ratelimit-a",)], many, odd, {}):
            c.observe_rate_limits(headers, provider="openai", model="py-bad")  # type: ignore[arg-type]
        c.observe_rate_limits({"x-ratelimit-a": "1"}, provider="", model="py-bad")  # no provider: ignored
        weird = [("openai\udcff", "m\ud800"), ("openai", "m" * 10_000), ("o" * 9_000, ""), ("openai", "é" * 5000)]
        for provider, model in weird:
            assert c.call(op, provider=provider, model=model, key_id="k" * 500) == "sent"
        assert c.call(op, provider="openai", model="py-bad") == "sent"

        def reported() -> bool:
            b = buckets(fleet.addr, "py-bad").get("availability")
            return b is not None and b.successes == 1

        wait_for("the report after the odd input", reported)
        assert c._stream is not None and c._stream.running
    assert len(op.at) == 5
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]


def test_async_open_breaker_stops_and_close_ends_the_task(fleet: Daemon) -> None:
    op = Op()

    async def until(what: str, cond: Callable[[], object]) -> None:
        end = time.monotonic() + 10
        while not cond():
            assert time.monotonic() < end, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    async def main() -> None:
        async with AsyncClient(fleet.addr, park_limit=0, timeout=10) as c:
            await c.call(op.aio, provider="openai", model="py-async")
            await until("the first assignment", lambda: assignment(c, "py-async") is not None)
            await asyncio.to_thread(open_breaker, fleet.addr, "py-async")
            await until("the OPEN assignment", lambda: getattr(assignment(c, "py-async"), "breaker", "") == "OPEN")
            with pytest.raises(RetryStopped) as info:
                await c.call(op.aio, provider="openai", model="py-async")
            assert info.value.decision is not None and info.value.decision.stop_reason == "CIRCUIT_OPEN"
            assert isinstance(info.value.error, FleetGateError)

            async def fallback(h: FallbackHint) -> str:
                return "fell back"

            assert await c.call(op.aio, provider="openai", model="py-async", fallback=fallback) == "fell back"
            assert len(op.at) == 1
            stream = c._stream
            assert stream is not None and not stream._task.done()
        assert stream._task.done()
        # Nothing of the stream is left running (grpc's own call tasks end within a few turns).
        end = time.monotonic() + 1
        while pending := [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            assert time.monotonic() < end, pending
            await asyncio.sleep(0.001)

    asyncio.run(main())


@pytest.mark.parametrize("down", ["closed-port", "black-hole"])
def test_async_daemon_down_blocks_nothing(down: str) -> None:
    hole = BlackHole() if down == "black-hole" else None
    addr = hole.addr if hole else closed_port_addr()
    op = Op()

    async def main() -> None:
        async with AsyncClient(addr, park_limit=0, timeout=0.5) as c:
            start = time.monotonic()
            for _ in range(20):
                assert await c.call(op.aio, provider="openai", model="py-down") == "sent"
            assert time.monotonic() - start < 0.5
            await asyncio.sleep(0.2)
            stream = c._stream
            assert stream is not None and not stream._task.done()
            start = time.monotonic()
        assert time.monotonic() - start < 1
        assert stream._task.done()

    try:
        asyncio.run(main())
    finally:
        if hole:
            hole.close()
    assert len(op.at) == 20


def test_async_hold_waits_with_the_clients_sleep(fleet: Daemon) -> None:
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    op = Op()

    async def main() -> None:
        async with AsyncClient(fleet.addr, park_limit=0, timeout=10, sleep=sleep) as c:
            await c.call(op.aio, provider="openai", model="py-hold-async", key_id="k-ha")
            t = Target("openai", "py-hold-async", "k-ha")
            while c._fleet is None or c._fleet.assignment(t) is None:
                await asyncio.sleep(0.02)
            failure = policy_pb2.Failure(
                provider="openai", model="py-hold-async", key_id="k-ha", http_status=429, headers={"retry-after": "3"}
            )
            await asyncio.to_thread(next_delay, fleet.addr, failure)
            while getattr(c._fleet.assignment(t), "hold", 0) == 0:
                await asyncio.sleep(0.02)
            await c.call(op.aio, provider="openai", model="py-hold-async", key_id="k-ha")

    asyncio.run(main())
    assert len(op.at) == 2
    (wait,) = slept
    assert 2 <= wait <= 3 * 2.5  # the hint, then this client's slot in a window of 1.5 hints
