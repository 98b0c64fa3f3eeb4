"""Client against a real policyd process and a local HTTP server that fails on cue."""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import anthropic
import httpx
import openai
import pytest
import requests
from conftest import Counted
from harness import BlackHole, Daemon, FakeServer, Reply, closed_port_addr

from policyd_client import (
    SOURCE_FAIL_OPEN,
    SOURCE_POLICYD,
    Action,
    Client,
    FailOpenPolicy,
    FallbackHint,
    RetryCancelled,
    RetryEvent,
    RetryStopped,
)


def get_text(url: str, timeout: float = 5) -> Callable[[], str]:
    def fetch() -> str:
        r = httpx.get(url, timeout=timeout)
        r.raise_for_status()
        return r.text

    return fetch


class Events:
    def __init__(self) -> None:
        self.list: list[RetryEvent] = []

    def __call__(self, e: RetryEvent) -> None:
        self.list.append(e)

    @property
    def types(self) -> list[str]:
        return [e.decision.failure_type for e in self.list]


@pytest.fixture
def events() -> Events:
    return Events()


def test_success_makes_no_rpc(counted: Counted, server: FakeServer) -> None:
    url = server.script("/ok", Reply(200, body="fine"))
    assert counted.client.call(get_text(url), operation="web_fetch", journal=True) == "fine"
    # Nor with a context id of the caller's (the same test in every client).
    assert counted.client.call(get_text(url), operation="web_fetch", context_id=str(uuid.uuid4())) == "fine"
    assert counted.rpcs == []


def test_transient_503_then_success(client: Client, server: FakeServer, events: Events) -> None:
    url = server.script("/t", Reply(503, body="busy"), Reply(200, body="done"))
    client.on_retry = events
    assert client.call(get_text(url), operation="web_fetch", profile="web_fetch") == "done"
    assert server.count("/t") == 2
    assert events.types == ["OVERLOADED"]
    assert events.list[0].decision.source == SOURCE_POLICYD
    assert events.list[0].decision.strategy == "web_fetch/OVERLOADED"


def test_429_with_retry_after_waits_at_least_that(client: Client, server: FakeServer) -> None:
    url = server.script("/rl", Reply(429, headers={"retry-after": "1"}), Reply(200))
    client.call(get_text(url), provider="web", operation="web_fetch", profile="web_fetch")
    first, second = server.hits["/rl"]
    assert second.at - first.at >= 1.0


def test_401_is_not_retried_and_the_recovery_action_reaches_the_caller(client: Client, server: FakeServer) -> None:
    url = server.script("/auth", Reply(401, body="who are you"), Reply(200))
    with pytest.raises(RetryStopped) as info:
        client.call(get_text(url), operation="web_fetch")
    e = info.value
    assert server.count("/auth") == 1
    assert isinstance(e.__cause__, httpx.HTTPStatusError) and e.error is e.__cause__
    assert e.decision is not None and e.decision.failure_type == "AUTH_INVALID"
    assert e.decision.stop_reason == "NOT_RETRYABLE"
    assert e.recovery_action == "Authentication required; this page is not fetchable anonymously."
    assert e.recovery_action in str(e)
    assert e.attempts == 1


def test_llm_401_recovery_action(client: Client, server: FakeServer) -> None:
    body = '{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}'
    url = server.script("/v1/chat", Reply(401, body=body))
    with pytest.raises(RetryStopped) as info:
        client.call(lambda: httpx.post(url).raise_for_status(), provider="openai", operation="chat")
    assert info.value.recovery_action == "Fix the API credentials (key, token or endpoint), then run again."


@pytest.mark.parametrize("drop", ["close", "reset"])
@pytest.mark.parametrize("lib", ["httpx", "requests", "urllib"])
def test_dropped_connection_is_retried(client: Client, server: FakeServer, events: Events, lib: str, drop: str) -> None:
    url = server.script("/drop", Reply(drop=drop), Reply(200, body="back"))
    fetch: Callable[[], str] = {
        "httpx": get_text(url),
        "requests": lambda: requests.get(url, timeout=5).text,
        "urllib": lambda: urllib.request.urlopen(url, timeout=5).read().decode(),
    }[lib]
    client.on_retry = events
    assert client.call(fetch, operation="web_fetch", profile="web_fetch") == "back"
    assert server.count("/drop") == 2
    assert events.types == ["CONNECTION_ERROR"]


