// The real OpenAI and Anthropic SDKs (dev dependencies only: the client
// reads their errors duck typed) against a fake provider on 127.0.0.1 and
// a real policyd.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { createClient, failureFromError, PolicydError } from "@policyd/client";
import OpenAI from "openai";
import { AUTH_RECOVERY, bodies, daemonAddr, decisions, FakeClock, flaky } from "./harness.js";

const messageOk = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4","content":[{"type":"text","text":"Hello from the fake Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":5}}`;
const overloaded = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`;
const badKey = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`;
const quota = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}`;

function openaiOn(url: string): OpenAI {
  // policyd decides the retries: the SDK's own are off.
  return new OpenAI({ apiKey: "sk-test", baseURL: `${url}/v1`, maxRetries: 0 });
}

function anthropicOn(url: string): Anthropic {
  return new Anthropic({ apiKey: "sk-ant-test", baseURL: url, maxRetries: 0 });
}

const chat = (openai: OpenAI) => (a: { signal: AbortSignal }) =>
  openai.chat.completions.create(
    { model: "gpt-4o", messages: [{ role: "user", content: "hi" }] },
    { signal: a.signal },
  );

const message = (anthropic: Anthropic) => (a: { signal: AbortSignal }) =>
  anthropic.messages.create(
    { model: "claude-sonnet-4", max_tokens: 64, messages: [{ role: "user", content: "hi" }] },
    { signal: a.signal },
  );

describe("the OpenAI SDK", { concurrency: true }, () => {
  const call = { provider: "openai", model: "gpt-4o", operation: "chat" };

  test("a 429 with retry-after-ms is retried after the server's delay", async () => {
    const srv = await flaky(
      { status: 429, headers: { "retry-after-ms": "300" }, body: bodies.rateLimit },
      { status: 200, body: bodies.chatOk },
    );
    const d = decisions();
    const client = createClient({ address: await daemonAddr(), onDecision: d.onDecision });
    const start = performance.now();
    const out = await client.call(chat(openaiOn(srv.url)), call);
    assert.equal(out.choices[0]?.message.content, "Hello from the fake model.");
    assert.ok(performance.now() - start >= 300);
    assert.equal(d.all[0]?.classification.failureType, "RATE_LIMIT");
    assert.equal(d.all[0]?.classification.retryAfterMs, 300);
  });

  test("a 401 stops with the SDK's AuthenticationError as the cause", async () => {
    const srv = await flaky({ status: 401, body: bodies.badKey });
    const client = createClient({ address: await daemonAddr() });
    const err = await client.call(chat(openaiOn(srv.url)), call).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof PolicydError, String(err));
    assert.ok(err.cause instanceof OpenAI.AuthenticationError);
    assert.equal(err.recoveryAction, AUTH_RECOVERY);
    assert.equal(err.failure.httpStatus, 401);
    assert.match(err.failure.body, /invalid_api_key/);
  });

  test("insufficient_quota: a 429 that waiting does not fix", async () => {
    const srv = await flaky({ status: 429, body: quota });
    const client = createClient({ address: await daemonAddr(), clock: new FakeClock() });
    const err = await client.call(chat(openaiOn(srv.url)), call).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof PolicydError);
    assert.equal(err.decision.classification.failureType, "QUOTA_EXHAUSTED");
    assert.equal(srv.hits, 1);
  });

  test("a dropped connection: APIConnectionError, retried", async () => {
    const srv = await flaky({ drop: true }, { status: 200, body: bodies.chatOk });
    const d = decisions();
    const client = createClient({ address: await daemonAddr(), clock: new FakeClock(), onDecision: d.onDecision });
    await client.call(chat(openaiOn(srv.url)), call);
    assert.equal(d.all[0]?.classification.failureType, "CONNECTION_ERROR");
    assert.equal(srv.hits, 2);
  });

  test("the error's fields as failureFromError reads them", async () => {
    const srv = await flaky({ status: 503, headers: { "x-request-id": "req_9" }, body: bodies.overloaded });
    const err = await chat(openaiOn(srv.url))({ signal: new AbortController().signal }).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );
    const f = failureFromError(err);
    assert.equal(f.httpStatus, 503);
    assert.equal(f.errorName, "InternalServerError");
    assert.equal(f.headers["x-request-id"], "req_9");
    assert.deepEqual(JSON.parse(f.body), JSON.parse(bodies.overloaded));
  });

  test("an abort stops the call with the signal's reason", async () => {
    const srv = await flaky({ delayMs: 10_000 });
    const client = createClient({ address: await daemonAddr() });
    const ac = new AbortController();
    let abortedAt = 0;
    setTimeout(() => {
      abortedAt = performance.now();
      ac.abort(new Error("user cancelled"));
    }, 100);
    await assert.rejects(client.call(chat(openaiOn(srv.url)), { ...call, signal: ac.signal }), /user cancelled/);
    assert.ok(performance.now() - abortedAt < 500, "the call outlived the abort");
  });
});

describe("the Anthropic SDK", { concurrency: true }, () => {
  const call = { provider: "anthropic", model: "claude-sonnet-4", operation: "chat" };

  test("529 overloaded_error is retried", async () => {
    const srv = await flaky({ status: 529, body: overloaded }, { status: 200, body: messageOk });
    const d = decisions();
    const client = createClient({ address: await daemonAddr(), clock: new FakeClock(), onDecision: d.onDecision });
    const out = await client.call(message(anthropicOn(srv.url)), call);
    const first = out.content[0];
    assert.equal(first?.type === "text" ? first.text : "", "Hello from the fake Claude.");
    assert.equal(d.all[0]?.classification.failureType, "OVERLOADED");
    assert.equal(d.all[0]?.action, "RETRY");
  });

  test("authentication_error stops", async () => {
    const srv = await flaky({ status: 401, body: badKey });
    const client = createClient({ address: await daemonAddr() });
    const err = await client.call(message(anthropicOn(srv.url)), call).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof PolicydError);
    assert.ok(err.cause instanceof Anthropic.AuthenticationError);
    assert.equal(err.decision.classification.failureType, "AUTH_INVALID");
    assert.equal(srv.hits, 1);
  });
});
