// failureFromError on the errors JavaScript really throws: fetch against
// real local servers, Node sockets, AbortSignal, and the shapes of the
// OpenAI and Anthropic SDKs' errors.

import assert from "node:assert/strict";
import { connect } from "node:net";
import { describe, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { checkResponse, failureFromError, HttpError, headersOf } from "@policyd/client";
import { closedAddr, flaky } from "./harness.js";

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => assert.fail("did not reject"),
    (e: unknown) => e,
  );
}

describe("failureFromError", { concurrency: true }, () => {
  test("fetch to a closed port: TypeError fetch failed, ECONNREFUSED from the cause", async () => {
    const err = await rejection(fetch(`http://${await closedAddr()}/`));
    const f = failureFromError(err);
    assert.equal(f.errorName, "TypeError");
    assert.equal(f.message, "fetch failed");
    assert.equal(f.errorCode, "ECONNREFUSED");
    assert.equal(f.httpStatus, 0);
    assert.ok(f.causes.length >= 2);
    assert.deepEqual(f.causes[0], { name: "TypeError", code: "", message: "fetch failed" });
    assert.ok(f.causes.some((c) => c.code === "ECONNREFUSED"));
  });

  test("fetch whose connection the server drops: UND_ERR_SOCKET", async () => {
    const srv = await flaky({ drop: true });
    const f = failureFromError(await rejection(fetch(srv.url)));
    assert.equal(f.errorName, "TypeError");
    assert.equal(f.errorCode, "UND_ERR_SOCKET");
    assert.ok(
      f.causes.some((c) => c.name === "SocketError" && c.code === "UND_ERR_SOCKET"),
      JSON.stringify(f.causes),
    );
  });

  test("an aborted fetch: AbortError, and no numeric DOMException code", async () => {
    const srv = await flaky({ delayMs: 5000 });
    const ac = new AbortController();
    const p = fetch(srv.url, { signal: ac.signal });
    ac.abort();
    const f = failureFromError(await rejection(p));
    assert.equal(f.errorName, "AbortError");
    assert.equal(f.errorCode, "");
  });

  test("AbortSignal.timeout: TimeoutError", async () => {
    const srv = await flaky({ delayMs: 5000 });
    const f = failureFromError(await rejection(fetch(srv.url, { signal: AbortSignal.timeout(50) })));
    assert.equal(f.errorName, "TimeoutError");
  });

  test("a Node system error: its code", async () => {
    const addr = await closedAddr();
    const [host, port] = addr.split(":");
    const err = await new Promise<unknown>((resolve) => {
      const sock = connect(Number(port), host);
      sock.on("error", resolve);
    });
    const f = failureFromError(err);
    assert.equal(f.errorCode, "ECONNREFUSED");
    assert.match(f.message, /ECONNREFUSED/);
  });

  test("checkResponse: an HttpError with status, lower-case headers and the body", async () => {
    const srv = await flaky({
      status: 429,
      headers: { "Retry-After": "7", "X-RateLimit-Remaining-Requests": "0" },
      body: '{"error":{"code":"rate_limit_exceeded"}}',
    });
    const err = await rejection(fetch(srv.url).then((r) => checkResponse(r, { method: "get" })));
    assert.ok(err instanceof HttpError);
    const f = failureFromError(err);
    assert.equal(f.httpStatus, 429);
    assert.equal(f.headers["retry-after"], "7");
    assert.equal(f.headers["x-ratelimit-remaining-requests"], "0");
    assert.equal(f.body, '{"error":{"code":"rate_limit_exceeded"}}');
    assert.equal(f.method, "GET");
    assert.equal(f.errorName, "HttpError");
    assert.equal(f.message, ""); // a bare HTTP error: the body says more
  });

  test("checkResponse returns a 2xx response untouched", async () => {
    const srv = await flaky({ status: 200, body: "fine" });
    const res = await checkResponse(await fetch(srv.url));
    assert.equal(await res.text(), "fine");
  });

  test("HttpError reads at most 64 KiB of the body", async () => {
    const srv = await flaky({ status: 500, body: "x".repeat(200_000) });
    const err = await rejection(fetch(srv.url).then((r) => checkResponse(r)));
    assert.ok(err instanceof HttpError);
    assert.equal(err.body.length, 64 << 10);
  });

  test("a thrown Response: status and headers", async () => {
    const res = new Response("busy", { status: 503, headers: { "Retry-After": "3" } });
    const f = failureFromError(res);
    assert.equal(f.httpStatus, 503);
    assert.equal(f.headers["retry-after"], "3");
  });

  test("an HttpError wrapped in a cause keeps its message", () => {
    const inner = new HttpError({ status: 502, body: "bad gateway" });
    const f = failureFromError(new Error("upstream failed", { cause: inner }));
    assert.equal(f.httpStatus, 502);
    assert.equal(f.body, "bad gateway");
    assert.equal(f.message, "upstream failed");
  });

  // The OpenAI SDK (v4): status, headers as a plain object, `error` the body's "error" member, `code` its code.
  class APIError extends Error {
    readonly code: string | undefined;
    constructor(
      readonly status: number | undefined,
      readonly error: Record<string, unknown> | undefined,
      message: string,
      readonly headers: Record<string, string> | undefined,
    ) {
      super(message);
      this.code = error?.["code"] as string | undefined;
    }
  }
  class RateLimitError extends APIError {}
  class APIConnectionError extends APIError {
    constructor(cause: unknown) {
      super(undefined, undefined, "Connection error.", undefined);
      this.cause = cause;
    }
  }
  class APIUserAbortError extends APIError {
    constructor() {
      super(undefined, undefined, "Request was aborted.", undefined);
    }
  }

  test("an OpenAI SDK error: status, headers and the body re-wrapped", () => {
    const err = new RateLimitError(
      429,
      { message: "Rate limit reached", type: "requests", code: "rate_limit_exceeded" },
      "429 Rate limit reached",
      { "retry-after-ms": "250", "X-Request-Id": "req_1" },
    );
    const f = failureFromError(err);
    assert.equal(f.httpStatus, 429);
    assert.equal(f.errorName, "RateLimitError");
    assert.equal(f.errorCode, "rate_limit_exceeded", "the API's error code, read from the body as every client does");
    assert.deepEqual(JSON.parse(f.body), {
      error: { message: "Rate limit reached", type: "requests", code: "rate_limit_exceeded" },
    });
    assert.deepEqual(f.headers, { "retry-after-ms": "250", "x-request-id": "req_1" });
  });

  test("an Anthropic SDK error: the whole body and a Headers", () => {
    const err = Object.assign(new Error("529 Overloaded"), {
      status: 529,
      headers: new Headers({ "Retry-After": "10" }),
      error: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
    });
    const f = failureFromError(err);
    assert.equal(f.httpStatus, 529);
    assert.equal(f.headers["retry-after"], "10");
    assert.deepEqual(JSON.parse(f.body), { type: "error", error: { type: "overloaded_error", message: "Overloaded" } });
  });

  test("an SDK connection error: its name, and the network code of its cause chain", async () => {
    const fetchErr = await rejection(fetch(`http://${await closedAddr()}/`));
    const f = failureFromError(new APIConnectionError(fetchErr));
    assert.equal(f.errorName, "APIConnectionError");
    assert.equal(f.errorCode, "ECONNREFUSED");
    assert.equal(f.httpStatus, 0);
  });

  test("an SDK user abort reads as ABORT_ERR", () => {
    const f = failureFromError(new APIUserAbortError());
    assert.equal(f.errorName, "APIUserAbortError");
    assert.equal(f.errorCode, "ABORT_ERR");
  });

  test("AggregateError: every error is walked", () => {
    const a = Object.assign(new Error("connect ECONNREFUSED ::1:443"), { code: "ECONNREFUSED", syscall: "connect" });
    const b = Object.assign(new Error("connect ETIMEDOUT 10.0.0.1:443"), { code: "ETIMEDOUT", syscall: "connect" });
    const f = failureFromError(new TypeError("fetch failed", { cause: new AggregateError([a, b]) }));
    assert.equal(f.errorCode, "ECONNREFUSED");
    assert.deepEqual(
      f.causes.map((c) => c.code),
      ["", "", "ECONNREFUSED", "ETIMEDOUT"],
    );
  });

  test("a gRPC error: its code", () => {
    const f = failureFromError(new ConnectError("upstream unavailable", Code.Unavailable));
    assert.equal(f.grpcCode, 14);
    assert.equal(f.errorName, "ConnectError");
  });

  test("task and stream codes, and the stream phase", () => {
    const task = failureFromError(Object.assign(new Error("3 tests failed"), { code: "TEST_FAILURE" }));
    assert.equal(task.errorCode, "TEST_FAILURE");
    const stream = failureFromError(
      Object.assign(new Error("stream cut"), {
        phase: "MID_STREAM",
        cause: Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }),
      }),
    );
    assert.equal(stream.phase, "MID_STREAM");
    assert.equal(stream.errorCode, "ECONNRESET");
  });

  test("values that are not errors, and cycles", () => {
    assert.equal(failureFromError("boom").message, "boom");
    assert.equal(failureFromError(undefined).message, "");
    const a: Error & { cause?: unknown } = new Error("a");
    const b = new Error("b", { cause: a });
    a.cause = b;
    assert.deepEqual(
      failureFromError(a).causes.map((c) => c.message),
      ["a", "b"],
    );
  });

  test("bounds: at most 64 causes, 8 KiB per message", () => {
    let e: Error = new Error("root");
    for (let i = 0; i < 100; i++) e = new Error(`level ${i}`, { cause: e });
    assert.equal(failureFromError(e).causes.length, 64);
    assert.equal(failureFromError(new Error("m".repeat(20_000))).message.length, 8 << 10);
  });

  test("headersOf: Headers, Map, pairs and objects, names in lower case", () => {
    assert.deepEqual(headersOf(new Headers({ "Retry-After": "1" })), { "retry-after": "1" });
    assert.deepEqual(headersOf(new Map([["X-A", "1"]])), { "x-a": "1" });
    assert.deepEqual(headersOf([["X-B", "2"]]), { "x-b": "2" });
    assert.deepEqual(headersOf({ "Set-Cookie": ["a", "b"] }), { "set-cookie": "a, b" });
    assert.deepEqual(headersOf(undefined), {});
  });
});
