// client.fetch without an SDK, against real HTTP servers on 127.0.0.1 and
// a real policyd: what it sends and resends, what it returns when policyd
// stops, what it journals, and what the fleet stream reports of its
// requests (input-token estimates, the batch class, calls in flight).

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test, type TestContext } from "node:test";
import { type ClientOptions, createClient, INPUT_TOKENS_HEADER } from "@policyd/client";
import { Action, FailureType, Outcome } from "@policyd/client/proto";
import {
  bodies,
  daemonAddr,
  daemonWith,
  decisions,
  FakeClock,
  flaky,
  journalDaemonAddr,
  rawClients,
  reportTap,
} from "./harness.js";

async function policyd(t: TestContext, options: ClientOptions = {}) {
  const d = decisions();
  const client = createClient({
    address: await daemonAddr(),
    clock: new FakeClock(),
    onDecision: d.onDecision,
    ...options,
  });
  t.after(() => client.close());
  return { client, decisions: d.all };
}

const chat = (model: string) => JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] });
const post = (body: string, headers: Record<string, string> = {}) => ({
  method: "POST",
  headers: { "content-type": "application/json", ...headers },
  body,
});

describe("client.fetch", { concurrency: true }, () => {
  test("a 503 is retried with the same request; the success is returned as it came", async (t) => {
    const srv = await flaky(
      { status: 503, body: bodies.overloaded },
      { status: 200, headers: { "x-request-id": "req_2" }, body: bodies.chatOk },
    );
    const { client, decisions } = await policyd(t);
    const res = await client.fetch()(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o"), { "x-trace": "t1" }));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("x-request-id"), "req_2");
    assert.equal(await res.text(), bodies.chatOk);
    assert.equal(decisions[0]?.classification.failureType, "OVERLOADED");
    assert.deepEqual(srv.requests, ["POST /v1/chat/completions", "POST /v1/chat/completions"]);
    assert.deepEqual(srv.bodies, [chat("gpt-4o"), chat("gpt-4o")]);
    assert.deepEqual(
      srv.headers.map((h) => h["x-trace"]),
      ["t1", "t1"],
    );
  });

  test("a Request's body is buffered and sent again", async (t) => {
    const srv = await flaky({ status: 502 }, { status: 200, body: bodies.chatOk });
    const { client } = await policyd(t);
    const res = await client.fetch()(new Request(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o"))));
    assert.equal(res.status, 200);
    assert.deepEqual(srv.bodies, [chat("gpt-4o"), chat("gpt-4o")]);
  });

  test("a dropped connection is retried", async (t) => {
    const srv = await flaky({ drop: true }, { status: 200, body: bodies.chatOk });
    const { client, decisions } = await policyd(t);
    const res = await client.fetch()(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o")));
    assert.equal(await res.text(), bodies.chatOk);
    assert.equal(decisions[0]?.classification.failureType, "CONNECTION_ERROR");
    assert.equal(srv.hits, 2);
  });

  test("when policyd stops, the last response comes back whole: a body past 64 KiB included", async (t) => {
    const big = JSON.stringify({ error: { message: "x".repeat(100 << 10), type: "invalid_request_error" } });
    const srv = await flaky({ status: 400, headers: { "x-request-id": "req_big" }, body: big });
    const { client, decisions } = await policyd(t);
    const res = await client.fetch()(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o")));
    assert.equal(res.status, 400);
    assert.equal(res.headers.get("x-request-id"), "req_big");
    assert.equal(await res.text(), big);
    assert.equal(decisions.length, 1);
    assert.equal(decisions[0]?.action, "STOP");
    assert.equal(srv.hits, 1);
  });

  test("a stream body is sent once: a failure is returned, not retried", async (t) => {
    const srv = await flaky({ status: 503, body: bodies.overloaded }, { status: 200 });
    const { client, decisions } = await policyd(t);
    const body = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(chat("gpt-4o")));
        c.close();
      },
    });
    const res = await client.fetch()(`${srv.url}/v1/chat/completions`, { method: "POST", body, duplex: "half" });
    assert.equal(res.status, 503);
    assert.equal(srv.hits, 1);
    assert.equal(decisions[0]?.stopReason, "IRREVERSIBLE_OPERATION");
  });

  test("a POST to a path that names no model operation is not repeated: its failure comes back at once", async (t) => {
    const srv = await flaky({ status: 503, body: bodies.serverError }, { status: 200 });
    const { client, decisions } = await policyd(t);
    const res = await client.fetch()(`${srv.url}/v1/files`, post("{}"));
    assert.equal(res.status, 503);
    assert.equal(await res.text(), bodies.serverError);
    assert.equal(decisions[0]?.stopReason, "IRREVERSIBLE_OPERATION");
    assert.equal(srv.hits, 1);
  });

  test(`${INPUT_TOKENS_HEADER} is read, never sent; a bad one is an error naming it, and nothing is sent`, async (t) => {
    const srv = await flaky({ status: 200, body: bodies.chatOk });
    const { client } = await policyd(t);
    const f = client.fetch();
    await f(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o"), { "X-Policyd-Input-Tokens": "12" }));
    await f(`${srv.url}/v1/chat/completions`, {
      ...post(chat("gpt-4o")),
      headers: new Headers({ [INPUT_TOKENS_HEADER]: "12", "x-kept": "1" }),
    });
    await f(`${srv.url}/v1/chat/completions`, { ...post(chat("gpt-4o")), headers: [[INPUT_TOKENS_HEADER, "12"]] });
    assert.deepEqual(
      srv.headers.map((h) => [h[INPUT_TOKENS_HEADER], h["x-kept"]]),
      [
        [undefined, undefined],
        [undefined, "1"],
        [undefined, undefined],
      ],
    );
    await assert.rejects(
      f(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o"), { [INPUT_TOKENS_HEADER]: "many" })),
      new TypeError(`policyd: header ${INPUT_TOKENS_HEADER}: "many" is not a whole number of tokens`),
    );
    assert.equal(srv.hits, 3);
  });

  test("a class other than interactive or batch is an error naming it", async (t) => {
    const { client } = await policyd(t);
    assert.throws(
      () => client.fetch({ class: "urgent" as "batch" }),
      new TypeError(`policyd: class: "urgent" is not "interactive" or "batch"`),
    );
    await assert.rejects(
      client.call(async () => "ok", { class: "urgent" as "batch" }),
      new TypeError(`policyd: class: "urgent" is not "interactive" or "batch"`),
    );
  });

  test("a journaled request is journaled as call journals it", async (t) => {
    const addr = await journalDaemonAddr();
    if (!addr) return t.skip("TEST_DATABASE_URL is not set (scripts/test.sh starts a database)");
    const srv = await flaky({ status: 503, body: bodies.overloaded }, { status: 200, body: bodies.chatOk });
    const provider = `fetch-${randomUUID()}`;
    const { client } = await policyd(t, { address: addr, journal: true, agent: "ts-fetch-test" });
    const res = await client.fetch({ provider })(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o-journal")));
    assert.equal(res.status, 200);
    const { journal } = rawClients(addr);
    const { contexts } = await journal.listContexts({ provider });
    assert.equal(contexts.length, 1);
    const got = await journal.getContext({ contextId: contexts[0]!.contextId });
    assert.equal(got.context?.outcome, Outcome.RESOLVED);
    assert.equal(got.context?.agent, "ts-fetch-test");
    assert.equal(got.context?.model, "gpt-4o-journal", "the model from the body");
    assert.deepEqual(
      got.attempts.map((a) => [a.attempt, a.failureType, a.decision, a.httpStatus]),
      [[1, FailureType.OVERLOADED, Action.RETRY, 503]],
    );
  });
});

// The fleet stream's reports of fetch requests, against a daemon with fleet memory on.
async function fleetAddr(): Promise<string> {
  return (await daemonWith("fetch-reports", ["--fleet", "on"])).addr;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("client.fetch: what the fleet stream reports", { concurrency: true }, () => {
  test("input tokens: the header's count for the first attempt and the retry, else the body's bytes / 4", async (t) => {
    const srv = await flaky({ status: 503 }, { status: 200, body: bodies.chatOk });
    const tap = reportTap();
    const { client } = await policyd(t, { address: await fleetAddr(), interceptors: [tap.interceptor] });
    const f = client.fetch();
    await f(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o-tokens"), { [INPUT_TOKENS_HEADER]: "1234" }));
    const body = JSON.stringify({ model: "gpt-4o-bytes", pad: "é".repeat(100) }); // 200 bytes of é: 4 bytes a token
    await f(`${srv.url}/v1/chat/completions`, post(body));
    await client.close(); // the last report
    const sum = (model: string, k: "firstAttemptInputTokens" | "retryInputTokens" | "retries") =>
      tap.usages.filter((u) => u.target?.model === model).reduce((n, u) => n + u[k], 0n);
    assert.equal(sum("gpt-4o-tokens", "firstAttemptInputTokens"), 1234n);
    assert.equal(sum("gpt-4o-tokens", "retries"), 1n);
    assert.equal(sum("gpt-4o-tokens", "retryInputTokens"), 1234n);
    assert.equal(sum("gpt-4o-bytes", "firstAttemptInputTokens"), BigInt(Math.ceil(Buffer.byteLength(body) / 4)));
    assert.equal(sum("gpt-4o-bytes", "retryInputTokens"), 0n);
  });

  test("the batch class is counted as such", async (t) => {
    const srv = await flaky({ status: 200, body: bodies.chatOk });
    const tap = reportTap();
    const { client } = await policyd(t, { address: await fleetAddr(), interceptors: [tap.interceptor] });
    await client.fetch({ class: "batch" })(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o-batch")));
    await client.fetch()(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o-batch")));
    await client.close();
    const mine = tap.usages.filter((u) => u.target?.model === "gpt-4o-batch");
    const sum = (k: "admitted" | "batchFirstAttempts") => mine.reduce((n, u) => n + u[k], 0n);
    assert.deepEqual([sum("admitted"), sum("batchFirstAttempts")], [2n, 1n]);
  });

  test("in flight: a call's attempt while it runs", async (t) => {
    const tap = reportTap();
    const { client } = await policyd(t, { address: await fleetAddr(), interceptors: [tap.interceptor] });
    const inFlight = () => tap.usages.filter((u) => u.target?.model === "gpt-4o-call").map((u) => u.inFlight);
    let release = () => {};
    const running = new Promise<void>((r) => (release = r));
    const call = client.call(() => running, { provider: "openai", model: "gpt-4o-call" });
    const end = performance.now() + 10_000;
    while (!inFlight().includes(1n)) {
      if (performance.now() > end) assert.fail(`no report of the attempt in flight: ${inFlight()}`);
      await sleep(50);
    }
    release();
    await call;
    await client.close();
    assert.equal(inFlight().at(-1), 0n);
  });

  test("in flight: a request until its response, a stream until its body ends", async (t) => {
    const events = "data: {}\n\ndata: [DONE]\n\n";
    const srv = await flaky(
      { status: 200, delayMs: 2500, body: bodies.chatOk },
      { status: 200, headers: { "content-type": "text/event-stream" }, body: events },
    );
    const tap = reportTap();
    const { client } = await policyd(t, { address: await fleetAddr(), interceptors: [tap.interceptor] });
    const f = client.fetch();
    const inFlight = (model: string) => tap.usages.filter((u) => u.target?.model === model).map((u) => u.inFlight);
    /** Waits for a report of model saying n in flight. */
    const reported = async (model: string, n: bigint) => {
      const end = performance.now() + 10_000;
      while (!inFlight(model).includes(n)) {
        if (performance.now() > end) assert.fail(`no report of ${n} in flight: ${inFlight(model)}`);
        await sleep(50);
      }
    };

    const slow = f(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o-slow")));
    await reported("gpt-4o-slow", 1n);
    assert.equal((await slow).status, 200);
    await reported("gpt-4o-slow", 0n);

    const stream = await f(`${srv.url}/v1/chat/completions`, post(chat("gpt-4o-stream")));
    await reported("gpt-4o-stream", 1n);
    assert.equal(await stream.text(), events, "the stream as it came");
    await reported("gpt-4o-stream", 0n);
  });
});
