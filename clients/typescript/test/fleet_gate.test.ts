// The fleet gate and the Coordinate stream against real policyd processes
// (fleet memory on): assignments the daemon pushes stop, hold or divert
// first attempts without an RPC, reports reach the daemon, and the stream
// neither blocks a call nor keeps Node running.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { promisify } from "node:util";
import { createClient as createConnectClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { type CallOptions, createClient, type Logger, PolicydError } from "@policyd/client";
import { FleetService, PolicyService } from "@policyd/client/proto";
import {
  bodies,
  closedAddr,
  daemonAddr,
  daemonWith,
  flaky,
  haveOpenssl,
  hungAddr,
  makeCerts,
  packageDir,
  rpcCounter,
  startDaemon,
  TOKEN,
  tokensFile,
} from "./harness.js";

const dir = mkdtempSync(join(tmpdir(), "policyd-ts-gate-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A policy file in dir. */
function policy(name: string, yaml: string): string {
  const path = join(dir, name);
  writeFileSync(path, yaml);
  return path;
}

// Three failures from one client open a breaker; gate-fb falls back to gate-fb-mini; gate-lease
// allows one request in flight.
const BREAKER = "  breaker: {min_volume: 3, min_clients: 1}\n";
const gatePolicy = policy(
  "gate.yaml",
  `fleet:\n${BREAKER}  max_in_flight: {openai/gate-lease: 1}\nfallbacks:\n  openai/gate-fb: [openai/gate-fb-mini]\n  openai/gpt-4o: [openai/gpt-4o-mini]\n`,
);

/** The shared fleet daemon of these tests; each test uses its own models, so their buckets do not meet. */
async function gateAddr(): Promise<string> {
  return (await daemonWith("gate", ["--fleet", "on", "--policy", gatePolicy])).addr;
}

function raw(addr: string) {
  const transport = createGrpcTransport({ baseUrl: `http://${addr}` });
  return { policy: createConnectClient(PolicyService, transport), fleet: createConnectClient(FleetService, transport) };
}

/** Three 503s on provider/model through NextDelay, from another client: the breaker opens. */
async function openBreaker(addr: string, model: string): Promise<void> {
  const { policy } = raw(addr);
  for (let i = 0; i < 3; i++) {
    const failure = { provider: "openai", model, httpStatus: 503 };
    await policy.nextDelay({ failure, attempt: 1, clientId: "other-agent" });
  }
}

/** A logger that keeps debug lines and waits for one. */
function watchLogger(): Logger & {
  warnings: string[];
  lines: string[];
  waitFor(re: RegExp, ms?: number): Promise<string>;
} {
  const lines: string[] = [];
  const warnings: string[] = [];
  const waiters: { re: RegExp; resolve: (line: string) => void }[] = [];
  const push = (m: string) => {
    lines.push(m);
    for (const w of [...waiters]) {
      if (w.re.test(m)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
    }
  };
  return {
    lines,
    warnings,
    warn: (m: string) => {
      warnings.push(m);
      push(m);
    },
    info: push,
    debug: push,
    waitFor(re: RegExp, ms = 10_000): Promise<string> {
      const seen = lines.find((l) => re.test(l));
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no log line ${re} in ${ms}ms:\n${lines.join("\n")}`)), ms);
        waiters.push({
          re,
          resolve: (l) => {
            clearTimeout(timer);
            resolve(l);
          },
        });
      });
    },
  };
}

/** An operation that counts its runs and answers ok. */
function counted() {
  const op = Object.assign(
    async () => {
      op.runs++;
      op.at = performance.now();
      return "ok";
    },
    { runs: 0, at: 0 },
  );
  return op;
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => assert.fail("call succeeded"),
    (e: unknown) => e,
  );
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls until check returns a value (not undefined), at most ms. */
async function eventually<T>(check: () => Promise<T | undefined>, ms = 10_000): Promise<T> {
  const end = performance.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (performance.now() > end) assert.fail(`not within ${ms}ms`);
    await sleep(50);
  }
}

// Certificates now: openssl blocks the event loop, which must not stall the timing of the tests below.
if (haveOpenssl()) makeCerts();

describe("fleet gate against policyd", { concurrency: true }, () => {
  test("admits without an assignment; the stream is the only RPC; reports and rate-limit headers reach the daemon", async (t) => {
    const addr = await gateAddr();
    const rpcs = rpcCounter();
    const client = createClient({ parkLimitMs: 0, address: addr, interceptors: [rpcs.interceptor] });
    t.after(() => client.close());
    const target = { provider: "openai", model: "gate-report", keyId: "report-key" } satisfies CallOptions<unknown>;
    const op = counted();

    for (let i = 0; i < 3; i++) assert.equal(await client.call(op, target), "ok");
    client.observeRateLimits(target, new Headers({ "x-ratelimit-limit-requests": "600", "x-request-id": "req_1" }));

    assert.equal(op.runs, 3);
    const { fleet } = raw(addr);
    const got = await eventually(async () => {
      const { buckets } = await fleet.listBuckets({ provider: "openai", model: "gate-report" });
      const av = buckets.find((b) => b.scope === "availability");
      const rl = buckets.find((b) => b.scope === "rate_limit");
      return av && av.firstAttemptsAdmitted >= 3n && av.successes >= 3n && rl && rl.requestsPerMinute > 0n
        ? { av, rl }
        : undefined;
    });
    assert.ok(got.av.reports > 0n);
    assert.equal(got.av.streamingClients, 1);
    assert.equal(got.rl.requestsPerMinute, 600n);
    assert.deepEqual(rpcs.calls, [], "no unary RPC on the success path");
    assert.deepEqual(rpcs.streams, ["Coordinate"], "one stream, opened by the first call");
  });

  test("an open breaker stops the next first attempt: CIRCUIT_OPEN, no attempt, no NextDelay", async (t) => {
    const addr = await gateAddr();
    const rpcs = rpcCounter();
    const logger = watchLogger();
    const client = createClient({ parkLimitMs: 0, address: addr, interceptors: [rpcs.interceptor], logger });
    t.after(() => client.close());
    const target = { provider: "openai", model: "gate-breaker", operation: "chat" } satisfies CallOptions<unknown>;
    const op = counted();
    assert.equal(await client.call(op, target), "ok"); // subscribes the target
    await logger.waitFor(/fleet assignment for openai\/gate-breaker: .*breaker CLOSED/);

    await openBreaker(addr, "gate-breaker");
    await logger.waitFor(/fleet assignment for openai\/gate-breaker: .*breaker OPEN/);
    const err = await rejection(client.call(op, target));

    assert.ok(err instanceof PolicydError, String(err));
    assert.equal(op.runs, 1, "the operation did not run");
    assert.equal(err.attempts, 0);
    assert.equal(err.cause, undefined);
    assert.equal(err.decision.stopReason, "CIRCUIT_OPEN");
    assert.equal(err.decision.classification.rule, "fleet.gate");
    assert.equal(err.decision.fleet?.breaker, "OPEN");
    assert.match(err.message, /CIRCUIT_OPEN/);
    assert.match(err.message, /breaker open/, "the assignment's reason");
    assert.deepEqual(rpcs.calls, [], "no NextDelay");
  });

  test("a lease of one request in flight: concurrent calls go one at a time, each woken by the last one's end", async (t) => {
    const addr = await gateAddr();
    const logger = watchLogger();
    const parks: string[] = [];
    const client = createClient({
      address: addr,
      logger,
      onDecision: ({ decision }) => {
        if (decision.parked && decision.stopReason) parks.push(decision.stopText); // a call parking
      },
    });
    t.after(() => client.close());
    const target = { provider: "openai", model: "gate-lease" } satisfies CallOptions<unknown>;
    let running = 0;
    let most = 0;
    const ends: number[] = [];
    const starts: number[] = [];
    const op = async () => {
      starts.push(performance.now());
      most = Math.max(most, ++running);
      await sleep(100);
      running--;
      ends.push(performance.now());
      return "ok";
    };
    assert.equal(await client.call(op, target), "ok"); // subscribes the target
    await logger.waitFor(/fleet assignment for openai\/gate-lease: .*lease 1 in flight/);
    starts.length = 0;
    ends.length = 0;

    const results = await Promise.all(Array.from({ length: 4 }, () => client.call(op, target)));
    assert.deepEqual(results, ["ok", "ok", "ok", "ok"]);
    assert.equal(most, 1, "never more than the lease in flight");
    assert.equal(parks.length, 3, "three calls parked");
    for (const text of parks)
      assert.equal(text, "waiting for the fleet: at its lease of requests in flight on openai/gate-lease");
    // Each parked call went at the end of the one before, not at its next re-check (1 s).
    for (let i = 1; i < 4; i++)
      assert.ok(starts[i]! - ends[i - 1]! < 300, `call ${i} started ${starts[i]! - ends[i - 1]!}ms late`);
  });

  test("a target's first call waits for its first assignment, so it is gated too", async (t) => {
    const addr = await gateAddr();
    const rpcs = rpcCounter();
    const logger = watchLogger();
    const client = createClient({ parkLimitMs: 0, address: addr, interceptors: [rpcs.interceptor], logger });
    t.after(() => client.close());
    const op = counted();
    await client.call(op, { provider: "openai", model: "gate-first-warm" }); // the stream is up
    await logger.waitFor(/fleet assignment for openai\/gate-first-warm/);
    await openBreaker(addr, "gate-first");

    const start = performance.now();
    const err = await rejection(client.call(op, { provider: "openai", model: "gate-first" }));
    assert.ok(err instanceof PolicydError, String(err));
    assert.equal(err.decision.stopReason, "CIRCUIT_OPEN");
    assert.equal(op.runs, 1);
    assert.deepEqual(rpcs.calls, []);
    assert.ok(performance.now() - start < 150, "within the 100 ms wait");
  });

  test("a gate that does not admit falls back through the fallback function to the assignment's target", async (t) => {
    const addr = await gateAddr();
    const logger = watchLogger();
    const rpcs = rpcCounter();
    const client = createClient({ parkLimitMs: 0, address: addr, logger, interceptors: [rpcs.interceptor] });
    t.after(() => client.close());
    const target = { provider: "openai", model: "gate-fb", operation: "chat" } satisfies CallOptions<unknown>;
    const op = counted();
    await client.call(op, target);
    await openBreaker(addr, "gate-fb");
    await logger.waitFor(/fleet assignment for openai\/gate-fb: .*breaker OPEN/);

    const out = await client.call(op, {
      ...target,
      fallback: (hint) => {
        assert.equal(hint.attempt, 0);
        assert.equal(hint.error, undefined);
        assert.equal(hint.decision.action, "FALL_BACK");
        assert.equal(hint.decision.stopReason, "CIRCUIT_OPEN");
        return `${hint.kind} ${hint.provider}/${hint.model}`;
      },
    });

    assert.equal(out, "OTHER_MODEL openai/gate-fb-mini");
    assert.equal(op.runs, 1);
    assert.deepEqual(rpcs.calls, []);
  });

  test("a hold makes the first attempt wait it out, then send", async (t) => {
    const addr = await gateAddr();
    const logger = watchLogger();
    const client = createClient({ parkLimitMs: 0, address: addr, logger });
    t.after(() => client.close());
    const target = { provider: "openai", model: "gate-hold", keyId: "hold-key" } satisfies CallOptions<unknown>;
    const op = counted();
    await client.call(op, target);
    await logger.waitFor(/fleet assignment for openai\/gate-hold@hold-key/);

    // Another agent's 429 with Retry-After: 1 holds the key's bucket (this client's stagger slot on top).
    await raw(addr).policy.nextDelay({
      failure: { ...target, httpStatus: 429, headers: { "retry-after": "1" }, body: bodies.rateLimit },
      attempt: 1,
      clientId: "other-agent",
    });
    const line = await logger.waitFor(/fleet assignment for openai\/gate-hold@hold-key: .*hold (\d+)ms/);
    const received = performance.now();
    const holdMs = Number(/hold (\d+)ms/.exec(line)![1]);
    assert.ok(holdMs >= 500 && holdMs <= 4000, `hold ${holdMs}ms`);

    assert.equal(await client.call(op, target), "ok");
    const waited = op.at - received;
    assert.equal(op.runs, 2);
    const sent = `sent ${waited.toFixed(0)}ms after the ${holdMs}ms hold arrived`;
    assert.ok(waited >= holdMs - 150 && waited <= holdMs + 1000, sent);
  });

  test("a hold past the caller's deadline stops the call (DEADLINE) without an attempt", async (t) => {
    const addr = await gateAddr();
    const logger = watchLogger();
    const client = createClient({ parkLimitMs: 0, address: addr, logger });
    t.after(() => client.close());
    const target = { provider: "openai", model: "gate-hold-deadline", keyId: "k" } satisfies CallOptions<unknown>;
    const op = counted();
    await client.call(op, target);
    await raw(addr).policy.nextDelay({
      failure: { ...target, httpStatus: 429, headers: { "retry-after": "5" }, body: bodies.rateLimit },
      attempt: 1,
      clientId: "other-agent",
    });
    await logger.waitFor(/fleet assignment for openai\/gate-hold-deadline@k: .*hold \d+ms/);

    const start = performance.now();
    const err = await rejection(client.call(op, { ...target, timeoutMs: 500 }));
    assert.ok(err instanceof PolicydError, String(err));
    assert.equal(err.decision.stopReason, "DEADLINE");
    assert.equal(op.runs, 1);
    assert.ok(performance.now() - start < 200, "stopped at once, not after a wait");
  });

  test("daemon down: every call is admitted at once, and close returns", async () => {
    for (const addr of [await closedAddr(), await hungAddr()]) {
      const logger = watchLogger();
      const client = createClient({ parkLimitMs: 0, address: addr, logger, daemonTimeoutMs: 300 });
      const op = counted();
      const start = performance.now();
      for (let i = 0; i < 20; i++) assert.equal(await client.call(op, { provider: "openai", model: "gpt-4o" }), "ok");
      assert.equal(op.runs, 20);
      assert.ok(performance.now() - start < 500, `20 calls took ${(performance.now() - start).toFixed(0)}ms`);
      const closing = performance.now();
      await client.close();
      assert.ok(performance.now() - closing < 1000, "close waited for the stream");
      assert.deepEqual(logger.warnings, [], "the stream does not warn");
    }
  });

  test("a daemon without fleet memory: the stream is tried once, calls are admitted, nothing is logged", async () => {
    const rpcs = rpcCounter();
    const logger = watchLogger();
    const client = createClient({
      parkLimitMs: 0,
      address: await daemonAddr(),
      interceptors: [rpcs.interceptor],
      logger,
    });
    const op = counted();
    for (let i = 0; i < 3; i++) await client.call(op, { provider: "openai", model: "gpt-4o" });
    await logger.waitFor(/no fleet stream \(FailedPrecondition/);
    await sleep(1200); // longer than a first reconnect could wait
    for (let i = 0; i < 3; i++) await client.call(op, { provider: "openai", model: "gpt-4o" });
    assert.equal(op.runs, 6);
    assert.deepEqual(rpcs.streams, ["Coordinate"]);
    assert.deepEqual(rpcs.calls, []);
    assert.deepEqual(logger.warnings, []);
    await client.close();
  });

  test(
    "over mutual TLS with a token, the stream gets its assignments",
    {
      skip: haveOpenssl() ? false : "the openssl command is not installed",
    },
    async (t) => {
      const c = makeCerts();
      const d = await daemonWith("gate-mtls", [
        "--fleet",
        "on",
        "--auth-tokens",
        tokensFile(),
        "--tls-cert",
        c.serverCert,
        "--tls-key",
        c.serverKey,
        "--tls-client-ca",
        c.ca,
      ]);
      const logger = watchLogger();
      const client = createClient({
        parkLimitMs: 0,
        address: d.addr,
        token: TOKEN,
        tlsCaFile: c.ca,
        tlsCertFile: c.clientCert,
        tlsKeyFile: c.clientKey,
        logger,
      });
      t.after(() => client.close());
      assert.equal(await client.call(counted(), { provider: "openai", model: "gate-tls" }), "ok");
      await logger.waitFor(/fleet assignment for openai\/gate-tls: ttl 15000ms/);
      assert.deepEqual(logger.warnings, []);
    },
  );

  test("fleetGate: false opens no stream", async () => {
    const rpcs = rpcCounter();
    const client = createClient({
      parkLimitMs: 0,
      address: await gateAddr(),
      interceptors: [rpcs.interceptor],
      fleetGate: false,
    });
    await client.call(counted(), { provider: "openai", model: "gate-off" });
    await sleep(100);
    assert.deepEqual(rpcs.streams, []);
    await client.close();
  });

  test("bad input never breaks the stream or the call", async (t) => {
    const addr = await gateAddr();
    const logger = watchLogger();
    const client = createClient({ parkLimitMs: 0, address: addr, logger });
    t.after(() => client.close());
    const op = counted();
    const huge = "p".repeat(9000); // longer than the daemon takes: not gated, not reported
    await client.call(op, { provider: huge });
    await client.call(op, { provider: "openai", model: "gate-bad", keyId: "é".repeat(100) }); // clipped to 128 bytes
    await client.call(op, { provider: "" }); // no provider: not gated
    for (const h of [
      null,
      42,
      "x-ratelimit-limit-requests: 5",
      { "x-ratelimit-remaining-requests": "x".repeat(65) }, // too long: dropped
      Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`x-ratelimit-h${i}`, "1"])), // 16 kept
      [
        ["anthropic-ratelimit-requests-limit", "50"],
        ["x-ratelimit-", "bare prefix: dropped"],
      ],
      new Map([["X-RateLimit-Limit-Requests", ["1", "2"]]]),
    ]) {
      client.observeRateLimits({ provider: "openai", model: "gate-bad" }, h);
    }
    client.observeRateLimits({ provider: "" }, { "x-ratelimit-limit-requests": "5" });
    // The stream still works: a new target gets its assignment.
    await client.call(op, { provider: "openai", model: "gate-bad-after" });
    await logger.waitFor(/fleet assignment for openai\/gate-bad-after/);
    await sleep(1300); // a report with the headers went out
    assert.equal(op.runs, 4);
    assert.deepEqual(logger.warnings, []);
    assert.ok(!logger.lines.some((l) => /broke|refused/.test(l)), logger.lines.join("\n"));
  });

  describe("fleet gate: expiry", () => {
    test("an expired assignment is kept through the grace, then first attempts go and the own budget limits retries", async (t) => {
      const file = policy("expiry.yaml", `fleet:\n${BREAKER}  stream: {ttl: 1s}\n`);
      const daemon = await startDaemon(undefined, ["--fleet", "on", "--policy", file]);
      t.after(() => daemon.stop());
      const logger = watchLogger();
      // random 0: the fail-open policy below retries at once.
      const client = createClient({
        parkLimitMs: 0,
        address: daemon.addr,
        logger,
        fleetGraceMs: 1500,
        random: () => 0,
        daemonTimeoutMs: 300,
      });
      t.after(() => client.close());
      const target = { provider: "openai", model: "gate-expiry", operation: "chat" } satisfies CallOptions<unknown>;
      const op = counted();
      await client.call(op, target);
      await openBreaker(daemon.addr, "gate-expiry");
      await logger.waitFor(/fleet assignment for openai\/gate-expiry: ttl 1000ms, breaker OPEN/);

      await daemon.kill();
      const stoppedAt = performance.now();
      // Within ttl + grace (2.5 s from the last refresh): the assignment still stops first attempts.
      const early = await rejection(client.call(op, target));
      assert.ok(early instanceof PolicydError, String(early));
      assert.equal(early.decision.stopReason, "CIRCUIT_OPEN");
      assert.ok(performance.now() - stoppedAt < 800);

      // Past it: every first attempt goes (policyd away never stops an agent).
      await sleep(2600);
      assert.equal(await client.call(op, target), "ok");
      assert.equal(op.runs, 2);

      // Failed attempts spend the own budget (10 tokens, retries while more than 5): the fail-open
      // policy's retries stop when it is spent, never a first attempt.
      const srv = await flaky({ status: 503, body: bodies.overloaded });
      const post = async ({ signal }: { signal: AbortSignal }) => {
        const r = await fetch(srv.url, { method: "POST", signal });
        throw Object.assign(new Error(`HTTP ${r.status}`), { status: r.status, headers: {}, body: await r.text() });
      };
      // Each call's first attempt goes; the retries stop once the budget is spent (10 tokens, −1 a
      // failure, +0.1 a second, retries while more than 5 are left): after 5 to 8 failures.
      let spent: PolicydError | undefined;
      for (let i = 0; i < 3 && !spent; i++) {
        const hits = srv.hits;
        const err = await rejection(client.call(post, target));
        assert.ok(err instanceof PolicydError, String(err));
        assert.ok(srv.hits > hits && err.attempts >= 1, `call ${i}: its first attempt was not sent`);
        if (err.decision.stopReason === "RETRY_BUDGET_EXHAUSTED") spent = err;
      }
      assert.ok(spent, `no retry refused by the own budget after ${srv.hits} failures`);
      assert.ok(srv.hits >= 5 && srv.hits <= 8, `${srv.hits} failures before the budget refused a retry`);
      assert.equal(spent.decision.fleet?.budgetExhausted, true);
      assert.match(spent.message, /own retry budget for openai\/gate-expiry is spent/);
    });

    test("policyd restarted on its address: no first attempt refused, the stream back within 2 s", async (t) => {
      const file = policy("restart.yaml", `fleet:\n${BREAKER}  stream: {ttl: 1s}\n`);
      const daemon = await startDaemon(undefined, ["--fleet", "on", "--policy", file]);
      const restarted: Awaited<ReturnType<typeof startDaemon>>[] = [];
      t.after(async () => {
        await daemon.stop().catch(() => {});
        for (const d of restarted) await d.stop();
      });
      const addr = daemon.addr;
      // random 0: the fail-open policy retries at once.
      const client = createClient({
        parkLimitMs: 0,
        address: addr,
        fleetGraceMs: 1000,
        random: () => 0,
        daemonTimeoutMs: 300,
      });
      t.after(() => client.close());
      const model = "gate-restart";
      const target = { provider: "openai", model, operation: "chat" } satisfies CallOptions<unknown>;
      // The provider drops every call's first attempt; its retry succeeds.
      const op = async ({ attempt }: { attempt: number }) => {
        if (attempt === 1) throw Object.assign(new Error("socket hang up"), { code: "ECONNRESET" });
        return "ok";
      };
      const refused: string[] = [];
      let budgetStops = 0;
      let otherStops = 0;
      let calls = 0;
      const streaming = async () => {
        try {
          const res = await raw(addr).fleet.listBuckets({ provider: "openai", model }, { timeoutMs: 300 });
          return res.buckets.some((b) => b.streamingClients >= 1);
        } catch {
          return false;
        }
      };
      const run = async (until: () => Promise<boolean> | boolean) => {
        while (!(await until())) {
          calls++;
          const err = await client.call(op, target).then(
            () => undefined,
            (e: unknown) => e,
          );
          if (err instanceof PolicydError && err.attempts === 0) refused.push(err.decision.stopText);
          else if (err instanceof PolicydError && err.decision.stopReason === "RETRY_BUDGET_EXHAUSTED") budgetStops++;
          else if (err instanceof PolicydError && err.attempts >= 1)
            otherStops++; // a retry the fleet refused
          else if (err !== undefined) throw err;
          await sleep(50);
        }
      };
      await run(streaming); // subscribed: the daemon counts the stream
      await daemon.kill();
      const killed = performance.now();
      await run(() => performance.now() - killed > 4000); // away past ttl (1 s) + grace (1 s)
      restarted.push(await startDaemon(undefined, ["--fleet", "on", "--policy", file, "--listen", addr]));
      const back = performance.now();
      await run(async () => (await streaming()) || performance.now() - back > 15_000);
      const took = performance.now() - back;
      t.diagnostic(
        `${calls} calls, ${budgetStops} retries refused by the own budget, ${otherStops} by the fleet; the stream back ${(took / 1000).toFixed(2)} s after the restart`,
      );
      assert.deepEqual(refused, [], "first attempts refused by the gate while policyd was away");
      assert.ok(took <= 2000, `the stream was back ${(took / 1000).toFixed(2)} s after policyd; want within 2 s`);
    });
  });

  describe("fleet gate: the stream does not keep Node running", { concurrency: true }, () => {
    const run = promisify(execFile);
    const script = join(packageDir, "build", "gate-exit.mjs");
    writeFileSync(
      script,
      `import { createClient } from "@policyd/client";
const client = createClient({ parkLimitMs: 0, address: process.argv[2] });
console.log(await client.call(async () => "ok", { provider: "openai", model: "gate-exit" }));
await new Promise((r) => setTimeout(r, 1500)); // the stream is open meanwhile
if (process.argv[3] === "close") await client.close();
`,
    );
    for (const [name, addr, close] of [
      ["a live stream, close() forgotten", gateAddr, ""],
      ["a live stream, closed", gateAddr, "close"],
      ["a hung daemon, close() forgotten", hungAddr, ""],
    ] as const) {
      test(name, async () => {
        const start = performance.now();
        const { stdout } = await run(process.execPath, [script, await addr(), close], { timeout: 8000 });
        assert.equal(stdout.trim(), "ok");
        assert.ok(performance.now() - start < 6000, "the script exited on its own");
      });
    }
  });
});
