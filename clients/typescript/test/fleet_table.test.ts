// The fleet table (src/fleet.ts) through its coordinator, without a
// stream: what a report says of a target's calls beyond admitted and shed
// (BucketUsage: input-token estimates, bounded by the calls the same report
// counts; the batch class's first attempts; the parking counts; calls in
// flight), and the lease of requests in flight an assignment may carry.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createRouterTransport } from "@connectrpc/connect";
import { Coordinator } from "@policyd/client";
import {
  type Assignment,
  AssignmentSchema,
  BreakerState,
  CoordinateResponseSchema,
  FallbackKind,
} from "@policyd/client/proto";

const target = { provider: "openai", model: "gpt-4o", keyId: "" };

/** A response assigning target for a minute, with the given fields. */
const assignment = (fields: Exclude<MessageInitShape<typeof AssignmentSchema>, Assignment>) =>
  create(CoordinateResponseSchema, { assignments: [{ target, ttl: { seconds: 60n }, ...fields }] });

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
  const assign = (admitFraction: number, batchAdmitFraction?: number, inFlightLease?: number) =>
    co.applyResponse(
      assignment({
        breaker: BreakerState.CLOSED,
        admitFraction,
        reason: "a lease of 1 of the 4 requests in flight the target allows",
        ...(batchAdmitFraction !== undefined ? { batchAdmitFraction } : {}),
        ...(inFlightLease !== undefined ? { inFlightLease } : {}),
      }),
    );
  const report = () => {
    const u = co.takeReport()[0];
    if (!u) return undefined;
    const { admitted, shed, fellBack, retries, parked, parkedNew, released } = u;
    const { firstAttemptInputTokens, retryInputTokens, batchFirstAttempts, inFlight } = u;
    return {
      admitted,
      shed,
      fellBack,
      retries,
      parked,
      parkedNew,
      released,
      firstAttemptInputTokens,
      retryInputTokens,
      batchFirstAttempts,
      inFlight,
    };
  };
  /** A first attempt's check; an admitted one's request ends at once. */
  const check = (call: { cls?: "batch"; inputTokens?: number } = {}) => {
    const gated = co.check(target, undefined, false, call);
    gated.ended?.();
    return gated;
  };
  return { co, clock, assign, report, check };
}

const zero = {
  admitted: 0n,
  shed: 0n,
  fellBack: 0n,
  retries: 0n,
  parked: 0n,
  parkedNew: 0n,
  released: 0n,
  firstAttemptInputTokens: 0n,
  retryInputTokens: 0n,
  batchFirstAttempts: 0n,
  inFlight: 0n,
};

