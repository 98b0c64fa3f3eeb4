// What OpenTelemetry costs a call's success path (src/otel.ts), by hand:
// `npm run build && npm run build:test && node build/test/otel_bench.js`.
// Each setup runs in a process of its own (OpenTelemetry's registrations are
// global), in rounds that run each once. The setups: without
// @opentelemetry/api (its resolution blocked); with the API and no SDK; with
// only the SDK's context manager and the calls inside a span that does not
// record (what AsyncLocalStorage costs every await, the client's checks
// aside); and with the SDK's tracer and meter providers registered too and
// the calls inside a recording span. A call here succeeds at once and makes
// no RPC (no fleet gate), so the time is the client's own. Printed for each
// setup: the median time of a call, the median of its ratios to the absent
// setup's time in the same round, and the median time of the client's
// OpenTelemetry work alone (src/otel.ts's callTelemetry and end).
//
// Env: BENCH_ROUNDS (rounds of each setup, default 15), BENCH_CALLS (calls a
// round, default 100000).

import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const setups = ["absent", "api", "context", "sdk"] as const;
type Setup = (typeof setups)[number];

/** One round in this process: ns a call, printed. */
async function round(setup: Setup, calls: number): Promise<void> {
  const { createClient } = await import("@policyd/client");
  let inSpan = <T>(fn: () => Promise<T>) => fn();
  if (setup === "context" || setup === "sdk") {
    const { context, trace } = await import("@opentelemetry/api");
    const { AsyncLocalStorageContextManager } = await import("@opentelemetry/context-async-hooks");
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    inSpan = (fn) =>
      trace.getTracer("bench").startActiveSpan("agent", async (span) => {
        try {
          return await fn();
        } finally {
          span.end();
        }
      });
  }
  if (setup === "sdk") {
    const { metrics, trace } = await import("@opentelemetry/api");
    const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } =
      await import("@opentelemetry/sdk-trace-base");
    const { InMemoryMetricExporter, AggregationTemporality, MeterProvider, PeriodicExportingMetricReader } =
      await import("@opentelemetry/sdk-metrics");
    const processor = new SimpleSpanProcessor(new InMemorySpanExporter());
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [processor] }));
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
  }
  const client = createClient({ address: "127.0.0.1:1", fleetGate: false });
  const ok = async () => "ok";
  const target = { provider: "openai", model: "gpt-4o" };
  const loop = async (n: number) => {
    for (let i = 0; i < n; i++) await client.call(ok, target);
  };
  await inSpan(() => loop(Math.ceil(calls / 10))); // warm up
  const t0 = process.hrtime.bigint();
  await inSpan(() => loop(calls));
  const ns = Number(process.hrtime.bigint() - t0) / calls;
  await client.close();
  // The client's own OpenTelemetry work for a call that succeeds at once, alone.
  const otel = new URL("../../dist/otel.js", import.meta.url).href;
  const { callTelemetry } = (await import(otel)) as {
    callTelemetry: (provider: string, model: string) => { end(): void } | undefined;
  };
  const own = calls * 10;
  const t1 = process.hrtime.bigint();
  await inSpan(async () => {
    for (let i = 0; i < own; i++) callTelemetry("openai", "gpt-4o")?.end();
  });
  console.log(`${ns.toFixed(1)} ${(Number(process.hrtime.bigint() - t1) / own).toFixed(2)}`);
}

const self = fileURLToPath(import.meta.url);
const setup = process.argv[2] as Setup | undefined;
const calls = Number(process.env["BENCH_CALLS"] ?? 100_000);
if (setup) {
  await round(setup, calls);
} else {
  const rounds = Number(process.env["BENCH_ROUNDS"] ?? 15);
  const dir = mkdtempSync(join(tmpdir(), "policyd-otel-bench-"));
  try {
    // Every resolution of @opentelemetry/api fails, as in a project without it.
    const block = join(dir, "block.cjs");
    writeFileSync(
      block,
      `const Module = require("node:module");
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === "@opentelemetry/api") throw Object.assign(new Error("blocked"), { code: "MODULE_NOT_FOUND" });
  return resolve.call(this, request, ...rest);
};
`,
    );
    const ns: Record<Setup, number[]> = { absent: [], api: [], context: [], sdk: [] };
    const own: Record<Setup, number[]> = { absent: [], api: [], context: [], sdk: [] };
    const ratios: Record<Setup, number[]> = { absent: [], api: [], context: [], sdk: [] };
    for (let r = 0; r < rounds; r++) {
      // Each round in another order: a busy machine's load moves, and each ratio compares a round's own runs.
      const order = setups.map((_, i) => setups[(i + r) % setups.length]!);
      const got: Partial<Record<Setup, number>> = {};
      for (const s of order) {
        const args = s === "absent" ? ["--require", block, self, s] : [self, s];
        const [call, otel] = execFileSync(process.execPath, args, { encoding: "utf8" }).trim().split(" ").map(Number);
        got[s] = call!;
        ns[s].push(call!);
        own[s].push(otel!);
      }
      for (const s of setups) ratios[s].push(got[s]! / got.absent!);
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    for (const s of setups) {
      const vs = s === "absent" ? "" : `, x${median(ratios[s]).toFixed(2)} the absent's`;
      console.log(
        `${s.padEnd(8)} a call ${median(ns[s]).toFixed(0)} ns${vs}; the OpenTelemetry work in it ${median(own[s]).toFixed(1)} ns`,
      );
    }
    console.log(`(medians of ${rounds} rounds of ${calls} calls)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