def test_slow_response_times_out_and_is_retried(client: Client, server: FakeServer, events: Events) -> None:
    url = server.script("/slow", Reply(delay=3, body="late"), Reply(200, body="quick"))
    client.on_retry = events
    assert client.call(get_text(url, timeout=0.3), operation="web_fetch", profile="web_fetch") == "quick"
    assert events.types == ["TIMEOUT"]


def test_cancel_stops_at_once_mid_sleep(client: Client, server: FakeServer, events: Events) -> None:
    url = server.script("/c", Reply(429, headers={"retry-after": "8"}), Reply(200))
    cancel = threading.Event()
    client.on_retry = events
    threading.Timer(0.3, cancel.set).start()
    start = time.monotonic()
    with pytest.raises(RetryCancelled) as info:
        client.call(get_text(url), operation="web_fetch", profile="web_fetch", cancel=cancel)
    took = time.monotonic() - start
    assert events.list[0].delay >= 8  # it was sleeping ...
    assert took < 0.3 + 0.5  # ... and stopped at once
    assert server.count("/c") == 1
    assert isinstance(info.value.__cause__, httpx.HTTPStatusError)


def test_cancel_is_checked_with_an_injected_sleep(daemon: Daemon, server: FakeServer) -> None:
    url = server.script("/c2", Reply(503), Reply(200))
    cancel = threading.Event()
    c = Client(daemon.addr, timeout=10, sleep=lambda s: cancel.set())
    with pytest.raises(RetryCancelled):
        c.call(get_text(url), operation="web_fetch", cancel=cancel)
    assert server.count("/c2") == 1


class TaskError(Exception):
    """A seed-002 style task failure: the runner's error code on .code."""

    def __init__(self, code: str) -> None:
        super().__init__(f"task failed with {code}")
        self.code = code


def failing(*codes: str, result: str = "done") -> Callable[[], str]:
    it: Iterator[str] = iter(codes)

    def run() -> str:
        code = next(it, None)
        if code is not None:
            raise TaskError(code)
        return result

    return run


@pytest.fixture
def task_client(daemon: Daemon) -> Iterator[tuple[Client, list[float]]]:
    slept: list[float] = []
    with Client(daemon.addr, timeout=10, profile="task_runner", sleep=slept.append) as c:
        yield c, slept


def test_task_runner_profile_sequence(task_client: tuple[Client, list[float]]) -> None:
    c, slept = task_client
    # transient task failures: linear 5, 10, 15 s
    assert c.call(failing("TEST_FAILURE", "LINT_FAILURE", "TASK_FAILED"), operation="task") == "done"
    assert slept == [5.0, 10.0, 15.0]
    # rate limit: exponential 30, 60, 120, 240, 300 s (capped)
    slept.clear()
    assert c.call(failing(*["RATE_LIMIT"] * 6), operation="task") == "done"
    assert slept == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0]
    # fatal codes stop at once
    slept.clear()
    with pytest.raises(RetryStopped) as info:
        c.call(failing("HOOK_FAILURE"), operation="task")
    assert slept == [] and info.value.decision is not None
    assert info.value.decision.failure_type == "TASK_FATAL"
    # a transient failure that keeps failing: 4 attempts, then stop
    with pytest.raises(RetryStopped) as info:
        c.call(failing(*["TEST_FAILURE"] * 10), operation="task")
    assert slept == [5.0, 10.0, 15.0]
    assert info.value.attempts == 4
    assert info.value.decision is not None and info.value.decision.stop_reason == "ATTEMPTS_EXHAUSTED"


