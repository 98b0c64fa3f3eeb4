"""Journaled calls against a policyd with a PostgreSQL journal (TEST_DATABASE_URL)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import grpc
import httpx
import pytest
from harness import CountingInterceptor, Daemon, FakeServer, Reply, closed_port_addr

from policyd_client import (
    AsyncClient,
    Client,
    FailOpenPolicy,
    RetryCancelled,
    RetryEvent,
    RetryStopped,
    journal_pb2,
    policy_pb2,
)


def get_text(url: str) -> Callable[[], str]:
    def fetch() -> str:
        r = httpx.get(url, timeout=5)
        r.raise_for_status()
        return r.text

    return fetch


@pytest.fixture
def jclient(journal_daemon: Daemon) -> Iterator[Client]:
    with Client(journal_daemon.addr, timeout=10, agent="py-tests", journal=True) as c:
        yield c


def context(c: Client, context_id: str) -> journal_pb2.GetContextResponse:
    return c.journal_service.GetContext(journal_pb2.GetContextRequest(context_id=context_id), timeout=10)


def test_journaled_run_records_the_context_and_its_attempts(journal_daemon: Daemon, server: FakeServer) -> None:
    interceptor = CountingInterceptor()
    channel = grpc.intercept_channel(grpc.insecure_channel(journal_daemon.addr), interceptor)
    c = Client(journal_daemon.addr, timeout=10, agent="py-tests", channel=channel)
    url = server.script("/j", Reply(503), Reply(200, body="ok"))
    cid = str(uuid.uuid4())
    try:
        assert c.call(get_text(url), operation="web_fetch", profile="web_fetch", journal=True, context_id=cid,
                      labels={"test": "journaled"}) == "ok"  # fmt: skip
        assert interceptor.methods == ["BeginContext", "NextDelay", "FinishContext"]
        got = context(c, cid)
    finally:
        channel.close()
    assert got.context.outcome == journal_pb2.OUTCOME_RESOLVED
    assert got.context.agent == "py-tests"
    assert got.context.labels["test"] == "journaled"
    assert got.context.profile == "web_fetch"
    (attempt,) = got.attempts
    assert attempt.attempt == 1
    assert attempt.failure_type == policy_pb2.FAILURE_TYPE_OVERLOADED
    assert attempt.http_status == 503
    assert attempt.decision == policy_pb2.ACTION_RETRY


def test_failed_run_has_an_error_report(jclient: Client, server: FakeServer) -> None:
    url = server.script("/jf", Reply(401, body="no"), Reply(200))
    with pytest.raises(RetryStopped) as info:
        jclient.call(get_text(url), provider="web", operation="web_fetch")
    cid = info.value.context_id
    assert cid is not None
    assert uuid.UUID(cid).version == 7  # the client made it: a time-ordered UUIDv7
    got = context(jclient, cid)
    assert got.context.outcome == journal_pb2.OUTCOME_FAILED
    assert [a.failure_type for a in got.attempts] == [policy_pb2.FAILURE_TYPE_AUTH_INVALID]
    report = jclient.journal_service.GetErrorReport(
        journal_pb2.GetErrorReportRequest(context_id=cid), timeout=10
    ).report
    assert report.root_cause_type == policy_pb2.FAILURE_TYPE_AUTH_INVALID
    assert report.recovery_action == info.value.recovery_action
    assert report.text


def test_first_try_success_leaves_no_context(jclient: Client, server: FakeServer) -> None:
    url = server.script("/js", Reply(200))
    cid = str(uuid.uuid4())
    jclient.call(get_text(url), operation="web_fetch", context_id=cid)
    with pytest.raises(grpc.RpcError) as info:
        context(jclient, cid)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]


def test_cancelled_run_is_abandoned(jclient: Client, server: FakeServer) -> None:
    url = server.script("/jc", Reply(429, headers={"retry-after": "8"}))
    cid = str(uuid.uuid4())
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(RetryCancelled):
        jclient.call(get_text(url), operation="web_fetch", profile="web_fetch", context_id=cid, cancel=cancel)
    assert context(jclient, cid).context.outcome == journal_pb2.OUTCOME_ABANDONED


def test_attempts_decided_while_the_daemon_was_down_are_recorded_later(
    binary: str, database_url: str, server: FakeServer
) -> None:
    addr = closed_port_addr()
    cid = str(uuid.uuid4())
    started: list[Daemon] = []

    def start_daemon(event: RetryEvent) -> None:  # after the fail-open decision, before the sleep
        started.append(Daemon(binary, database_url=database_url, args=("--listen", addr)))

    # Retry-After 2 s: longer than the channel's first reconnect backoff (1 s ± 20 %), so the
    # end of the call finds the daemon up.
    url = server.script("/jd", Reply(503, headers={"retry-after": "2"}), Reply(200, body="ok"))
    try:
        fail_open = FailOpenPolicy(random=lambda: 0.0)
        with Client(addr, timeout=10, journal=True, fail_open=fail_open, on_retry=start_daemon) as c:
            assert c.call(get_text(url), operation="web_fetch", context_id=cid) == "ok"
            got = context(c, cid)
    finally:
        for d in started:
            d.stop()
    assert got.context.outcome == journal_pb2.OUTCOME_RESOLVED
    (attempt,) = got.attempts
    assert attempt.strategy == "fail-open/OVERLOADED"


def test_journal_requested_from_a_daemon_without_one(
    daemon: Daemon, server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="policyd_client")
    url = server.script("/jo", Reply(503), Reply(200, body="still works"))
    with Client(daemon.addr, timeout=10, journal=True) as c:
        assert c.call(get_text(url), operation="web_fetch", profile="web_fetch") == "still works"
    assert any("journal is off" in r.getMessage() for r in caplog.records)


def test_async_journaled_failure_and_cancel(journal_daemon: Daemon, server: FakeServer) -> None:
    failed_id, cancelled_id = str(uuid.uuid4()), str(uuid.uuid4())
    url_failed = server.script("/ja", Reply(404))
    url_cancel = server.script("/jb", Reply(429, headers={"retry-after": "8"}))

    async def get(url: str) -> str:
        async with httpx.AsyncClient() as h:
            r = await h.get(url)
            r.raise_for_status()
            return r.text

    async def main() -> tuple[journal_pb2.GetContextResponse, journal_pb2.GetContextResponse]:
        async with AsyncClient(journal_daemon.addr, timeout=10, journal=True) as c:
            with pytest.raises(RetryStopped):
                await c.call(lambda: get(url_failed), operation="web_fetch", context_id=failed_id)
            task = asyncio.create_task(
                c.call(lambda: get(url_cancel), operation="web_fetch", profile="web_fetch", context_id=cancelled_id)
            )
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.3)  # the shielded FinishContext
            a = await c.journal_service.GetContext(journal_pb2.GetContextRequest(context_id=failed_id), timeout=10)
            b = await c.journal_service.GetContext(journal_pb2.GetContextRequest(context_id=cancelled_id), timeout=10)
            return a, b

    failed, cancelled = asyncio.run(main())
    assert failed.context.outcome == journal_pb2.OUTCOME_FAILED
    assert failed.attempts[0].failure_type == policy_pb2.FAILURE_TYPE_NOT_FOUND
    assert cancelled.context.outcome == journal_pb2.OUTCOME_ABANDONED


def test_a_run_that_ends_while_the_daemon_is_away_is_finished_when_it_is_back(
    binary: str, database_url: str, server: FakeServer
) -> None:
    first = Daemon(binary, database_url=database_url)
    addr = first.addr
    cid = str(uuid.uuid4())
    url = server.script("/away", Reply(503), Reply(200, body="ok"))
    calls = 0

    def attempt() -> str:
        nonlocal calls
        calls += 1
        if calls == 2:
            first.stop()  # policyd goes away after deciding the retry, before the call ends
        return get_text(url)()

    second: Daemon | None = None
    try:
        with Client(addr, timeout=0.3, journal=True, sleep=lambda s: None) as c:
            start = time.monotonic()
            assert c.call(attempt, operation="web_fetch", profile="web_fetch", context_id=cid) == "ok"
            assert time.monotonic() - start < 5, "finishing must not hold the caller"
            second = Daemon(binary, database_url=database_url, args=("--listen", addr))
            deadline = time.monotonic() + 30
            outcome = None
            while time.monotonic() < deadline:
                try:
                    outcome = context(c, cid).context.outcome
                except grpc.RpcError:
                    outcome = None
                if outcome == journal_pb2.OUTCOME_RESOLVED:
                    break
                time.sleep(0.1)
            assert outcome == journal_pb2.OUTCOME_RESOLVED
    finally:
        if second is not None:
            second.stop()
