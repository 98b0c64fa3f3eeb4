"""A mistake in the caller's configuration is an error, not an outage (docs/clients.md, "Configuration errors")."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from harness import Daemon, FakeServer, Reply

from policyd_client import AsyncClient, Client, PolicydConfigError, PolicydOptionsError


def fetch(url: str) -> str:
    r = httpx.get(url, timeout=5)
    r.raise_for_status()
    return r.text


@pytest.mark.parametrize("journal", [False, True], ids=["plain", "journaled"])
def test_unknown_profile_raises_with_the_daemon_message(
    request: pytest.FixtureRequest, server: FakeServer, journal: bool
) -> None:
    url = server.script("/p", Reply(503), Reply(200))
    addr = request.getfixturevalue("journal_daemon" if journal else "daemon").addr
    with Client(addr, timeout=10, profile="web_fech", journal=journal) as c:
        with pytest.raises(PolicydOptionsError) as info:
            c.call(lambda: fetch(url), operation="web_fetch")
    assert 'unknown profile "web_fech"; known:' in str(info.value)
    assert isinstance(info.value.error, httpx.HTTPStatusError)
    assert server.count("/p") == 1  # no retry on the built-in policy


def test_a_context_id_the_daemon_refuses_raises(journal_daemon: Daemon, server: FakeServer) -> None:
    url = server.script("/l", Reply(503), Reply(200))
    labels = {f"k{i}": "v" for i in range(100)}
    with Client(journal_daemon.addr, timeout=10, journal=True) as c:
        with pytest.raises(PolicydConfigError, match="BeginContext: INVALID_ARGUMENT: labels"):
            c.call(lambda: fetch(url), operation="web_fetch", labels=labels, context_id=str(uuid.uuid4()))


def test_async_unknown_profile_raises(daemon: Daemon, server: FakeServer) -> None:
    url = server.script("/a", Reply(503), Reply(200))

    async def attempt() -> str:
        async with httpx.AsyncClient() as h:
            r = await h.get(url, timeout=5)
            r.raise_for_status()
            return r.text

    async def main() -> None:
        async with AsyncClient(daemon.addr, timeout=10, profile="web_fech") as c:
            with pytest.raises(PolicydOptionsError, match="web_fech"):
                await c.call(attempt, operation="web_fetch")

    asyncio.run(main())


def test_an_http_url_address_reaches_the_daemon(daemon: Daemon, server: FakeServer) -> None:
    url = server.script("/u", Reply(503), Reply(200, body="ok"))
    sources: list[str] = []
    with Client(
        f"http://{daemon.addr}/", timeout=10, sleep=lambda s: None, on_retry=lambda e: sources.append(e.decision.source)
    ) as c:
        assert c.call(lambda: fetch(url), operation="web_fetch") == "ok"
    assert sources == ["policyd"]