def test_fallback_hint_is_handed_to_the_fallback_function(client: Client, server: FakeServer) -> None:
    # A Retry-After above the default profile's 60 s provider ceiling: fall back to another provider.
    url = server.script("/fb", Reply(429, headers={"retry-after": "61"}))
    hints: list[FallbackHint] = []

    def other_provider(hint: FallbackHint) -> str:
        hints.append(hint)
        return "answer from the other provider"

    fetch = lambda: httpx.post(url).raise_for_status().text  # noqa: E731
    got = client.call(fetch, provider="openai", operation="chat", fallback=other_provider)
    assert got == "answer from the other provider"
    (hint,) = hints
    assert hint.kind == "OTHER_PROVIDER"
    assert hint.decision.action is Action.FALL_BACK
    assert hint.decision.stop_reason == "SERVER_DELAY_ABOVE_CEILING"
    assert isinstance(hint.error, httpx.HTTPStatusError)
    # Without a fallback function the same decision stops with the reason.
    with pytest.raises(RetryStopped) as info:
        client.call(fetch, provider="openai", operation="chat")
    assert info.value.decision is not None and info.value.decision.action is Action.FALL_BACK
    # It says the call stopped, why, and where it would have gone.
    assert (
        "stopped after 1 attempt: policyd advised a fallback to OTHER_PROVIDER, and the call has no fallback function"
        in str(info.value)
    )


def test_deadline_stops_a_retry_that_would_pass_it(client: Client, server: FakeServer) -> None:
    url = server.script("/dl", Reply(429, headers={"retry-after": "5"}), Reply(200))
    start = time.monotonic()
    with pytest.raises(RetryStopped) as info:
        client.call(get_text(url), operation="web_fetch", profile="web_fetch", deadline=1.0)
    assert time.monotonic() - start < 1.0
    assert info.value.decision is not None and info.value.decision.stop_reason == "DEADLINE"
    assert server.count("/dl") == 1


def test_post_to_a_web_fetch_is_not_repeated(client: Client, server: FakeServer) -> None:
    url = server.script("/post", Reply(503), Reply(200))
    with pytest.raises(RetryStopped) as info:
        client.call(lambda: httpx.post(url).raise_for_status(), operation="web_fetch", profile="web_fetch")
    assert info.value.decision is not None
    assert info.value.decision.stop_reason == "IRREVERSIBLE_OPERATION"
    assert server.count("/post") == 1


def test_decorator(client: Client, server: FakeServer) -> None:
    url = server.script("/dec", Reply(502), Reply(200, body="decorated"))

    @client.retry(operation="web_fetch", profile="web_fetch")
    def fetch(u: str, *, timeout: float = 5) -> str:
        return get_text(u, timeout)()

    assert fetch(url, timeout=5) == "decorated"
    assert fetch.__name__ == "fetch"
    assert server.count("/dec") == 2


def test_keyboard_interrupt_is_never_retried(counted: Counted) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        counted.client.call(interrupted)
    assert counted.rpcs == []


# ---- the OpenAI and Anthropic SDKs against the local server


def test_openai_sdk_rate_limit_then_success(client: Client, server: FakeServer, events: Events) -> None:
    err = '{"error": {"message": "Rate limit reached for gpt-4o", "type": "requests", "code": "rate_limit_exceeded"}}'
    ok = (
        '{"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-4o", "choices": [{"index": 0, '
        '"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}'
    )
    server.script("/v1/chat/completions", Reply(429, headers={"retry-after": "1"}, body=err), Reply(200, body=ok))
    llm = openai.OpenAI(base_url=server.url("/v1"), api_key="test", max_retries=0)
    client.on_retry = events

    def ask() -> str:
        r = llm.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hello"}])
        return r.choices[0].message.content or ""

    assert client.call(ask, provider="openai", model="gpt-4o", operation="chat") == "hi"
    (e,) = events.list
    assert isinstance(e.error, openai.RateLimitError)
    assert e.decision.failure_type == "RATE_LIMIT"
    assert e.delay >= 1.1  # Retry-After 1 s + 10 % under the default profile
    assert e.failure.headers["retry-after"] == "1"


