// The fail-open policy, Retry-After parsing and operation safety: pure
// functions, with an injected time and random source.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { deriveSafety, emptyFailure, FailOpenPolicy, type Failure, retryAfterMs, systemClock } from "@policyd/client";

const NOW = Date.parse("2026-01-01T00:00:00Z");

function failure(fields: Partial<Failure>): Failure {
  return { ...emptyFailure(), ...fields };
}

describe("FailOpenPolicy.decide", () => {
  const policy = new FailOpenPolicy();
  const cases: {
    name: string;
    f: Partial<Failure>;
    attempt?: number;
    random?: number;
    deadlineMs?: number;
    action: string;
    delayMs?: number;
    type?: string;
    stop?: string;
  }[] = [
    {
      name: "503, attempt 1, half the 1 s backoff",
      f: { httpStatus: 503 },
      random: 0.5,
      action: "RETRY",
      delayMs: 500,
      type: "OVERLOADED",
    },
    {
      name: "503, attempt 2, the whole 2 s backoff",
      f: { httpStatus: 503 },
      attempt: 2,
      random: 0.9999,
      action: "RETRY",
      delayMs: 1999,
      type: "OVERLOADED",
    },
    {
      name: "503, attempt 3: attempts exhausted",
      f: { httpStatus: 503 },
      attempt: 3,
      action: "STOP",
      stop: "ATTEMPTS_EXHAUSTED",
    },
    {
      name: "500: server error, retried",
      f: { httpStatus: 500 },
      random: 0,
      action: "RETRY",
      delayMs: 0,
      type: "SERVER_ERROR",
    },
    { name: "501: not retried", f: { httpStatus: 501 }, action: "STOP", stop: "NOT_RETRYABLE", type: "UNSUPPORTED" },
    {
      name: "429 with retry-after 2: at least 2 s",
      f: { httpStatus: 429, headers: { "retry-after": "2" } },
      random: 0.1,
      action: "RETRY",
      delayMs: 2000,
      type: "RATE_LIMIT",
    },
    {
      name: "429 with retry-after 120: above the ceiling",
      f: { httpStatus: 429, headers: { "retry-after": "120" } },
      action: "STOP",
      stop: "SERVER_DELAY_ABOVE_CEILING",
    },
    { name: "401: not retried", f: { httpStatus: 401 }, action: "STOP", stop: "NOT_RETRYABLE", type: "AUTH_INVALID" },
    {
      name: "400: not retried",
      f: { httpStatus: 400 },
      action: "STOP",
      stop: "NOT_RETRYABLE",
      type: "INVALID_REQUEST",
    },
    {
      name: "418: not retried without policyd",
      f: { httpStatus: 418 },
      action: "STOP",
      stop: "NOT_RETRYABLE",
      type: "UNKNOWN",
    },
    {
      name: "ECONNRESET in the cause chain",
      f: {
        causes: [
          { name: "TypeError", code: "", message: "fetch failed" },
          { name: "Error", code: "ECONNRESET", message: "read ECONNRESET" },
        ],
      },
      random: 0.5,
      action: "RETRY",
      delayMs: 500,
      type: "CONNECTION_ERROR",
    },
    {
      name: "UND_ERR_SOCKET: a dropped connection",
      f: { errorCode: "UND_ERR_SOCKET" },
      random: 0.5,
      action: "RETRY",
      delayMs: 500,
      type: "CONNECTION_ERROR",
    },
    {
      name: "ENOTFOUND: as often a typo as an outage",
      f: { errorCode: "ENOTFOUND" },
      action: "STOP",
      stop: "NOT_RETRYABLE",
      type: "UNKNOWN",
    },
    {
      name: "AbortError: canceled",
      f: { errorName: "AbortError", causes: [{ name: "AbortError", code: "", message: "aborted" }] },
      action: "STOP",
      stop: "NOT_RETRYABLE",
      type: "CANCELED",
    },
    { name: "gRPC UNAVAILABLE", f: { grpcCode: 14 }, random: 0.5, action: "RETRY", delayMs: 500, type: "OVERLOADED" },
    {
      name: "a POST outside a model call is irreversible",
      f: { httpStatus: 503, method: "POST", operation: "web_fetch" },
      action: "STOP",
      stop: "IRREVERSIBLE_OPERATION",
    },
    {
      name: "a POST of a chat call is safe",
      f: { httpStatus: 503, method: "POST", operation: "chat" },
      random: 0.5,
      action: "RETRY",
      delayMs: 500,
    },
    {
      name: "shell.exec is irreversible",
      f: { httpStatus: 503, operation: "shell.exec" },
      action: "STOP",
      stop: "IRREVERSIBLE_OPERATION",
    },
    {
      name: "a wait past the deadline stops",
      f: { httpStatus: 429, headers: { "retry-after": "5" } },
      deadlineMs: NOW + 3000,
      action: "STOP",
      stop: "DEADLINE",
    },
  ];
  for (const tc of cases) {
    test(tc.name, () => {
      const random = tc.random;
      const d = policy.decide(failure(tc.f), {
        attempt: tc.attempt ?? 1,
        nowMs: NOW,
        deadlineMs: tc.deadlineMs,
        random: random === undefined ? undefined : () => random,
      });
      assert.equal(d.action, tc.action, d.stopText);
      assert.equal(d.failOpen, true);
      assert.match(d.classification.rule, /^fail_open\./);
      if (tc.delayMs !== undefined) assert.equal(d.delayMs, tc.delayMs);
      if (tc.type !== undefined) assert.equal(d.classification.failureType, tc.type);
      if (tc.stop !== undefined) assert.equal(d.stopReason, tc.stop);
    });
  }

  test("the backoff is capped at maxDelayMs", () => {
    const p = new FailOpenPolicy({ maxAttempts: 20, initialDelayMs: 1000, maxDelayMs: 4000 });
    const delays = [1, 2, 3, 4, 5, 6].map(
      (attempt) => p.decide(failure({ httpStatus: 502 }), { attempt, nowMs: NOW, random: () => 0.99999 }).delayMs,
    );
    assert.deepEqual(delays, [999, 1999, 3999, 3999, 3999, 3999]);
  });

  test("the same draws give the same decisions", () => {
    const draws = [0.1, 0.7, 0.3];
    const run = () => {
      let i = 0;
      return [1, 2].map(
        (attempt) =>
          policy.decide(failure({ httpStatus: 503 }), { attempt, nowMs: NOW, random: () => draws[i++ % 3]! }).delayMs,
      );
    };
    assert.deepEqual(run(), run());
    assert.deepEqual(run(), [100, 1400]);
  });
});

