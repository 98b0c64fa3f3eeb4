// What a report says of a target's calls beyond the gate's admitted and
// shed (BucketUsage; the table of src/fleet.ts): input-token estimates,
// bounded by the calls the same report counts; the batch class's first
// attempts; calls in flight.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { createRouterTransport } from "@connectrpc/connect";
import { Coordinator } from "@policyd/client";
import { BreakerState, CoordinateResponseSchema } from "@policyd/client/proto";

const target = { provider: "openai", model: "gpt-4o", keyId: "" };

/** A coordinator without a stream, on a clock the test moves; parking off unless parkLimitMs is given. */
async function table(parkLimitMs = 0) {
  const clock = { now: 0, draw: 0.5 };
  const co = new Coordinator({
    transport: createRouterTransport(() => {}),
    clientId: "usage",
    profile: "",
    now: () => clock.now,
    random: () => clock.draw,
    graceMs: 10_000,
    parkLimitMs,
    closeTimeoutMs: 0,
    debug: () => {},
    warnOnce: () => {},
  });
  await co.close(); // no stream: the test takes the reports
  const assign = (admitFraction: number, batchAdmitFraction?: number) =>
    co.applyResponse(
      create(CoordinateResponseSchema, {
        assignments: [
          {
            target,
            ttl: { seconds: 60n },
            breaker: BreakerState.CLOSED,
            admitFraction,
            ...(batchAdmitFraction !== undefined ? { batchAdmitFraction } : {}),
          },
        ],
      }),
    );
  const report = () => {
    const u = co.takeReport()[0];
    if (!u) return undefined;
    const { admitted, shed, retries, firstAttemptInputTokens, retryInputTokens, batchFirstAttempts, inFlight } = u;
    return { admitted, shed, retries, firstAttemptInputTokens, retryInputTokens, batchFirstAttempts, inFlight };
  };
  return { co, clock, assign, report };
}

const zero = {
  admitted: 0n,
  shed: 0n,
  retries: 0n,
  firstAttemptInputTokens: 0n,
  retryInputTokens: 0n,
  batchFirstAttempts: 0n,
  inFlight: 0n,
};

describe("bucket usage in the fleet reports", () => {
  test("tokens of first attempts and retries; an estimate is cut to 2,000,000 a call", async () => {
    const { co, report } = await table();
    co.check(target, undefined, false, { inputTokens: 1200.2 });
    co.check(target, undefined, false, { inputTokens: 5_000_000 });
    co.retry(target, 300);
    assert.deepEqual(report(), {
      ...zero,
      admitted: 2n,
      retries: 1n,
      firstAttemptInputTokens: 1201n + 2_000_000n,
      retryInputTokens: 300n,
    });
    assert.equal(report(), undefined, "nothing left to report");
  });

  test("a parked first attempt's tokens wait until it is counted", async () => {
    const { co, clock, assign, report } = await table(120_000);
    co.check(target, undefined, false); // subscribes
    report();
    assign(0.5);
    const gated = co.check(target, undefined, false, { inputTokens: 40 });
    assert.equal(gated.verdict.action, "park");
    assert.deepEqual(report(), zero, "nothing counted yet: the tokens stay");
    clock.now = 1000;
    clock.draw = 0.1;
    assert.equal(co.resume(target, gated.verdict.parked!).verdict.action, "admit");
    assert.deepEqual(report(), { ...zero, admitted: 1n, firstAttemptInputTokens: 40n });
  });

  test("the batch class's first attempts: drawn at its own share, counted at their first check", async () => {
    const { co, assign, report } = await table();
    co.check(target, undefined, false); // subscribes
    report();
    assign(0.8, 0.2);
    const batch = { cls: "batch" as const };
    assert.equal(co.check(target, undefined, false, batch).verdict.action, "stop"); // draw 0.5 ≥ 0.2
    assert.equal(co.check(target, undefined, false).verdict.action, "admit"); // draw 0.5 < 0.8
    assign(0.8);
    assert.equal(co.check(target, undefined, false, batch).verdict.action, "admit", "no batch share: admitFraction");
    assert.deepEqual(report(), { ...zero, admitted: 2n, shed: 1n, batchFirstAttempts: 2n });
  });

  test("calls in flight: a gauge, reported when it changes", async () => {
    const { co, report } = await table();
    const first = co.began(target);
    const second = co.began(target);
    assert.deepEqual(report(), { ...zero, inFlight: 2n });
    assert.equal(report(), undefined, "unchanged: nothing to report");
    first();
    first(); // ends once
    assert.deepEqual(report(), { ...zero, inFlight: 1n });
    second();
    assert.deepEqual(report(), zero);
  });
});
