// The fetch transport under the real OpenAI and Anthropic SDKs (their own
// retries off), against the fake provider (bin/policyd-fakeprovider) and a
// real policyd: successes and streams pass through with no RPC, failures
// are decided by policyd, and what policyd stops reaches the SDK as the
// SDK's own error.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test, type TestContext } from "node:test";
import { createClient as createConnectClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import Anthropic from "@anthropic-ai/sdk";
import {
  type ClientOptions,
  createClient,
  INPUT_TOKENS_HEADER,
  type PolicydClient,
  PolicydError,
} from "@policyd/client";
import { PolicyService } from "@policyd/client/proto";
import OpenAI from "openai";
import {
  daemonAddr,
  daemonWith,
  decisions,
  FakeClock,
  fakeProvider,
  packageDir,
  reportTap,
  rpcCounter,
} from "./harness.js";

const REPLY = "ok! ".repeat(20); // the fake's reply: 20 tokens of "ok! "
const badRequest = `{"error":{"message":"Invalid value for 'temperature'.","type":"invalid_request_error","param":"temperature","code":null}}`;
const badKey = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`;

/** A client on addr (by default the daemon without fleet memory) that counts its RPCs and decisions. */
async function policyd(t: TestContext, options: ClientOptions = {}) {
  const rpcs = rpcCounter();
  const d = decisions();
  const client = createClient({
    address: await daemonAddr(),
    interceptors: [rpcs.interceptor],
    onDecision: d.onDecision,
    ...options,
  });
  t.after(() => client.close());
  return { client, rpcs, decisions: d.all };
}

function openaiThrough(client: PolicydClient, url: string, extra: Parameters<PolicydClient["fetch"]>[0] = {}) {
  return new OpenAI({ apiKey: "sk-test", baseURL: `${url}/v1`, maxRetries: 0, fetch: client.fetch(extra) });
}

function anthropicThrough(client: PolicydClient, url: string) {
  return new Anthropic({ apiKey: "sk-ant-test", baseURL: url, maxRetries: 0, fetch: client.fetch() });
}

const hi = [{ role: "user" as const, content: "hi" }];

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => assert.fail("the request succeeded"),
    (e: unknown) => e,
  );
}

describe("the OpenAI SDK through client.fetch", { concurrency: true }, () => {
  test("a success passes through: no NextDelay, no unary RPC at all", async (t) => {
    const fake = await fakeProvider();
    const { client, rpcs, decisions } = await policyd(t);
    const out = await openaiThrough(client, fake.url).chat.completions.create({ model: "gpt-4o", messages: hi });
    assert.equal(out.choices[0]?.message.content, REPLY);
    assert.deepEqual(rpcs.calls, []);
    assert.deepEqual(decisions, []);
    assert.equal((await fake.stats()).requests, 1);
  });

  test("an injected 529, twice, is retried by policyd: the SDK sees the success", async (t) => {
    const fake = await fakeProvider();
    await fake.fail({ status: 529, count: 2 });
    const clock = new FakeClock();
    const { client, rpcs, decisions } = await policyd(t, { clock });
    const out = await openaiThrough(client, fake.url).chat.completions.create({ model: "gpt-4o", messages: hi });
    assert.equal(out.choices[0]?.message.content, REPLY);
    assert.deepEqual(
      decisions.map((d) => d.action),
      ["RETRY", "RETRY"],
    );
    assert.deepEqual(rpcs.calls, ["NextDelay", "NextDelay"], "policyd decided, not the fail-open policy");
    assert.equal(clock.waits.length, 2);
    const stats = await fake.stats();
    assert.deepEqual([stats.requests, stats.failed, stats.ok], [3, 2, 1]);
  });

  test("a 429 with retry-after is honoured: the retry waits for it", async (t) => {
    const fake = await fakeProvider();
    const rateLimited = `{"error":{"message":"Rate limit reached for gpt-4o on requests per min (RPM)","type":"requests","param":null,"code":"rate_limit_exceeded"}}`;
    await fake.fail({ status: 429, retry_after: "1", body: rateLimited });
    const { client, decisions } = await policyd(t);
    const start = performance.now();
    const out = await openaiThrough(client, fake.url).chat.completions.create({ model: "gpt-4o", messages: hi });
    assert.equal(out.choices[0]?.message.content, REPLY);
    assert.ok(performance.now() - start >= 1000, "retried before the server's retry-after");
    assert.equal(decisions[0]?.classification.failureType, "RATE_LIMIT");
    assert.equal(decisions[0]?.classification.retryAfterMs, 1000);
    assert.equal((await fake.stats()).requests, 2);
  });

  test("a stream passes through as it comes, with no RPC", async (t) => {
    const fake = await fakeProvider();
    const { client, rpcs } = await policyd(t);
    const stream = await openaiThrough(client, fake.url).chat.completions.create({
      model: "gpt-4o",
      messages: hi,
      stream: true,
    });
    let text = "";
    let chunks = 0;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      chunks++;
    }
    assert.equal(text, REPLY);
    assert.ok(chunks >= 20);
    assert.deepEqual(rpcs.calls, []);
    assert.equal((await fake.stats()).streams, 1);
  });

  test("a 400 is returned to the SDK at once: its BadRequestError, one request", async (t) => {
    const fake = await fakeProvider();
    await fake.fail({ status: 400, body: badRequest });
    const clock = new FakeClock();
    const { client, decisions } = await policyd(t, { clock });
    const err = await rejection(
      openaiThrough(client, fake.url).chat.completions.create({ model: "gpt-4o", messages: hi }),
    );
    assert.ok(err instanceof OpenAI.BadRequestError, String(err));
    assert.equal(err.status, 400);
    assert.match(err.message, /Invalid value for 'temperature'/);
    assert.equal(decisions.length, 1);
    assert.equal(decisions[0]?.action, "STOP");
    assert.deepEqual(clock.waits, []);
    assert.equal((await fake.stats()).requests, 1);
  });

  test("policyd's stop after retries returns the last response: the SDK raises its own error", async (t) => {
    const fake = await fakeProvider();
    await fake.fail({ status: 503, count: 100 });
    const clock = new FakeClock();
    const { client, decisions } = await policyd(t, { clock });
    const err = await rejection(
      openaiThrough(client, fake.url).chat.completions.create({ model: "gpt-4o", messages: hi }),
    );
    assert.ok(err instanceof OpenAI.InternalServerError, String(err));
    assert.equal(err.status, 503);
    assert.ok(["STOP", "FALL_BACK"].includes(decisions.at(-1)!.action), decisions.at(-1)!.action);
    assert.equal((await fake.stats()).requests, decisions.length);
  });

  test("an abort ends a stream at once, as the SDK ends it on the global fetch", async (t) => {
    const fake = await fakeProvider("-chunk-delay", "200ms");
    const { client } = await policyd(t);
    const ac = new AbortController();
    const stream = await openaiThrough(client, fake.url).chat.completions.create(
      { model: "gpt-4o", messages: hi, stream: true },
      { signal: ac.signal },
    );
    let chunks = 0;
    let abortedAt = 0;
    for await (const chunk of stream) {
      assert.ok(chunk);
      if (++chunks === 2) {
        abortedAt = performance.now();
        ac.abort();
      }
    }
    assert.equal(chunks, 2, "the stream went on after the abort");
    assert.ok(performance.now() - abortedAt < 150, "the stream outlived the abort");
  });
});

describe("the Anthropic SDK through client.fetch", { concurrency: true }, () => {
  test("a 529 overloaded_error is retried: the SDK sees the message", async (t) => {
    const fake = await fakeProvider();
    await fake.fail({ status: 529 });
    const clock = new FakeClock();
    const { client, decisions } = await policyd(t, { clock });
    const out = await anthropicThrough(client, fake.url).messages.create({
      model: "claude-sonnet-4",
      max_tokens: 64,
      messages: hi,
    });
    const first = out.content[0];
    assert.equal(first?.type === "text" ? first.text : "", REPLY);
    assert.equal(decisions[0]?.classification.failureType, "OVERLOADED");
    assert.equal(decisions[0]?.action, "RETRY");
    assert.equal((await fake.stats()).requests, 2);
  });

  test("a stream passes through", async (t) => {
    const fake = await fakeProvider();
    const { client, rpcs } = await policyd(t);
    const stream = anthropicThrough(client, fake.url).messages.stream({
      model: "claude-sonnet-4",
      max_tokens: 64,
      messages: hi,
    });
    const message = await stream.finalMessage();
    const first = message.content[0];
    assert.equal(first?.type === "text" ? first.text : "", REPLY);
    assert.deepEqual(rpcs.calls, []);
    assert.equal((await fake.stats()).streams, 1);
  });

  test("a 401 is the SDK's AuthenticationError, at once", async (t) => {
    const fake = await fakeProvider();
    await fake.fail({ status: 401, body: badKey });
    const { client, decisions } = await policyd(t);
    const err = await rejection(
      anthropicThrough(client, fake.url).messages.create({ model: "claude-sonnet-4", max_tokens: 64, messages: hi }),
    );
    assert.ok(err instanceof Anthropic.AuthenticationError, String(err));
    assert.equal(decisions[0]?.classification.failureType, "AUTH_INVALID");
    assert.equal((await fake.stats()).requests, 1);
  });
});

// With fleet memory on: the gate, and what the stream reports.
const fleetPolicy = join(packageDir, "build", "fetch-fleet-policy.yaml");

async function fleetAddr(): Promise<string> {
  writeFileSync(fleetPolicy, "fleet:\n  breaker: {min_volume: 3, min_clients: 1}\n");
  return (await daemonWith("fetch-fleet", ["--fleet", "on", "--policy", fleetPolicy])).addr;
}

/** A logger that keeps the client's debug lines, and a wait for one. */
function debugLines() {
  const lines: string[] = [];
  const logger = { warn: (m: string) => void lines.push(m), debug: (m: string) => void lines.push(m) };
  const waitFor = async (re: RegExp) => {
    const end = performance.now() + 10_000;
    while (!lines.some((l) => re.test(l))) {
      if (performance.now() > end) assert.fail(`no log line ${re}:\n${lines.join("\n")}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  return { logger, waitFor };
}

