// The shared client vectors (clients/testdata, docs/clients.md); the Go and
// Python suites read the same files.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  deriveSafety,
  emptyFailure,
  FailOpenPolicy,
  type Failure,
  failureFromError,
  HttpError,
  PolicydClient,
  retryAfterMs,
  type Safety,
} from "@policyd/client";
import { readTestdata } from "./testdata.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the vectors are untyped JSON, checked field by field.
type Json = any;

function load(name: string): { now?: string; cases: Json[] } {
  const v = readTestdata<{ now?: string; cases: Json[] }>(name);
  assert.ok(v.cases.length > 0, name);
  return v;
}

describe("vectors: retry_after.json", () => {
  const v = load("retry_after.json");
  const now = Date.parse(v.now!);
  for (const c of v.cases) {
    test(c.id, () => {
      const got = retryAfterMs(c.headers, now);
      if (c.want_ms === null) assert.equal(got, undefined);
      else assert.ok(got !== undefined && Math.abs(got - c.want_ms) <= 1, `got ${got}, want ${c.want_ms}`);
    });
  }
});

describe("vectors: safety.json", () => {
  for (const c of load("safety.json").cases) {
    test(c.id, () => assert.equal(deriveSafety(c.operation, c.method), c.want.toUpperCase()));
  }
});

/** Decide at jitter draws 0 and just under 1; check the outcome and the delay bounds. */
function checkFailOpen(f: Failure, want: Json, nowMs: number, attempt = 1, safety?: Safety, deadlineMs?: number) {
  for (const [r, bound] of [
    [0, "min"],
    [1 - 1e-9, "max"],
  ] as const) {
    const d = new FailOpenPolicy().decide(f, {
      attempt,
      nowMs,
      safety,
      deadlineMs: deadlineMs === undefined ? undefined : nowMs + deadlineMs,
      random: () => r,
    });
    const c = d.classification;
    assert.deepEqual([d.action.toLowerCase(), c.failureType], [want.action, want.failure_type], d.stopText);
    if ("retryable" in want) assert.equal(c.retryable, want.retryable);
    if ("stop_reason" in want) assert.equal(d.stopReason, want.stop_reason);
    if ("attempts_left" in want) assert.equal(d.attemptsLeft, want.attempts_left);
    if ("delay_ms" in want) assert.ok(Math.abs(d.delayMs - want.delay_ms[bound]) <= 1, `draw ${r}: delay ${d.delayMs}`);
  }
}

describe("vectors: fail_open.json", () => {
  const v = load("fail_open.json");
  const now = Date.parse(v.now!);
  for (const c of v.cases) {
    test(c.id, () => {
      const x = c.failure;
      const f: Failure = {
        ...emptyFailure(),
        httpStatus: x.http_status ?? 0,
        headers: x.headers ?? {},
        errorCode: x.error_code ?? "",
        causes: (x.causes ?? []).map((k: Json) => ({ name: k.name, code: k.code, message: "" })),
        grpcCode: x.grpc_code ?? 0,
        operation: x.operation ?? "",
        method: x.method ?? "",
      };
      checkFailOpen(f, c.want, now, c.attempt, c.safety?.toUpperCase(), c.deadline_ms);
    });
  }
});

/** The JavaScript error a language-neutral native stands for. */
async function native(n: Json): Promise<unknown> {
  const systemError = (code: string) => Object.assign(new Error(`read ${code}`), { code, syscall: "read" });
  switch (n.kind) {
    case "http_response": {
      const headers = new Headers();
      for (const [k, val] of n.headers) headers.append(k, val);
      return HttpError.fromResponse(new Response(n.body, { status: n.status, headers }), { method: n.method });
    }
    case "errno":
      return new TypeError("fetch failed", { cause: systemError(n.code) });
    case "timeout": {
      const cause = Object.assign(new Error("Headers Timeout Error"), {
        name: "HeadersTimeoutError",
        code: "UND_ERR_HEADERS_TIMEOUT",
      });
      return new TypeError("fetch failed", { cause });
    }
    case "dns_not_found":
      return new TypeError("fetch failed", {
        cause: Object.assign(new Error("getaddrinfo ENOTFOUND x.invalid"), { code: "ENOTFOUND" }),
      });
    case "canceled":
      return new DOMException("This operation was aborted", "AbortError");
    case "grpc_status":
      return new ConnectError("upstream", n.code);
  }
  throw new Error(`unknown native kind ${n.kind}`);
}

describe("vectors: error_mapping.json", () => {
  const fields: Record<string, keyof Failure> = {
    http_status: "httpStatus",
    error_code: "errorCode",
    grpc_code: "grpcCode",
    method: "method",
    body: "body",
  };
  for (const c of load("error_mapping.json").cases) {
    test(c.id, async () => {
      const f = failureFromError(await native(c.native));
      for (const [k, want] of Object.entries(c.want.failure)) {
        if (k === "headers") {
          for (const [name, value] of Object.entries(want as Record<string, string>))
            assert.equal(f.headers[name], value, name);
        } else {
          assert.equal(f[fields[k]!], want, k);
        }
      }
      checkFailOpen(f, c.want.fail_open, Date.parse("2026-01-01T00:00:00Z"));
    });
  }
});

test("vectors: a timeout by name (AbortSignal.timeout) is retried", () => {
  const f = failureFromError(new DOMException("The operation was aborted due to timeout", "TimeoutError"));
  checkFailOpen(f, { action: "retry", failure_type: "TIMEOUT" }, 0);
});

// The client's internals the vectors below pin, from the built package (dist/).
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- internal modules, not part of the typed API.
async function internal(module: string): Promise<any> {
  return import(new URL(`../../dist/${module}`, import.meta.url).href);
}

describe("vectors: address.json", async () => {
  const { parseAddress } = await internal("address.js");
  for (const c of load("address.json").cases) {
    test(JSON.stringify(c.addr), () => {
      if (c.error) assert.throws(() => parseAddress(c.addr));
      else assert.deepEqual(parseAddress(c.addr), { target: c.target, tls: c.tls });
    });
  }
  test("a bad POLICYD_ADDR is the constructor's error, naming it", () => {
    const saved = process.env["POLICYD_ADDR"];
    process.env["POLICYD_ADDR"] = "grpc://127.0.0.1:7433";
    try {
      assert.throws(() => new PolicydClient({ fleetGate: false }), /POLICYD_ADDR.*scheme/);
    } finally {
      if (saved === undefined) delete process.env["POLICYD_ADDR"];
      else process.env["POLICYD_ADDR"] = saved;
    }
  });
});

describe("vectors: agent.json", async () => {
  const { defaultAgent } = await internal("address.js");
  for (const c of load("agent.json").cases) {
    test(c.program, () => assert.equal(defaultAgent(c.program), c.agent));
  }
});

describe("vectors: refusals.json", async () => {
  const { callerMistake } = await internal("rpc.js");
  for (const c of load("refusals.json").cases) {
    test(`${c.code}: ${c.message}`, () => {
      const code =
        Code[
          c.code
            .toLowerCase()
            .replace(/(^|_)(\w)/g, (_m: string, _u: string, ch: string) => ch.toUpperCase()) as keyof typeof Code
        ];
      assert.notEqual(code, undefined, c.code);
      assert.equal(callerMistake(code, c.message), c.raise);
    });
  }
});
