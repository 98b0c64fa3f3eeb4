// Journaled calls against a policyd journaling into TEST_DATABASE_URL: the
// context and its attempts are in the journal, and a failed one has an
// error report.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { type CallOptions, checkResponse, createClient, PolicydError, PolicydOptionsError } from "@policyd/client";
import { Action, FailureType, Outcome, StopReason } from "@policyd/client/proto";
import {
  AUTH_RECOVERY,
  bodies,
  daemonAddr,
  FakeClock,
  flaky,
  journalDaemonAddr,
  memoryLogger,
  rawClients,
  rpcCounter,
  startDaemon,
} from "./harness.js";

const openai = { provider: "openai", model: "gpt-4o", operation: "chat" } satisfies CallOptions<unknown>;

function get(url: string) {
  return async ({ signal }: { signal: AbortSignal }) => (await checkResponse(await fetch(url, { signal }))).text();
}

describe("journal", { concurrency: true }, () => {
  test("a failed run: the context, its attempts and the error report", async (t) => {
    const addr = await journalDaemonAddr();
    if (!addr) return t.skip("TEST_DATABASE_URL is not set (scripts/test.sh starts a database)");
    const srv = await flaky(
      { status: 503, body: bodies.overloaded },
      { status: 503, body: bodies.overloaded },
      { status: 401, body: bodies.badKey },
    );
    const client = createClient({ address: addr, journal: true, clock: new FakeClock(), agent: "ts-client-test" });

    const err = await client.call(get(srv.url), { ...openai, labels: { suite: "journal" } }).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );

    assert.ok(err instanceof PolicydError, String(err));
    // The client made the id: a time-ordered UUIDv7 (RFC 9562).
    assert.match(err.contextId, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const { journal } = rawClients(addr);
    const got = await journal.getContext({ contextId: err.contextId });
    assert.equal(got.context?.outcome, Outcome.FAILED);
    assert.equal(got.context?.agent, "ts-client-test");
    assert.equal(got.context?.provider, "openai");
    assert.deepEqual(got.context?.labels, { suite: "journal" });
    assert.deepEqual(
      got.attempts.map((a) => [a.attempt, a.failureType, a.decision]),
      [
        [1, FailureType.OVERLOADED, Action.RETRY],
        [2, FailureType.OVERLOADED, Action.RETRY],
        [3, FailureType.AUTH_INVALID, Action.STOP],
      ],
    );
    assert.equal(got.attempts[2]?.stopReason, StopReason.NOT_RETRYABLE);
    assert.equal(got.attempts[2]?.httpStatus, 401);

    const { report } = await journal.getErrorReport({ contextId: err.contextId });
    assert.equal(report?.rootCauseType, FailureType.AUTH_INVALID);
    assert.equal(report?.recoveryAction, AUTH_RECOVERY);
    assert.equal(report?.attempts.length, 3);
  });

  test("a run that recovers: RESOLVED, with the failed attempt", async (t) => {
    const addr = await journalDaemonAddr();
    if (!addr) return t.skip("TEST_DATABASE_URL is not set (scripts/test.sh starts a database)");
    const srv = await flaky({ status: 500, body: bodies.serverError }, { status: 200, body: "ok" });
    const rpcs = rpcCounter();
    const contextId = randomUUID();
    const client = createClient({ address: addr, clock: new FakeClock(), interceptors: [rpcs.interceptor] });

    assert.equal(await client.call(get(srv.url), { ...openai, contextId }), "ok");

    assert.deepEqual(rpcs.calls, ["BeginContext", "NextDelay", "FinishContext"]);
    const got = await rawClients(addr).journal.getContext({ contextId });
    assert.equal(got.context?.outcome, Outcome.RESOLVED);
    assert.equal(got.context?.attemptCount, 1);
    assert.equal(got.attempts[0]?.failureType, FailureType.SERVER_ERROR);
    assert.equal(got.attempts[0]?.decision, Action.RETRY);
  });

  test("an aborted run is ABANDONED, finished in the background", async (t) => {
    const addr = await journalDaemonAddr();
    if (!addr) return t.skip("TEST_DATABASE_URL is not set (scripts/test.sh starts a database)");
    const srv = await flaky({ status: 429, headers: { "retry-after": "5" }, body: bodies.rateLimit });
    const ac = new AbortController();
    const contextId = randomUUID();
    const client = createClient({ address: addr, onDecision: () => void setTimeout(() => ac.abort(), 100) });

    await assert.rejects(client.call(get(srv.url), { ...openai, contextId, signal: ac.signal }), {
      name: "AbortError",
    });
    await client.close();

    const got = await rawClients(addr).journal.getContext({ contextId });
    assert.equal(got.context?.outcome, Outcome.ABANDONED);
    assert.equal(got.attempts.length, 1);
  });

  test("a daemon without a database: the call works, the client warns once", async () => {
    const srv = await flaky({ status: 503 }, { status: 200, body: "ok" }, { status: 503 }, { status: 200, body: "ok" });
    const logger = memoryLogger();
    const client = createClient({ address: await daemonAddr(), journal: true, clock: new FakeClock(), logger });
    assert.equal(await client.call(get(srv.url), openai), "ok");
    assert.equal(await client.call(get(srv.url), openai), "ok");
    assert.equal(logger.warnings.length, 1, logger.warnings.join("\n"));
    assert.match(logger.warnings[0]!, /journal is off/);
  });

  test("a run that ends while policyd is away is finished when it is back", async (t) => {
    if (!(await journalDaemonAddr())) return t.skip("TEST_DATABASE_URL is not set (scripts/test.sh starts a database)");
    const url = process.env["TEST_DATABASE_URL"]!;
    const first = await startDaemon(url);
    const addr = first.addr;
    const srv = await flaky({ status: 503, body: bodies.overloaded }, { status: 200, body: "ok" });
    const client = createClient({ address: addr, clock: new FakeClock(), daemonTimeoutMs: 300 });
    const contextId = randomUUID();
    const started = Date.now();
    const out = await client.call(
      async (a) => {
        if (a.attempt === 2) await first.stop(); // policyd goes away after deciding the retry
        return get(srv.url)(a);
      },
      { ...openai, contextId },
    );
    assert.equal(out, "ok");
    assert.ok(Date.now() - started < 5000, "finishing must not hold the caller");
    const second = await startDaemon(url, ["--listen", addr]);
    t.after(() => second.stop());
    const { journal } = rawClients(addr);
    let outcome: Outcome | undefined;
    for (const end = Date.now() + 30_000; Date.now() < end; await new Promise((r) => setTimeout(r, 100))) {
      outcome = await journal.getContext({ contextId }).then(
        (r) => r.context?.outcome,
        () => undefined,
      );
      if (outcome === Outcome.RESOLVED) break;
    }
    assert.equal(outcome, Outcome.RESOLVED);
    await client.close();
  });

  test("a context id policyd refuses rejects the call, naming it", async (t) => {
    const addr = await journalDaemonAddr();
    if (!addr) return t.skip("TEST_DATABASE_URL is not set (scripts/test.sh starts a database)");
    const srv = await flaky({ status: 503, body: bodies.overloaded }, { status: 200, body: "ok" });
    const client = createClient({ address: addr, clock: new FakeClock() });
    const err = await client.call(get(srv.url), { ...openai, contextId: "not-a-uuid" }).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof PolicydOptionsError, String(err));
    assert.equal(err.method, "BeginContext");
    assert.match(err.message, /context_id/);
    assert.equal(srv.hits, 1);
  });
});
