// The client when policyd is down or hung: it decides with the fail-open
// policy, warns once, and never blocks past the daemon timeout or the
// caller's deadline.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type CallOptions, checkResponse, createClient, PolicydError } from "@policyd/client";
import { AUTH_RECOVERY, bodies, closedAddr, decisions, FakeClock, flaky, hungAddr, memoryLogger } from "./harness.js";

const openai = { provider: "openai", model: "gpt-4o", operation: "chat" } satisfies CallOptions<unknown>;

function get(url: string) {
  return async ({ signal }: { signal: AbortSignal }) => (await checkResponse(await fetch(url, { signal }))).text();
}

describe("fail open", { concurrency: true }, () => {
  test("daemon down: a 503 is still retried, and the client warns once", async () => {
    const srv = await flaky(
      { status: 503, body: bodies.overloaded },
      { status: 200, body: "ok" },
      { status: 503 },
      { status: 200, body: "ok again" },
    );
    const clock = new FakeClock();
    const logger = memoryLogger();
    const d = decisions();
    const client = createClient({
      address: await closedAddr(),
      clock,
      random: () => 0.5,
      logger,
      onDecision: d.onDecision,
    });

    assert.equal(await client.call(get(srv.url), openai), "ok");
    assert.equal(await client.call(get(srv.url), openai), "ok again");

    assert.equal(d.all.length, 2);
    for (const dec of d.all) {
      assert.equal(dec.failOpen, true);
      assert.equal(dec.action, "RETRY");
      assert.equal(dec.strategy.name, "fail-open/OVERLOADED");
    }
    assert.deepEqual(clock.waits, [500, 500], "1 s backoff, full jitter drawn at 0.5");
    assert.equal(logger.warnings.length, 1, logger.warnings.join("\n"));
    assert.match(logger.warnings[0]!, /unreachable or slow.*fail-open/);
  });

  test("daemon down: a 401 stops at once with the recovery action", async () => {
    const srv = await flaky({ status: 401, body: bodies.badKey });
    const client = createClient({ address: await closedAddr(), clock: new FakeClock(), logger: memoryLogger() });

    const err = await client.call(get(srv.url), openai).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );

    assert.ok(err instanceof PolicydError, String(err));
    assert.equal(srv.hits, 1);
    assert.equal(err.decision.failOpen, true);
    assert.equal(err.decision.stopReason, "NOT_RETRYABLE");
    assert.equal(err.decision.classification.failureType, "AUTH_INVALID");
    assert.equal(err.recoveryAction, AUTH_RECOVERY);
    assert.match(err.message, /fail-open/);
  });

  test("daemon down: a dropped connection is retried", async () => {
    const srv = await flaky({ drop: true }, { status: 200, body: "ok" });
    const client = createClient({ address: await closedAddr(), clock: new FakeClock(), logger: memoryLogger() });
    assert.equal(await client.call(get(srv.url), { provider: "web", operation: "web_fetch" }), "ok");
    assert.equal(srv.hits, 2);
  });

  test("daemon hung: one daemon timeout per failure, journal on or off", async () => {
    const addr = await hungAddr();
    for (const journal of [false, true]) {
      const srv = await flaky({ status: 503 }, { status: 200, body: "ok" });
      let failedAt = 0;
      let decidedAfter = 0;
      const client = createClient({
        address: addr,
        daemonTimeoutMs: 500,
        journal,
        clock: new FakeClock(),
        logger: memoryLogger(),
        onDecision: () => {
          decidedAfter = performance.now() - failedAt;
        },
      });
      const out = await client.call(async (a) => {
        try {
          return await get(srv.url)(a);
        } catch (e) {
          failedAt = performance.now();
          throw e;
        }
      }, openai);
      assert.equal(out, "ok");
      assert.ok(
        decidedAfter >= 490,
        `journal ${journal}: decided after ${decidedAfter.toFixed(0)}ms, before the daemon timeout`,
      );
      assert.ok(
        decidedAfter < 900,
        `journal ${journal}: decided after ${decidedAfter.toFixed(0)}ms: more than one daemon timeout`,
      );
    }
  });

  test("daemon hung: never blocks past the caller's deadline", async () => {
    const srv = await flaky({ status: 503 });
    const client = createClient({ address: await hungAddr(), daemonTimeoutMs: 5000, logger: memoryLogger() });

    const start = performance.now();
    const err = await client.call(get(srv.url), { ...openai, timeoutMs: 300 }).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );
    const took = performance.now() - start;

    assert.ok(err instanceof PolicydError, String(err));
    assert.equal(err.decision.stopReason, "DEADLINE");
    assert.ok(took < 2000, `call took ${took.toFixed(0)}ms with a 300ms deadline and a hung daemon`);
  });
});
