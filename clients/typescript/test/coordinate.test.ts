// The Coordinate stream's client side against an in-memory FleetService
// (connect's router transport): what goes up (the first message, reports,
// counts, rate-limit headers, a last report at close, resubscription after
// a break) and what the gate does with what comes down. The clock is
// injected, so holds and expiries are exact.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createRouterTransport, type HandlerContext, type Transport } from "@connectrpc/connect";
import { type CallOptions, createClient, type Decision, type Logger, PolicydError } from "@policyd/client";
import {
  type AssignmentSchema,
  BreakerState,
  type CoordinateRequest,
  type CoordinateResponseSchema,
  FallbackKind,
  FleetService,
} from "@policyd/client/proto";
import { FakeClock } from "./harness.js";

type Response = MessageInitShape<typeof CoordinateResponseSchema>;

/** An in-memory FleetService: it records every stream's requests and sends what a test pushes. */
class FakeFleet {
  /** Each stream's requests, in order. */
  streams: CoordinateRequest[][] = [];
  /** Streams whose request side the client closed. */
  halfClosed = 0;
  /** How the next streams end right after their first message (undefined: they stay open). */
  failWith: ConnectError[] = [];
  /** Answers each stream's first message with this, when set. */
  answerFirst: ((req: CoordinateRequest) => Response) | undefined;
  #push: ((r: Response) => void) | undefined;
  #waiters: (() => void)[] = [];

  readonly transport = createRouterTransport(({ service }) => {
    service(FleetService, {
      coordinate: (reqs, ctx) => this.#handle(reqs, ctx),
    });
  });

  get requests(): CoordinateRequest[] {
    return this.streams.flat();
  }

  push(r: Response): void {
    assert.ok(this.#push, "no stream open");
    this.#push(r);
  }

  /** Resolves once check() holds (checked after every request), at most ms. */
  async until(check: () => boolean, ms = 5000): Promise<void> {
    const end = Date.now() + ms;
    while (!check()) {
      if (Date.now() > end) assert.fail(`not within ${ms}ms: ${JSON.stringify(this.streams, bigints)}`);
      await new Promise<void>((r) => {
        this.#waiters.push(r);
        setTimeout(r, 50);
      });
    }
  }

  async *#handle(reqs: AsyncIterable<CoordinateRequest>, ctx: HandlerContext): AsyncIterable<Response> {
    const mine: CoordinateRequest[] = [];
    this.streams.push(mine);
    const fail = this.failWith.shift();
    const queue: Response[] = [];
    let wake: (() => void) | undefined;
    let ended = false;
    this.#push = (r) => {
      queue.push(r);
      wake?.();
    };
    void (async () => {
      try {
        for await (const r of reqs) {
          mine.push(r);
          if (mine.length === 1 && this.answerFirst) this.#push?.(this.answerFirst(r));
          for (const w of this.#waiters.splice(0)) w();
          if (fail) break;
        }
        if (!fail) this.halfClosed++;
      } catch {
        // the client went away
      }
      ended = true;
      wake?.();
    })();
    while (!ended && !ctx.signal.aborted) {
      const r = queue.shift();
      if (r) {
        yield r;
        continue;
      }
      await new Promise<void>((res) => {
        wake = res;
        setTimeout(res, 100);
      });
    }
    if (fail) throw fail;
  }
}

function bigints(_k: string, v: unknown) {
  return typeof v === "bigint" ? Number(v) : v;
}

