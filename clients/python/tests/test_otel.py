"""OpenTelemetry against a real policyd (docs/clients.md, "Tracing and metrics"): the decisions
on the caller's span, the retries sent on it, the retries and waits through the global meter, the
names those use all in clients/testdata/otel.json; and the client without OpenTelemetry at all.

The SDK's in-memory exporter reads the spans (a tracer provider of each test's own: the client
writes on whatever span is current); the metrics go through the global meter, so one in-memory
reader serves the module and each test reads its own model's points."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import REPO, Daemon, FakeServer, Reply, closed_port_addr
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_fleet_gate import assignment, open_breaker, start_daemon, wait_for

from policyd_client import AsyncClient, Client, FallbackHint, RetryCancelled, RetryEvent, RetryStopped, _otel

OTEL = json.loads((REPO / "clients" / "testdata" / "otel.json").read_text())
EVENT_ATTRIBUTES = set(OTEL["span_event"]["attributes"])
SPAN_ATTRIBUTES = set(OTEL["span_attributes"])
METRICS = {m["name"]: m for m in OTEL["metrics"]}

# A breaker that opens on three failures from one client and stays open through a test, and a
# fallback chain for openai/gpt-4o (as test_fleet_gate's).
GATE_POLICY = """
fleet:
  breaker: {min_volume: 3, min_clients: 1, open_for: 30s}
fallbacks:
  openai/gpt-4o: [openai/gpt-4o-mini]
"""
# A breaker open for one second and assignments that live one, so that a parked call is
# released within seconds: the breaker half-opens and the next assignment lets it probe.
PARK_POLICY = """
fleet:
  breaker: {min_volume: 3, min_clients: 1, open_for: 1s, max_open_for: 1s, probe_interval: 200ms}
  stream: {ttl: 1s}
"""


@pytest.fixture(scope="module")
def reader() -> InMemoryMetricReader:
    """The global meter provider's reader (a process has one global provider: set once)."""
    r = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[r]))
    return r


