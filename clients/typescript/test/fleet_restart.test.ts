// policyd away never refuses a first attempt, at full length: several
// agents call a real HTTP provider in a loop through the real client's
// fetch transport, fleet memory on, while the provider fails each call's
// first attempt (503) and lets its retry through; the breaker opens and the
// gates stop first attempts; policyd is killed for 40 s and restarted on
// the same address. Once the assignments the gates hold expire (their ttl
// and the client's grace), every first attempt goes; calls keep finishing
// (the process's own budget limits the retries, never the first attempts);
// and every stream is back within 2 s of policyd. The Go client's
// TestFleetGateDaemonRestart has the same shape.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { createClient as createConnectClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { createClient, type PolicydClient, PolicydError } from "@policyd/client";
import { FleetService } from "@policyd/client/proto";
import { bodies, type Daemon, memoryLogger, startDaemon } from "./harness.js";

const AGENTS = 6;
const THINK_MS = 50;
const TIMEOUT_MS = 2000;
const DOWN_MS = 40_000;
// The assignments' life (the policy's stream.ttl) and the gates' grace (the
// client's default): the last assignment a gate holds expires this long
// after policyd goes, at the latest.
const TTL_MS = 15_000;
const GRACE_MS = 10_000;

const POLICY = `
profiles:
  fleet_e2e:
    extends: default
    strategies:
      OVERLOADED: {retry: true, max_attempts: 4, backoff: exponential, initial_delay: 100ms, max_delay: 1s, multiplier: 2,
                   jitter: full, honor_retry_after: true, retry_after_ceiling: 10s, fallback: none}
fleet:
  breaker: {min_volume: 20, min_clients: 3, window: 5s, open_for: 2s, max_open_for: 2s, probe_interval: 1s}
  stream: {ttl: ${TTL_MS / 1000}s}
`;

type Outcome = "ok" | "failed" | "refused" | "stopped";

interface CallRecord {
  start: number;
  end: number;
  outcome: Outcome;
  stopReason: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A provider that fails each call's first attempt (a call is its
 * x-call-id) with a 503 and answers its retries; it records when each
 * first attempt came.
 */
