"""The transport with the real OpenAI and Anthropic SDKs, their retries off, against a real
policyd (fleet memory on) and the fake provider (bin/policyd-fakeprovider): policyd decides each
failure, a success passes through with no RPC, and the SDK raises its own errors when policyd
says stop (docs/clients.md, "The transport").

Each test uses its own model: the fleet's breakers are per provider and model. The Anthropic
SDK sends its key as a bearer token; the fake provider reads Anthropic's x-api-key header, so
the tests send that header too."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import grpc
import httpx
import httpx2
import openai
import pytest
from harness import CountingInterceptor, Daemon, FakeProvider, closed_port_addr

from policyd_client import (
    AsyncClient,
    AsyncPolicydTransport,
    Client,
    FleetGateError,
    PolicydTransport,
    RetryEvent,
    RetryStopped,
    httpx2_client,
    httpx_async_client,
    httpx_client,
    journal_pb2,
    policy_pb2,
)
from policyd_client._fleet import Target
from policyd_client._gen.policyd.v1 import policy_pb2_grpc
from policyd_client.transport import ERROR_BODY_BYTES

KEY = "sk-fake-transport"
HI = [{"role": "user", "content": "Say hi"}]
# A breaker that opens on three failures from one client and stays open through a test.
POLICY = "fleet:\n  breaker: {min_volume: 3, min_clients: 1, open_for: 30s}\n"


@pytest.fixture(scope="module")
def fleet(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    path = tmp_path_factory.mktemp("transport") / "policy.yaml"
    path.write_text(POLICY)
    d = Daemon(binary, args=("--fleet", "on", "--policy", str(path)))
    yield d
    d.stop()


class Policyd:
    """A Client on the daemon whose unary RPCs are counted, and whose waits are recorded, not slept."""

    def __init__(self, addr: str, *, real_sleep: bool = False, **options: Any) -> None:
        self.rpcs = CountingInterceptor()
        self.channel = grpc.intercept_channel(grpc.insecure_channel(addr), self.rpcs)
        self.slept: list[float] = []
        self.events: list[RetryEvent] = []

        def sleep(s: float) -> None:
            self.slept.append(s)
            if real_sleep:
                time.sleep(s)

        self.client = Client(addr, timeout=10, channel=self.channel, sleep=sleep, on_retry=self.events.append,
                             **options)  # fmt: skip

    def next_delays(self) -> int:
        return self.rpcs.methods.count("NextDelay")

    def close(self) -> None:
        self.client.close()
        self.channel.close()


@pytest.fixture
def pd(fleet: Daemon) -> Iterator[Policyd]:
    p = Policyd(fleet.addr)
    yield p
    p.close()


def openai_sdk(pd: Client, provider: FakeProvider, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=provider.url + "/v1", api_key=KEY, max_retries=0,
                         http_client=pd.httpx2_client(provider="openai", **options))  # fmt: skip


def anthropic_sdk(pd: Client, provider: FakeProvider, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=provider.url, api_key=KEY, default_headers={"x-api-key": KEY}, max_retries=0,
                               http_client=pd.httpx2_client(provider="anthropic", **options))  # fmt: skip


def chat(llm: openai.OpenAI, model: str, **kw: Any) -> str:
    r = llm.chat.completions.create(model=model, messages=HI, **kw)  # type: ignore[arg-type]
    return r.choices[0].message.content or ""


def message(llm: anthropic.Anthropic, model: str, **kw: Any) -> str:
    m = llm.messages.create(model=model, max_tokens=16, messages=HI, **kw)  # type: ignore[arg-type]
    block = m.content[0]
    assert block.type == "text"
    return block.text


# ---- success


def test_a_success_passes_through_with_no_rpc(pd: Policyd, provider: FakeProvider) -> None:
    llm = openai_sdk(pd.client, provider)
    assert chat(llm, "gpt-success").startswith("ok! ")
    assert message(anthropic_sdk(pd.client, provider), "claude-success").startswith("ok! ")
    assert provider.stats()["requests"] == 2
    assert pd.rpcs.methods == []  # no NextDelay, no journal call: the gate works from the stream


def test_a_stream_passes_through_as_it_comes(pd: Policyd, provider: FakeProvider) -> None:
    llm = openai_sdk(pd.client, provider)
    chunks = [c.choices[0].delta.content for c in llm.chat.completions.create(model="gpt-stream", messages=HI,  # type: ignore[arg-type]
                                                                                stream=True) if c.choices]  # fmt: skip
    assert "".join(c or "" for c in chunks) == "ok! " * 20
    with anthropic_sdk(pd.client, provider).messages.stream(model="claude-stream", max_tokens=5, messages=HI) as s:  # type: ignore[arg-type]
        assert "".join(s.text_stream) == "ok! " * 5
    assert provider.stats()["streams"] == 2 and pd.rpcs.methods == []


# ---- failures policyd decides


def test_an_overloaded_provider_is_retried_and_the_sdk_sees_the_success(pd: Policyd, provider: FakeProvider) -> None:
    provider.fail(529, count=2)
    assert message(anthropic_sdk(pd.client, provider), "claude-overloaded").startswith("ok! ")
    assert provider.stats()["requests"] == 3
    assert pd.next_delays() == 2
    assert [e.decision.failure_type for e in pd.events] == ["OVERLOADED", "OVERLOADED"]
    assert [e.failure.http_status for e in pd.events] == [529, 529]
    assert isinstance(pd.events[0].error, httpx2.HTTPStatusError)  # what the hook sees of the failure

    provider.fail(503, count=1)
    assert chat(openai_sdk(pd.client, provider), "gpt-unavailable").startswith("ok! ")
    assert provider.stats()["requests"] == 5 and pd.next_delays() == 3


def test_a_429s_retry_after_is_waited_out(fleet: Daemon, fakeprovider_binary: str) -> None:
    # 60 requests a minute, spent by another agent on the key: the next gets Anthropic's 429 with
    # retry-after (whole seconds until a request fits); it is waited out for real and the retry
    # gets through.
    limited = FakeProvider(fakeprovider_binary, "-rpm", "60")
    p = Policyd(fleet.addr, real_sleep=True)
    try:
        with httpx2.Client(base_url=limited.url, headers={"x-api-key": KEY}) as other:
            body = {"model": "claude-limited", "max_tokens": 1, "messages": HI}
            while other.post("/v1/messages", json=body).status_code == 200:
                pass
        started = time.monotonic()
        assert message(anthropic_sdk(p.client, limited), "claude-limited")
        (event,) = p.events
        assert event.failure.http_status == 429 and event.failure.headers["retry-after"] == "1"
        assert event.delay >= 1.0 and time.monotonic() - started >= 1.0
        assert limited.stats()["rate_limited"] == 2 and limited.stats()["ok"] == 61
    finally:
        p.close()
        limited.stop()


def test_a_request_that_cannot_succeed_is_the_sdks_own_error_at_once(pd: Policyd, provider: FakeProvider) -> None:
    provider.fail(400)
    with pytest.raises(openai.BadRequestError) as bad:
        chat(openai_sdk(pd.client, provider), "gpt-bad")
    assert bad.value.status_code == 400 and "server had an error" in str(bad.value)  # the body, restored
    provider.fail(401, body='{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}')
    with pytest.raises(anthropic.AuthenticationError) as auth:
        message(anthropic_sdk(pd.client, provider), "claude-auth")
    assert "invalid x-api-key" in str(auth.value)
    assert provider.stats()["requests"] == 2 and pd.slept == []
    assert pd.next_delays() == 2  # policyd said stop, once each


def test_when_policyd_says_stop_the_sdk_gets_the_last_response(pd: Policyd, provider: FakeProvider) -> None:
    body = '{"error": {"message": "' + "x" * (ERROR_BODY_BYTES + 100) + '", "type": "overloaded_error"}}'
    provider.fail(529, count=10, body=body)
    with pytest.raises(anthropic.APIStatusError) as info:
        message(anthropic_sdk(pd.client, provider), "claude-down")
    assert info.value.status_code == 529
    assert len(info.value.response.text) == len(body)  # all of it, though policyd got its first 64 KiB
    sent = provider.stats()["requests"]
    assert 1 < sent < 10 and pd.next_delays() == sent
    assert len(pd.events[0].failure.body) == ERROR_BODY_BYTES


def test_a_connection_error_is_decided_and_then_the_sdks_own_error(pd: Policyd) -> None:
    llm = openai.OpenAI(base_url=f"http://{closed_port_addr()}/v1", api_key=KEY, max_retries=0,
                        http_client=pd.client.httpx2_client(provider="openai"))  # fmt: skip
    with pytest.raises(openai.APIConnectionError) as info:
        chat(llm, "gpt-refused")
    assert isinstance(info.value.__cause__, httpx2.ConnectError)
    assert isinstance(info.value.__cause__.__cause__, RetryStopped)  # why it was not retried again
    assert len(pd.events) >= 1 and pd.events[0].decision.failure_type == "CONNECTION_ERROR"


def test_a_cut_stream_is_reported_and_not_retried(provider: FakeProvider) -> None:
    # A table without a stream (policyd is not there), so that its counts stay to be read.
    with Client(closed_port_addr(), timeout=0.2) as c:
        assert c._stream is not None and c._fleet is not None
        c._stream.close()
        provider.fail(cut_stream=True)
        stream = openai_sdk(c, provider).chat.completions.create(model="gpt-cut", messages=HI, stream=True)  # type: ignore[arg-type]
        with pytest.raises(openai.APIConnectionError):
            for _ in stream:
                pass
        assert provider.stats()["requests"] == 1
        (u,) = [u for m in c._fleet.reports() for u in m.usage]
        assert (u.admitted, u.succeeded, u.failed, u.retries) == (1, 1, 1, 0)


def test_the_gates_stop_raises_the_clients_error_without_a_request(fleet: Daemon, provider: FakeProvider) -> None:
    with grpc.insecure_channel(fleet.addr) as ch:  # another agent's failures open the breaker
        stub = policy_pb2_grpc.PolicyServiceStub(ch)
        failure = policy_pb2.Failure(provider="openai", model="gpt-open", http_status=503)
        for _ in range(3):
            stub.NextDelay(policy_pb2.NextDelayRequest(failure=failure, attempt=1, client_id="other"), timeout=10)
        failure = policy_pb2.Failure(provider="anthropic", model="claude-open", http_status=503)
        for _ in range(3):
            stub.NextDelay(policy_pb2.NextDelayRequest(failure=failure, attempt=1, client_id="other"), timeout=10)
    p = Policyd(fleet.addr, park_limit=0)
    try:
        with pytest.raises(RetryStopped) as info:
            chat(openai_sdk(p.client, provider), "gpt-open")
        assert info.value.attempts == 0 and isinstance(info.value.error, FleetGateError)
        assert info.value.decision is not None and info.value.decision.stop_reason == "CIRCUIT_OPEN"
        # The Anthropic SDK wraps whatever its transport raises in APIConnectionError.
        with pytest.raises(anthropic.APIConnectionError) as wrapped:
            message(anthropic_sdk(p.client, provider), "claude-open")
        assert isinstance(wrapped.value.__cause__, RetryStopped) and wrapped.value.__cause__.attempts == 0
        assert provider.stats()["requests"] == 0 and p.next_delays() == 0
    finally:
        p.close()


def test_the_deadline_bounds_each_request_and_its_retries(provider: FakeProvider) -> None:
    with Client(closed_port_addr(), timeout=0.2, sleep=lambda s: None) as c:
        provider.fail(503)
        with pytest.raises(openai.InternalServerError):  # no retry fits in 1 ms: the 503 it got
            chat(openai_sdk(c, provider, deadline=0.001), "gpt-deadline")
        assert provider.stats()["requests"] == 1
        provider.fail(503)
        assert chat(openai_sdk(c, provider, deadline=60), "gpt-deadline")
        assert provider.stats()["requests"] == 3


def test_policyd_away_fails_open(provider: FakeProvider) -> None:
    slept: list[float] = []
    with Client(closed_port_addr(), timeout=0.2, sleep=slept.append) as c:
        provider.fail(503)
        assert chat(openai_sdk(c, provider), "gpt-away").startswith("ok! ")
    assert provider.stats()["requests"] == 2 and len(slept) == 1


def test_a_streamed_request_body_is_sent_once(pd: Policyd, provider: FakeProvider) -> None:
    # A body the transport cannot hold (a generator) cannot be sent again: it goes as an
    # irreversible operation, policyd stops at the first failure, and the caller gets the response.
    def body() -> Iterator[bytes]:
        yield b'{"model": "gpt-streamed-body", '
        yield b'"messages": [{"role": "user", "content": "hi"}]}'

    provider.fail(503)
    with pd.client.httpx2_client(provider="openai") as http:
        r = http.post(provider.url + "/v1/chat/completions", content=body(), headers={"authorization": "Bearer k"})
    assert r.status_code == 503 and "server had an error" in r.text
    assert provider.stats()["requests"] == 1 and pd.next_delays() == 1 and pd.slept == []


def test_a_journaled_request_records_its_attempts(journal_daemon: Daemon, provider: FakeProvider) -> None:
    events: list[RetryEvent] = []
    with Client(journal_daemon.addr, timeout=10, on_retry=events.append, sleep=lambda s: None) as c:
        llm = anthropic_sdk(c, provider, journal=True, labels={"test": "transport"}, key_id="journal-key")
        provider.fail(529)
        assert message(llm, "claude-journal")
        (event,) = events
        assert event.context_id is not None
        got = c.journal_service.GetContext(journal_pb2.GetContextRequest(context_id=event.context_id), timeout=10)
    assert got.context.outcome == journal_pb2.OUTCOME_RESOLVED
    assert (got.context.provider, got.context.model, got.context.operation) == (
        "anthropic",
        "claude-journal",
        "messages",
    )
    assert got.context.labels["test"] == "transport"
    (attempt,) = got.attempts
    assert attempt.http_status == 529 and attempt.decision == policy_pb2.ACTION_RETRY


# ---- what the transport reads and reports


class Recording(httpx2.HTTPTransport):
    """httpx2's transport, keeping the headers of each request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: list[dict[str, str]] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.headers.append(dict(request.headers))
        return super().handle_request(request)


