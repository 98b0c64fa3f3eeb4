// client.call against a real policyd process and a real HTTP server that
// fails on cue.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  type CallOptions,
  checkResponse,
  createClient,
  HttpError,
  newContextId,
  PolicydError,
  PolicydOptionsError,
} from "@policyd/client";
import { AUTH_RECOVERY, bodies, closedAddr, daemonAddr, decisions, FakeClock, flaky, rpcCounter } from "./harness.js";

const openai = { provider: "openai", model: "gpt-4o", operation: "chat" } satisfies CallOptions<unknown>;

/** POSTs a chat request to url, as an OpenAI-compatible client does with fetch. */
function chat(url: string) {
  return async ({ signal }: { signal: AbortSignal }) => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o", messages: [{ role: "user", content: "hi" }] }),
      signal,
    });
    await checkResponse(res, { method: "POST" });
    return (await res.json()) as unknown;
  };
}

/** GETs url with fetch. */
function get(url: string) {
  return async ({ signal }: { signal: AbortSignal }) => {
    const res = await checkResponse(await fetch(url, { signal }));
    return res.text();
  };
}

describe("client.call against policyd", { concurrency: true }, () => {
  test("succeeds after a transient 503, waiting what policyd said", async () => {
    const srv = await flaky({ status: 503, body: bodies.overloaded }, { status: 200, body: bodies.chatOk });
    const clock = new FakeClock();
    const d = decisions();
    const client = createClient({ address: await daemonAddr(), clock, onDecision: d.onDecision });

    const out = await client.call(chat(srv.url), openai);

    assert.deepEqual((out as { choices: unknown[] }).choices.length, 1);
    assert.equal(srv.hits, 2);
    assert.equal(d.all.length, 1);
    const dec = d.all[0]!;
    assert.equal(dec.action, "RETRY");
    assert.equal(dec.classification.failureType, "OVERLOADED");
    assert.equal(dec.strategy.name, "default/OVERLOADED");
    assert.equal(dec.failOpen, false);
    // default/OVERLOADED: 5 s with full jitter; the client waits exactly what policyd said.
    assert.deepEqual(clock.waits, [dec.delayMs]);
    assert.ok(dec.delayMs <= 5000, `delay ${dec.delayMs}ms`);
  });

  test("makes no RPC on the success path, and only NextDelay after one failure", async () => {
    const addr = await daemonAddr();
    const ok = await flaky({ status: 200, body: bodies.chatOk });
    for (const journal of [false, true]) {
      const rpcs = rpcCounter();
      const client = createClient({ address: addr, journal, interceptors: [rpcs.interceptor] });
      await client.call(chat(ok.url), openai);
      assert.deepEqual(rpcs.calls, [], `journal ${journal}: RPCs on the success path`);
    }
    // Nor with a context id of the caller's, which journals the call.
    const rpcs0 = rpcCounter();
    const client0 = createClient({ address: addr, interceptors: [rpcs0.interceptor] });
    await client0.call(chat(ok.url), { ...openai, contextId: newContextId() });
    assert.deepEqual(rpcs0.calls, [], "contextId: RPCs on the success path");
    const srv = await flaky({ status: 500, body: bodies.serverError }, { status: 200, body: bodies.chatOk });
    const rpcs = rpcCounter();
    const client = createClient({ address: addr, clock: new FakeClock(), interceptors: [rpcs.interceptor] });
    await client.call(chat(srv.url), openai);
    assert.deepEqual(rpcs.calls, ["NextDelay"]);
  });

  test("429 with retry-after: 1 waits at least 1 s", async () => {
    const srv = await flaky(
      { status: 429, headers: { "retry-after": "1" }, body: bodies.rateLimit },
      { status: 200, body: bodies.chatOk },
    );
    const d = decisions();
    const client = createClient({ address: await daemonAddr(), onDecision: d.onDecision });

    const start = performance.now();
    await client.call(chat(srv.url), openai);
    const took = performance.now() - start;

    assert.ok(took >= 1000, `call took ${took.toFixed(0)}ms, want at least the 1 s the server asked for`);
    assert.equal(d.all.length, 1);
    assert.equal(d.all[0]!.classification.retryAfterMs, 1000);
    assert.ok(d.all[0]!.delayMs >= 1000);
    assert.equal(srv.hits, 2);
  });

  test("401 is not retried, and the recovery action reaches the caller", async () => {
    const srv = await flaky({ status: 401, body: bodies.badKey }, { status: 200 });
    const client = createClient({ address: await daemonAddr() });

    const err = await client.call(chat(srv.url), openai).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );

    assert.ok(err instanceof PolicydError, `rejected with ${String(err)}`);
    assert.equal(err.attempts, 1);
    assert.equal(srv.hits, 1);
    assert.equal(err.decision.action, "STOP");
    assert.equal(err.decision.stopReason, "NOT_RETRYABLE");
    assert.equal(err.decision.classification.failureType, "AUTH_INVALID");
    assert.equal(err.recoveryAction, AUTH_RECOVERY);
    assert.ok(err.message.includes(AUTH_RECOVERY), err.message);
    assert.ok(err.cause instanceof HttpError);
    assert.equal(err.cause.status, 401);
    assert.match(err.cause.body, /invalid_api_key/);
    assert.equal(err.failure.method, "POST");
  });

  test("a dropped connection is retried", async () => {
    const srv = await flaky({ drop: true }, { status: 200, body: "<html>ok</html>" });
    const d = decisions();
    const client = createClient({
      address: await daemonAddr(),
      profile: "web_fetch",
      onDecision: d.onDecision,
      clock: new FakeClock(),
    });

    const text = await client.call(get(srv.url), { provider: "web", operation: "web_fetch" });

    assert.equal(text, "<html>ok</html>");
    assert.equal(srv.hits, 2);
    assert.equal(d.all.length, 1);
    assert.equal(d.all[0]!.action, "RETRY");
    assert.equal(d.all[0]!.classification.failureType, "CONNECTION_ERROR");
    assert.equal(d.all[0]!.strategy.name, "web_fetch/CONNECTION_ERROR");
  });

  test("a slow response past the attempt's timeout is retried as a TIMEOUT", async () => {
    const srv = await flaky({ delayMs: 5000 }, { status: 200, body: "fast" });
    const d = decisions();
    const client = createClient({ address: await daemonAddr(), onDecision: d.onDecision, clock: new FakeClock() });

    const text = await client.call(get(srv.url), {
      provider: "web",
      operation: "web_fetch",
      profile: "web_fetch",
      attemptTimeoutMs: 200,
    });

    assert.equal(text, "fast");
    assert.equal(d.all.length, 1);
    assert.equal(d.all[0]!.classification.failureType, "TIMEOUT");
  });

  test("abort stops at once, mid-sleep, with the signal's reason", async () => {
    // retry-after: 5 under default/RATE_LIMIT: policyd says wait 5.5-6 s (+10 %, +0-10 % jitter).
    const srv = await flaky({ status: 429, headers: { "retry-after": "5" }, body: bodies.rateLimit });
    const ac = new AbortController();
    let abortedAt = 0;
    const client = createClient({
      address: await daemonAddr(),
      onDecision: ({ decision }) => {
        assert.equal(decision.action, "RETRY");
        assert.ok(decision.delayMs >= 5000, `delay ${decision.delayMs}`);
        setTimeout(() => {
          abortedAt = performance.now();
          ac.abort(new Error("user pressed Ctrl-C"));
        }, 200);
      },
    });

    const err = await client.call(chat(srv.url), { ...openai, signal: ac.signal }).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );
    const since = performance.now() - abortedAt;

    assert.ok(abortedAt > 0, "the call returned before the abort");
    assert.equal((err as Error).message, "user pressed Ctrl-C");
    assert.ok(since < 500, `call returned ${since.toFixed(0)}ms after the abort, want at once`);
    assert.equal(srv.hits, 1);
  });

  test("abort stops a running attempt at once, without asking policyd", async () => {
    const srv = await flaky({ delayMs: 10_000 });
    const rpcs = rpcCounter();
    const client = createClient({ address: await daemonAddr(), interceptors: [rpcs.interceptor] });
    const signal = AbortSignal.timeout(200);

    const start = performance.now();
    const err = await client.call(chat(srv.url), { ...openai, signal }).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );

    assert.equal((err as Error).name, "TimeoutError"); // AbortSignal.timeout's reason
    assert.ok(performance.now() - start < 1200, "the call outlived its signal by far");
    assert.deepEqual(rpcs.calls, [], "nothing to decide after the caller aborted");
  });

  test("an AbortError from the operation itself is never retried", async () => {
    const d = decisions();
    const client = createClient({ address: await daemonAddr(), onDecision: d.onDecision, clock: new FakeClock() });
    let runs = 0;

    const err = await client
      .call(
        () => {
          runs++;
          throw new DOMException("This operation was aborted", "AbortError");
        },
        { ...openai },
      )
      .then(
        () => assert.fail("call succeeded"),
        (e: unknown) => e,
      );

    assert.ok(err instanceof PolicydError);
    assert.equal(runs, 1);
    assert.equal(err.decision.classification.failureType, "CANCELED");
    assert.equal(err.decision.action, "STOP");
  });

  test("never waits past the call's deadline", async () => {
    const srv = await flaky({ status: 429, headers: { "retry-after": "5" }, body: bodies.rateLimit });
    const client = createClient({ address: await daemonAddr() });

    const start = performance.now();
    const err = await client.call(chat(srv.url), { ...openai, timeoutMs: 3000 }).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );

    assert.ok(err instanceof PolicydError, String(err));
    assert.equal(err.decision.stopReason, "DEADLINE");
    assert.ok(performance.now() - start < 2000, "it waited instead of stopping");
  });

  test("the deadline ends a running attempt", async () => {
    const srv = await flaky({ delayMs: 10_000 });
    const client = createClient({ address: await daemonAddr() });

    const start = performance.now();
    const err = await client.call(chat(srv.url), { ...openai, timeoutMs: 200 }).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );

    assert.ok(err instanceof PolicydError, String(err));
    assert.equal(err.decision.stopReason, "DEADLINE");
    assert.equal((err.cause as Error).name, "TimeoutError");
    assert.ok(performance.now() - start < 1200, "the call outlived its deadline by far");
  });

  test("a bare `fetch failed` is retried only with retryFetchErrors (seed 000)", async () => {
    const addr = await daemonAddr();
    for (const retryFetchErrors of [false, true]) {
      const d = decisions();
      const client = createClient({ address: addr, clock: new FakeClock(), onDecision: d.onDecision });
      let runs = 0;
      await client
        .call(
          () => {
            if (++runs === 1) throw new TypeError("fetch failed");
            return "ok";
          },
          { provider: "google", operation: "chat", retryFetchErrors },
        )
        .catch(() => {});
      assert.equal(d.all[0]?.action, retryFetchErrors ? "RETRY" : "STOP", `retryFetchErrors ${retryFetchErrors}`);
      assert.equal(runs, retryFetchErrors ? 2 : 1);
    }
  });

  test("classify: what policyd makes of an error, and no failing open", async () => {
    const client = createClient({ address: await daemonAddr() });
    const c = await client.classify(new HttpError({ status: 401, body: bodies.badKey }));
    assert.equal(c.failureType, "AUTH_INVALID");
    assert.equal(c.retryable, false);
    assert.equal(c.recoveryAction, AUTH_RECOVERY);
    const down = createClient({ address: await closedAddr() });
    await assert.rejects(down.classify(new Error("x")), { name: "ConnectError" });
  });

  describe("task_runner profile sequences (seed 002)", { concurrency: true }, () => {
    const cases = [
      {
        name: "test failure: linear 5, 10, 15 s, 4 attempts",
        code: "TEST_FAILURE",
        waits: [5000, 10000, 15000],
        type: "TASK_TRANSIENT",
        stop: "ATTEMPTS_EXHAUSTED",
      },
      {
        name: "rate limit: 30, 60, 120, 240 s capped at 300 s, 7 attempts",
        code: "RATE_LIMIT",
        waits: [30000, 60000, 120000, 240000, 300000, 300000],
        type: "RATE_LIMIT",
        stop: "ATTEMPTS_EXHAUSTED",
      },
      {
        name: "unknown code: linear like a transient failure",
        code: "SOMETHING_ODD",
        waits: [5000, 10000, 15000],
        type: "TASK_TRANSIENT",
        stop: "ATTEMPTS_EXHAUSTED",
      },
      {
        name: "hook failure: fatal, no retry",
        code: "HOOK_FAILURE",
        waits: [],
        type: "TASK_FATAL",
        stop: "NOT_RETRYABLE",
      },
    ];
    for (const tc of cases) {
      test(tc.name, async () => {
        const clock = new FakeClock();
        const client = createClient({ address: await daemonAddr(), clock, profile: "task_runner" });
        let runs = 0;
        const err = await client
          .call(
            () => {
              runs++;
              throw Object.assign(new Error("the task failed"), { code: tc.code });
            },
            { operation: "task" },
          )
          .then(
            () => assert.fail("call succeeded"),
            (e: unknown) => e,
          );
        assert.ok(err instanceof PolicydError);
        assert.deepEqual(clock.waits, tc.waits);
        assert.equal(runs, tc.waits.length + 1);
        assert.equal(err.attempts, runs);
        assert.equal(err.decision.classification.failureType, tc.type);
        assert.equal(err.decision.stopReason, tc.stop);
      });
    }
  });

  test("an invalid stream is continued once with the continuation prompt (seed 001)", async () => {
    const client = createClient({ address: await daemonAddr(), profile: "agent_cli", clock: new FakeClock() });
    const prompts: (string | undefined)[] = [];
    const err = await client
      .call(
        ({ lastDecision }) => {
          prompts.push(lastDecision?.classification.continuationPrompt);
          throw Object.assign(new Error("the stream ended without a finish reason"), {
            name: "InvalidStreamError",
            code: "NO_FINISH_REASON",
          });
        },
        { provider: "google", operation: "chat.stream" },
      )
      .then(
        () => assert.fail("call succeeded"),
        (e: unknown) => e,
      );
    assert.ok(err instanceof PolicydError);
    assert.deepEqual(prompts, [undefined, "Please continue."]);
    assert.equal(err.decision.classification.failureType, "INVALID_STREAM");
  });

  describe("fallback", { concurrency: true }, () => {
    test("context too long: the fallback function's result is the call's", async () => {
      const small = await flaky({ status: 400, body: bodies.contextTooLong });
      const large = await flaky({ status: 200, body: bodies.chatOk });
      const client = createClient({ address: await daemonAddr() });
      const hints: string[] = [];
      const out = await client.call(chat(small.url), {
        ...openai,
        fallback: async (hint) => {
          hints.push(`${hint.kind}@${hint.attempt}`);
          return chat(large.url)({ signal: hint.signal });
        },
      });
      assert.deepEqual(hints, ["LARGER_CONTEXT_MODEL@1"]);
      assert.equal((out as { id: string }).id, "chatcmpl-1");
      assert.equal(small.hits, 1);
      assert.equal(large.hits, 1);
    });

    test("server errors: another provider after 2 attempts", async () => {
      const first = await flaky({ status: 500, body: bodies.serverError });
      const second = await flaky({ status: 200, body: bodies.chatOk });
      const client = createClient({ address: await daemonAddr(), clock: new FakeClock() });
      const out = await client.call(chat(first.url), {
        ...openai,
        fallback: (hint) => {
          assert.equal(hint.kind, "OTHER_PROVIDER");
          return chat(second.url)({ signal: hint.signal });
        },
      });
      assert.ok(out);
      assert.equal(first.hits, 2);
      assert.equal(second.hits, 1);
    });

    test("without a fallback function it stops with the hint", async () => {
      const srv = await flaky({ status: 400, body: bodies.contextTooLong });
      const client = createClient({ address: await daemonAddr() });
      const err = await client.call(chat(srv.url), openai).then(
        () => assert.fail("call succeeded"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof PolicydError);
      assert.equal(err.decision.action, "FALL_BACK");
      assert.equal(err.decision.fallback.kind, "LARGER_CONTEXT_MODEL");
      // It says the call stopped, why, and where it would have gone.
      assert.match(
        err.message,
        /stopped after 1 attempt: policyd advised a fallback to LARGER_CONTEXT_MODEL, and the call has no fallback function/,
      );
    });

    test("the fallback function's error is the call's", async () => {
      const srv = await flaky({ status: 400, body: bodies.contextTooLong });
      const client = createClient({ address: await daemonAddr() });
      const noLarger = new Error("no larger model");
      await assert.rejects(
        client.call(chat(srv.url), {
          ...openai,
          fallback: () => {
            throw noLarger;
          },
        }),
        (e) => e === noLarger,
      );
    });
  });

  describe("SDK errors, duck typed", { concurrency: true }, () => {
    // The shape of the OpenAI SDK's APIError: status, headers, and the body's "error" member.
    class APIError extends Error {
      constructor(
        readonly status: number,
        readonly error: object,
        readonly headers: Record<string, string>,
      ) {
        super(`${status} ${JSON.stringify(error)}`);
      }
    }
    class RateLimitError extends APIError {}
    // The shape of the Anthropic SDK's: `error` is the whole body, headers a Headers.
    class AnthropicAPIError extends Error {
      constructor(
        readonly status: number,
        readonly error: object,
        readonly headers: Headers,
      ) {
        super(`${status} ${JSON.stringify(error)}`);
      }
    }

    test("OpenAI insufficient_quota: quota exhausted, not retried", async () => {
      const client = createClient({ address: await daemonAddr(), clock: new FakeClock() });
      let runs = 0;
      const err = await client
        .call(() => {
          runs++;
          throw new RateLimitError(
            429,
            {
              message: "You exceeded your current quota, please check your plan and billing details.",
              type: "insufficient_quota",
              code: "insufficient_quota",
            },
            { "x-request-id": "req_1" },
          );
        }, openai)
        .then(
          () => assert.fail("call succeeded"),
          (e: unknown) => e,
        );
      assert.ok(err instanceof PolicydError);
      assert.equal(runs, 1);
      assert.equal(err.decision.classification.failureType, "QUOTA_EXHAUSTED");
    });

    test("Anthropic overloaded_error: retried", async () => {
      const d = decisions();
      const client = createClient({ address: await daemonAddr(), clock: new FakeClock(), onDecision: d.onDecision });
      let runs = 0;
      const out = await client.call(
        () => {
          if (++runs === 1) {
            throw new AnthropicAPIError(
              529,
              { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
              new Headers({ "Retry-After": "2" }),
            );
          }
          return "ok";
        },
        { provider: "anthropic", model: "claude-sonnet-4", operation: "chat" },
      );
      assert.equal(out, "ok");
      assert.equal(d.all[0]!.classification.failureType, "OVERLOADED");
      assert.equal(d.all[0]!.classification.retryAfterMs, 2000);
    });
  });

  test("an unknown profile rejects with the daemon's message, not a fail-open retry", async () => {
    const srv = await flaky({ status: 503, body: bodies.overloaded }, { status: 200, body: bodies.chatOk });
    const client = createClient({ address: await daemonAddr(), clock: new FakeClock(), profile: "web_fech" });
    const err = await client.call(chat(srv.url), openai).then(
      () => assert.fail("call succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof PolicydOptionsError, String(err));
    assert.equal(err.method, "NextDelay");
    assert.match(err.message, /unknown profile "web_fech"; known:/);
    assert.ok(err.error instanceof HttpError);
    assert.equal(srv.hits, 1);
  });
});
