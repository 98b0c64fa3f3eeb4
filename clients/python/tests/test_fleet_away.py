"""policyd away never refuses a first attempt, at full length (docs/clients.md, "The fleet gate"):
several agents call a provider through the Python client (sync and asyncio) with the fleet gate on,
the provider fails each call's first attempt with a 503 and answers its retry; policyd (a real
process) is killed for 40 s, longer than an assignment's ttl and the gate's grace at their defaults,
then restarted on the same address. Once the assignments expire no gate refuses a call, calls keep
completing (the process's own budget limits only retries), and every agent's stream is back within
2 s of the restart. clients/go/fleet_e2e_test.go's TestFleetGateDaemonRestart is the Go client's."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
from harness import Daemon, FakeServer, Reply

from policyd_client import SOURCE_FLEET_GATE, AsyncClient, Client, RetryStopped
from policyd_client._fleet import Target
from policyd_client._gate import GRACE, GateAssignment
from policyd_client._gen.policyd.v1 import fleet_pb2, fleet_pb2_grpc

MODEL = "py-away"
# A breaker that opens on the agents' first attempts (a failure for each success) and stays open
# past the kill; the stream's ttl is the default (15 s).
POLICY = """
fleet:
  breaker: {min_volume: 3, failure_rate: 0.3, min_clients: 1, open_for: 60s, max_open_for: 60s}
"""
OVERLOADED = '{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}'
SYNC_AGENTS, ASYNC_AGENTS = 4, 2
AGENTS = SYNC_AGENTS + ASYNC_AGENTS
DOWN = 40.0  # seconds policyd is away
DEADLINE = 5.0  # each call's


@dataclass(frozen=True)
class Done:
    """One call: when it started and ended, and how it stopped (None: it succeeded)."""

    start: float
    end: float
    stopped: RetryStopped | None

    def refused_by_gate(self) -> bool:
        d = self.stopped.decision if self.stopped is not None else None
        return d is not None and d.source == SOURCE_FLEET_GATE


class Agents:
    """The agents' shared provider (a path per call: its first request 503, then 200) and log."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.done: list[Done] = []
        self.clients: list[Client | AsyncClient] = []
        self._n = 0

    def next_url(self, agent: int) -> str:
        with self._lock:
            self._n += 1
            n = self._n
        return self.server.script(f"/v1/chat/{agent}/{n}", Reply(503, body=OVERLOADED), Reply(200, body="{}"))

    def record(self, start: float, stopped: RetryStopped | None) -> None:
        with self._lock:
            self.done.append(Done(start, time.monotonic(), stopped))

    def calls(self) -> list[Done]:
        with self._lock:
            return list(self.done)

    def sync_agent(self, addr: str, i: int) -> None:
        with Client(addr, park_limit=0, timeout=1, client_id=f"py-away-{i}") as c, httpx.Client() as http:
            with self._lock:
                self.clients.append(c)
            while not self.stop.is_set():
                url = self.next_url(i)

                def post(url: str = url) -> int:
                    return http.post(url, json={"model": MODEL}).raise_for_status().status_code

                start = time.monotonic()
                try:
                    c.call(post, provider="openai", model=MODEL, operation="chat", deadline=DEADLINE)
                    self.record(start, None)
                except RetryStopped as e:
                    self.record(start, e)
                self.stop.wait(0.05)

    async def async_agent(self, addr: str, i: int) -> None:
        async with (
            AsyncClient(addr, park_limit=0, timeout=1, client_id=f"py-away-{i}") as c,
            httpx.AsyncClient() as http,
        ):
            with self._lock:
                self.clients.append(c)
            while not self.stop.is_set():
                url = self.next_url(i)

                async def post(url: str = url) -> int:
                    return (await http.post(url, json={"model": MODEL})).raise_for_status().status_code

                start = time.monotonic()
                try:
                    await c.call(post, provider="openai", model=MODEL, operation="chat", deadline=DEADLINE)
                    self.record(start, None)
                except RetryStopped as e:
                    self.record(start, e)
                await asyncio.sleep(0.05)

    def run_async(self, addr: str) -> None:
        async def main() -> None:
            await asyncio.gather(*(self.async_agent(addr, SYNC_AGENTS + i) for i in range(ASYNC_AGENTS)))

        asyncio.run(main())

    def first_attempts_sent(self, after: float, before: float) -> int:
        """The calls whose first attempt reached the provider in (after, before)."""
        return sum(1 for at in self.server.first_hits() if after < at < before)

    def assignments(self) -> list[GateAssignment | None]:
        """What each agent's gate holds for openai/MODEL."""
        with self._lock:
            tables = [c._fleet for c in self.clients]
        return [t.assignment(Target("openai", MODEL, "")) if t is not None else None for t in tables]