def offline_client() -> Client:
    """A Client whose table keeps its counts (no stream), with policyd away."""
    c = Client(closed_port_addr(), timeout=0.2)
    assert c._stream is not None
    c._stream.close()
    return c


def test_tokens_model_and_rate_limits_reach_the_report(fakeprovider_binary: str) -> None:
    limited = FakeProvider(fakeprovider_binary, "-rpm", "600", "-tpm", "100000")
    c = offline_client()
    inner = Recording()
    try:
        llm = openai.OpenAI(base_url=limited.url + "/v1", api_key=KEY, max_retries=0,
                            http_client=httpx2.Client(transport=PolicydTransport(c, inner=inner, key_id="team-a")))  # fmt: skip
        chat(llm, "gpt-tokens")
        body_bytes = int(inner.headers[0]["content-length"])
        chat(llm, "gpt-tokens", extra_headers={"x-policyd-input-tokens": "1234"})
        assert "x-policyd-input-tokens" not in inner.headers[1]  # stripped before sending
        assert c._fleet is not None
        (u,) = [u for m in c._fleet.reports() for u in m.usage]
        # The provider from the path (a local base URL), the model from the body.
        assert Target(u.target.provider, u.target.model, u.target.key_id) == Target("openai", "gpt-tokens", "team-a")
        assert u.first_attempt_input_tokens == math.ceil(body_bytes / 4) + 1234
        assert u.rate_limit_headers["x-ratelimit-limit-requests"] == "600"
        assert (u.admitted, u.succeeded, u.in_flight) == (2, 2, 0)
        with pytest.raises(ValueError, match="x-policyd-input-tokens: want a whole number"):
            chat(llm, "gpt-tokens", extra_headers={"x-policyd-input-tokens": "lots"})
        assert limited.stats()["requests"] == 2
    finally:
        c.close()
        limited.stop()