/** A logger that waits for a debug line. */
function debugLog(): Logger & { lines: string[]; warnings: string[]; waitFor(re: RegExp): Promise<void> } {
  const lines: string[] = [];
  const warnings: string[] = [];
  return {
    lines,
    warnings,
    warn: (m: string) => void warnings.push(m),
    debug: (m: string) => void lines.push(m),
    async waitFor(re: RegExp) {
      const end = Date.now() + 5000;
      while (!lines.some((l) => re.test(l))) {
        if (Date.now() > end) assert.fail(`no ${re} in:\n${lines.join("\n")}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
  };
}

const target = { provider: "openai", model: "gpt-4o", keyId: "k1" } satisfies CallOptions<unknown>;
const t = { provider: "openai", model: "gpt-4o", keyId: "k1" };

/** The sum of a count over the usages of target in requests. */
function total(reqs: CoordinateRequest[], field: "admitted" | "shed" | "succeeded" | "failed" | "retries"): number {
  let n = 0;
  for (const r of reqs) for (const u of r.usage) if (u.target?.keyId === t.keyId) n += Number(u[field]);
  return n;
}

function assignment(extra: Omit<MessageInitShape<typeof AssignmentSchema>, "$typeName"> = {}): Response {
  return {
    assignments: [{ target: t, ttl: { seconds: 15n }, breaker: BreakerState.CLOSED, admitFraction: 1, ...extra }],
  };
}

function setup(extra: Parameters<typeof createClient>[0] = {}, tc?: { after(fn: () => Promise<void>): void }) {
  const fleet = new FakeFleet();
  const clock = new FakeClock();
  const logger = debugLog();
  const client = createClient({
    parkLimitMs: 0,
    transport: fleet.transport,
    clientId: "agent-7",
    clock,
    logger,
    ...extra,
  });
  tc?.after(() => client.close()); // a stream on a transport of the caller's runs until close
  return { fleet, clock, logger, client };
}

const ok = async () => "ok";

describe("the Coordinate stream (in memory)", { concurrency: true }, () => {
  test("the first message names the client and profile and subscribes the first target", async (tc) => {
    const { fleet, client } = setup({ profile: "agent_cli" }, tc);
    assert.equal(await client.call(ok, target), "ok");
    await fleet.until(() => fleet.requests.length > 0);
    const first = fleet.requests[0]!;
    assert.equal(first.clientId, "agent-7");
    assert.equal(first.profile, "agent_cli");
    // It subscribes the target before the call is gated (the call waits up to 100 ms for the answer).
    assert.equal(first.usage.length, 1);
    assert.deepEqual({ ...first.usage[0]!.target }, { ...first.usage[0]!.target, ...t });
    assert.ok(first.usage[0]!.elapsed!.nanos > 0 || first.usage[0]!.elapsed!.seconds > 0n, "elapsed > 0");
    await client.close(); // sends the rest
    assert.equal(total(fleet.requests, "admitted"), 1);
    assert.equal(total(fleet.requests, "succeeded"), 1);
    assert.equal(fleet.streams.length, 1);
  });

  test("reports carry the counts, at most 16 rate-limit headers, and go about once a second", async (tc) => {
    const { fleet, client } = setup({}, tc);
    let n = 0;
    const flaky = async () => {
      if (n++ === 0) throw Object.assign(new Error("HTTP 503"), { status: 503, headers: {}, body: "" });
      return "ok";
    };
    // No PolicyService here: the failure is decided by the fail-open policy (a failure decided locally).
    assert.equal(await client.call(flaky, target), "ok");
    assert.equal(await client.call(ok, target), "ok");
    // A 400 decided locally is not a failure the breakers count: not reported as failed.
    const bad = async () => {
      throw Object.assign(new Error("HTTP 400"), { status: 400, headers: {}, body: "" });
    };
    await assert.rejects(client.call(bad, target));
    const headers = Object.fromEntries(
      Array.from({ length: 40 }, (_, i) => [`x-ratelimit-h${String(i).padStart(2, "0")}`, "1"]),
    );
    client.observeRateLimits(target, {
      ...headers,
      "x-ratelimit-long": "9".repeat(65),
      "retry-after": "3",
      "anthropic-ratelimit-requests-limit": "50",
    });
    const start = Date.now();
    const withHeaders = () =>
      fleet.requests.some((r) => r.usage.some((u) => Object.keys(u.rateLimitHeaders).length > 0));
    await fleet.until(
      () => total(fleet.requests, "succeeded") === 2 && total(fleet.requests, "admitted") === 3 && withHeaders(),
    );
    assert.ok(Date.now() - start < 2500);
    const reqs = fleet.requests;
    assert.equal(total(reqs, "admitted"), 3);
    assert.equal(total(reqs, "shed"), 0);
    assert.equal(total(reqs, "failed"), 1, "one 503 decided locally; the 400 is not counted");
    assert.equal(total(reqs, "retries"), 1);
    const sent = reqs.flatMap((r) => r.usage).find((u) => Object.keys(u.rateLimitHeaders).length > 0)!;
    const names = Object.keys(sent.rateLimitHeaders);
    assert.equal(names.length, 16);
    assert.ok(
      names.every((h) => h.startsWith("x-ratelimit-") || h.startsWith("anthropic-ratelimit-")),
      names.join(),
    );
    assert.ok(!names.includes("x-ratelimit-long") && !names.includes("retry-after"));
    // Nothing new: no more reports.
    const count = fleet.requests.length;
    await new Promise((r) => setTimeout(r, 1300));
    assert.equal(fleet.requests.length, count, "a report only for targets with activity");
    await client.close();
  });

  test("a first attempt that meets an open breaker parks until the breaker closes; an abort ends the wait", async (tc) => {
    const decisions: Decision[] = [];
    const { fleet, logger, client } = setup(
      { parkLimitMs: 60_000, onDecision: ({ attempt, decision }) => void (attempt === 0 && decisions.push(decision)) },
      tc,
    );
    let runs = 0;
    const op = async () => {
      runs++;
      return "ok";
    };
    await client.call(op, target);
    await fleet.until(() => fleet.requests.length > 0);
    fleet.push(assignment({ breaker: BreakerState.OPEN, reason: "breaker open: 3 failures" }));
    await logger.waitFor(/breaker OPEN/);

    const parked = client.call(op, target);
    await fleet.until(() => decisions.length === 1);
    assert.equal(runs, 1, "no attempt while parked");
    assert.equal(decisions[0]!.parked, true);
    assert.equal(decisions[0]!.stopReason, "CIRCUIT_OPEN");
    assert.equal(decisions[0]!.stopText, "waiting for the fleet: breaker open on openai/gpt-4o@k1");
    fleet.push(assignment({ breaker: BreakerState.CLOSED }));
    assert.equal(await parked, "ok");
    assert.equal(runs, 2);
    assert.equal(decisions.length, 2);
    assert.equal(decisions[1]!.action, "RETRY");
    assert.equal(decisions[1]!.parked, true);
    assert.ok((decisions[1]!.waitedMs ?? -1) >= 0);

    logger.lines.length = 0;
    fleet.push(assignment({ breaker: BreakerState.OPEN }));
    await logger.waitFor(/breaker OPEN/);
    const ac = new AbortController();
    const cancelled = client.call(op, { ...target, signal: ac.signal }).catch((e: unknown) => e);
    await fleet.until(() => decisions.length === 3);
    ac.abort(new Error("the user gave up"));
    const err = await cancelled;
    assert.ok(err instanceof Error && err.message === "the user gave up", String(err));
    assert.equal(runs, 2);
  });

  test("assignments drive the gate: hold, stop, breaker, probes, shed, abandon", async (tc) => {
    let draw = 0.7;
    const { fleet, clock, logger, client } = setup({ random: () => draw }, tc);
    let runs = 0;
    const op = async () => {
      runs++;
      return "ok";
    };
    await client.call(op, target);
    await fleet.until(() => fleet.requests.length > 0);
    const assign = async (extra: Parameters<typeof assignment>[0], re: RegExp) => {
      logger.lines.length = 0;
      fleet.push(assignment(extra));
      await logger.waitFor(re);
    };

    // A hold is waited exactly (the clock has not moved since its receipt), then the attempt goes.
    await assign({ hold: { nanos: 500_000_000, seconds: 1n } }, /hold 1500ms/);
    await client.call(op, target);
    assert.deepEqual(clock.waits, [1500]);
    assert.equal(runs, 2);

    // A stopped key: FLEET_STOP, naming the assignment's reason; no attempt.
    await assign({ stop: { seconds: 60n }, reason: "stopped: a revoked key" }, /stop 60000ms/);
    let err = await client.call(op, target).catch((e: unknown) => e);
    assert.ok(err instanceof PolicydError, String(err));
    assert.equal(err.decision.stopReason, "FLEET_STOP");
    assert.match(err.message, /FLEET_STOP.*stopped: a revoked key/);
    assert.equal(err.decision.fleet?.openRemainingMs, 60_000);
    assert.equal(runs, 2);

    // Half-open with one permit: one probe; then the draws below the admit fraction are probes, the others CIRCUIT_OPEN.
    await assign({ breaker: BreakerState.HALF_OPEN, probePermits: 1, admitFraction: 0.5 }, /HALF_OPEN/);
    await client.call(op, target);
    err = await client.call(op, target).catch((e: unknown) => e);
    assert.ok(err instanceof PolicydError);
    assert.equal(err.decision.stopReason, "CIRCUIT_OPEN");
    assert.match(err.message, /half-open/);
    assert.equal(runs, 3);
    draw = 0.2;
    await client.call(op, target);
    assert.equal(runs, 4);
    draw = 0.7;

    // A share admitted: a draw at or above it sheds, one below admits.
    await assign({ admitFraction: 0.5 }, /admit 0.5/);
    err = await client.call(op, target).catch((e: unknown) => e);
    assert.ok(err instanceof PolicydError);
    assert.equal(err.decision.stopReason, "FLEET_SHED");
    draw = 0.2;
    await client.call(op, target);
    assert.equal(runs, 5);

    // An open breaker with a fallback: the fallback function gets it.
    await assign(
      {
        breaker: BreakerState.OPEN,
        fallback: { kind: FallbackKind.OTHER_PROVIDER, provider: "anthropic", model: "claude-sonnet-4-5", reason: "" },
      },
      /breaker OPEN/,
    );
    const out = await client.call(op, { ...target, fallback: (h) => `${h.kind} ${h.provider}/${h.model}` });
    assert.equal(out, "OTHER_PROVIDER anthropic/claude-sonnet-4-5");

    // The ttl passes, then the grace: the own budget (full) admits.
    await clock.sleep(25_000);
    await client.call(op, target);
    assert.equal(runs, 6);

    // Abandon forgets the target: admitted with no assignment.
    await assign({ breaker: BreakerState.OPEN }, /breaker OPEN/);
    assert.ok((await client.call(op, target).catch((e: unknown) => e)) instanceof PolicydError);
    fleet.push({ assignments: [{ target: t, abandon: true }] });
    await logger.waitFor(/abandoned openai\/gpt-4o@k1/);
    await client.call(op, target);
    assert.equal(runs, 7);

    // Shed first attempts are reported as such.
    await fleet.until(() => total(fleet.requests, "shed") === 5);
    await client.close();
  });

  test("a target's first call waits for its first assignment: up to 100 ms, never past the deadline", async (tc) => {
    // A daemon that answers at once: the very first call is gated by the answer.
    const quick = setup({}, tc);
    quick.fleet.answerFirst = () => assignment({ breaker: BreakerState.OPEN, reason: "breaker open: 24 failures" });
    let runs = 0;
    const op = async () => {
      runs++;
      return "ok";
    };
    const err = await quick.client.call(op, target).catch((e: unknown) => e);
    assert.ok(err instanceof PolicydError, String(err));
    assert.equal(err.decision.stopReason, "CIRCUIT_OPEN");
    assert.equal(runs, 0);

    // A daemon that does not answer: the first call goes after 100 ms; the next ones do not wait.
    const silent = setup({}, tc);
    let start = performance.now();
    await silent.client.call(op, target);
    const first = performance.now() - start;
    assert.ok(first >= 95 && first < 400, `first call after ${first.toFixed(0)}ms`);
    start = performance.now();
    await silent.client.call(op, target);
    assert.ok(performance.now() - start < 50, "the second call did not wait");

    // A nearer deadline bounds the wait.
    start = performance.now();
    await silent.client.call(op, { ...target, model: "other", timeoutMs: 30 });
    const waited = performance.now() - start;
    assert.ok(waited < 90, `waited ${waited.toFixed(0)}ms with a 30 ms deadline`);
    assert.equal(runs, 3);
  });

  test("a probe's success is reported at once, not at the next tick", async (tc) => {
    const { fleet, client } = setup({}, tc);
    fleet.answerFirst = () => assignment({ breaker: BreakerState.HALF_OPEN, probePermits: 1, admitFraction: 0 });
    await client.call(ok, target); // the permit: a probe
    const start = performance.now();
    await fleet.until(() => total(fleet.requests, "succeeded") === 1);
    assert.ok(performance.now() - start < 500, `reported after ${(performance.now() - start).toFixed(0)}ms`);
  });

  test("a stream that breaks is reopened; it resubscribes its targets and sends the counts made meanwhile", async (tc) => {
    const { fleet, logger, client } = setup({}, tc);
    fleet.failWith.push(new ConnectError("daemon restarting", Code.Unavailable));
    await client.call(ok, target);
    await logger.waitFor(/fleet stream broke \(Unavailable/);
    await client.call(ok, target);
    await client.call(ok, target);
    await fleet.until(() => fleet.streams.length === 2 && total(fleet.requests, "succeeded") === 3);
    assert.equal(total(fleet.requests, "admitted"), 3, "every first attempt counted once");
    const reopened = fleet.streams[1]![0]!;
    assert.equal(reopened.clientId, "agent-7");
    assert.equal(reopened.usage[0]?.target?.keyId, "k1", "the target is subscribed again");
    assert.deepEqual(logger.warnings, []);
    await client.close();
  });

  test("a refused stream warns once; no fleet service at all gives the stream up", async (tc) => {
    const { fleet, logger, client } = setup({}, tc);
    fleet.failWith.push(new ConnectError('profile: unknown profile "nope"', Code.InvalidArgument));
    await client.call(ok, target);
    await fleet.until(() => logger.warnings.length > 0);
    assert.equal(logger.warnings.length, 1);
    assert.match(logger.warnings[0]!, /refused the fleet stream \(InvalidArgument: profile: unknown profile "nope"\)/);
    await client.close();

    const log = debugLog();
    const bare = createClient({
      parkLimitMs: 0,
      transport: createRouterTransport(() => {}),
      clock: new FakeClock(),
      logger: log,
    });
    for (let i = 0; i < 3; i++) assert.equal(await bare.call(ok, target), "ok");
    await log.waitFor(/no fleet stream \(Unimplemented/);
    assert.deepEqual(log.warnings, []);
    await bare.close();
  });

  test("close sends the last report and half-closes the stream", async (tc) => {
    const { fleet, client } = setup({}, tc);
    await client.call(ok, target);
    await fleet.until(() => fleet.requests.length > 0);
    await client.call(ok, target);
    await client.close();
    assert.equal(total(fleet.requests, "succeeded"), 2);
    assert.equal(total(fleet.requests, "admitted"), 2);
    await fleet.until(() => fleet.halfClosed === 1);
    // After close the gate still answers and nothing reopens the stream.
    assert.equal(await client.call(ok, target), "ok");
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(fleet.streams.length, 1);
  });

  test("a close while a report is being sent still sends a last report, taken after the close", async (tc) => {
    const fleet = new FakeFleet();
    // The client's sends of stream messages wait while held (a slow connection): the report
    // the transport took is still being sent when the client closes.
    let held: Promise<void> = Promise.resolve();
    const transport: Transport = {
      unary: (...args) => fleet.transport.unary(...args),
      stream: (method, signal, timeoutMs, header, input, values) => {
        async function* slowed() {
          for await (const m of input) {
            yield m;
            await held;
          }
        }
        return fleet.transport.stream(method, signal, timeoutMs, header, slowed(), values);
      },
    };
    const client = createClient({ parkLimitMs: 0, transport, clientId: "agent-7", clock: new FakeClock() });
    tc.after(() => client.close());
    await client.call(ok, target);
    await fleet.until(() => fleet.requests.length > 0);
    let release = () => {};
    const running = new Promise<string>((r) => (release = () => r("ok")));
    const call = client.call(() => running, target);
    const mine = () => fleet.requests.flatMap((r) => r.usage.filter((u) => u.target?.keyId === t.keyId));
    let unhold = () => {};
    held = new Promise<void>((r) => (unhold = r));
    await fleet.until(() => mine().some((u) => u.inFlight === 1n)); // and its send is held
    release();
    await call;
    const closing = client.close();
    await new Promise((r) => setTimeout(r, 50));
    unhold();
    await closing;
    await fleet.until(() => fleet.halfClosed === 1);
    assert.equal(mine().at(-1)?.inFlight, 0n, "the last report says nothing is in flight");
    assert.equal(total(fleet.requests, "succeeded"), 2);
  });

  test("calls without a provider are not gated, and fleetGate: false gates nothing", async (tc) => {
    const { fleet, client } = setup({}, tc);
    await client.call(ok, {});
    await client.call(ok, { provider: "" });
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(fleet.streams.length, 0);
    const off = setup({ fleetGate: false }, tc);
    await off.client.call(ok, target);
    off.client.observeRateLimits(target, { "x-ratelimit-limit-requests": "1" });
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(off.fleet.streams.length, 0);
  });
});