describe("retryAfterMs", () => {
  const cases: { name: string; headers: Record<string, string>; want: number | undefined }[] = [
    { name: "seconds", headers: { "retry-after": "3" }, want: 3000 },
    { name: "fractional seconds", headers: { "retry-after": "1.5" }, want: 1500 },
    { name: "milliseconds win", headers: { "retry-after-ms": "250", "retry-after": "3" }, want: 250 },
    { name: "an HTTP-date", headers: { "retry-after": "Thu, 01 Jan 2026 00:00:10 GMT" }, want: 10_000 },
    { name: "a past date is 0", headers: { "retry-after": "Wed, 31 Dec 2025 23:00:00 GMT" }, want: 0 },
    { name: "negative: ignored", headers: { "retry-after": "-1" }, want: undefined },
    { name: "garbage: ignored", headers: { "retry-after": "soon" }, want: undefined },
    { name: "more than a week: ignored", headers: { "retry-after": "999999999" }, want: undefined },
    { name: "x-amz-retry-after", headers: { "x-amz-retry-after": "700" }, want: 700 },
    { name: "grpc-retry-pushback-ms", headers: { "grpc-retry-pushback-ms": "90" }, want: 90 },
    { name: "none", headers: {}, want: undefined },
  ];
  for (const tc of cases) {
    test(tc.name, () => assert.equal(retryAfterMs(tc.headers, NOW), tc.want));
  }
});

describe("deriveSafety", () => {
  const cases: [string, string, string][] = [
    ["chat", "POST", "SAFE"],
    ["web_fetch", "GET", "SAFE"],
    ["web_fetch", "POST", "IRREVERSIBLE"],
    ["web_fetch", "", "SAFE"],
    ["shell.exec", "", "IRREVERSIBLE"],
    ["file.write", "", "CONDITIONAL"],
    ["task", "", "SAFE"],
  ];
  for (const [op, method, want] of cases) {
    test(`${op} ${method || "(no method)"}: ${want}`, () => assert.equal(deriveSafety(op, method), want));
  }
});

describe("systemClock.sleep", () => {
  test("an abort ends the wait at once with the signal's reason", async () => {
    const ac = new AbortController();
    const start = performance.now();
    setTimeout(() => ac.abort(new Error("stop")), 50);
    await assert.rejects(systemClock.sleep(10_000, ac.signal), /stop/);
    assert.ok(performance.now() - start < 500);
  });

  test("an aborted signal rejects before waiting", async () => {
    await assert.rejects(systemClock.sleep(10_000, AbortSignal.abort(new Error("already"))), /already/);
  });

  test("it waits at least ms", async () => {
    const start = performance.now();
    await systemClock.sleep(100);
    assert.ok(performance.now() - start >= 99);
  });
});