def test_a_successs_body_is_in_flight_until_it_is_read_or_closed(provider: FakeProvider) -> None:
    c = offline_client()
    assert c._fleet is not None
    table = c._fleet

    def in_flight() -> int:
        (u,) = [u for m in table.reports() for u in m.usage]
        return u.in_flight

    body = {"model": "gpt-body", "messages": HI, "stream": True}
    try:
        with httpx2_client(c, provider="openai") as http:
            with http.stream("POST", provider.url + "/v1/chat/completions", json=body,
                             headers={"authorization": f"Bearer {KEY}"}) as r:  # fmt: skip
                assert r.status_code == 200
                assert in_flight() == 1  # the attempt is over; its body holds the provider's slot
                assert b"ok! " in b"".join(r.iter_bytes())
                assert in_flight() == 0  # read to its end
            with http.stream("POST", provider.url + "/v1/chat/completions", json=body,
                             headers={"authorization": f"Bearer {KEY}"}) as r:  # fmt: skip
                assert in_flight() == 1
            assert in_flight() == 0  # closed unread
    finally:
        c.close()


def test_a_retry_reports_its_tokens_and_batch_calls_are_counted(provider: FakeProvider) -> None:
    c = offline_client()
    c._sleep = lambda s: None
    try:
        llm = openai_sdk(c, provider, priority="batch")
        provider.fail(503)
        chat(llm, "gpt-batch", extra_headers={"x-policyd-input-tokens": "100"})
        assert c._fleet is not None
        (u,) = [u for m in c._fleet.reports() for u in m.usage]
        assert (u.admitted, u.batch_first_attempts, u.retries) == (1, 1, 1)
        assert (u.first_attempt_input_tokens, u.retry_input_tokens) == (100, 100)
    finally:
        c.close()


