// failureFromError: the heart of the client. It turns whatever a JavaScript
// operation threw — a fetch Response or HttpError, `TypeError: fetch failed`
// and its cause chain, a Node system error, an AbortError, an error of the
// OpenAI or Anthropic SDKs, a gRPC error — into the Failure policyd
// classifies. Everything is duck typed: no SDK is a dependency.

import { create } from "@bufbuild/protobuf";
import { CauseSchema, FailureSchema, type Failure as PbFailure, Phase as PbPhase } from "./gen/policyd/v1/policy_pb.js";
import { HttpError } from "./http_error.js";

/** Where in a streaming call a failure happened; "" when unknown or not streaming. */
export type Phase = "" | "CONNECT" | "MID_STREAM";

/** One link of an error's cause chain. */
export interface Cause {
  /** The link's class name, e.g. "TypeError", "SocketError", "AbortError". */
  name: string;
  /** Its machine code, e.g. "ECONNRESET", "UND_ERR_SOCKET"; often "". */
  code: string;
  /** Its message. */
  message: string;
}

/**
 * A failure as policyd sees it: what failureFromError made of an error, plus
 * the call's provider, model, operation and method. The more it carries,
 * the better the classification.
 */
export interface Failure {
  /** The provider, e.g. "openai", "anthropic", "web"; case-insensitive. */
  provider: string;
  /** The model, e.g. "gpt-4o". */
  model: string;
  /** A label of the credential the call used (CallOptions.keyId); never the key itself. */
  keyId: string;
  /** What was being done: "chat", "chat.stream", "web_fetch", "task", "shell.exec", ... */
  operation: string;
  /** The HTTP method, when there was one. */
  method: string;
  /** The HTTP status; 0 when there was no HTTP response. */
  httpStatus: number;
  /** Response headers, names in lower case. */
  headers: Record<string, string>;
  /** The response body (the first 64 KiB). */
  body: string;
  /** The error's message; "" for a bare HttpError, whose body says more. */
  message: string;
  /** The outermost error's class name, e.g. "TypeError", "AbortError", "APIConnectionError". */
  errorName: string;
  /** The outermost network, task or stream code in the chain, e.g. "ECONNRESET", "TEST_FAILURE". */
  errorCode: string;
  /** The cause chain, outermost first (the error itself included). */
  causes: Cause[];
  /** Where in a streaming call the failure happened. */
  phase: Phase;
  /** The status code of a failed upstream gRPC call; 0 when none. */
  grpcCode: number;
}

/** The limits policyd enforces; the client truncates to them so a huge error is never a refused request. */
const MAX_BODY_CHARS = 64 << 10;
const MAX_FIELD_CHARS = 8 << 10;
const MAX_HEADERS = 100;
const MAX_HEADER_NAME = 256;
const MAX_CAUSES = 64;
/** key_id and client_id are labels, not data: policyd refuses more than 128 UTF-8 bytes. */
const MAX_LABEL_BYTES = 128;

/** An empty Failure, every field at its zero value. */
export function emptyFailure(): Failure {
  return {
    provider: "",
    model: "",
    keyId: "",
    operation: "",
    method: "",
    httpStatus: 0,
    headers: {},
    body: "",
    message: "",
    errorName: "",
    errorCode: "",
    causes: [],
    phase: "",
    grpcCode: 0,
  };
}

type Obj = Record<string | symbol, unknown>;

function isObject(v: unknown): v is Obj {
  return (typeof v === "object" || typeof v === "function") && v !== null;
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

function clip(s: string, n: number): string {
  return s.length > n ? s.slice(0, n) : s;
}

/** @internal s cut to policyd's label limit in UTF-8 bytes, on a character boundary. */
export function clipLabel(s: string): string {
  let bytes = 0;
  let end = 0;
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    bytes += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; // a lone surrogate is sent as U+FFFD: 3
    if (bytes > MAX_LABEL_BYTES) break;
    end += ch.length;
  }
  return s.slice(0, end);
}

/** The class name of e: its own name unless that is the generic "Error", then its constructor's. */
function nameOf(e: Obj): string {
  const own = str(e["name"]);
  const ctor = isObject(e["constructor"]) ? str((e["constructor"] as Obj)["name"]) : "";
  if (own && own !== "Error") return own;
  if (ctor && ctor !== "Object") return ctor;
  return own;
}

