// OpenTelemetry (src/otel.ts; docs/clients.md, "Tracing and metrics"): the
// SDK's in-memory exporters registered globally, as an application would,
// and calls against real policyd processes. Every decision is one span
// event policyd.decision on the caller's span, the retries go on that span,
// and the meter counts retries and measures waits, all under the names of
// clients/testdata/otel.json. Without @opentelemetry/api the client works.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { type Attributes, context, metrics, type Span, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import {
  type DataPoint,
  DataPointType,
  type Histogram,
  InMemoryMetricExporter,
  AggregationTemporality,
  MeterProvider,
  PeriodicExportingMetricReader,
} from "@opentelemetry/sdk-metrics";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { type CallOptions, createClient, HttpError, type Logger, PolicydError } from "@policyd/client";
import { PolicyService } from "@policyd/client/proto";
import { createClient as createConnectClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { closedAddr, daemonAddr, daemonWith, FakeClock, flaky, packageDir } from "./harness.js";

const TESTDATA = fileURLToPath(new URL("../../../testdata/", import.meta.url));

/** clients/testdata/otel.json. */
interface Contract {
  span_event: { name: string; attributes: Record<string, string> };
  span_attributes: Record<string, string>;
  metrics: { name: string; kind: string; unit: string; attributes: string[] }[];
}
const contract = JSON.parse(readFileSync(`${TESTDATA}otel.json`, "utf8")) as Contract;

// The application's OpenTelemetry setup: a context manager, a tracer
// provider and a meter provider, each registered globally.
const spans = new InMemorySpanExporter();
const exported = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({ exporter: exported, exportIntervalMillis: 3_600_000 });
const meterProvider = new MeterProvider({ readers: [reader] });
before(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
  metrics.setGlobalMeterProvider(meterProvider);
});
after(async () => {
  await meterProvider.shutdown();
  trace.disable();
  metrics.disable();
  context.disable();
});

/** inSpan runs fn in a new active span named name, ended after it, and returns fn's outcome and the span. */
async function inSpan<T>(name: string, fn: () => Promise<T>): Promise<{ out: T | unknown; span: ReadableSpan }> {
  const out = await trace.getTracer("agent").startActiveSpan(name, async (span) => {
    try {
      return await fn();
    } catch (err) {
      return err;
    } finally {
      span.end();
    }
  });
  const span = spans.getFinishedSpans().find((s) => s.name === name);
  assert.ok(span, `no span ${name}`);
  return { out, span };
}

/** The attributes of the span's policyd.decision events. */
function decisionsOf(span: ReadableSpan): Attributes[] {
  return span.events.filter((e) => e.name === contract.span_event.name).map((e) => e.attributes ?? {});
}

/** The data points of a metric whose policyd.model is model, from a collection now. */
async function points(metric: string, model: string): Promise<DataPoint<number | Histogram>[]> {
  await reader.forceFlush();
  const last = exported.getMetrics().at(-1);
  const found = last?.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === metric);
  return (found?.dataPoints ?? []).filter((p) => p.attributes["policyd.model"] === model) as DataPoint<
    number | Histogram
  >[];
}

const overloaded = `{"error":{"message":"The engine is currently overloaded, please try again later.","type":"server_error","code":"overloaded"}}`;

function get(url: string) {
  return async ({ signal }: { signal: AbortSignal }) => {
    const res = await fetch(url, { signal });
    if (!res.ok) throw await HttpError.fromResponse(res);
    return res.text();
  };
}