def test_options_are_checked() -> None:
    with Client(closed_port_addr(), fleet_gate=False) as c:
        with pytest.raises(ValueError, match="priority must be"):
            c.httpx2_client(priority="urgent")  # type: ignore[typeddict-item]
        with pytest.raises(TypeError, match="unknown transport option 'modle'"):
            c.httpx2_client(modle="gpt-4o")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="inner must be a sync httpx2 transport"):
            PolicydTransport(c, inner=httpx2.AsyncHTTPTransport())
        with pytest.raises(TypeError, match="needs a policyd_client.AsyncClient"):
            AsyncPolicydTransport(c)  # type: ignore[arg-type]


def test_an_httpx_client_works_the_same(pd: Policyd, provider: FakeProvider) -> None:
    # The OpenAI SDK still takes an httpx client (its releases before httpx2 took only that).
    llm = openai.OpenAI(base_url=provider.url + "/v1", api_key=KEY, max_retries=0,
                        http_client=httpx_client(pd.client, provider="openai"))  # fmt: skip
    provider.fail(529)
    assert chat(llm, "gpt-httpx").startswith("ok! ")
    assert provider.stats()["requests"] == 2 and pd.next_delays() == 1
    assert isinstance(httpx2_client(pd.client), httpx2.Client) and isinstance(httpx_client(pd.client), httpx.Client)