/**
 * The HTTP shape of e, when it has one: our HttpError, a fetch Response
 * (thrown as is), or an SDK error (OpenAI, Anthropic and friends) with a
 * numeric status and headers or an error body.
 */
function httpOf(e: Obj): { status: number; headers: Record<string, string>; body: string; method: string } | undefined {
  if (e instanceof HttpError) {
    return { status: e.status, headers: e.headers, body: e.body, method: e.method };
  }
  if (typeof Response !== "undefined" && e instanceof Response) {
    return { status: e.status, headers: headersOf(e.headers), body: "", method: "" };
  }
  const status = e["status"] ?? e["statusCode"];
  if (typeof status !== "number" || !Number.isInteger(status) || status < 100 || status > 599) return undefined;
  if (!("headers" in e) && !("error" in e) && !("body" in e)) return undefined;
  return { status, headers: headersOf(e["headers"]), body: bodyOf(e), method: "" };
}

/** An SDK error's body: its `error` field (OpenAI: the body's error object; Anthropic: the whole body). */
function bodyOf(e: Obj): string {
  for (const key of ["error", "body"]) {
    const v = e[key];
    if (typeof v === "string") return v;
    if (isObject(v)) {
      // OpenAI's SDK keeps the body's "error" member; re-wrap it so the body reads as the provider sent it.
      const whole = "error" in v || v["type"] === "error" || key === "body";
      try {
        return JSON.stringify(whole ? v : { error: v }) ?? "";
      } catch {
        return "";
      }
    }
  }
  return "";
}

/** Response headers from a Headers, a Map, an array of pairs or a plain object; names in lower case. */
export function headersOf(h: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  let n = 0;
  const put = (k: unknown, v: unknown) => {
    if (typeof k !== "string" || n >= MAX_HEADERS) return;
    const name = k.toLowerCase();
    if (!name || name.length > MAX_HEADER_NAME) return;
    const value = Array.isArray(v) ? v.map(String).join(", ") : v === undefined || v === null ? "" : String(v);
    if (!(name in out)) n++;
    out[name] = clip(value, MAX_FIELD_CHARS);
  };
  if (!isObject(h)) return out;
  if (typeof Headers !== "undefined" && h instanceof Headers) {
    h.forEach((v, k) => {
      put(k, v);
    });
  } else if (h instanceof Map) {
    for (const [k, v] of h) put(k, v);
  } else if (Array.isArray(h)) {
    for (const pair of h) if (Array.isArray(pair)) put(pair[0], pair[1]);
  } else if (typeof h["forEach"] === "function" && typeof h["get"] === "function") {
    (h["forEach"] as (cb: (v: unknown, k: unknown) => void) => void).call(h, (v, k) => put(k, v));
  } else {
    for (const [k, v] of Object.entries(h)) put(k, v);
  }
  return out;
}

/** A gRPC status code carried by e: connect's ConnectError, @grpc/grpc-js's ServiceError. */
function grpcCodeOf(e: Obj): number {
  const code = e["code"];
  if (typeof code !== "number" || !Number.isInteger(code) || code < 1 || code > 16) return 0;
  if (nameOf(e) === "ConnectError" || "metadata" in e || "details" in e) return code;
  return 0;
}

function phaseOf(v: unknown): Phase {
  const p = str(v)
    .toUpperCase()
    .replace(/^PHASE_/, "");
  return p === "CONNECT" || p === "MID_STREAM" ? p : "";
}

/**
 * failureFromError maps a thrown value to the Failure policyd classifies.
 * It walks the whole cause chain (`cause`, and AggregateError's `errors`)
 * and reads, wherever they sit (the outermost wins):
 *
 * - HttpError (see checkResponse), a thrown fetch Response, and errors of
 *   the OpenAI and Anthropic SDKs (and any error with a numeric `status` and
 *   `headers` or an `error` body): status, headers, body;
 * - `TypeError: fetch failed` with its cause's code (ECONNRESET,
 *   ECONNREFUSED, UND_ERR_SOCKET, UND_ERR_CONNECT_TIMEOUT, ...);
 * - Node system errors by their string `code` (`.syscall` and `.errno` need
 *   nothing more);
 * - AbortError (DOMException or Node's), TimeoutError (AbortSignal.timeout)
 *   and the SDKs' APIUserAbortError (read as ABORT_ERR): by name;
 * - gRPC errors (ConnectError, grpc-js ServiceError): the numeric code;
 * - a `phase` property ("CONNECT" or "MID_STREAM") on any link: the stream
 *   phase; a string `code` on any error: task and stream codes such as
 *   TEST_FAILURE or NO_FINISH_REASON.
 *
 * A string or other non-error value becomes the message.
 */
