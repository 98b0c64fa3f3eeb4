"""Tokens and TLS against real policyd processes started with --auth-tokens, TLS and mutual TLS."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
from harness import TOKEN, WRONG_TOKEN, Certs, Daemon, FakeServer, Reply

from policyd_client import SOURCE_POLICYD, AsyncClient, Client, PolicydAuthError, RetryEvent, policy_pb2


def get_text(url: str) -> str:
    r = httpx.get(url, timeout=5)
    r.raise_for_status()
    return r.text


def no_token_in(*texts: str) -> None:
    for text in texts:
        assert TOKEN not in text and WRONG_TOKEN not in text


def test_right_token(auth_daemon: Daemon, server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = server.script("/ok", Reply(503), Reply(200, body="fine"))
    events: list[RetryEvent] = []
    with Client(auth_daemon.addr, token=TOKEN, timeout=10, on_retry=events.append, sleep=lambda s: None) as c:
        assert c.call(lambda: get_text(url), operation="web_fetch", method="GET", profile="web_fetch") == "fine"
        # The generated stubs go through the same channel, with the token.
        c.policy.Classify(policy_pb2.ClassifyRequest(failure=policy_pb2.Failure(http_status=429)), timeout=10)
    assert [e.decision.source for e in events] == [SOURCE_POLICYD]
    no_token_in(caplog.text, auth_daemon.logs())


def test_token_from_env(auth_daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLICYD_TOKEN", TOKEN)
    with Client(auth_daemon.addr, timeout=10) as c:
        c.policy.Classify(policy_pb2.ClassifyRequest(failure=policy_pb2.Failure(http_status=503)), timeout=10)
    # token="" sends none, whatever the environment says.
    with Client(auth_daemon.addr, token="", timeout=10) as c, pytest.raises(PolicydAuthError):
        c.call(lambda: get_text("http://127.0.0.1:1/"), operation="web_fetch", method="GET")


@pytest.mark.parametrize(
    "token, says",
    [
        (None, "missing bearer token"),
        (WRONG_TOKEN, "invalid bearer token; the token sent (POLICYD_TOKEN or token=) is not in"),
    ],
)
def test_refused_token_is_an_error_not_an_outage(
    token: str | None,
    says: str,
    auth_daemon: Daemon,
    server: FakeServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("POLICYD_TOKEN", raising=False)
    caplog.set_level(logging.DEBUG)
    url = server.script("/refused", Reply(503), Reply(200))
    events: list[RetryEvent] = []
    with Client(auth_daemon.addr, token=token, timeout=10, journal=True, on_retry=events.append) as c:
        with pytest.raises(PolicydAuthError) as info:
            c.call(lambda: get_text(url), operation="web_fetch", method="GET", profile="web_fetch")
    e = info.value
    assert says in str(e) and "UNAUTHENTICATED" in str(e)
    if token is None:
        assert "set POLICYD_TOKEN" in str(e)
    assert e.method == "BeginContext"  # journaled: the first RPC of a failing call
    assert isinstance(e.error, httpx.HTTPStatusError) and e.__cause__ is e.error
    assert server.count("/refused") == 1 and events == []  # not retried by the fail-open policy
    assert "fail-open" not in caplog.text
    no_token_in(str(e), caplog.text, auth_daemon.logs())


def test_refused_token_async(auth_daemon: Daemon, server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = server.script("/async", Reply(503), Reply(503), Reply(200, body="async fine"))

    async def fetch() -> str:
        async with httpx.AsyncClient(timeout=5) as h:
            r = await h.get(url)
            r.raise_for_status()
            return r.text

    async def main() -> None:
        async with AsyncClient(auth_daemon.addr, token=WRONG_TOKEN, timeout=10) as c:
            with pytest.raises(PolicydAuthError) as info:
                await c.call(fetch, operation="web_fetch", method="GET", profile="web_fetch")
            assert info.value.method == "NextDelay" and info.value.token_set
        async with AsyncClient(auth_daemon.addr, token=TOKEN, timeout=10, sleep=lambda s: asyncio.sleep(0)) as c:
            assert await c.call(fetch, operation="web_fetch", method="GET", profile="web_fetch") == "async fine"

    asyncio.run(main())
    assert server.count("/async") == 3
    no_token_in(caplog.text, auth_daemon.logs())


def test_no_plaintext_token_beyond_loopback() -> None:
    for cls in (Client, AsyncClient):
        with pytest.raises(ValueError, match="not sending the bearer token") as info:
            cls("10.20.30.40:7433", token=TOKEN)
        no_token_in(str(info.value))
    Client("localhost:7433", token=TOKEN).close()
    Client("[::1]:7433", token=TOKEN).close()


def test_tls_with_token(tls_daemon: Daemon, certs: Certs, server: FakeServer) -> None:
    url = server.script("/tls", Reply(503), Reply(200, body="over tls"))
    with Client(tls_daemon.addr, token=TOKEN, tls_ca=certs.ca, timeout=10, sleep=lambda s: None) as c:
        assert c.call(lambda: get_text(url), operation="web_fetch", method="GET", profile="web_fetch") == "over tls"


def test_mutual_tls(mtls_daemon: Daemon, certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    req = policy_pb2.ClassifyRequest(failure=policy_pb2.Failure(http_status=429))
    kw = {"tls_ca": certs.ca, "tls_cert": certs.client_cert, "tls_key": certs.client_key}
    with Client(mtls_daemon.addr, token=TOKEN, timeout=10, **kw) as c:
        assert c.policy.Classify(req, timeout=10).classification.rule

    async def main() -> str:
        async with AsyncClient(mtls_daemon.addr, token=TOKEN, timeout=10, **kw) as c:
            return (await c.policy.Classify(req, timeout=10)).classification.rule

    assert asyncio.run(main())
    # From the environment.
    monkeypatch.setenv("POLICYD_TOKEN", TOKEN)
    monkeypatch.setenv("POLICYD_TLS_CA", certs.ca)
    monkeypatch.setenv("POLICYD_TLS_CERT", certs.client_cert)
    monkeypatch.setenv("POLICYD_TLS_KEY", certs.client_key)
    with Client(mtls_daemon.addr, timeout=10) as c:
        assert c.policy.Classify(req, timeout=10).classification.rule
    # Without the client certificate the handshake fails.
    monkeypatch.delenv("POLICYD_TLS_CERT")
    monkeypatch.delenv("POLICYD_TLS_KEY")
    # The handshake fails in grpc with whatever its TLS stack raises.
    with Client(mtls_daemon.addr, timeout=10) as c, pytest.raises(Exception):  # noqa: B017
        c.policy.Classify(req, timeout=5)


def test_tls_configuration_errors(certs: Certs) -> None:
    with pytest.raises(ValueError, match="cannot read the TLS CA file"):
        Client("127.0.0.1:1", tls_ca="/nonexistent/ca.pem")
    with pytest.raises(ValueError, match="both the certificate and the key"):
        Client("127.0.0.1:1", tls_cert=certs.client_cert)
    with pytest.raises(ValueError, match="not both"):
        Client("127.0.0.1:1", token=TOKEN, channel=object())  # type: ignore[arg-type]