# ---- asyncio


def run(coro: Callable[[], Any]) -> Any:
    return asyncio.run(coro())


def test_async_success_retry_stream_and_stop(fleet: Daemon, provider: FakeProvider) -> None:
    async def main() -> None:
        rpcs = CountingInterceptor()
        async with AsyncClient(fleet.addr, timeout=10, sleep=lambda s: asyncio.sleep(0)) as apd:
            oai = openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key=KEY, max_retries=0,
                                     http_client=apd.httpx2_async_client(provider="openai"))  # fmt: skip
            ant = anthropic.AsyncAnthropic(base_url=provider.url, api_key=KEY, default_headers={"x-api-key": KEY},
                                           max_retries=0, http_client=apd.httpx2_async_client(provider="anthropic"))  # fmt: skip
            r = await oai.chat.completions.create(model="gpt-async", messages=HI)  # type: ignore[arg-type]
            assert r.choices[0].message.content
            provider.fail(529, count=2)
            m = await ant.messages.create(model="claude-async", max_tokens=8, messages=HI)  # type: ignore[arg-type]
            assert m.content[0].type == "text" and m.content[0].text == "ok! " * 8
            assert provider.stats()["requests"] == 4
            chunks = []
            async for c in await oai.chat.completions.create(model="gpt-async", messages=HI, stream=True):  # type: ignore[arg-type]
                if c.choices:
                    chunks.append(c.choices[0].delta.content or "")
            assert "".join(chunks) == "ok! " * 20
            provider.fail(400)
            with pytest.raises(anthropic.BadRequestError):
                await ant.messages.create(model="claude-async", max_tokens=8, messages=HI)  # type: ignore[arg-type]
            assert provider.stats()["requests"] == 6
            # The same through an httpx client.
            oai1 = openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key=KEY, max_retries=0,
                                      http_client=httpx_async_client(apd, provider="openai"))  # fmt: skip
            provider.fail(503)
            r = await oai1.chat.completions.create(model="gpt-async", messages=HI)  # type: ignore[arg-type]
            assert r.choices[0].message.content and provider.stats()["requests"] == 8
        assert rpcs.methods == []

    run(main)