@pytest.fixture(scope="module")
def gate_daemon(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(binary, tmp_path_factory.mktemp("otel-gate"), GATE_POLICY)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def park_daemon(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(binary, tmp_path_factory.mktemp("otel-park"), PARK_POLICY)
    yield d
    d.stop()


class Spans:
    """A tracer of the test's own whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = provider.get_tracer("test_otel")

    def only(self) -> ReadableSpan:
        (span,) = self.exporter.get_finished_spans()
        return span


@pytest.fixture
def spans(reader: InMemoryMetricReader) -> Spans:
    return Spans()


def decisions(span: ReadableSpan) -> list[dict[str, Any]]:
    """The span's decision events' attributes, checked against otel.json's list."""
    found = []
    for e in span.events:
        assert e.name == OTEL["span_event"]["name"], e.name
        attrs = dict(e.attributes or {})
        assert set(attrs) <= EVENT_ATTRIBUTES, set(attrs) - EVENT_ATTRIBUTES
        found.append(attrs)
    return found


@dataclass
class Points:
    """One model's data points of the client's metrics."""

    retries: list[NumberDataPoint] = field(default_factory=list)
    waits: list[HistogramDataPoint] = field(default_factory=list)


def points(reader: InMemoryMetricReader, model: str) -> Points:
    """The client's points for model, each metric's name, unit and attributes checked against otel.json."""
    got = Points()
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            if sm.scope.name != "policyd_client":
                continue
            for m in sm.metrics:
                spec = METRICS[m.name]
                assert m.unit == spec["unit"] and m.description == spec["description"], m
                for p in m.data.data_points:
                    attrs = dict(p.attributes or {})
                    assert set(attrs) <= set(spec["attributes"]), (m.name, attrs)
                    if attrs.get("policyd.model") != model:
                        continue
                    if m.name == "policyd.client.retries":
                        assert isinstance(p, NumberDataPoint)
                        got.retries.append(p)
                    else:
                        assert isinstance(p, HistogramDataPoint)
                        got.waits.append(p)
    return got


def fetch(url: str) -> Callable[[], str]:
    def get() -> str:
        r = httpx.get(url, timeout=5)
        r.raise_for_status()
        return r.text

    return get


def afetch(url: str) -> Callable[[], Awaitable[str]]:
    async def get() -> str:
        async with httpx.AsyncClient() as h:
            r = await h.get(url, timeout=5)
        r.raise_for_status()
        return r.text

    return get


def run(mode: str, spans: Spans, addr: str, url: str, on_retry: Callable[[RetryEvent], None], **call: Any) -> Any:
    """One call in a span of the test's, by the sync or the asyncio client (without real sleeps);
    returns its result or the error it raised."""
    options: dict[str, Any] = {"timeout": 10, "fleet_gate": False, "on_retry": on_retry}
    if mode == "sync":
        with Client(addr, sleep=lambda s: None, **options) as c, spans.tracer.start_as_current_span("agent-step"):
            try:
                return c.call(fetch(url), **call)
            except RetryStopped as e:
                return e

    async def main() -> Any:
        async def no_sleep(s: float) -> None:
            pass

        async with AsyncClient(addr, sleep=no_sleep, **options) as c:
            with spans.tracer.start_as_current_span("agent-step"):
                try:
                    return await c.call(afetch(url), **call)
                except RetryStopped as e:
                    return e

    return asyncio.run(main())


MODES = ["sync", "async"]


@pytest.mark.parametrize("mode", MODES)
def test_a_retry_then_success_is_one_decision_a_resend_and_its_metrics(
    mode: str, spans: Spans, reader: InMemoryMetricReader, daemon: Daemon, server: FakeServer
) -> None:
    model = f"otel-retry-{mode}"
    url = server.script("/r", Reply(503, body="busy"), Reply(200, body="done"))
    seen: list[RetryEvent] = []
    got = run(mode, spans, daemon.addr, url, seen.append, provider="openai", model=model, operation="chat")
    assert got == "done" and server.count("/r") == 2
    (ev,) = seen
    span = spans.only()
    assert decisions(span) == [
        {
            "policyd.attempt": 1,
            "error.type": "OVERLOADED",
            "policyd.action": "RETRY",
            "policyd.delay_ms": round(ev.delay * 1000),
            "policyd.decided_by": "policyd",
        }
    ]
    assert ev.delay > 0
    assert span.attributes is not None and span.attributes["http.request.resend_count"] == 1

    p = points(reader, model)
    (retries,) = p.retries
    assert retries.value == 1
    assert dict(retries.attributes or {}) == {
        "error.type": "OVERLOADED",
        "policyd.provider": "openai",
        "policyd.model": model,
    }
    (wait,) = p.waits
    assert dict(wait.attributes or {}) == {
        "policyd.wait.kind": "retry",
        "policyd.provider": "openai",
        "policyd.model": model,
    }
    assert wait.count == 1 and wait.sum == pytest.approx(ev.delay)


@pytest.mark.parametrize("mode", MODES)
def test_a_stop_is_a_decision_and_no_retry(
    mode: str, spans: Spans, reader: InMemoryMetricReader, daemon: Daemon, server: FakeServer
) -> None:
    model = f"otel-stop-{mode}"
    url = server.script("/s", Reply(400, body="bad request"))
    got = run(mode, spans, daemon.addr, url, lambda e: None, provider="openai", model=model, operation="chat")
    assert isinstance(got, RetryStopped) and got.decision is not None
    span = spans.only()
    assert decisions(span) == [
        {
            "policyd.attempt": 1,
            "error.type": "INVALID_REQUEST",
            "policyd.action": "STOP",
            "policyd.stop_reason": got.decision.stop_reason,
            "policyd.decided_by": "policyd",
        }
    ]
    assert got.decision.stop_reason == "NOT_RETRYABLE"
    assert "http.request.resend_count" not in (span.attributes or {})  # no retry was sent
    assert points(reader, model) == Points()


@pytest.mark.parametrize("mode", MODES)
def test_a_fail_open_decision_while_policyd_is_down(
    mode: str, spans: Spans, reader: InMemoryMetricReader, server: FakeServer
) -> None:
    model = f"otel-fail-open-{mode}"
    url = server.script("/f", Reply(503, body="busy"), Reply(200, body="done"))
    seen: list[RetryEvent] = []
    got = run(mode, spans, closed_port_addr(), url, seen.append, provider="openai", model=model, operation="chat")
    assert got == "done"
    (ev,) = seen
    span = spans.only()
    assert decisions(span) == [
        {
            "policyd.attempt": 1,
            "error.type": "OVERLOADED",
            "policyd.action": "RETRY",
            "policyd.delay_ms": round(ev.delay * 1000),
            "policyd.decided_by": "fail_open",
        }
    ]
    assert span.attributes is not None and span.attributes["http.request.resend_count"] == 1
    (retries,) = points(reader, model).retries
    assert retries.value == 1 and dict(retries.attributes or {})["error.type"] == "OVERLOADED"


def test_a_retry_cancelled_in_its_wait_is_decided_but_not_counted(
    spans: Spans, reader: InMemoryMetricReader, daemon: Daemon, server: FakeServer
) -> None:
    model = "otel-cancelled"
    url = server.script("/c", Reply(503, body="busy"), Reply(200, body="done"))
    cancel = threading.Event()
    with Client(daemon.addr, timeout=10, fleet_gate=False, sleep=lambda s: cancel.set()) as c:
        with spans.tracer.start_as_current_span("agent-step"), pytest.raises(RetryCancelled):
            c.call(fetch(url), provider="openai", model=model, operation="chat", cancel=cancel)
    span = spans.only()
    assert [d["policyd.action"] for d in decisions(span)] == ["RETRY"]
    assert "http.request.resend_count" not in (span.attributes or {})
    p = points(reader, model)
    assert p.retries == [] and [w.count for w in p.waits] == [1]  # the wait is the decision's; no retry was sent


def test_a_stop_the_client_makes_itself_is_a_decision(spans: Spans, daemon: Daemon) -> None:
    """An attempt that fails past the caller's deadline: the client stops without asking policyd, as
    its built-in policy (the Go client's expired context reaches its fail-open policy)."""

    def late() -> str:
        time.sleep(0.2)
        raise ConnectionResetError(104, "reset")

    with Client(daemon.addr, timeout=10, fleet_gate=False) as c, spans.tracer.start_as_current_span("agent-step"):
        with pytest.raises(RetryStopped) as info:
            c.call(late, provider="openai", model="otel-deadline", operation="chat", deadline=0.1)
    assert info.value.decision is not None and info.value.decision.stop_reason == "DEADLINE"
    assert decisions(spans.only()) == [
        {
            "policyd.attempt": 1,
            "policyd.action": "STOP",
            "policyd.stop_reason": "DEADLINE",
            "policyd.decided_by": "fail_open",
        }
    ]


def hint(h: FallbackHint) -> str:
    return f"from {h.provider}/{h.model}"


def check_gate_events(spans: Spans, reason: str, stopped: object, fell_back: object) -> None:
    """The gate's stop and its fallback, each one decision of the gate's on its own span."""
    assert isinstance(stopped, RetryStopped) and stopped.attempts == 0
    assert fell_back == "from openai/gpt-4o-mini"
    stop, fallback = (decisions(s) for s in spans.exporter.get_finished_spans())
    assert stop == [
        {
            "policyd.attempt": 0,
            "policyd.action": "STOP",
            "policyd.stop_reason": "CIRCUIT_OPEN",
            "policyd.fleet.reason": reason,
            "policyd.decided_by": "gate",
        }
    ]
    assert fallback == [
        {
            "policyd.attempt": 0,
            "policyd.action": "FALL_BACK",
            "policyd.stop_reason": "CIRCUIT_OPEN",
            "policyd.fleet.reason": reason,
            "policyd.fallback.target": "openai/gpt-4o-mini",
            "policyd.decided_by": "gate",
        }
    ]


def open_reason(c: Client | AsyncClient, model: str) -> str | None:
    """The reason of the client's OPEN assignment for openai/model, None until it has one."""
    a = assignment(c, model)
    return a.reason if a is not None and a.breaker == "OPEN" else None


# The policy's fallback chain is openai/gpt-4o's; the breaker stays open for both tests.
GATE_MODEL = "gpt-4o"


def until_stopped(call: Callable[[], object]) -> None:
    """Calls until the gate stops one: the target's first call waits up to 100 ms for its
    first assignment, which a loaded machine (the suites of make test side by side) can miss."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            call()
        except RetryStopped:
            return
        time.sleep(0.05)
    pytest.fail("no call stopped by the gate on the open breaker within 10 s")


async def until_stopped_async(call: Callable[[], Awaitable[object]]) -> None:
    """until_stopped, for the async client."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            await call()
        except RetryStopped:
            return
        await asyncio.sleep(0.05)
    pytest.fail("no call stopped by the gate on the open breaker within 10 s")


def test_a_gate_stop_and_a_gate_fallback_are_decisions(spans: Spans, gate_daemon: Daemon) -> None:
    open_breaker(gate_daemon.addr, GATE_MODEL)
    with Client(gate_daemon.addr, park_limit=0, timeout=10) as c:
        until_stopped(lambda: c.call(lambda: "sent", provider="openai", model=GATE_MODEL))
        reason = open_reason(c, GATE_MODEL)
        assert reason
        with spans.tracer.start_as_current_span("stopped"), pytest.raises(RetryStopped) as info:
            c.call(lambda: "sent", provider="openai", model=GATE_MODEL)
        with spans.tracer.start_as_current_span("fell back"):
            fell_back = c.call(lambda: "sent", provider="openai", model=GATE_MODEL, fallback=hint)
    check_gate_events(spans, reason, info.value, fell_back)


def test_async_a_gate_stop_and_a_gate_fallback_are_decisions(spans: Spans, gate_daemon: Daemon) -> None:
    open_breaker(gate_daemon.addr, GATE_MODEL)

    async def sent() -> str:
        return "sent"

    async def ahint(h: FallbackHint) -> str:
        return hint(h)

    async def main() -> tuple[str | None, object, object]:
        async with AsyncClient(gate_daemon.addr, park_limit=0, timeout=10) as c:
            await until_stopped_async(lambda: c.call(sent, provider="openai", model=GATE_MODEL))
            reason = open_reason(c, GATE_MODEL)
            with spans.tracer.start_as_current_span("stopped"):
                try:
                    await c.call(sent, provider="openai", model=GATE_MODEL)
                except RetryStopped as e:
                    stopped = e
            with spans.tracer.start_as_current_span("fell back"):
                fell_back = await c.call(sent, provider="openai", model=GATE_MODEL, fallback=ahint)
            return reason, stopped, fell_back

    reason, stopped, fell_back = asyncio.run(main())
    assert reason
    check_gate_events(spans, reason, stopped, fell_back)


def test_a_park_ending_is_a_decision_and_a_wait(
    spans: Spans, reader: InMemoryMetricReader, park_daemon: Daemon
) -> None:
    model = "otel-park"
    with Client(park_daemon.addr, timeout=10) as c:
        c.call(lambda: "sent", provider="openai", model=model)  # subscribes the target
        wait_for("the first assignment", lambda: assignment(c, model) is not None)
        open_breaker(park_daemon.addr, model)
        wait_for("the OPEN assignment", lambda: getattr(assignment(c, model), "breaker", "") == "OPEN")

        parks: list[RetryEvent] = []
        c.on_retry = parks.append
        start = time.monotonic()
        with spans.tracer.start_as_current_span("agent-step"):
            got = c.call(lambda: "sent", provider="openai", model=model, deadline=20)
        took = time.monotonic() - start
    assert got == "sent"
    assert [e.decision.waited > 0 for e in parks] == [False, True]  # parked, then released
    waited = parks[-1].decision.waited
    assert 0 < waited <= took
    (d,) = decisions(spans.only())
    assert d == {
        "policyd.attempt": 0,
        "policyd.action": "RETRY",
        "policyd.delay_ms": 0,
        "policyd.parked_ms": round(waited * 1000),
        "policyd.decided_by": "gate",
    }
    (wait,) = points(reader, model).waits
    assert dict(wait.attributes or {}) == {
        "policyd.wait.kind": "park",
        "policyd.provider": "openai",
        "policyd.model": model,
    }
    assert wait.count == 1 and wait.sum == pytest.approx(waited)


def test_a_span_that_is_not_recording_costs_no_attributes(
    daemon: Daemon, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API without an SDK gives a span that does not record: the client builds nothing for it."""

    def built(*args: object) -> dict[str, str | int]:
        raise AssertionError("attributes built for a span that does not record")

    monkeypatch.setattr(_otel, "decision_attributes", built)
    url = server.script("/n", Reply(503), Reply(400))
    with Client(daemon.addr, timeout=10, fleet_gate=False, sleep=lambda s: None) as c:
        assert not trace.get_current_span().is_recording()
        with pytest.raises(RetryStopped) as info:
            c.call(fetch(url), provider="openai", model="otel-none", operation="chat")
    assert info.value.attempts == 2


def test_every_name_the_client_records_is_in_otel_json() -> None:
    """The module's names against the file; the other tests check what was recorded."""
    assert _otel.EVENT == OTEL["span_event"]["name"]
    event = {_otel.ATTEMPT, _otel.ERROR_TYPE, _otel.ACTION, _otel.DELAY_MS, _otel.STOP_REASON, _otel.FLEET_REASON,
             _otel.FALLBACK_TARGET, _otel.PARKED_MS, _otel.DECIDED_BY}  # fmt: skip
    assert event == EVENT_ATTRIBUTES
    assert {_otel.RESEND_COUNT} == SPAN_ATTRIBUTES
    assert set(METRICS) == {_otel.RETRIES, _otel.WAIT}
    assert METRICS[_otel.RETRIES]["kind"] == "counter" and METRICS[_otel.WAIT]["kind"] == "histogram"
    assert {_otel.ERROR_TYPE, _otel.PROVIDER, _otel.MODEL} == set(METRICS[_otel.RETRIES]["attributes"])
    assert {_otel.WAIT_KIND, _otel.PROVIDER, _otel.MODEL} == set(METRICS[_otel.WAIT]["attributes"])
    # policyd.decided_by: the list's three values.
    described = OTEL["span_event"]["attributes"][_otel.DECIDED_BY]
    listed = {"policyd", "fail_open", "gate"}
    assert all(re.search(rf"\b{v}\b", described) for v in listed)
    assert set(_otel.DECIDED_BY_SOURCE.values()) == listed


def test_the_client_works_without_opentelemetry(daemon: Daemon, server: FakeServer) -> None:
    """OpenTelemetry not importable (the otel extra not installed): the client imports, retries and
    stops as always, and imports nothing of it."""
    url = server.script("/x", Reply(503), Reply(200, body="done"))
    script = """
import asyncio, sys
import httpx
sys.modules["opentelemetry"] = None  # as if not installed: every import of it fails
from policyd_client import AsyncClient, Client, _otel
assert not _otel.ENABLED

def get():
    r = httpx.get(sys.argv[2], timeout=5)
    r.raise_for_status()
    return r.text

with Client(sys.argv[1], timeout=10, fleet_gate=False, sleep=lambda s: None) as c:
    assert c.call(get, provider="openai", model="m", operation="chat") == "done"

async def main():
    async def no_sleep(s):
        pass
    async def aget():
        async with httpx.AsyncClient() as h:
            r = await h.get(sys.argv[3], timeout=5)
        r.raise_for_status()
        return r.text
    async with AsyncClient(sys.argv[1], timeout=10, fleet_gate=False, sleep=no_sleep) as c:
        return await c.call(aget, provider="openai", model="m", operation="chat")

assert asyncio.run(main()) == "done"
loaded = sorted(m for m, v in sys.modules.items() if m.startswith("opentelemetry") and v is not None)
assert loaded == [], loaded
print("ok")
"""
    aurl = server.script("/y", Reply(503), Reply(200, body="done"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run(
        [sys.executable, "-c", script, daemon.addr, url, aurl],
        capture_output=True, text=True, timeout=60, env=env, cwd=Path(__file__).parent,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert server.count("/x") == 2 and server.count("/y") == 2
