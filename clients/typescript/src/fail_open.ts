// FailOpenPolicy: the small built-in policy the client decides with when
// policyd cannot be asked, so that a daemon outage never becomes an agent
// outage. The Go and Python clients implement the same contract
// (docs/clients.md), checked by the vectors in clients/testdata.

import type { Random } from "./clock.js";
import type { Classification, Decision, FailureType, Safety } from "./decision.js";
import type { Failure } from "./failure.js";
import { retryAfterMs } from "./retry_after.js";

/** The knobs of the fail-open policy; every field has a default (see DEFAULT_FAIL_OPEN). */
export interface FailOpenOptions {
  /** Total attempts allowed, the first included. */
  maxAttempts: number;
  /** The backoff after the first attempt, before jitter, in ms. */
  initialDelayMs: number;
  /** The cap on the backoff, in ms. */
  maxDelayMs: number;
  /** How the backoff grows after every attempt. */
  multiplier: number;
  /** A server asking to wait longer than this (ms) is not waited for. */
  retryAfterCeilingMs: number;
}

/**
 * DEFAULT_FAIL_OPEN: 3 attempts, 1 s doubling up to 30 s with full jitter,
 * Retry-After honoured up to 60 s. Conservative on purpose: without policyd
 * the client knows little, and retrying a permanent failure costs money and
 * time.
 */
export const DEFAULT_FAIL_OPEN: Readonly<FailOpenOptions> = Object.freeze({
  maxAttempts: 3,
  initialDelayMs: 1000,
  maxDelayMs: 30_000,
  multiplier: 2,
  retryAfterCeilingMs: 60_000,
});

/** What FailOpenPolicy.decide needs besides the failure. */
export interface FailOpenContext {
  /** The failed attempt's number, 1-based. */
  attempt: number;
  /** The current time, ms since the epoch. */
  nowMs: number;
  /** The caller's deadline, ms since the epoch; undefined: none. */
  deadlineMs?: number | undefined;
  /** Whether the operation may be repeated; "" or undefined: derived from the failure's operation and method. */
  safety?: Safety | undefined;
  /** The jitter source; undefined draws 0.5 (half the backoff). */
  random?: Random | undefined;
}

/**
 * FailOpenPolicy retries only clearly transient failures — connection
 * errors and timeouts, 408, 429 and 5xx (except 501), gRPC UNAVAILABLE,
 * RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED — with capped
 * exponential backoff and full jitter, waits at least a server's
 * Retry-After, and never retries an irreversible operation or past the
 * caller's deadline. Everything else stops at once. The same inputs and
 * draws give the same decision.
 */
export class FailOpenPolicy {
  readonly options: Readonly<FailOpenOptions>;

  constructor(options: Partial<FailOpenOptions> = {}) {
    this.options = Object.freeze({ ...DEFAULT_FAIL_OPEN, ...options });
  }

  decide(failure: Failure, ctx: FailOpenContext): Decision {
    const p = this.options;
    const c = classify(failure);
    const d: Decision = {
      action: "STOP",
      delayMs: 0,
      classification: c,
      attemptsLeft: 0,
      stopReason: "",
      stopText: "",
      fallback: { kind: "", reason: "", provider: "", model: "" },
      strategy: {
        name: `fail-open/${c.failureType}`,
        summary: `exponential ${fmt(p.initialDelayMs)}→${fmt(p.maxDelayMs)} ×${p.multiplier}, full jitter, ${p.maxAttempts} attempts (policyd unreachable)`,
      },
      journaled: false,
      failOpen: true,
    };
    const hint = retryAfterMs(failure.headers, ctx.nowMs);
    if (hint !== undefined) c.retryAfterMs = hint;
    const stop = (reason: Decision["stopReason"], text: string): Decision => {
      d.stopReason = reason;
      d.stopText = text;
      return d;
    };
    if (!c.retryable) return stop("NOT_RETRYABLE", `not retryable: ${c.recoveryAction}`);
    const safety = ctx.safety || deriveSafety(failure.operation, failure.method);
    if (safety === "IRREVERSIBLE") {
      return stop("IRREVERSIBLE_OPERATION", "the operation is irreversible; retrying it could repeat its effect");
    }
    if (ctx.attempt >= p.maxAttempts) return stop("ATTEMPTS_EXHAUSTED", `all ${p.maxAttempts} attempts were used`);

    let backoff = p.initialDelayMs * p.multiplier ** (ctx.attempt - 1);
    if (p.maxDelayMs > 0 && backoff > p.maxDelayMs) backoff = p.maxDelayMs;
    const r = ctx.random ? ctx.random() : 0.5;
    let delay = Math.floor(backoff * r);
    if (hint !== undefined && hint > 0) {
      if (p.retryAfterCeilingMs > 0 && hint > p.retryAfterCeilingMs) {
        return stop(
          "SERVER_DELAY_ABOVE_CEILING",
          `the server asked to wait ${fmt(hint)}, above the ${fmt(p.retryAfterCeilingMs)} ceiling`,
        );
      }
      delay = Math.max(delay, hint);
    }
    if (ctx.deadlineMs !== undefined && ctx.nowMs + delay > ctx.deadlineMs) {
      return stop("DEADLINE", `waiting ${fmt(delay)} would pass the deadline`);
    }
    d.action = "RETRY";
    d.delayMs = delay;
    d.attemptsLeft = p.maxAttempts - ctx.attempt; // only on a retry, as policyd answers: a stop leaves none
    return d;
  }
}