def test_async_cancelling_the_request_stops_its_wait(fleet: Daemon, provider: FakeProvider) -> None:
    async def main() -> None:
        async with AsyncClient(fleet.addr, timeout=10, sleep=lambda s: asyncio.sleep(30)) as apd:
            oai = openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key=KEY, max_retries=0,
                                     http_client=apd.httpx2_async_client(provider="openai"))  # fmt: skip
            provider.fail(503)
            task = asyncio.create_task(oai.chat.completions.create(model="gpt-cancel", messages=HI))  # type: ignore[arg-type]
            while provider.stats()["requests"] < 1:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert provider.stats()["requests"] == 1

    run(main)


def test_the_transport_module_is_loaded_on_first_use() -> None:
    import subprocess
    import sys

    code = "import sys, policyd_client; assert 'httpx' not in sys.modules and 'httpx2' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent)


# ---- what a success used


class ReportRecorder(grpc.StreamStreamClientInterceptor):  # type: ignore[misc]
    """Keeps every usage the client's stream sends to policyd."""

    def __init__(self) -> None:
        self.usages: list[Any] = []

    def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        def recorded() -> Iterator[Any]:
            for m in request_iterator:
                self.usages.extend(m.usage)
                yield m

        return continuation(client_call_details, recorded())


LONG = [{"role": "user", "content": "word " * 200}]  # the fake provider counts 250 input tokens


def test_the_input_tokens_a_response_says_reach_policyd_with_the_calls_estimate(
    fleet: Daemon, provider: FakeProvider
) -> None:
    reports = ReportRecorder()
    channel = grpc.intercept_channel(grpc.insecure_channel(fleet.addr), reports)
    c = Client(fleet.addr, timeout=10, channel=channel)
    try:
        llm = openai_sdk(c, provider)
        r = llm.chat.completions.create(
            model="gpt-usage", messages=LONG, extra_headers={"x-policyd-input-tokens": "1000"}
        )  # type: ignore[arg-type]
        assert r.usage is not None and r.usage.prompt_tokens == 250
        # A call whose response says nothing of its usage (a stream without include_usage): the
        # report that counts it carries the first's usage, had a report counted the first already.
        for _ in llm.chat.completions.create(model="gpt-usage", messages=HI, stream=True):  # type: ignore[arg-type]
            pass

        def sent() -> tuple[int, int, int]:
            us = [u for u in list(reports.usages) if u.target.model == "gpt-usage"]
            return (sum(u.admitted for u in us), sum(u.input_tokens_used for u in us),
                    sum(u.input_tokens_estimated_for_used for u in us))  # fmt: skip

        end = time.monotonic() + 10
        while sent()[0] < 2 and time.monotonic() < end:
            time.sleep(0.05)
        assert sent() == (2, 250, 1000)
        # policyd took the reports: it answers the target with an assignment.
        assert c._fleet is not None and c._fleet.assignment(Target("openai", "gpt-usage", "")) is not None
    finally:
        c.close()
        channel.close()