def test_anthropic_sdk_overloaded_then_invalid_key(client: Client, server: FakeServer, events: Events) -> None:
    overloaded = '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    bad_key = '{"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}'
    server.script("/v1/messages", Reply(529, body=overloaded), Reply(401, body=bad_key))
    llm = anthropic.Anthropic(base_url=server.url(""), api_key="test", max_retries=0)
    client.on_retry = events

    def ask() -> object:
        return llm.messages.create(model="claude", max_tokens=10, messages=[{"role": "user", "content": "hi"}])

    with pytest.raises(RetryStopped) as info:
        client.call(ask, provider="anthropic", operation="chat")
    assert events.types == ["OVERLOADED"]
    assert events.list[0].decision.source == SOURCE_POLICYD
    assert events.list[0].failure.http_status == 529
    assert isinstance(info.value.error, anthropic.AuthenticationError)
    assert info.value.decision is not None and info.value.decision.failure_type == "AUTH_INVALID"
    assert server.count("/v1/messages") == 2


# ---- fail open


def quick_fail_open() -> FailOpenPolicy:
    return FailOpenPolicy(random=lambda: 0.1)  # 0.1 s, 0.2 s, ...


def test_daemon_down_fails_open(server: FakeServer, caplog: pytest.LogCaptureFixture, events: Events) -> None:
    caplog.set_level(logging.WARNING, logger="policyd_client")
    url = server.script("/down", Reply(503), Reply(503), Reply(200, body="served"))
    with Client(closed_port_addr(), fail_open=quick_fail_open(), on_retry=events) as c:
        assert c.call(get_text(url), operation="web_fetch", journal=True) == "served"
        assert [e.decision.source for e in events.list] == [SOURCE_FAIL_OPEN, SOURCE_FAIL_OPEN]
        url = server.script("/down401", Reply(401), Reply(200))
        with pytest.raises(RetryStopped) as info:
            c.call(get_text(url), operation="web_fetch")
    assert server.count("/down401") == 1
    assert info.value.decision is not None and info.value.decision.source == SOURCE_FAIL_OPEN
    assert info.value.decision.failure_type == "AUTH_INVALID"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # warned once for the outage
    assert "fail-open" in warnings[0].getMessage()


def test_hung_daemon_fails_open_after_the_rpc_timeout(server: FakeServer, events: Events) -> None:
    hole = BlackHole()
    try:
        url = server.script("/hung", Reply(503), Reply(200, body="ok"))
        with Client(hole.addr, timeout=0.3, fail_open=quick_fail_open(), on_retry=events) as c:
            start = time.monotonic()
            assert c.call(get_text(url), operation="web_fetch") == "ok"
            assert time.monotonic() - start < 2.0
        assert [e.decision.source for e in events.list] == [SOURCE_FAIL_OPEN]
    finally:
        hole.close()


def test_hung_daemon_never_holds_the_caller_past_its_deadline(server: FakeServer) -> None:
    hole = BlackHole()
    try:
        url = server.script("/hung2", Reply(503), Reply(200))
        with Client(hole.addr, timeout=30, fail_open=quick_fail_open()) as c:
            start = time.monotonic()
            with pytest.raises(RetryStopped) as info:
                c.call(get_text(url), operation="web_fetch", deadline=0.5)
            assert time.monotonic() - start < 0.5 + 0.5
        assert info.value.decision is not None and info.value.decision.stop_reason == "DEADLINE"
    finally:
        hole.close()


def test_daemon_answers_again_after_an_outage(binary: str, server: FakeServer, events: Events) -> None:
    addr = closed_port_addr()
    port = addr.rsplit(":", 1)[1]
    url = server.script("/again", Reply(503), Reply(200))
    with Client(addr, timeout=10, fail_open=quick_fail_open(), on_retry=events) as c:
        c.call(get_text(url), operation="web_fetch")
        d = Daemon(binary, args=("--listen", addr))  # the later --listen wins
        try:
            assert d.addr.endswith(":" + port)
            deadline = time.monotonic() + 10
            while events.list[-1].decision.source != SOURCE_POLICYD and time.monotonic() < deadline:
                server.script("/again", Reply(503), Reply(200))
                c.call(get_text(url), operation="web_fetch")
                time.sleep(0.1)
        finally:
            d.stop()
    assert events.list[0].decision.source == SOURCE_FAIL_OPEN
    assert events.list[-1].decision.source == SOURCE_POLICYD