describe("OpenTelemetry against policyd", () => {
  test("a call failing once: one decision event by policyd, resend_count 1, the retry counted and its wait measured", async () => {
    const srv = await flaky({ status: 503, body: overloaded }, { status: 200, body: "ok" });
    const clock = new FakeClock();
    const client = createClient({ address: await daemonAddr(), clock, fleetGate: false });
    const target = { provider: "openai", model: "otel-once", operation: "chat" } satisfies CallOptions<unknown>;

    const { out, span } = await inSpan("agent-step-once", () => client.call(get(srv.url), target));

    assert.equal(out, "ok");
    assert.equal(srv.hits, 2);
    assert.equal(clock.waits.length, 1);
    const delay = clock.waits[0]!;
    assert.deepEqual(decisionsOf(span), [
      {
        "policyd.attempt": 1,
        "error.type": "OVERLOADED",
        "policyd.action": "RETRY",
        "policyd.delay_ms": delay,
        "policyd.decided_by": "policyd",
      },
    ]);
    assert.equal(span.attributes["http.request.resend_count"], 1);

    const retries = await points("policyd.client.retries", "otel-once");
    assert.deepEqual(
      retries.map((p) => [p.attributes, p.value]),
      [[{ "policyd.provider": "openai", "policyd.model": "otel-once", "error.type": "OVERLOADED" }, 1]],
    );
    const waits = await points("policyd.client.wait", "otel-once");
    assert.equal(waits.length, 1);
    assert.deepEqual(waits[0]!.attributes, {
      "policyd.provider": "openai",
      "policyd.model": "otel-once",
      "policyd.wait.kind": "retry",
    });
    const h = waits[0]!.value as Histogram;
    assert.equal(h.count, 1);
    assert.ok(Math.abs(h.sum! - delay / 1000) < 1e-9, `wait sum ${h.sum}s, want ${delay / 1000}s`);
    await client.close();
  });

  test("a request through client.fetch is recorded as a call is", async () => {
    const srv = await flaky({ status: 503, body: overloaded }, { status: 200, body: "ok" });
    const client = createClient({ address: await daemonAddr(), clock: new FakeClock(), fleetGate: false });
    const f = client.fetch({ provider: "openai", model: "otel-fetch" });
    const { out, span } = await inSpan("agent-step-fetch", async () =>
      (await f(`${srv.url}/v1/chat/completions`)).text(),
    );
    assert.equal(out, "ok");
    assert.equal(srv.hits, 2);
    assert.deepEqual(
      decisionsOf(span).map((e) => [e["policyd.action"], e["policyd.decided_by"], e["error.type"]]),
      [["RETRY", "policyd", "OVERLOADED"]],
    );
    assert.equal(span.attributes["http.request.resend_count"], 1);
    assert.equal((await points("policyd.client.retries", "otel-fetch"))[0]?.value, 1);
    await client.close();
  });

  test("a success at once: no event, no resend_count, nothing counted", async () => {
    const client = createClient({ address: await daemonAddr(), fleetGate: false });
    const { out, span } = await inSpan("agent-step-ok", () =>
      client.call(async () => "ok", { provider: "openai", model: "otel-ok" }),
    );
    assert.equal(out, "ok");
    assert.deepEqual(span.events, []);
    assert.equal(span.attributes["http.request.resend_count"], undefined);
    assert.deepEqual(await points("policyd.client.retries", "otel-ok"), []);
    await client.close();
  });

  test("a stop: the event says STOP and why; no retry", async () => {
    const srv = await flaky({
      status: 401,
      body: `{"error":{"message":"Incorrect API key provided: sk-xxx.","type":"invalid_request_error","code":"invalid_api_key"}}`,
    });
    const client = createClient({ address: await daemonAddr(), fleetGate: false });
    const { out, span } = await inSpan("agent-step-stop", () =>
      client.call(get(srv.url), { provider: "openai", model: "otel-stop" }),
    );
    assert.ok(out instanceof PolicydError, String(out));
    assert.deepEqual(decisionsOf(span), [
      {
        "policyd.attempt": 1,
        "error.type": "AUTH_INVALID",
        "policyd.action": "STOP",
        "policyd.stop_reason": "NOT_RETRYABLE",
        "policyd.decided_by": "policyd",
      },
    ]);
    assert.equal(span.attributes["http.request.resend_count"], undefined);
    assert.deepEqual(await points("policyd.client.retries", "otel-stop"), []);
    await client.close();
  });

  test("policyd down: the fail-open decision is the event (decided_by fail_open)", async () => {
    const srv = await flaky({ status: 503, body: overloaded }, { status: 200, body: "ok" });
    const clock = new FakeClock();
    const quiet: Logger = { warn: () => {} };
    const client = createClient({
      address: await closedAddr(),
      clock,
      random: () => 0.5,
      logger: quiet,
      fleetGate: false,
    });
    const { out, span } = await inSpan("agent-step-fail-open", () =>
      client.call(get(srv.url), { provider: "openai", model: "otel-fail-open" }),
    );
    assert.equal(out, "ok");
    assert.deepEqual(clock.waits, [500]);
    assert.deepEqual(decisionsOf(span), [
      {
        "policyd.attempt": 1,
        "error.type": "OVERLOADED",
        "policyd.action": "RETRY",
        "policyd.delay_ms": 500,
        "policyd.decided_by": "fail_open",
      },
    ]);
    assert.equal(span.attributes["http.request.resend_count"], 1);
    const retries = await points("policyd.client.retries", "otel-fail-open");
    assert.equal(retries.length, 1);
    assert.equal(retries[0]!.value, 1);
    await client.close();
  });

  test("a span that does not record gets nothing: no event, no attribute built for it", async () => {
    const srv = await flaky({ status: 503, body: overloaded }, { status: 200, body: "ok" });
    const client = createClient({ address: await daemonAddr(), clock: new FakeClock(), fleetGate: false });
    const touched: string[] = [];
    const span: Span = trace.wrapSpanContext({ traceId: "a".repeat(32), spanId: "b".repeat(16), traceFlags: 0 });
    span.addEvent = () => (touched.push("addEvent"), span);
    span.setAttribute = () => (touched.push("setAttribute"), span);
    const out = await context.with(trace.setSpan(context.active(), span), () =>
      client.call(get(srv.url), { provider: "openai", model: "otel-not-recording" }),
    );
    assert.equal(out, "ok");
    assert.equal(srv.hits, 2);
    assert.deepEqual(touched, []);
    await client.close();
  });
});