def usage_of(c: Client | AsyncClient) -> tuple[int, int, int, int, int]:
    """The table's next report of one target: (admitted, input_tokens_used,
    input_tokens_estimated_for_used, output_tokens_used, output_tokens_used_calls)."""
    assert c._fleet is not None
    (u,) = [u for m in c._fleet.reports() for u in m.usage]
    return (u.admitted, u.input_tokens_used, u.input_tokens_estimated_for_used,
            u.output_tokens_used, u.output_tokens_used_calls)  # fmt: skip


def test_the_usage_of_streams_is_read_as_the_sdk_reads_them(provider: FakeProvider) -> None:
    c = offline_client()
    try:
        with anthropic_sdk(c, provider).messages.stream(model="claude-usage", max_tokens=5, messages=LONG,  # type: ignore[arg-type]
                                                        extra_headers={"x-policyd-input-tokens": "300"}) as s:  # fmt: skip
            assert "".join(s.text_stream) == "ok! " * 5
        # message_start's input_tokens; message_delta's output_tokens, the last (message_start says 1)
        assert usage_of(c) == (1, 250, 300, 5, 1)
        llm = openai_sdk(c, provider)
        chunks = list(llm.chat.completions.create(model="gpt-usage", messages=LONG, stream=True,  # type: ignore[arg-type]
                                                  stream_options={"include_usage": True},
                                                  extra_headers={"x-policyd-input-tokens": "200"}))  # fmt: skip
        assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 250
        out = chunks[-1].usage.completion_tokens
        assert out > 0 and usage_of(c) == (1, 250, 200, out, 1)  # the last chunk's prompt_tokens, completion_tokens
        # A stream closed before the chunk that carries the usage says nothing.
        stream = llm.chat.completions.create(model="gpt-usage", messages=LONG, stream=True,  # type: ignore[arg-type]
                                             stream_options={"include_usage": True})  # fmt: skip
        next(iter(stream))
        stream.close()
        assert usage_of(c) == (1, 0, 0, 0, 0)
    finally:
        c.close()


def test_a_retried_call_counts_its_usage_once_at_its_estimate(provider: FakeProvider) -> None:
    c = offline_client()
    c._sleep = lambda s: None
    try:
        provider.fail(529)
        msg = anthropic_sdk(c, provider).messages.create(model="claude-usage", max_tokens=4, messages=LONG)  # type: ignore[arg-type]
        assert msg.usage.input_tokens == 250
        assert c._fleet is not None
        (u,) = [u for m in c._fleet.reports() for u in m.usage]
        assert (u.admitted, u.retries, u.input_tokens_used) == (1, 1, 250)
        assert u.input_tokens_estimated_for_used == u.first_attempt_input_tokens == u.retry_input_tokens > 0
    finally:
        c.close()


def test_async_transports_read_the_usage(provider: FakeProvider) -> None:
    async def main() -> None:
        async with AsyncClient(closed_port_addr(), timeout=0.2) as apd:
            apd._start_stream = lambda fleet: None  # type: ignore[method-assign]  # no stream: the table keeps its counts
            for http in (apd.httpx2_async_client(provider="openai"), httpx_async_client(apd, provider="openai")):
                oai = openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key=KEY, max_retries=0, http_client=http)
                r = await oai.chat.completions.create(model="gpt-usage", messages=LONG,  # type: ignore[arg-type]
                                                      extra_headers={"x-policyd-input-tokens": "400"})  # fmt: skip
                assert r.usage is not None and r.usage.prompt_tokens == 250
                assert r.usage.completion_tokens > 0
                assert usage_of(apd) == (1, 250, 400, r.usage.completion_tokens, 1)

    run(main)
