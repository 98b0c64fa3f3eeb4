"""Fleet memory: the key id and client id the client sends, and the fleet state, fallback
targets and stop reasons it reads from the daemon's decisions."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator

import grpc
import httpx
import pytest
from google.protobuf import duration_pb2
from harness import Daemon, FakeServer, Reply

from policyd_client import Action, Client, Decision, FallbackHint, FleetState, RetryEvent, RetryStopped
from policyd_client._gen.policyd.v1 import fleet_pb2, fleet_pb2_grpc
from policyd_client._gen.policyd.v1 import policy_pb2 as pb

INVALID_KEY = (
    '{"error": {"message": "Incorrect API key provided: sk-abc***xyz.", "type": "invalid_request_error",'
    ' "code": "invalid_api_key"}}'
)
# A fallback chain, so that FALL_BACK names its target.
POLICY = "fallbacks:\n  openai/gpt-4o: [anthropic/claude-sonnet-4-5]\n"


@pytest.fixture(scope="module")
def fleet_daemon(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """policyd with fleet memory on (the harness's --fleet off is overridden). Tests use
    their own key ids, so that one test's failures do not stop another's key."""
    policy = tmp_path_factory.mktemp("fleet") / "policy.yaml"
    policy.write_text(POLICY)
    d = Daemon(binary, args=("--fleet", "on", "--policy", str(policy)))
    yield d
    d.stop()


def post(url: str) -> str:
    return httpx.post(url).raise_for_status().text


def chat(c: Client, url: str, key_id: str) -> str:
    """A chat call to openai/gpt-4o with key_id; the retries' waits are skipped by the clients' sleep."""
    return c.call(lambda: post(url), provider="openai", model="gpt-4o", key_id=key_id, operation="chat", method="POST")


def buckets(addr: str) -> list[fleet_pb2.Bucket]:
    with grpc.insecure_channel(addr) as ch:
        resp = fleet_pb2_grpc.FleetServiceStub(ch).ListBuckets(fleet_pb2.ListBucketsRequest(), timeout=10)
    return list(resp.buckets)


def test_a_revoked_key_stops_the_fleet_on_that_key_only(fleet_daemon: Daemon, server: FakeServer) -> None:
    revoked = server.script("/v1/revoked", Reply(401, headers={"content-type": "application/json"}, body=INVALID_KEY))
    no_sleep = lambda s: None  # noqa: E731

    # One agent's 401: the key id and the client id reach the daemon's auth bucket.
    with Client(fleet_daemon.addr, park_limit=0, timeout=10, client_id="py-agent-1", sleep=no_sleep) as first:
        with pytest.raises(RetryStopped):
            chat(first, revoked, "revoked")
    (auth,) = [b for b in buckets(fleet_daemon.addr) if b.scope == "auth" and b.key_id == "revoked"]
    assert auth.first_client_id == "py-agent-1"
    assert auth.state.stopped

    # Another agent on the same key: its fleet gate does not even send the call (the key's
    # assignment arrives with its first call)...
    flaky = server.script("/v1/flaky", Reply(504, body="gateway timeout"), Reply(200, body="ok"))
    with Client(fleet_daemon.addr, park_limit=0, timeout=10, sleep=no_sleep) as gated:
        with pytest.raises(RetryStopped) as info:
            chat(gated, flaky, "revoked")
        d = info.value.decision
        assert info.value.attempts == 0 and server.count("/v1/flaky") == 0
        assert d is not None and d.stop_reason == "FLEET_STOP" and d.source == "fleet-gate"

    # ... and without the gate, a retryable 504 stops at once, by NextDelay's fleet memory.
    with Client(fleet_daemon.addr, park_limit=0, timeout=10, sleep=no_sleep, fleet_gate=False) as second:
        with pytest.raises(RetryStopped) as info:
            chat(second, flaky, "revoked")
        d = info.value.decision
        assert info.value.attempts == 1 and server.count("/v1/flaky") == 1
        assert d is not None and d.stop_reason == "FLEET_STOP"
        assert d.fleet is not None and d.fleet.stopped and d.fleet.changed
        assert d.fleet.open_remaining > 0 and "revoked" in d.fleet.bucket

        # The same failure on another key is retried.
        flaky = server.script("/v1/flaky", Reply(504, body="gateway timeout"), Reply(200, body="ok"))
        assert chat(second, flaky, "healthy") == "ok"
        assert server.count("/v1/flaky") == 2


def test_the_fallback_function_gets_the_chains_target(fleet_daemon: Daemon, server: FakeServer) -> None:
    # A Retry-After above the 60 s ceiling falls back; the policy's chain names where to.
    url = server.script("/v1/limited", Reply(429, headers={"retry-after": "61"}))
    hints: list[FallbackHint] = []

    def fallback(hint: FallbackHint) -> str:
        hints.append(hint)
        return "from claude"

    with Client(fleet_daemon.addr, park_limit=0, timeout=10) as c:
        got = c.call(lambda: post(url), provider="openai", model="gpt-4o", key_id="fallback-test", operation="chat",
                     fallback=fallback)  # fmt: skip
    assert got == "from claude"
    (hint,) = hints
    assert (hint.provider, hint.model) == ("anthropic", "claude-sonnet-4-5")
    assert (hint.decision.fallback_provider, hint.decision.fallback_model) == ("anthropic", "claude-sonnet-4-5")
    assert hint.decision.action is Action.FALL_BACK


def test_key_id_is_clipped_and_fleet_is_none_when_the_daemon_says_nothing(client: Client, server: FakeServer) -> None:
    # The session daemon runs with --fleet off: its decisions carry no fleet state.
    url = server.script("/k", Reply(503), Reply(200, body="done"))
    events: list[RetryEvent] = []
    client.on_retry = events.append
    long_key = "é" * 100  # 200 bytes: clipped to 128 on a character boundary
    assert client.call(lambda: post(url), provider="openai", key_id=long_key, operation="chat") == "done"
    (e,) = events
    assert e.failure.key_id == "é" * 64
    assert e.decision.fleet is None
    assert e.decision.fallback_provider == "" and e.decision.fallback_model == ""
    assert Decision.from_proto(pb.Decision(action=pb.ACTION_RETRY)).fleet is None


def test_client_id_default_and_option(client: Client) -> None:
    host = re.escape(socket.gethostname())
    assert re.fullmatch(rf"{host}/{os.getpid()}/[0-9a-f]{{8}}", client.client_id)
    with Client(client.addr, park_limit=0) as other:
        assert other.client_id != client.client_id  # each client its own: breakers count clients
    with Client(client.addr, park_limit=0, client_id="x" * 200) as named:
        assert named.client_id == "x" * 128


@pytest.mark.parametrize(
    "value, name",
    [
        (pb.STOP_REASON_CIRCUIT_OPEN, "CIRCUIT_OPEN"),
        (pb.STOP_REASON_RETRY_BUDGET_EXHAUSTED, "RETRY_BUDGET_EXHAUSTED"),
        (pb.STOP_REASON_FLEET_STOP, "FLEET_STOP"),
    ],
)
def test_fleet_stop_reasons_have_names(value: pb.StopReason, name: str) -> None:
    d = Decision.from_proto(pb.Decision(action=pb.ACTION_STOP, stop_reason=value))
    assert d.stop_reason == name
    assert Decision(Action.STOP, stop_reason=name).to_proto().stop_reason == value


def test_every_proto_stop_reason_maps_both_ways() -> None:
    for value in pb.StopReason.values():
        if value == pb.STOP_REASON_UNSPECIFIED:
            continue
        name = Decision.from_proto(pb.Decision(action=pb.ACTION_STOP, stop_reason=value)).stop_reason
        assert name and not name.isdigit(), value
        assert Decision(Action.STOP, stop_reason=name).to_proto().stop_reason == value


def test_fleet_state_from_proto() -> None:
    raw = pb.Decision(
        action=pb.ACTION_STOP,
        stop_reason=pb.STOP_REASON_CIRCUIT_OPEN,
        fallback=pb.Fallback(kind=pb.FALLBACK_KIND_OTHER_PROVIDER, provider="anthropic", model="claude-sonnet-4-5"),
        fleet=pb.FleetState(
            bucket="availability:openai/gpt-4o",
            breaker=pb.BREAKER_STATE_HALF_OPEN,
            hold_remaining=duration_pb2.Duration(seconds=1, nanos=500_000_000),
            open_remaining=duration_pb2.Duration(seconds=4),
            budget_tokens=-0.5,
            budget_exhausted=True,
            changed=True,
            reason="24 failures in 10s from 6 clients",
        ),
    )
    d = Decision.from_proto(raw)
    assert d.fleet == FleetState(
        bucket="availability:openai/gpt-4o", breaker="HALF_OPEN", hold_remaining=1.5, open_remaining=4.0,
        budget_tokens=-0.5, budget_exhausted=True, stopped=False, changed=True,
        reason="24 failures in 10s from 6 clients",
    )  # fmt: skip
    assert (d.fallback, d.fallback_provider, d.fallback_model) == ("OTHER_PROVIDER", "anthropic", "claude-sonnet-4-5")