def streaming(addr: str) -> int:
    """The clients streaming on openai/MODEL, as the daemon counts them (FleetService.ListBuckets)."""
    try:
        with grpc.insecure_channel(addr) as ch:
            resp = fleet_pb2_grpc.FleetServiceStub(ch).ListBuckets(
                fleet_pb2.ListBucketsRequest(provider="openai", model=MODEL), timeout=1
            )
    except grpc.RpcError:
        return 0
    return max((b.streaming_clients for b in resp.buckets), default=0)


def wait_for(what: str, cond: Callable[[], bool], timeout: float) -> float:
    """Poll cond until it holds; return when it first did."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.02)
    return time.monotonic()


def test_policyd_away_for_40s_never_refuses_a_first_attempt(binary: str, tmp_path: Path, server: FakeServer) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    d = Daemon(binary, args=("--fleet", "on", "--policy", str(policy)))
    addr = d.addr
    agents = Agents(server)
    threads = [threading.Thread(target=agents.sync_agent, args=(addr, i)) for i in range(SYNC_AGENTS)]
    threads.append(threading.Thread(target=agents.run_async, args=(addr,)))
    d2: Daemon | None = None
    try:
        for t in threads:
            t.start()
        # The failures open the breaker, and the gates refuse first attempts: the assignments in
        # force when policyd dies are ones that refuse.
        wait_for("every agent streaming", lambda: streaming(addr) >= AGENTS, 15)
        wait_for(
            "a first attempt refused by an open breaker",
            lambda: any(
                c.refused_by_gate() and c.stopped is not None and c.stopped.attempts == 0 for c in agents.calls()
            ),
            15,
        )
        wait_for(
            "every agent's gate holding the OPEN assignment",
            lambda: all(a is not None and a.breaker == "OPEN" for a in agents.assignments()),
            10,
        )
        ttl = max(a.ttl for a in agents.assignments() if a is not None)
        d.proc.kill()
        d.proc.wait()
        killed = time.monotonic()
        expired = killed + ttl + GRACE  # the last assignment's ttl and the grace, at the latest

        time.sleep(DOWN)
        d2 = Daemon(binary, args=("--fleet", "on", "--policy", str(policy), "--listen", addr))
        restarted = time.monotonic()
        back = math.inf  # measured, then checked with the rest
        while time.monotonic() - restarted < 20:
            if streaming(addr) >= AGENTS:
                back = time.monotonic() - restarted
                break
            time.sleep(0.02)
    finally:
        agents.stop.set()
        for t in threads:
            t.join(DEADLINE + 5)
        d.stop()
        if d2 is not None:
            d2.stop()

    calls = agents.calls()
    away = [c for c in calls if c.start > expired + 0.1 and c.end < restarted]
    refused = [c for c in away if c.refused_by_gate()]
    budget = [c for c in away if c.stopped is not None and c.stopped.decision is not None
              and c.stopped.decision.stop_reason == "RETRY_BUDGET_EXHAUSTED"]  # fmt: skip
    succeeded = [c for c in away if c.stopped is None]
    sent = agents.first_attempts_sent(expired + 0.1, restarted)
    longest = max(c.end - c.start for c in calls)
    print(
        f"policyd away {DOWN:.0f} s (assignments expired after {expired - killed:.0f} s): "
        f"{len(away)} calls after they expired, {len(refused)} refused by the gate, {len(succeeded)} succeeded, "
        f"{len(budget)} stopped by the own retry budget, {sent} first attempts sent; "
        f"all {AGENTS} streams back {back:.2f} s after the restart; longest call {longest:.2f} s"
    )
    assert not refused, f"{len(refused)} calls refused by the gate after the assignments expired: {refused[0].stopped}"
    assert len(away) >= AGENTS * 10, f"only {len(away)} calls finished while policyd was away: calls must keep going"
    assert sent >= len(away), "a call after the assignments expired did not send its first attempt"
    assert succeeded, "no call succeeded on its retry while policyd was away"
    assert longest <= DEADLINE + 0.5, f"a call took {longest:.2f} s, past its {DEADLINE} s deadline"
    assert back <= 2.0, f"the streams were back {back:.2f} s after policyd; want within 2 s"