describe("OpenTelemetry: the fleet gate against policyd", () => {
  const dir = mkdtempSync(join(tmpdir(), "policyd-ts-otel-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const policy = join(dir, "gate.yaml");
  // Three failures from one client open a breaker, for a second.
  writeFileSync(policy, "fleet:\n  breaker: {min_volume: 3, min_clients: 1, open_for: 1s, max_open_for: 1s}\n");
  const gateAddr = async () => (await daemonWith("otel-gate", ["--fleet", "on", "--policy", policy])).addr;

  /** Three 503s on openai/model through NextDelay from another client, then the assignment that says OPEN. */
  async function openBreaker(addr: string, model: string, lines: string[]): Promise<void> {
    const raw = createConnectClient(PolicyService, createGrpcTransport({ baseUrl: `http://${addr}` }));
    for (let i = 0; i < 3; i++) {
      await raw.nextDelay({ failure: { provider: "openai", model, httpStatus: 503 }, attempt: 1, clientId: "other" });
    }
    const open = new RegExp(`fleet assignment for openai/${model}: .*breaker OPEN`);
    for (let i = 0; i < 200 && !lines.some((l) => open.test(l)); i++) await new Promise((r) => setTimeout(r, 25));
    assert.ok(
      lines.some((l) => open.test(l)),
      `no open breaker in:\n${lines.join("\n")}`,
    );
  }

  function debugLines(): { lines: string[]; logger: Logger } {
    const lines: string[] = [];
    return { lines, logger: { warn: (m) => void lines.push(m), debug: (m) => void lines.push(m) } };
  }

  test("a gate stop: the event names the gate and the stop; no attempt", async () => {
    const addr = await gateAddr();
    const { lines, logger } = debugLines();
    const client = createClient({ address: addr, parkLimitMs: 0, logger });
    const target = { provider: "openai", model: "otel-gate-stop" } satisfies CallOptions<unknown>;
    let runs = 0;
    const op = async () => (runs++, "ok");
    await client.call(op, target); // subscribes the target
    await openBreaker(addr, "otel-gate-stop", lines);

    const { out, span } = await inSpan("agent-step-gate-stop", () => client.call(op, target));

    assert.ok(out instanceof PolicydError, String(out));
    assert.equal(runs, 1, "no attempt");
    const events = decisionsOf(span);
    assert.equal(events.length, 1);
    const e = events[0]!;
    assert.equal(e["policyd.attempt"], 0);
    assert.equal(e["policyd.action"], "STOP");
    assert.equal(e["policyd.stop_reason"], "CIRCUIT_OPEN");
    assert.equal(e["policyd.decided_by"], "gate");
    assert.equal(e["error.type"], undefined, "no failure before a gate decision");
    assert.match(String(e["policyd.fleet.reason"]), /breaker open/);
    assert.equal(span.attributes["http.request.resend_count"], undefined);
    await client.close();
  });

  test("a park that ends: one event with parked_ms, and the park's wait measured", async (t) => {
    const addr = await gateAddr();
    const { lines, logger } = debugLines();
    const hooked: boolean[] = [];
    // The park limit outlasts the open breaker's hint: the call parks, then is released or gives up.
    const client = createClient({
      address: addr,
      parkLimitMs: 3_000,
      logger,
      onDecision: ({ decision }) => void hooked.push(decision.parked === true),
    });
    const target = { provider: "openai", model: "otel-park" } satisfies CallOptions<unknown>;
    let runs = 0;
    const op = async () => (runs++, "ok");
    await client.call(op, target);
    await openBreaker(addr, "otel-park", lines);

    const start = performance.now();
    const { out, span } = await inSpan("agent-step-park", () => client.call(op, target));
    const took = performance.now() - start;

    assert.equal(hooked[0], true, "the call parked, and the client's own hook saw it");
    const events = decisionsOf(span);
    assert.equal(events.length, 1, JSON.stringify(events));
    const e = events[0]!;
    assert.equal(e["policyd.attempt"], 0);
    assert.equal(e["policyd.decided_by"], "gate");
    if (out === "ok") {
      assert.equal(e["policyd.action"], "RETRY", "released");
      assert.equal(runs, 2);
    } else {
      assert.ok(out instanceof PolicydError, String(out));
      assert.equal(e["policyd.action"], "STOP");
      assert.equal(e["policyd.stop_reason"], "DEADLINE", "gave up waiting for the fleet");
      assert.equal(runs, 1);
    }
    const parked = e["policyd.parked_ms"] as number;
    assert.ok(Number.isInteger(parked), `parked_ms ${parked} is an int`);
    assert.ok(parked >= 500 && parked <= took + 1, `parked ${parked}ms in a call of ${took.toFixed(0)}ms`);
    t.diagnostic(`${out === "ok" ? "released" : "gave up"} after ${parked}ms parked`);

    const waits = await points("policyd.client.wait", "otel-park");
    assert.equal(waits.length, 1);
    assert.equal(waits[0]!.attributes["policyd.wait.kind"], "park");
    const h = waits[0]!.value as Histogram;
    assert.equal(h.count, 1);
    assert.ok(Math.abs(h.sum! - parked / 1000) < 0.001, `park wait ${h.sum}s, want ${parked / 1000}s`);
    await client.close();
  });
});

describe("OpenTelemetry: the names", () => {
  test("every name the client records is in otel.json, with its unit and kind", async () => {
    // Each attribute's description opens with its type: "int: ..." or "string: ...".
    const typed = (where: string, docs: Record<string, string>, attrs: Attributes) => {
      for (const [k, v] of Object.entries(attrs)) {
        const doc = docs[k];
        assert.ok(doc, `${where} attribute ${k} is not in otel.json`);
        if (doc.startsWith("int:")) assert.ok(Number.isInteger(v), `${k}: ${String(v)} is not an int`);
        else assert.equal(typeof v, "string", `${k}: ${String(v)}`);
      }
    };
    const finished = spans.getFinishedSpans();
    assert.ok(
      finished.some((s) => s.events.length > 0),
      "the tests above recorded events",
    );
    for (const s of finished) {
      for (const e of s.events) {
        assert.equal(e.name, contract.span_event.name);
        typed("event", contract.span_event.attributes, e.attributes ?? {});
      }
      typed("span", contract.span_attributes, s.attributes);
    }
    await reader.forceFlush();
    const recorded = exported.getMetrics().flatMap((r) => r.scopeMetrics.flatMap((s) => s.metrics));
    assert.ok(recorded.length > 0, "the tests above recorded metrics");
    for (const m of recorded) {
      const want = contract.metrics.find((c) => c.name === m.descriptor.name);
      assert.ok(want, `metric ${m.descriptor.name}`);
      assert.equal(m.descriptor.unit, want.unit);
      const kind = m.dataPointType === DataPointType.SUM && m.isMonotonic ? "counter" : "";
      assert.equal(m.dataPointType === DataPointType.HISTOGRAM ? "histogram" : kind, want.kind);
      for (const p of m.dataPoints) {
        for (const k of Object.keys(p.attributes)) assert.ok(want.attributes.includes(k), `${want.name}: ${k}`);
      }
    }
  });

  test("every name in the source is in otel.json", () => {
    const src = readFileSync(join(packageDir, "src", "otel.ts"), "utf8");
    const known = new Set([
      contract.span_event.name,
      ...Object.keys(contract.span_event.attributes),
      ...Object.keys(contract.span_attributes),
      ...contract.metrics.flatMap((m) => [m.name, ...m.attributes]),
    ]);
    const used = [...src.matchAll(/"((?:policyd|error|http)\.[a-z_.]+)"/g)].map((m) => m[1]!);
    assert.ok(used.length >= 15, `found ${used.length} names`);
    for (const n of used) assert.ok(known.has(n), `${n} is not in otel.json`);
  });
});

describe("OpenTelemetry absent", () => {
  test("the client loads and retries when @opentelemetry/api cannot be resolved", async () => {
    const dir = mkdtempSync(join(tmpdir(), "policyd-ts-no-otel-"));
    after(() => rmSync(dir, { recursive: true, force: true }));
    // Every resolution of @opentelemetry/api fails, as in a project without it.
    const block = join(dir, "block.cjs");
    writeFileSync(
      block,
      `const Module = require("node:module");
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === "@opentelemetry/api" || request.startsWith("@opentelemetry/api/")) {
    throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: "MODULE_NOT_FOUND" });
  }
  return resolve.call(this, request, ...rest);
};
`,
    );
    const script = join(packageDir, "build", "no-otel.mjs");
    writeFileSync(
      script,
      `import { createRequire } from "node:module";
import { createClient, HttpError } from "@policyd/client";
let blocked = false;
try { createRequire(import.meta.url)("@opentelemetry/api"); } catch { blocked = true; }
const client = createClient({ address: process.argv[2], fleetGate: false });
const answer = await client.call(
  async ({ attempt }) => {
    if (attempt === 1) throw new HttpError({ status: 503 });
    return "answered on attempt " + attempt;
  },
  { provider: "openai", model: "otel-absent" },
);
await client.close();
console.log(blocked ? "blocked" : "loaded", answer);
`,
    );
    const { stdout } = await promisify(execFile)(process.execPath, ["--require", block, script, await daemonAddr()], {
      timeout: 30_000,
    });
    assert.equal(stdout.trim(), "blocked answered on attempt 2");
  });
});