/** Human durations as Go prints them: 500ms, 1s, 1m0s. */
function fmt(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${Number(s.toFixed(3))}s`;
  return `${Math.floor(s / 60)}m${Number((s % 60).toFixed(3))}s`;
}

/**
 * The codes read as a connection error. ENOTFOUND (no such host) is left
 * out: it is as often a typo as an outage.
 */
const CONNECTION_CODES = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
  "EHOSTDOWN",
  "EAI_AGAIN",
  "UND_ERR_SOCKET",
  "UND_ERR_CLOSED",
  "ERR_STREAM_PREMATURE_CLOSE",
]);

/** The codes read as a timeout: a request that got no answer in time is worth one more try. */
const TIMEOUT_CODES = new Set([
  "ETIMEDOUT",
  "ESOCKETTIMEDOUT",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
  "ERR_SOCKET_CONNECTION_TIMEOUT",
]);

/** Timeouts known by name: AbortSignal.timeout's TimeoutError, undici's and the SDKs' timeout errors. */
const TIMEOUT_NAMES = new Set([
  "TimeoutError",
  "HeadersTimeoutError",
  "BodyTimeoutError",
  "ConnectTimeoutError",
  "APIConnectionTimeoutError",
]);

const ABORT_NAMES = new Set(["AbortError", "APIUserAbortError"]);

function classify(f: Failure): Classification {
  const c = (
    t: FailureType,
    retryable: boolean,
    rule: string,
    reason: string,
    recoveryAction: string,
  ): Classification => ({
    failureType: t,
    retryable,
    rule: `fail_open.${rule}`,
    reason,
    recoveryAction,
    retryAfterSource: "",
    continuationPrompt: "",
  });
  if (f.grpcCode === 1 || f.causes.some((x) => ABORT_NAMES.has(x.name) || x.code === "ABORT_ERR")) {
    return c(
      "CANCELED",
      false,
      "canceled",
      "the caller aborted the operation",
      "Nothing to retry; the operation was cancelled by its caller.",
    );
  }
  const s = f.httpStatus;
  if (s === 429) {
    return c(
      "RATE_LIMIT",
      true,
      "rate_limit",
      "HTTP 429: the service is throttling requests",
      "Wait and retry with backoff, honouring the server's delay.",
    );
  }
  if (s === 503 || s === 529)
    return c("OVERLOADED", true, "overloaded", `HTTP ${s}: the service is overloaded`, "Retry with backoff.");
  if (s === 504) return c("TIMEOUT", true, "gateway_timeout", "HTTP 504: the gateway timed out", "Retry with backoff.");
  if (s === 408)
    return c(
      "TIMEOUT",
      true,
      "request_timeout",
      "HTTP 408: the server timed out waiting for the request",
      "Retry with backoff.",
    );
  if (s === 501) {
    return c(
      "UNSUPPORTED",
      false,
      "status",
      "HTTP 501: not implemented",
      "Change approach; the service does not support the request.",
    );
  }
  if (s >= 500 && s <= 599)
    return c("SERVER_ERROR", true, "server_error", `HTTP ${s}: the service failed`, "Retry with backoff.");
  if (s === 401) {
    return c(
      "AUTH_INVALID",
      false,
      "status",
      "HTTP 401: the credentials are invalid or missing",
      "Fix the API credentials (key, token or endpoint), then run again.",
    );
  }
  if (s === 403)
    return c(
      "PERMISSION_DENIED",
      false,
      "status",
      "HTTP 403: the credentials are not allowed",
      "Request access to the resource.",
    );
  if (s === 404)
    return c("NOT_FOUND", false, "status", "HTTP 404: not found", "Use a valid URL, model or resource id.");
  if (s === 400 || s === 422) {
    return c(
      "INVALID_REQUEST",
      false,
      "status",
      `HTTP ${s}: the request was refused as invalid`,
      "Fix the request; the same request will fail again.",
    );
  }
  if (s !== 0) {
    return c(
      "UNKNOWN",
      false,
      "status",
      `HTTP ${s} is not retried while policyd is unreachable`,
      "Inspect the response; only connection errors, timeouts, 408, 429 and 5xx are retried without policyd.",
    );
  }
  if (f.grpcCode === 14)
    return c(
      "OVERLOADED",
      true,
      "grpc_unavailable",
      "gRPC UNAVAILABLE: the service is unavailable",
      "Retry with backoff.",
    );
  if (f.grpcCode === 8) {
    return c(
      "RATE_LIMIT",
      true,
      "grpc_resource_exhausted",
      "gRPC RESOURCE_EXHAUSTED: the service is throttling requests",
      "Wait and retry with backoff, honouring the server's delay.",
    );
  }
  if (f.grpcCode === 4)
    return c(
      "TIMEOUT",
      true,
      "grpc_deadline_exceeded",
      "gRPC DEADLINE_EXCEEDED: the call timed out",
      "Retry; raise the timeout if it persists.",
    );
  const codes = [f.errorCode, ...f.causes.map((x) => x.code)].map((x) => x.toUpperCase());
  if (
    codes.some((x) => TIMEOUT_CODES.has(x)) ||
    [f.errorName, ...f.causes.map((x) => x.name)].some((x) => TIMEOUT_NAMES.has(x))
  ) {
    return c("TIMEOUT", true, "timeout", "the request timed out", "Retry; raise the timeout if it persists.");
  }
  if (codes.some((x) => CONNECTION_CODES.has(x))) {
    return c(
      "CONNECTION_ERROR",
      true,
      "connection",
      "the connection failed or was reset",
      "Retry after a short backoff; check the network if it persists.",
    );
  }
  return c(
    "UNKNOWN",
    false,
    "unknown",
    "not a connection error, timeout, 408, 429 or 5xx: not retried while policyd is unreachable",
    "Inspect the error; only clearly transient failures are retried without policyd.",
  );
}

const MODEL_PREFIXES = ["chat", "completion", "complete", "embed", "messages", "responses", "generate", "model", "llm"];
const IRREVERSIBLE_PREFIXES = ["shell", "exec", "deploy", "external_write", "api.write", "payment"];
const CONDITIONAL_PREFIXES = ["file.write", "file.edit", "write_file", "edit_file", "patch"];

/**
 * deriveSafety is policyd's default operation safety: model requests and
 * GET, HEAD, OPTIONS are safe; other methods and shell, exec, deploy and
 * external writes are irreversible; file writes are conditional; anything
 * else is safe.
 */
export function deriveSafety(operation: string, method: string): Safety {
  const op = operation.toLowerCase();
  const starts = (list: string[]) => list.some((p) => op.startsWith(p));
  if (starts(MODEL_PREFIXES)) return "SAFE";
  const m = method.trim().toUpperCase();
  if (m) return m === "GET" || m === "HEAD" || m === "OPTIONS" ? "SAFE" : "IRREVERSIBLE";
  if (starts(IRREVERSIBLE_PREFIXES)) return "IRREVERSIBLE";
  if (starts(CONDITIONAL_PREFIXES)) return "CONDITIONAL";
  return "SAFE";
}
