// The fetch transport's cost (scripts/bench.sh): requests a second through
// client.fetch and through the bare global fetch, against the fake provider
// without limits (bin/policyd-fakeprovider) and a policyd with fleet memory
// on, in alternating rounds of one run, so that both see the same machine;
// each request with an abort signal of its own, as the SDKs send them.
// It prints one line: transport/bare=R (the median ratio of the rounds'
// pairs), the two rates over the whole run, and this process's CPU per
// request of each (process.cpuUsage over its rounds).
//
// Env: POLICYD_BIN and FAKEPROVIDER_BIN (the built binaries), BENCH_ROUNDS
// (pairs of rounds, default 40), BENCH_SECONDS (a round's length, default 0.5),
// BENCH_CONCURRENCY (requests in flight, default 8).

import { createClient } from "@policyd/client";
import { need, start, startPolicyd } from "./bench_procs.js";

const rounds = Number(process.env["BENCH_ROUNDS"] ?? 40);
const seconds = Number(process.env["BENCH_SECONDS"] ?? 0.5);
const concurrency = Number(process.env["BENCH_CONCURRENCY"] ?? 8);

const daemon = startPolicyd();
const provider = start(need("FAKEPROVIDER_BIN"), [], "stdout", (line) => /^listening on (\S+)$/.exec(line)?.[1]);

try {
  const [addr, base] = await Promise.all([daemon.found, provider.found]);
  const client = createClient({ address: addr });
  const url = `${base}/v1/chat/completions`;
  const init = {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer sk-bench" },
    body: JSON.stringify({ model: "gpt-4o-mini", max_tokens: 8, messages: [{ role: "user", content: "Say hello" }] }),
  };
  const kinds = { transport: client.fetch(), bare: globalThis.fetch };
  const done = { transport: 0, bare: 0 };
  const took = { transport: 0, bare: 0 };
  const cpu = { transport: 0, bare: 0 }; // µs of this process's CPU (user + system)

  /** Sends requests with f, concurrency at a time, for ms; returns how many completed. */
  async function round(f: typeof fetch, ms: number): Promise<number> {
    const end = performance.now() + ms;
    let n = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (performance.now() < end) {
          const res = await f(url, { ...init, signal: new AbortController().signal });
          await res.text();
          if (res.status !== 200) throw new Error(`bench: HTTP ${res.status}`);
          n++;
        }
      }),
    );
    return n;
  }

  for (const f of Object.values(kinds)) await round(f, 500); // warm up: connections, JIT, the fleet stream
  // Short rounds in pairs, each pair in both orders (ABBA): a busy machine's load moves over seconds, and
  // the ratio of each pair, of which the median is taken, sees the same load on both sides.
  const ratios: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const order = Object.entries(kinds) as [keyof typeof kinds, typeof fetch][];
    if (i % 2 === 1) order.reverse();
    const rate = { transport: 0, bare: 0 };
    for (const [name, f] of order) {
      const t0 = performance.now();
      const c0 = process.cpuUsage();
      const n = await round(f, seconds * 1000);
      const c = process.cpuUsage(c0);
      const ms = performance.now() - t0;
      cpu[name] += c.user + c.system;
      done[name] += n;
      took[name] += ms;
      rate[name] = n / ms;
    }
    ratios.push(rate.transport / rate.bare);
  }
  await client.close();
  ratios.sort((a, b) => a - b);
  const median = ratios[Math.floor(ratios.length / 2)]!;
  const rate = (k: keyof typeof kinds) => (done[k] * 1000) / took[k];
  const us = (k: keyof typeof kinds) => cpu[k] / done[k];
  const added = us("transport") - us("bare");
  console.log(
    `transport/bare=${median.toFixed(2)} (transport ${rate("transport").toFixed(0)} req/s, bare ${rate("bare").toFixed(0)} req/s; ` +
      `the median of ${rounds} pairs of ${seconds}s rounds, ${concurrency} in flight); ` +
      `client CPU per request: transport ${us("transport").toFixed(0)} us, bare ${us("bare").toFixed(0)} us ` +
      `(${added < 0 ? "" : "+"}${added.toFixed(0)} us)`,
  );
} finally {
  daemon.child.kill("SIGTERM");
  provider.child.kill("SIGTERM");
}
