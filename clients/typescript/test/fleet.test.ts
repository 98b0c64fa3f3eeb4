// Fleet memory: the key id and client id the client sends, and the fleet
// state, fallback targets and stop reasons it reads from policyd's decisions.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createClient as createConnectClient, createRouterTransport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { type CallOptions, checkResponse, createClient, PolicydError, type StopReason } from "@policyd/client";
import {
  Action,
  BreakerState,
  DecisionSchema,
  FleetService,
  type NextDelayRequest,
  StopReason as PbStopReason,
  PolicyService,
} from "@policyd/client/proto";
import { bodies, daemonAddr, daemonWith, decisions, FakeClock, flaky } from "./harness.js";

// A fallback chain, so that FALL_BACK names its target.
const dir = mkdtempSync(join(tmpdir(), "policyd-ts-fleet-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const policyFile = join(dir, "policy.yaml");
writeFileSync(policyFile, "fallbacks:\n  openai/gpt-4o: [anthropic/claude-sonnet-4-5]\n");

/** A daemon with fleet memory on (the harness's --fleet off is overridden). Tests use their own key ids. */
async function fleetAddr(): Promise<string> {
  return (await daemonWith("fleet", ["--fleet", "on", "--policy", policyFile])).addr;
}

const openai = {
  provider: "openai",
  model: "gpt-4o",
  operation: "chat",
  method: "POST",
} satisfies CallOptions<unknown>;

/** POSTs to url and throws an HttpError for a failed response. */
function post(url: string) {
  return async ({ signal }: { signal: AbortSignal }) =>
    (await checkResponse(await fetch(url, { method: "POST", signal }))).text();
}

/** The call's rejection. */
async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => assert.fail("call succeeded"),
    (e: unknown) => e,
  );
}

describe("fleet memory", { concurrency: true }, () => {
  test("a revoked key stops the fleet on that key only; key id and client id reach the daemon", async (t) => {
    const addr = await fleetAddr();
    const revoked = await flaky({ status: 401, body: bodies.badKey });
    const first = createClient({ parkLimitMs: 0, address: addr, clientId: "ts-agent-1" });
    t.after(() => first.close()); // its fleet stream
    assert.ok(
      (await rejection(first.call(post(revoked.url), { ...openai, keyId: "revoked" }))) instanceof PolicydError,
    );

    const fleet = createConnectClient(FleetService, createGrpcTransport({ baseUrl: `http://${addr}` }));
    const { buckets } = await fleet.listBuckets({});
    const auth = buckets.filter((b) => b.scope === "auth" && b.keyId === "revoked");
    assert.equal(auth.length, 1, JSON.stringify(buckets.map((b) => b.state?.bucket)));
    assert.equal(auth[0]!.firstClientId, "ts-agent-1");
    assert.equal(auth[0]!.state?.stopped, true);

    // Another agent on the same key, its fleet gate off: a retryable 504 stops at once, by NextDelay.
    const second = createClient({ parkLimitMs: 0, address: addr, clock: new FakeClock(), fleetGate: false });
    t.after(() => second.close());
    const gateway = await flaky({ status: 504, body: bodies.serverError }, { status: 200, body: "ok" });
    const err = await rejection(second.call(post(gateway.url), { ...openai, keyId: "revoked" }));
    assert.ok(err instanceof PolicydError);
    assert.equal(err.attempts, 1);
    assert.equal(gateway.hits, 1);
    assert.equal(err.decision.stopReason, "FLEET_STOP");
    assert.equal(err.decision.fleet?.stopped, true);
    assert.equal(err.decision.fleet?.changed, true);
    assert.ok(err.decision.fleet!.openRemainingMs > 0);

    // With its gate on (the default), a new agent's first attempt on that key is not even sent.
    const third = createClient({ parkLimitMs: 0, address: addr });
    t.after(() => third.close());
    assert.equal(await third.call(async () => "ok", { ...openai, keyId: "warm-up" }), "ok"); // its stream is up
    const gated = await rejection(third.call(post(gateway.url), { ...openai, keyId: "revoked" }));
    assert.ok(gated instanceof PolicydError);
    assert.equal(gated.attempts, 0);
    assert.equal(gated.decision.stopReason, "FLEET_STOP");
    assert.equal(gateway.hits, 1);

    // The same failure on another key is retried.
    const other = await flaky({ status: 504, body: bodies.serverError }, { status: 200, body: "ok" });
    assert.equal(await second.call(post(other.url), { ...openai, keyId: "healthy" }), "ok");
    assert.equal(other.hits, 2);
  });

  test("the fallback function gets the chain's target", async (t) => {
    // A Retry-After above the 60 s ceiling falls back; the policy's chain names where to.
    const limited = await flaky({ status: 429, headers: { "retry-after": "61" }, body: bodies.rateLimit });
    const client = createClient({ parkLimitMs: 0, address: await fleetAddr() });
    t.after(() => client.close());
    const out = await client.call(post(limited.url), {
      ...openai,
      keyId: "fallback-test",
      fallback: (hint) => {
        assert.equal(hint.decision.action, "FALL_BACK");
        assert.equal(hint.decision.fallback.provider, "anthropic");
        return `${hint.provider}/${hint.model}`;
      },
    });
    assert.equal(out, "anthropic/claude-sonnet-4-5");
  });

  test("sends the key id clipped to 128 bytes and the client id; no fleet state when the daemon says nothing", async () => {
    const sent: NextDelayRequest[] = [];
    const d = decisions();
    const client = createClient({
      parkLimitMs: 0,
      address: await daemonAddr(), // --fleet off
      clock: new FakeClock(),
      onDecision: d.onDecision,
      interceptors: [
        (next) => async (req) => {
          if (req.method.name === "NextDelay") sent.push(req.message as NextDelayRequest);
          return next(req);
        },
      ],
    });
    const srv = await flaky({ status: 503, body: bodies.overloaded }, { status: 200, body: "ok" });
    await client.call(post(srv.url), { ...openai, keyId: "é".repeat(100) }); // 200 bytes
    assert.equal(sent.length, 1);
    assert.equal(sent[0]!.failure?.keyId, "é".repeat(64));
    assert.equal(sent[0]!.clientId, client.clientId);
    assert.equal(d.all.length, 1);
    assert.equal(d.all[0]!.fleet, undefined);
    assert.deepEqual([d.all[0]!.fallback.provider, d.all[0]!.fallback.model], ["", ""]);
  });

  test("a client id per client: host/pid/8 hex digits, or the option clipped", () => {
    const a = createClient({ parkLimitMs: 0, address: "127.0.0.1:1" });
    const b = createClient({ parkLimitMs: 0, address: "127.0.0.1:1" });
    const escaped = hostname().replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    assert.match(a.clientId, new RegExp(`^${escaped}/${process.pid}/[0-9a-f]{8}$`));
    assert.notEqual(a.clientId, b.clientId); // breakers count distinct clients
    assert.equal(
      createClient({ parkLimitMs: 0, address: "127.0.0.1:1", clientId: "x".repeat(200) }).clientId,
      "x".repeat(128),
    );
  });
});