describe("client.fetch and the fleet", { concurrency: true }, () => {
  test("a stream cut after its first byte is reported to the fleet, not retried", async (t) => {
    const addr = await fleetAddr();
    const fake = await fakeProvider();
    await fake.fail({ cut_stream: true });
    const tap = reportTap();
    const { client, rpcs } = await policyd(t, { address: addr, interceptors: [tap.interceptor] });
    const stream = await openaiThrough(client, fake.url).chat.completions.create({
      model: "gpt-4o-cut",
      messages: hi,
      stream: true,
    });
    let text = "";
    const err = await rejection(
      (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      })(),
    );
    assert.ok(err instanceof Error, String(err));
    assert.equal(text, "ok! ", "the first chunk came through");
    await client.close(); // the last report
    const mine = tap.usages.filter((u) => u.target?.model === "gpt-4o-cut");
    const sum = (k: "failed" | "admitted" | "retries") => mine.reduce((n, u) => n + u[k], 0n);
    assert.equal(sum("failed"), 1n, "the cut is counted as a failure decided here");
    assert.equal(sum("admitted"), 1n);
    assert.equal(sum("retries"), 0n);
    assert.equal((await fake.stats()).requests, 1, "not retried");
    assert.ok(!rpcs.calls.includes("NextDelay"));
  });

  test("the gate's stop rejects with the client's PolicydError, and nothing is sent", async (t) => {
    const addr = await fleetAddr();
    const fake = await fakeProvider();
    const lines = debugLines();
    const { client } = await policyd(t, { address: addr, parkLimitMs: 0, logger: lines.logger });
    const openai = openaiThrough(client, fake.url);
    await openai.chat.completions.create({ model: "gpt-4o-gated", messages: hi }); // subscribes the target
    await lines.waitFor(/fleet assignment for openai\/gpt-4o-gated: .*breaker CLOSED/);

    const policy = createConnectClient(PolicyService, createGrpcTransport({ baseUrl: `http://${addr}` }));
    for (let i = 0; i < 3; i++) {
      const failure = { provider: "openai", model: "gpt-4o-gated", httpStatus: 503 };
      await policy.nextDelay({ failure, attempt: 1, clientId: "another-agent" });
    }
    await lines.waitFor(/fleet assignment for openai\/gpt-4o-gated: .*breaker OPEN/);

    const err = await rejection(openai.chat.completions.create({ model: "gpt-4o-gated", messages: hi }));
    // The SDK wraps what fetch threw as a connection error; its cause is the client's own error.
    assert.ok(err instanceof OpenAI.APIConnectionError, String(err));
    const cause = (err as { cause?: unknown }).cause;
    assert.ok(cause instanceof PolicydError, String(cause));
    assert.equal(cause.attempts, 0);
    assert.equal(cause.decision.stopReason, "CIRCUIT_OPEN");
    assert.equal((await fake.stats()).requests, 1, "only the first request was sent");
  });

  test("what a success used: the provider's counts, with the call's estimate, JSON and streams", async (t) => {
    const addr = await fleetAddr();
    const fake = await fakeProvider();
    const tap = reportTap();
    const { client } = await policyd(t, { address: addr, interceptors: [tap.interceptor] });
    const openai = openaiThrough(client, fake.url);
    const anthropic = anthropicThrough(client, fake.url);
    const long = [{ role: "user" as const, content: "four bytes a token. ".repeat(200) }]; // the fake counts 1,000
    /**
     * A failing call to model after the others: a count read after the
     * report that counted its call's attempt goes with the next report that
     * counts one (the daemon bounds it by them), so that each is sent by close.
     */
    const release = async (model: string) => {
      await fake.fail({ status: 400, body: badRequest });
      const zero = { headers: { [INPUT_TOKENS_HEADER]: "0" } };
      await rejection(openai.chat.completions.create({ model, messages: hi }, zero));
    };

    // The output tokens each response said, by model: the SDK's own reading of its usage.
    const outputs = new Map<string, number>();
    // OpenAI's whole reply (usage.prompt_tokens), the caller's exact estimate in the header.
    const whole = await openai.chat.completions.create(
      { model: "gpt-4o-used", messages: long },
      { headers: { [INPUT_TOKENS_HEADER]: "800" } },
    );
    outputs.set("gpt-4o-used", whole.usage?.completion_tokens ?? 0);
    await release("gpt-4o-used");
    // OpenAI's stream: the usage chunk at its end, with include_usage; none without.
    const streamed = async (model: string, includeUsage: boolean) => {
      const stream = await openai.chat.completions.create({
        model,
        messages: long,
        stream: true,
        ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
      });
      for await (const chunk of stream) if (chunk.usage) outputs.set(model, chunk.usage.completion_tokens);
      await release(model);
    };
    await streamed("gpt-4o-used-stream", true);
    await streamed("gpt-4o-no-usage", false);
    // Anthropic's message (usage.input_tokens), and its stream's message_start; the stream's
    // output is message_delta's, the last count (message_start says 1).
    const message = await anthropic.messages.create({ model: "claude-used", max_tokens: 64, messages: long });
    outputs.set("claude-used", message.usage.output_tokens);
    await release("claude-used");
    const final = await anthropic.messages
      .stream({ model: "claude-used-stream", max_tokens: 64, messages: long })
      .finalMessage();
    outputs.set("claude-used-stream", final.usage.output_tokens);
    await release("claude-used-stream");
    await client.close(); // the last report

    type Key =
      | "inputTokensUsed"
      | "inputTokensEstimatedForUsed"
      | "firstAttemptInputTokens"
      | "outputTokensUsed"
      | "outputTokensUsedCalls";
    const sum = (model: string, k: Key) =>
      tap.usages.filter((u) => u.target?.model === model).reduce((n, u) => n + u[k], 0n);
    const reported = (model: string) => [sum(model, "inputTokensUsed"), sum(model, "inputTokensEstimatedForUsed")];
    assert.deepEqual(reported("gpt-4o-used"), [1000n, 800n]);
    for (const model of ["gpt-4o-used-stream", "claude-used", "claude-used-stream"]) {
      // The estimate is the body's bytes / 4, as the first attempt was counted at (the release counted 0).
      const estimate = sum(model, "firstAttemptInputTokens");
      assert.ok(estimate > 1000n, `${model}: estimate ${estimate}`);
      assert.deepEqual(reported(model), [1000n, estimate], model);
    }
    assert.deepEqual(reported("gpt-4o-no-usage"), [0n, 0n], "a stream without a count counts nothing");
    for (const model of ["gpt-4o-used", "gpt-4o-used-stream", "claude-used", "claude-used-stream"]) {
      const out = outputs.get(model) ?? 0;
      assert.ok(out > 1, `${model}: the SDK read ${out} output tokens`);
      assert.deepEqual([sum(model, "outputTokensUsed"), sum(model, "outputTokensUsedCalls")], [BigInt(out), 1n], model);
    }
    assert.deepEqual(
      [sum("gpt-4o-no-usage", "outputTokensUsed"), sum("gpt-4o-no-usage", "outputTokensUsedCalls")],
      [0n, 0n],
      "a stream without a count counts no output",
    );
  });
});