async function firstAttemptsFail() {
  const seen = new Set<string>();
  const firstAttempts: number[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on("end", () => {
      const id = String(req.headers["x-call-id"] ?? "");
      const first = !seen.has(id);
      seen.add(id);
      if (first) firstAttempts.push(performance.now());
      res.writeHead(first ? 503 : 200, { "content-type": "application/json" });
      res.end(first ? bodies.overloaded : bodies.chatOk);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const a = server.address();
  if (!a || typeof a === "string") throw new Error("no address");
  return {
    url: `http://127.0.0.1:${a.port}`,
    firstAttempts,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

/** The most clients streaming on openai/gpt-4o's buckets, as the daemon at addr counts them (-1: unreachable). */
async function streamingClients(addr: string): Promise<number> {
  const fleet = createConnectClient(FleetService, createGrpcTransport({ baseUrl: `http://${addr}` }));
  try {
    const { buckets } = await fleet.listBuckets({ provider: "openai", model: "gpt-4o" }, { timeoutMs: 300 });
    return Math.max(0, ...buckets.map((b) => b.streamingClients));
  } catch {
    return -1;
  }
}

test("policyd away for 40 s never refuses a first attempt once the assignments expire; every stream is back within 2 s", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "policyd-ts-restart-"));
  const policy = join(dir, "policy.yaml");
  writeFileSync(policy, POLICY);
  const provider = await firstAttemptsFail();
  const daemons: Daemon[] = [await startDaemon(undefined, ["--fleet", "on", "--policy", policy])];
  const addr = daemons[0]!.addr;
  const clients: PolicydClient[] = [];
  t.after(async () => {
    for (const c of clients) await c.close();
    for (const d of daemons) await d.stop().catch(() => {});
    await provider.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const log: CallRecord[] = [];
  /** When the process's own budget refused a retry (policyd away). */
  const budgetStops: number[] = [];
  let stopping = false;
  const agent = async (i: number) => {
    const client = createClient({
      address: addr,
      clientId: `restart-agent-${i}`,
      parkLimitMs: 0,
      daemonTimeoutMs: 500,
      logger: memoryLogger(), // the fail-open warning, once a client
      onDecision: ({ decision }) => {
        if (decision.stopReason === "RETRY_BUDGET_EXHAUSTED") budgetStops.push(performance.now());
      },
    });
    clients.push(client);
    const send = client.fetch({ provider: "openai", keyId: "k1", profile: "fleet_e2e", timeoutMs: TIMEOUT_MS });
    const body = JSON.stringify({ model: "gpt-4o", messages: [{ role: "user", content: "hello" }] });
    for (let n = 0; !stopping; n++) {
      const start = performance.now();
      let outcome: Outcome;
      let stopReason = "";
      try {
        const res = await send(`${provider.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-call-id": `${i}-${n}` },
          body,
        });
        await res.text();
        // A call policyd (or the own budget) stopped returns the provider's last answer, as an SDK reads it.
        outcome = res.ok ? "ok" : "failed";
      } catch (err) {
        if (!(err instanceof PolicydError)) throw err;
        outcome = err.attempts === 0 ? "refused" : "stopped";
        stopReason = err.decision.stopReason;
      }
      log.push({ start, end: performance.now(), outcome, stopReason });
      await sleep(THINK_MS);
    }
  };
  const agents = Promise.all(Array.from({ length: AGENTS }, (_, i) => agent(i)));

  // The provider's failures open the fleet's breaker: the gates stop first attempts.
  const opened = performance.now();
  while (!log.some((c) => c.outcome === "refused" && c.stopReason === "CIRCUIT_OPEN")) {
    assert.ok(performance.now() - opened < 30_000, "no gate stop (CIRCUIT_OPEN) within 30 s");
    await sleep(50);
  }

  await daemons[0]!.kill();
  const killed = performance.now();
  await sleep(DOWN_MS);
  daemons.push(await startDaemon(undefined, ["--fleet", "on", "--policy", policy, "--listen", addr]));
  const restarted = performance.now();
  let back = Infinity;
  let streaming = 0;
  while (performance.now() - restarted < 15_000) {
    streaming = await streamingClients(addr);
    if (streaming >= AGENTS) {
      back = performance.now() - restarted;
      break;
    }
    await sleep(50);
  }
  // Calls go on after the return too.
  const returned = log.length;
  while (log.length < returned + AGENTS && performance.now() - restarted < 20_000) await sleep(50);
  stopping = true;
  await agents;

  const expired = killed + TTL_MS + GRACE_MS + 100;
  const away = log.filter((c) => c.start > killed && c.end < restarted);
  const afterExpiry = away.filter((c) => c.start > expired);
  const count = (calls: CallRecord[], o: Outcome) => calls.filter((c) => c.outcome === o).length;
  const refusedBefore = count(
    away.filter((c) => c.start <= expired),
    "refused",
  );
  const budgetStopsAway = budgetStops.filter((at) => at > killed && at < restarted).length;
  const firstAttemptsSent = provider.firstAttempts.filter((at) => at > expired && at < restarted).length;
  const longest = Math.max(...log.map((c) => c.end - c.start));
  t.diagnostic(
    `policyd away ${DOWN_MS / 1000} s: ${away.length} calls finished (${count(away, "ok")} ok, ${count(away, "failed")} ` +
      `with the provider's 503 after policyd's or the own budget's stop, ${budgetStopsAway} retries refused by the own ` +
      `budget); ${refusedBefore} first attempts refused by ` +
      `the gate before the assignments expired, ${count(afterExpiry, "refused")} after; ${firstAttemptsSent} first ` +
      `attempts sent after they expired (${count(afterExpiry, "ok")} calls ok); after the restart all ${streaming} ` +
      `streams back in ${(back / 1000).toFixed(2)} s; longest call ${Math.round(longest)} ms (timeout ${TIMEOUT_MS} ms); ` +
      `${log.length} calls in all`,
  );
  assert.equal(count(afterExpiry, "refused"), 0, "first attempts refused by the gate after the assignments expired");
  assert.ok(
    afterExpiry.length >= AGENTS * 5,
    `only ${afterExpiry.length} calls finished after the assignments expired`,
  );
  assert.ok(firstAttemptsSent > 0, "no first attempt reached the provider after the assignments expired");
  assert.ok(count(afterExpiry, "ok") > 0, "no call completed while policyd was away");
  assert.ok(
    back <= 2000,
    `the streams were back ${(back / 1000).toFixed(2)} s after policyd (${streaming} of ${AGENTS})`,
  );
  assert.ok(longest <= TIMEOUT_MS + 300, `a call took ${Math.round(longest)} ms, past its ${TIMEOUT_MS} ms deadline`);
  assert.ok(log.length > returned, "no call finished after policyd returned");
});
