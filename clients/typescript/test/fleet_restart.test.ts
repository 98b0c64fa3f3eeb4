// policyd away never refuses a first attempt, at full length: agents call
// a real HTTP provider in a loop through the real client's fetch
// transport, fleet memory on, while the provider fails each call's first
// attempt (503) and lets its retry through. The agents' failures open the
// fleet's breaker and the gates stop first attempts; policyd is killed for
// 40 s and restarted on the same address. Once the assignments the gates
// hold expire (their ttl and the client's grace), every first attempt goes;
// calls keep finishing: a paced agent's each completes by the fail-open
// policy's retry, while busy agents spend their process's own budget and
// their calls end with the provider's 503 (the budget limits retries,
// never first attempts); and every stream is back within 2 s of policyd.
// The Go client's TestFleetGateDaemonAwayLong has the same shape.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { createClient as createConnectClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { createClient, type Decision, type PolicydClient, PolicydError } from "@policyd/client";
import { FleetService } from "@policyd/client/proto";
import { bodies, type Daemon, memoryLogger, startDaemon } from "./harness.js";

/** The agents: busy ones call every 50 ms, paced ones every 6 s (their own budget refills between). */
const KINDS = {
  busy: { agents: 6, thinkMs: 50, timeoutMs: 2000 },
  paced: { agents: 6, thinkMs: 6000, timeoutMs: 5000 },
} as const;
type Kind = keyof typeof KINDS;
const AGENTS = KINDS.busy.agents + KINDS.paced.agents;
const DOWN_MS = 40_000;
// The assignments' life (the policy's stream.ttl) and the gates' grace
// (fleetGraceMs), short so that most of the 40 s come after the last
// assignment a gate holds has expired.
const TTL_MS = 1000;
const GRACE_MS = 1000;

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
  kind: Kind;
  id: string;
  start: number;
  end: number;
  outcome: Outcome;
  stopReason: string;
  /** What onDecision saw of the call. */
  decisions: Decision[];
}

/** Resolves after ms, or at once when signal aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });
}

/**
 * A provider that fails each call's first attempt (a call is its
 * x-call-id) with a 503 and answers its retries; it records when each
 * first attempt came, and each call's attempts.
 */
async function firstAttemptsFail() {
  const attempts = new Map<string, number>();
  const firstAttempts: number[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on("end", () => {
      const id = String(req.headers["x-call-id"] ?? "");
      const first = !attempts.has(id);
      attempts.set(id, (attempts.get(id) ?? 0) + 1);
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
    /** The attempts the provider saw of call id. */
    attempts: (id: string) => attempts.get(id) ?? 0,
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
  const stopping = new AbortController();
  const agent = async (kind: Kind, i: number) => {
    const { thinkMs, timeoutMs } = KINDS[kind];
    let decisions: Decision[] = [];
    const client = createClient({
      address: addr,
      clientId: `restart-${kind}-${i}`,
      parkLimitMs: 0,
      daemonTimeoutMs: 500,
      fleetGraceMs: GRACE_MS,
      logger: memoryLogger(), // the fail-open warning, once a client
      onDecision: ({ decision }) => {
        decisions.push(decision);
        if (decision.stopReason === "RETRY_BUDGET_EXHAUSTED") budgetStops.push(performance.now());
      },
    });
    clients.push(client);
    const send = client.fetch({ provider: "openai", keyId: "k1", profile: "fleet_e2e", timeoutMs });
    const body = JSON.stringify({ model: "gpt-4o", messages: [{ role: "user", content: "hello" }] });
    for (let n = 0; !stopping.signal.aborted; n++) {
      const id = `${kind}-${i}-${n}`;
      decisions = [];
      const start = performance.now();
      let outcome: Outcome;
      let stopReason = "";
      try {
        const res = await send(`${provider.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-call-id": id },
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
      log.push({ kind, id, start, end: performance.now(), outcome, stopReason, decisions });
      await sleep(thinkMs, stopping.signal);
    }
  };
  const agents = Promise.all(
    (Object.keys(KINDS) as Kind[]).flatMap((kind) =>
      Array.from({ length: KINDS[kind].agents }, (_, i) => agent(kind, i)),
    ),
  );

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
  while (log.length < returned + KINDS.busy.agents && performance.now() - restarted < 20_000) await sleep(50);
  stopping.abort();
  await agents;

  const expired = killed + TTL_MS + GRACE_MS + 100;
  const away = log.filter((c) => c.start > killed && c.end < restarted);
  const afterExpiry = away.filter((c) => c.start > expired);
  const count = (calls: CallRecord[], o: Outcome) => calls.filter((c) => c.outcome === o).length;
  const of = (calls: CallRecord[], kind: Kind) => calls.filter((c) => c.kind === kind);
  const refusedBefore = count(
    away.filter((c) => c.start <= expired),
    "refused",
  );
  const budgetStopsAway = budgetStops.filter((at) => at > killed && at < restarted).length;
  const firstAttemptsSent = provider.firstAttempts.filter((at) => at > expired && at < restarted).length;
  // A paced call after the expiry: its first attempt, the fail-open policy's RETRY, its retry's success.
  const paced = of(afterExpiry, "paced");
  const notByOneRetry = paced.filter(
    (c) =>
      c.outcome !== "ok" ||
      provider.attempts(c.id) !== 2 ||
      c.decisions.length !== 1 ||
      !c.decisions[0]!.failOpen ||
      c.decisions[0]!.action !== "RETRY",
  );
  const longest = Math.max(...log.map((c) => c.end - c.start - KINDS[c.kind].timeoutMs));
  t.diagnostic(
    `policyd away ${DOWN_MS / 1000} s: ${away.length} calls finished; ${refusedBefore} first attempts refused by ` +
      `the gate before the assignments expired, ${count(afterExpiry, "refused")} after; after the expiry ` +
      `${firstAttemptsSent} first attempts reached the provider; paced agents: ${paced.length} calls, ` +
      `${paced.length - notByOneRetry.length} completed by one fail-open retry; busy agents: ` +
      `${of(afterExpiry, "busy").length} calls, ${count(of(afterExpiry, "busy"), "ok")} ok, ${budgetStopsAway} ` +
      `retries refused by the own budget; after the restart ${streaming} of ${AGENTS} streams back in ` +
      `${(back / 1000).toFixed(2)} s; ${log.length} calls in all; the longest call ${Math.round(longest)} ms ` +
      `from its deadline`,
  );
  assert.equal(count(afterExpiry, "refused"), 0, "first attempts refused by the gate after the assignments expired");
  assert.ok(firstAttemptsSent > 0, "no first attempt reached the provider after the assignments expired");
  assert.ok(paced.length >= KINDS.paced.agents * 4, `only ${paced.length} paced calls while policyd was away`);
  assert.deepEqual(
    notByOneRetry.map((c) => ({ outcome: c.outcome, attempts: provider.attempts(c.id), decisions: c.decisions })),
    [],
    "paced calls that did not complete by one fail-open retry",
  );
  assert.ok(
    of(afterExpiry, "busy").length >= KINDS.busy.agents * 5,
    `only ${of(afterExpiry, "busy").length} busy calls finished`,
  );
  assert.ok(
    back <= 2000,
    `the streams were back ${(back / 1000).toFixed(2)} s after policyd (${streaming} of ${AGENTS})`,
  );
  assert.ok(longest <= 300, `a call took ${Math.round(longest)} ms past its deadline`);
  assert.ok(log.length > returned, "no call finished after policyd returned");
});
