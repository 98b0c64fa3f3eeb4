"""AsyncClient against a real policyd process and a local HTTP server that fails on cue."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest
from harness import Daemon, FakeServer, Reply, closed_port_addr

from policyd_client import (
    SOURCE_FAIL_OPEN,
    SOURCE_POLICYD,
    AsyncClient,
    FailOpenPolicy,
    FallbackHint,
    RetryEvent,
    RetryStopped,
)


def get_text(url: str, timeout: float = 5) -> Callable[[], Awaitable[str]]:
    async def fetch() -> str:
        async with httpx.AsyncClient(timeout=timeout) as h:
            r = await h.get(url)
            r.raise_for_status()
            return r.text

    return fetch


def test_transient_503_then_success(daemon: Daemon, server: FakeServer) -> None:
    url = server.script("/a", Reply(503), Reply(200, body="async ok"))
    events: list[RetryEvent] = []

    async def main() -> str:
        async with AsyncClient(daemon.addr, timeout=10, on_retry=events.append) as c:
            return await c.call(get_text(url), operation="web_fetch", profile="web_fetch")

    assert asyncio.run(main()) == "async ok"
    assert [e.decision.failure_type for e in events] == ["OVERLOADED"]
    assert events[0].decision.source == SOURCE_POLICYD


def test_cancel_stops_at_once_mid_sleep(daemon: Daemon, server: FakeServer) -> None:
    url = server.script("/c", Reply(429, headers={"retry-after": "8"}), Reply(200))
    events: list[RetryEvent] = []

    async def main() -> float:
        async with AsyncClient(daemon.addr, timeout=10, on_retry=events.append) as c:
            task = asyncio.create_task(c.call(get_text(url), operation="web_fetch", profile="web_fetch"))
            while not events:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            start = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return time.monotonic() - start

    took = asyncio.run(main())
    assert events[0].delay >= 8
    assert took < 0.5
    assert server.count("/c") == 1


def test_timeout_around_the_call_stops_it(daemon: Daemon, server: FakeServer) -> None:
    url = server.script("/t", Reply(503, headers={"retry-after": "8"}), Reply(200))

    async def main() -> None:
        async with AsyncClient(daemon.addr, timeout=10) as c:
            await asyncio.wait_for(c.call(get_text(url), operation="web_fetch", profile="web_fetch"), 0.5)

    start = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(main())
    assert time.monotonic() - start < 1.5


def test_401_stops_with_the_recovery_action(daemon: Daemon, server: FakeServer) -> None:
    url = server.script("/u", Reply(401))

    async def main() -> None:
        async with AsyncClient(daemon.addr, timeout=10) as c:
            await c.call(get_text(url), operation="web_fetch")

    with pytest.raises(RetryStopped) as info:
        asyncio.run(main())
    assert info.value.recovery_action == "Authentication required; this page is not fetchable anonymously."
    assert server.count("/u") == 1


def test_async_fallback_and_decorator(daemon: Daemon, server: FakeServer) -> None:
    url = server.script("/f", Reply(429, headers={"retry-after": "61"}))
    kinds: list[str] = []

    async def other_provider(hint: FallbackHint) -> str:
        kinds.append(hint.kind)
        return "fallback"

    async def main() -> tuple[str, str]:
        async with AsyncClient(daemon.addr, timeout=10) as c:

            async def ask() -> str:
                async with httpx.AsyncClient() as h:
                    return (await h.post(url)).raise_for_status().text

            a = await c.call(ask, provider="openai", operation="chat", fallback=other_provider)
            server.script("/g", Reply(502), Reply(200, body="decorated"))

            @c.retry(operation="web_fetch", profile="web_fetch")
            async def fetch(path: str) -> str:
                return await get_text(server.url(path))()

            return a, await fetch("/g")

    assert asyncio.run(main()) == ("fallback", "decorated")
    assert kinds == ["OTHER_PROVIDER"]
    assert server.count("/g") == 2


def test_daemon_down_fails_open(server: FakeServer) -> None:
    url = server.script("/d", Reply(503), Reply(200, body="served"))
    url401 = server.script("/d401", Reply(401), Reply(200))
    events: list[RetryEvent] = []

    async def main() -> str:
        fail_open = FailOpenPolicy(random=lambda: 0.1)
        async with AsyncClient(closed_port_addr(), fail_open=fail_open, on_retry=events.append) as c:
            got = await c.call(get_text(url), operation="web_fetch")
            with pytest.raises(RetryStopped) as info:
                await c.call(get_text(url401), operation="web_fetch")
            assert info.value.decision is not None and info.value.decision.source == SOURCE_FAIL_OPEN
            return got

    assert asyncio.run(main()) == "served"
    assert [e.decision.source for e in events] == [SOURCE_FAIL_OPEN]
    assert server.count("/d401") == 1


def test_injected_sleep_sees_the_task_runner_delays(daemon: Daemon) -> None:
    slept: list[float] = []

    async def record(s: float) -> None:
        slept.append(s)

    class TaskError(Exception):
        code = "LINT_FAILURE"

    attempts = 0

    async def task() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 4:
            raise TaskError("lint failed")
        return "done"

    async def main() -> str:
        async with AsyncClient(daemon.addr, timeout=10, profile="task_runner", sleep=record) as c:
            return await c.call(task, operation="task")

    assert asyncio.run(main()) == "done"
    assert slept == [5.0, 10.0, 15.0]