describe("bucket usage in the fleet reports", () => {
  test("tokens of first attempts and retries; an estimate is cut to 2,000,000 a call", async () => {
    const { co, report, check } = await table();
    check({ inputTokens: 1200.2 });
    check({ inputTokens: 5_000_000 });
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

  test("a first attempt sent to the fallback: shed and fell back, at most the report's shed", async () => {
    const { co, assign, report, check } = await table();
    check(); // subscribes
    report();
    const openWithFallback = () =>
      co.applyResponse(
        assignment({
          breaker: BreakerState.OPEN,
          admitFraction: 1,
          fallback: { kind: FallbackKind.OTHER_MODEL, provider: "openai", model: "gpt-4o-mini" },
        }),
      );
    openWithFallback();
    assert.equal(co.check(target, undefined, true).verdict.action, "fall_back");
    assert.equal(co.check(target, undefined, false).verdict.action, "stop", "no fallback for the caller, parking off");
    assert.deepEqual(report(), { ...zero, shed: 2n, fellBack: 1n });
    // 600 admitted, then 900 to the fallback: a report carries 1,000 first
    // attempts, fell_back within its shed; the rest waits for the next.
    assign(1);
    for (let i = 0; i < 600; i++) check();
    openWithFallback();
    for (let i = 0; i < 900; i++) co.check(target, undefined, true);
    assert.deepEqual(report(), { ...zero, admitted: 600n, shed: 400n, fellBack: 400n });
    assert.deepEqual(report(), { ...zero, shed: 500n, fellBack: 500n });
  });

  test("a parked first attempt: counted at its first check (parked_new, its class and tokens), released once", async () => {
    const { co, clock, assign, report, check } = await table(120_000);
    check(); // subscribes
    report();
    assign(0.5, 0.5);
    const gated = check({ cls: "batch", inputTokens: 40 });
    assert.equal(gated.verdict.action, "park");
    const parkedNow = { ...zero, parked: 1n, parkedNew: 1n, batchFirstAttempts: 1n, firstAttemptInputTokens: 40n };
    assert.deepEqual(report(), parkedNow);
    assert.equal(report(), undefined, "still parked: nothing changed");
    clock.now = 1000;
    clock.draw = 0.1;
    const resumed = co.resume(target, gated.verdict.parked!);
    assert.equal(resumed.verdict.action, "admit");
    resumed.ended?.();
    assert.deepEqual(report(), { ...zero, admitted: 1n, released: 1n }, "not counted again as batch, nor its tokens");
  });

  test("a parked call its caller cancelled: shed, out of the gauge, not counted again", async () => {
    const { co, assign, report, check } = await table(120_000);
    check(); // subscribes
    report();
    assign(0.5, 0.5);
    const gated = check({ cls: "batch" });
    assert.equal(gated.verdict.action, "park");
    assert.deepEqual(report(), { ...zero, parked: 1n, parkedNew: 1n, batchFirstAttempts: 1n });
    co.parkCancelled(target, gated.verdict.parked!);
    assert.deepEqual(report(), { ...zero, shed: 1n });
  });

  test("a retry parked by an open breaker is in the gauge, not a first attempt", async () => {
    const { co, clock, report, check } = await table(120_000);
    check(); // subscribes
    report();
    co.applyResponse(assignment({ breaker: BreakerState.OPEN, admitFraction: 1 }));
    const gated = co.checkRetry(target, undefined);
    assert.equal(gated.verdict.action, "park");
    assert.deepEqual(report(), { ...zero, parked: 1n });
    clock.now = 1000;
    co.applyResponse(assignment({ breaker: BreakerState.CLOSED, admitFraction: 1 }));
    assert.equal(co.resume(target, gated.verdict.parked!).verdict.action, "admit");
    assert.deepEqual(report(), zero, "released, but not as a first attempt");
  });

  test("the batch class's first attempts: drawn at its own share, counted at their first check", async () => {
    const { assign, report, check } = await table();
    check(); // subscribes
    report();
    assign(0.8, 0.2);
    const batch = { cls: "batch" as const };
    assert.equal(check(batch).verdict.action, "stop"); // draw 0.5 ≥ 0.2
    assert.equal(check().verdict.action, "admit"); // draw 0.5 < 0.8
    assign(0.8);
    assert.equal(check(batch).verdict.action, "admit", "no batch share: admitFraction");
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

describe("the assignment's park hint", () => {
  /** An open breaker, with the daemon's estimate of the wait when hintSeconds is given. */
  const open = (hintSeconds?: bigint) =>
    assignment({
      breaker: BreakerState.OPEN,
      admitFraction: 1,
      reason: "breaker open",
      ...(hintSeconds !== undefined ? { parkHint: { seconds: hintSeconds } } : {}),
    });

  test("a call whose deadline comes before the hint's wait stops at once; without the hint it parks", async () => {
    const { co, check, report } = await table(120_000);
    check(); // subscribes
    report();
    co.applyResponse(open());
    assert.equal(co.check(target, 3000, false).verdict.action, "park", "no hint: the wait may fit");
    co.applyResponse(open(5n));
    const gated = co.check(target, 3000, false);
    assert.equal(gated.verdict.action, "stop", "3 s left, ~5 s to wait");
    assert.equal(gated.verdict.stopReason, "CIRCUIT_OPEN");
    const parked = co.check(target, 8000, false);
    assert.equal(parked.verdict.action, "park");
    assert.equal(parked.verdict.reason, "waiting for the fleet: breaker open on openai/gpt-4o, ~5 s");
  });
});

describe("leases of requests in flight", () => {
  const LEASE_PARK = "waiting for the fleet: at its lease of requests in flight on openai/gpt-4o";

  test("a first attempt at the lease parks; a request's end wakes it, and it goes", async () => {
    const { co, clock, assign, report, check } = await table(120_000);
    check(); // subscribes
    report();
    assign(1, undefined, 1);
    const ended = co.began(target);
    const gated = check();
    assert.equal(gated.verdict.action, "park");
    assert.equal(gated.verdict.stopReason, "FLEET_SHED");
    assert.equal(gated.verdict.reason, LEASE_PARK);
    const p = gated.verdict.parked!;
    // Still at the lease: the re-check parks it again.
    clock.now = 1000;
    assert.equal(co.resume(target, p).verdict.action, "park");
    // The wait ends at the request's end, well before the next re-check (1 s).
    const ac = new AbortController();
    const started = performance.now();
    const woken = co.parkWait(target, p, ac.signal);
    setTimeout(ended, 20);
    await woken;
    assert.ok(performance.now() - started < 500, "woken by the request's end, not the re-check timer");
    clock.now = 1100;
    const resumed = co.resume(target, p);
    assert.equal(resumed.verdict.action, "admit");
    assert.equal(resumed.verdict.waitedMs, 1100);
    const released = { ...zero, admitted: 1n, parkedNew: 1n, released: 1n };
    assert.deepEqual(report(), { ...released, inFlight: 1n }, "in flight from its admission");
    resumed.ended!();
    assert.deepEqual(report(), zero, "its request ended");
  });

  test("calls woken together by one request's end: the first admitted holds the slot, the others park again", async () => {
    const { co, clock, assign, check } = await table(120_000);
    check(); // subscribes
    assign(1, undefined, 1);
    const first = co.check(target, undefined, false);
    assert.equal(first.verdict.action, "admit");
    const parked = [check(), check(), check()].map((g) => g.verdict.parked!);
    assert.ok(
      parked.every((p) => p !== undefined),
      "at the lease: parked",
    );
    clock.now = 500;
    first.ended!();
    const actions = parked.map((p) => co.resume(target, p).verdict.action);
    assert.deepEqual(actions, ["admit", "park", "park"]);
  });

  test("at the lease without parking: a stop that names the requests in flight and the lease", async () => {
    const { co, assign, report, check } = await table(0);
    check(); // subscribes
    report();
    assign(1, undefined, 2);
    co.began(target);
    co.began(target);
    const gated = check();
    assert.equal(gated.verdict.action, "stop");
    assert.equal(gated.verdict.stopReason, "FLEET_SHED");
    assert.equal(
      gated.decision(gated.verdict).stopText,
      "this process has 2 requests in flight to openai/gpt-4o, its lease of the fleet's cap: " +
        "a lease of 1 of the 4 requests in flight the target allows",
    );
    assert.deepEqual(report(), { ...zero, shed: 1n, inFlight: 2n });
  });

  test("no lease, no cap; a lease of 0 parks every first attempt", async () => {
    const { co, assign, report, check } = await table(120_000);
    check(); // subscribes
    report();
    assign(1);
    for (let i = 0; i < 50; i++) co.began(target);
    assert.equal(check().verdict.action, "admit", "no lease: 50 in flight go on");
    const idle = await table(120_000);
    idle.check(); // subscribes
    idle.assign(1, undefined, 0);
    assert.equal(idle.check().verdict.action, "park", "none in flight, a lease of 0");
  });
});

describe("the pace's grants", () => {
  /** A pace of 25 %, with the running count of grants when permits is given. */
  const paced = (permits?: bigint) =>
    assignment({
      breaker: BreakerState.CLOSED,
      admitFraction: 0.25,
      reason: "pacing",
      ...(permits !== undefined ? { pacePermits: permits } : {}),
    });

  test("a paced first attempt goes only against a grant, whatever its draw; a retry neither parks nor spends", async () => {
    const { co, clock, report, check } = await table(120_000);
    check(); // subscribes
    report();
    co.applyResponse(paced(0n));
    clock.draw = 0; // a draw admitFraction would admit
    const gated = check();
    assert.equal(gated.verdict.action, "park");
    assert.equal(gated.verdict.stopReason, "FLEET_SHED");
    assert.equal(gated.verdict.reason, "waiting for the fleet: paced on openai/gpt-4o");
    const p = gated.verdict.parked!;
    const woken = co.parkWait(target, p, new AbortController().signal);
    co.applyResponse(paced(1n)); // one grant, with an assignment: it wakes the parked call
    await woken;
    clock.draw = 0.99;
    const resumed = co.resume(target, p);
    assert.equal(resumed.verdict.action, "admit");
    resumed.ended!();
    clock.draw = 0;
    assert.equal(check().verdict.action, "park", "the grant is spent");
    assert.equal(co.checkRetry(target, undefined).verdict.action, "admit", "a retry is not held by the grants");
    co.applyResponse(paced(2n));
    assert.equal(co.checkRetry(target, undefined).verdict.action, "admit");
    clock.draw = 0.99;
    assert.equal(check().verdict.action, "admit", "the retry spent no grant");
    assert.deepEqual(report(), { ...zero, admitted: 2n, parkedNew: 2n, released: 1n, parked: 1n });
  });

  test("without pace_permits a pace draws", async () => {
    const { co, clock, check } = await table(0);
    check(); // subscribes
    co.applyResponse(paced());
    clock.draw = 0;
    assert.equal(check().verdict.action, "admit");
    clock.draw = 0.5;
    assert.equal(check().verdict.action, "stop");
  });
});
