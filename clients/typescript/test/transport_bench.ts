// The fetch transport's own cost, in process, by hand: `npm run build &&
// npm run build:test && POLICYD_BIN=../../bin/policyd node
// build/test/transport_bench.js`. scripts/bench.sh measures the transport
// against a real provider over the network, where the machine's load moves
// the numbers; here each request goes to a stub fetch that answers at once
// with a new Response (a JSON reply like the fake provider's, with its
// usage), read whole as the SDKs read it, one request at a time: the time
// and the bytes allocated a request of the stub alone, of the transport with
// the fleet gate off, and with it on (a policyd with fleet memory on), in
// rounds that run each once. Printed: the median µs a request of each, and
// what the transport adds; with BENCH_ALLOC=1, the bytes allocated a request
// too (V8's sampling heap profiler, collected objects included).
//
// Env: POLICYD_BIN (a built daemon), BENCH_ROUNDS (default 7), BENCH_REQUESTS
// (a round's requests, default 20000), BENCH_ALLOC.

import { Session } from "node:inspector/promises";
import { createClient } from "@policyd/client";
import { startPolicyd } from "./bench_procs.js";

const rounds = Number(process.env["BENCH_ROUNDS"] ?? 7);
const requests = Number(process.env["BENCH_REQUESTS"] ?? 20_000);

const daemon = startPolicyd();
try {
  const addr = await daemon.found;
  const reply = JSON.stringify({
    id: "chatcmpl-bench",
    object: "chat.completion",
    model: "gpt-4o-mini",
    choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "ok! ".repeat(20) } }],
    usage: { prompt_tokens: 21, completion_tokens: 20, total_tokens: 41 },
  });
  const headers = { "content-type": "application/json", "content-length": String(Buffer.byteLength(reply)) };
  const stub: typeof fetch = async () => new Response(reply, { headers });
  const url = "http://127.0.0.1:9/v1/chat/completions";
  const init = {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer sk-bench" },
    body: JSON.stringify({ model: "gpt-4o-mini", max_tokens: 8, messages: [{ role: "user", content: "Say hello" }] }),
  };
  const on = createClient({ address: addr });
  const off = createClient({ address: addr, fleetGate: false });
  const kinds = { stub, off: off.fetch({ fetch: stub }), on: on.fetch({ fetch: stub }) };

  const loop = async (f: typeof fetch, n: number) => {
    for (let i = 0; i < n; i++) await (await f(url, { ...init, signal: new AbortController().signal })).json();
  };
  for (const f of Object.values(kinds)) await loop(f, 5000); // warm up: JIT, the fleet stream's first assignment

  const us: Record<string, number[]> = { stub: [], off: [], on: [] };
  for (let r = 0; r < rounds; r++) {
    for (const [name, f] of Object.entries(kinds)) {
      const t0 = performance.now();
      await loop(f, requests);
      us[name]!.push(((performance.now() - t0) * 1000) / requests);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const [s, o, g] = [median(us["stub"]!), median(us["off"]!), median(us["on"]!)];
  console.log(
    `stub ${s.toFixed(1)} µs, transport (gate off) ${o.toFixed(1)} µs (+${(o - s).toFixed(1)}), ` +
      `transport (gate on) ${g.toFixed(1)} µs (+${(g - s).toFixed(1)}) a request; the median of ${rounds} rounds`,
  );

  if (process.env["BENCH_ALLOC"]) {
    const session = new Session();
    session.connect();
    const bytes: string[] = [];
    for (const [name, f] of Object.entries(kinds)) {
      await session.post("HeapProfiler.startSampling", {
        samplingInterval: 64,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: true,
      });
      await loop(f, requests);
      const { profile } = await session.post("HeapProfiler.stopSampling");
      let total = 0;
      const walk = (n: typeof profile.head): void => {
        total += n.selfSize;
        n.children.forEach(walk);
      };
      walk(profile.head);
      bytes.push(`${name} ${(total / requests / 1024).toFixed(1)} KiB`);
    }
    session.disconnect();
    console.log(`allocated a request: ${bytes.join(", ")}`);
  }
  await Promise.all([on.close(), off.close()]);
} finally {
  daemon.child.kill("SIGTERM");
}