export function failureFromError(err: unknown): Failure {
  const f = emptyFailure();
  if (!isObject(err)) {
    f.message = clip(err === undefined ? "" : String(err), MAX_FIELD_CHARS);
    return f;
  }
  let http: ReturnType<typeof httpOf>;
  const seen = new Set<unknown>();
  const walk = (e: unknown, depth: number) => {
    if (f.causes.length >= MAX_CAUSES || depth > 100) return;
    if (!isObject(e)) {
      if (e !== undefined && e !== null)
        f.causes.push({ name: "", code: "", message: clip(String(e), MAX_FIELD_CHARS) });
      return;
    }
    if (seen.has(e)) return;
    seen.add(e);
    const name = nameOf(e);
    const h = httpOf(e);
    if (h && !http) http = h;
    let code = "";
    const rawCode = e["code"];
    // An SDK API error's code ("rate_limit_exceeded") is in its body; a DOMException's code is a legacy number.
    if (typeof rawCode === "string" && !h) code = rawCode;
    if (!code && name !== "AbortError" && /AbortError$/.test(name)) code = "ABORT_ERR";
    if (!f.grpcCode) f.grpcCode = grpcCodeOf(e);
    if (!f.phase) f.phase = phaseOf(e["phase"]);
    if (!f.errorCode && code) f.errorCode = clip(code, MAX_FIELD_CHARS);
    f.causes.push({
      name: clip(name, MAX_FIELD_CHARS),
      code: clip(code, MAX_FIELD_CHARS),
      message: clip(str(e["message"]), MAX_FIELD_CHARS),
    });
    if ("cause" in e) walk(e["cause"], depth + 1);
    const errors = e["errors"];
    if (Array.isArray(errors)) for (const inner of errors) walk(inner, depth + 1);
  };
  walk(err, 0);
  f.errorName = f.causes[0]?.name ?? "";
  f.message = f.causes[0]?.message ?? "";
  if (http) {
    f.httpStatus = http.status;
    f.headers = http.headers;
    f.body = clip(http.body, MAX_BODY_CHARS);
    if (!f.errorCode) f.errorCode = bodyErrorCode(http.body);
    if (http.method) f.method = http.method.toUpperCase();
    if (err instanceof HttpError) f.message = ""; // a bare HTTP error: the body says more than "HTTP 401"
  }
  return f;
}

/** @internal The Failure as the generated message. */
export function failureToProto(f: Failure): PbFailure {
  const phase =
    f.phase === "CONNECT" ? PbPhase.CONNECT : f.phase === "MID_STREAM" ? PbPhase.MID_STREAM : PbPhase.UNSPECIFIED;
  return create(FailureSchema, {
    provider: f.provider,
    model: f.model,
    keyId: clipLabel(f.keyId),
    operation: f.operation,
    method: f.method,
    httpStatus: f.httpStatus,
    headers: { ...f.headers },
    body: f.body,
    message: f.message,
    errorName: f.errorName,
    errorCode: f.errorCode,
    causes: f.causes.map((c) => create(CauseSchema, c)),
    phase,
    grpcCode: f.grpcCode,
  });
}

/**
 * bodyErrorCode is the provider's machine code in a JSON error body, as the
 * SDKs read it: error.code ("insufficient_quota", "rate_limit_exceeded"),
 * else error.status ("RESOURCE_EXHAUSTED"); "" when there is none. The
 * journal keeps it, so post-mortems tell an exhausted quota from a rate
 * limit; every client reads the same two fields (error_mapping.json).
 */
export function bodyErrorCode(body: string): string {
  const text = body.trim();
  if (!text.startsWith("{")) return "";
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return "";
  }
  const err = isObject(parsed) ? parsed["error"] : undefined;
  if (!isObject(err)) return "";
  for (const key of ["code", "status"]) {
    const v = err[key];
    if (typeof v === "string" && v.length > 0 && v.length <= 128 && !/\s/.test(v)) return v;
  }
  return "";
}