describe("decisions from policyd's fleet", () => {
  // A stand-in PolicyService: these tests check the conversion of answers a
  // real daemon gives only under fleet-wide load.
  function answering(decision: MessageInitShape<typeof DecisionSchema>) {
    const transport = createRouterTransport(({ service }) => {
      service(PolicyService, { nextDelay: () => ({ decision: create(DecisionSchema, decision) }) });
    });
    return createClient({ parkLimitMs: 0, transport, clock: new FakeClock() });
  }
  const fail = () => {
    throw new Error("boom");
  };

  test("every proto stop reason has its name, the fleet's included", async () => {
    // Compile-time: the StopReason union lists each name once; run time: it matches the proto's enum.
    const names: Record<Exclude<StopReason, "">, true> = {
      NOT_RETRYABLE: true,
      ATTEMPTS_EXHAUSTED: true,
      DEADLINE: true,
      SERVER_DELAY_ABOVE_CEILING: true,
      IRREVERSIBLE_OPERATION: true,
      CONTINUATION_OFF: true,
      STREAM_PHASE: true,
      CIRCUIT_OPEN: true,
      RETRY_BUDGET_EXHAUSTED: true,
      FLEET_STOP: true,
      FLEET_SHED: true,
    };
    const proto = Object.values(PbStopReason).filter((v): v is string => typeof v === "string" && v !== "UNSPECIFIED");
    assert.deepEqual(Object.keys(names).sort(), [...proto].sort());
    for (const name of proto) {
      const err = await rejection(
        answering({ action: Action.STOP, stopReason: PbStopReason[name as keyof typeof PbStopReason] }).call(fail),
      );
      assert.ok(err instanceof PolicydError);
      assert.equal(err.decision.stopReason, name);
    }
  });

  test("the fleet state and the fallback target", async () => {
    const err = await rejection(
      answering({
        action: Action.STOP,
        stopReason: PbStopReason.CIRCUIT_OPEN,
        fallback: { provider: "anthropic", model: "claude-sonnet-4-5" },
        fleet: {
          bucket: "availability:openai/gpt-4o",
          breaker: BreakerState.HALF_OPEN,
          holdRemaining: { seconds: 1n, nanos: 500_000_000 },
          openRemaining: { seconds: 4n },
          budgetTokens: -0.5,
          budgetExhausted: true,
          changed: true,
          reason: "24 failures in 10s from 6 clients",
        },
      }).call(fail),
    );
    assert.ok(err instanceof PolicydError);
    assert.equal(err.decision.stopReason, "CIRCUIT_OPEN");
    assert.deepEqual(err.decision.fleet, {
      bucket: "availability:openai/gpt-4o",
      breaker: "HALF_OPEN",
      holdRemainingMs: 1500,
      openRemainingMs: 4000,
      budgetTokens: -0.5,
      budgetExhausted: true,
      stopped: false,
      changed: true,
      reason: "24 failures in 10s from 6 clients",
    });
    assert.deepEqual([err.decision.fallback.provider, err.decision.fallback.model], ["anthropic", "claude-sonnet-4-5"]);
  });
});
