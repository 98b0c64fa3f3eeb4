// The fetch transport (PolicydClient.fetch; docs/clients.md, "The
// transport"): a function with fetch's signature that the OpenAI and
// Anthropic SDKs take in place of the global fetch, so that every request
// runs under policyd's retry policy with no change at the call sites. Each
// request is one `call` (run.ts: the same gate, decisions, journal,
// deadlines and fail-open), whose attempt sends the request once: a
// failure status goes to the loop as the response it is, a success comes
// back untouched. Not to be confused with transport.ts, the client's
// connection to policyd.

import type { Safety } from "./decision.js";
import { failureFromError } from "./failure.js";
import { HttpError } from "./http_error.js";
import { type Attempt, type CallOptions, gateCallOf, targetOf } from "./options.js";
import { PolicydError } from "./policyd_error.js";
import { bodyModelOf, MAX_MODEL_BODY_BYTES, operationOf, pathModelOf, providerOf } from "./request_target.js";
import { run, type RunContext } from "./run.js";
import { UsageScanner } from "./usage.js";
import { ScannedResponse, watched } from "./watched.js";

/**
 * The request header that carries the caller's exact count of a request's
 * input tokens (set it with the SDK's extra headers); the transport reads
 * it and does not send it on.
 */
export const INPUT_TOKENS_HEADER = "x-policyd-input-tokens";

/** A token is about four bytes of English text: the providers' own rule of thumb. */
const BYTES_PER_TOKEN = 4;

/** Options of PolicydClient.fetch; every field is optional. */
export interface FetchOptions extends Pick<
  CallOptions<Response>,
  | "provider"
  | "model"
  | "keyId"
  | "profile"
  | "operation"
  | "agent"
  | "journal"
  | "labels"
  | "safety"
  | "timeoutMs"
  | "attemptTimeoutMs"
  | "retryFetchErrors"
  | "class"
> {
  /** The fetch that sends each attempt; default the global fetch. */
  fetch?: typeof globalThis.fetch;
}

/** Request headers as fetch takes them: a Headers, pairs or a record. */
type Headers_ = RequestInit["headers"];

/** A request as the transport sends it, attempt after attempt. */
interface Outgoing {
  href: string;
  /** What each attempt passes to fetch: the caller's init, or a copy without the input-token header. */
  init: RequestInit;
  /** The caller's signal. */
  signal: AbortSignal | undefined;
  method: string;
  /** Whether the body can be sent again (not a stream). */
  replayable: boolean;
  /** The body's text, when it may be JSON naming the model. */
  text: string | undefined;
  /** The input-token estimate: the header's count, else the body's bytes / 4; undefined: unknown. */
  tokens: number | undefined;
}

const noop = () => {};

/**
 * @internal fetchThrough is PolicydClient.fetch: it returns the fetch
 * function (see there). It throws a TypeError for a class that is neither
 * "interactive" nor "batch".
 */
export function fetchThrough(ctx: RunContext, options: FetchOptions = {}): typeof globalThis.fetch {
  const { fetch: given, ...fixed } = options;
  gateCallOf(fixed);
  const send = given ?? globalThis.fetch;
  const coordinator = ctx.coordinator;
  // With a time bound of its own the attempt's signal ends with the call; the caller's must still end a body read later.
  const timed = fixed.timeoutMs !== undefined || fixed.attemptTimeoutMs !== undefined;

  return async function policydFetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
    const out =
      typeof input === "string" || input instanceof URL ? outgoing(input, init) : await outgoingRequest(input, init);
    const endpoint = fixed.provider && fixed.model && fixed.operation ? undefined : endpointOf(out.href);
    const call: CallOptions<Response> = {
      ...fixed,
      provider: fixed.provider || endpoint!.provider,
      model: fixed.model || bodyModelOf(out.text) || endpoint!.pathModel,
      operation: fixed.operation || endpoint!.operation,
      method: out.method,
      inputTokens: out.tokens,
    };
    // A stream body is sent once: not safe to repeat, whatever the request.
    if (!out.replayable) call.safety = "IRREVERSIBLE" satisfies Safety;
    if (out.signal) call.signal = out.signal;
    const target = targetOf(call);
    const href = out.href;

    let failed: { thrown: Response; response: Response } | undefined;
    const drop = () => {
      failed?.response.body?.cancel().catch(noop);
      failed = undefined;
    };
    // The caller's signal as given, unless the call's own bounds must end the attempt too.
    const initOf = (a: Attempt): RequestInit =>
      timed ? { ...out.init, signal: joined(a.signal, out.signal) } : out.init;
    // A stream cut after its first byte: reported as a failure decided here, never retried.
    const cut = (err: unknown) => {
      if (out.signal?.aborted || !coordinator) return; // the caller ended it: not the provider's failure
      const f = failureFromError(err);
      Object.assign(f, { provider: target.provider, model: target.model, keyId: target.keyId, method: out.method });
      f.phase = "MID_STREAM";
      const s = ctx.settings;
      const d = s.failOpen.decide(f, { attempt: 1, nowMs: s.clock.now(), deadlineMs: undefined, random: s.random });
      coordinator.outcome(target, false);
      coordinator.failedLocally(target, d.classification.failureType);
      s.logger.debug?.(`policyd: the stream of ${out.method} ${href} was cut: reported, not retried`);
    };

    const attempt = async (a: Attempt): Promise<Response> => {
      drop();
      if (a.attempt > 1 && !out.replayable) {
        throw new TypeError("policyd: the request's body is a stream, sent once: it cannot be sent again");
      }
      // In flight while it runs (the loop counts it); a stream until its body ends.
      const res = await send(href, initOf(a));
      if (coordinator && hasRateLimits(res.headers)) coordinator.observeRateLimits(target, res.headers);
      if (res.status < 400) {
        // What the body says the call used, read as the SDK reads it: the input tokens counted with
        // the call's estimate (none: nothing to compare), the output tokens once the body ends.
        const estimate = out.tokens;
        const scan =
          coordinator && scannable(res)
            ? new UsageScanner((used) => {
                if (estimate) coordinator.usage(target, used, estimate);
              })
            : undefined;
        const output = coordinator ? (n: number) => coordinator.output(target, n) : noop;
        if (res.body && isEventStream(res))
          return watched(res, coordinator ? coordinator.began(target) : noop, cut, scan, output);
        return scan ? new ScannedResponse(res, scan, output) : res;
      }
      // The loop reads a copy (HttpError.fromResponse: the first 64 KiB);
      // the response keeps its whole body for the SDK, should policyd stop.
      failed = { thrown: res.clone(), response: res };
      throw failed.thrown;
    };

    try {
      return await run(ctx, attempt, call);
    } catch (err) {
      const last = failed;
      failed = undefined;
      // Stopped after an HTTP failure: the SDK gets the response and raises its own error.
      if (last && err instanceof PolicydError && err.cause instanceof HttpError && err.cause.response === last.thrown) {
        return last.response;
      }
      last?.response.body?.cancel().catch(noop);
      throw err;
    }
  };
}

/** What the transport reads of a URL: parsed once per endpoint (its query and fragment aside). */
const endpoints = new Map<string, Endpoint>();
const MAX_ENDPOINTS = 256;

interface Endpoint {
  provider: string;
  /** A Gemini-style path's model. */
  pathModel: string;
  operation: string;
}

function endpointOf(href: string): Endpoint {
  const cut = href.search(/[?#]/);
  const key = cut < 0 ? href : href.slice(0, cut);
  let e = endpoints.get(key);
  if (!e) {
    const url = new URL(key);
    e = { provider: providerOf(url), pathModel: pathModelOf(url.pathname), operation: operationOf(url.pathname) };
    if (endpoints.size >= MAX_ENDPOINTS) endpoints.clear();
    endpoints.set(key, e);
  }
  return e;
}

/**
 * outgoingRequest is outgoing of a Request: its parts, its body buffered
 * so that it can be sent again.
 */
async function outgoingRequest(input: Request, init: RequestInit | undefined): Promise<Outgoing> {
  const r = init ? new Request(input, init) : input;
  return outgoing(r.url, {
    method: r.method,
    headers: r.headers,
    body: r.body ? new Uint8Array(await r.arrayBuffer()) : null,
    redirect: r.redirect,
    signal: r.signal,
    keepalive: r.keepalive,
    integrity: r.integrity,
    referrer: r.referrer,
    referrerPolicy: r.referrerPolicy,
  });
}

/**
 * outgoing reads what the transport needs of a request: its URL, method,
 * signal and body, and the input-token header, which it takes out of a
 * copy of the headers (the caller's init is sent as it is otherwise).
 */
function outgoing(input: string | URL, init: RequestInit | undefined): Outgoing {
  let req = init ?? {};
  const { headers, value } = takeHeader(req.headers, INPUT_TOKENS_HEADER);
  if (value !== undefined) req = { ...req, headers };
  const body = bodyOf(req.body, headers);
  let tokens = body.bytes === undefined ? undefined : Math.ceil(body.bytes / BYTES_PER_TOKEN);
  if (value !== undefined) {
    const n = Number(value.trim());
    if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n)) {
      throw new TypeError(
        `policyd: header ${INPUT_TOKENS_HEADER}: ${JSON.stringify(value)} is not a whole number of tokens`,
      );
    }
    tokens = n;
  }
  return {
    href: typeof input === "string" ? input : input.href,
    init: req,
    signal: req.signal ?? undefined,
    method: (req.method ?? "GET").toUpperCase(),
    replayable: body.replayable,
    text: body.text,
    tokens,
  };
}

/**
 * takeHeader returns headers without name (a copy, when it was there) and
 * name's value; headers as fetch takes them: a Headers, pairs or a record.
 */
function takeHeader(
  headers: Headers_ | undefined,
  name: string,
): { headers: Headers_ | undefined; value: string | undefined } {
  if (!headers) return { headers, value: undefined };
  if (headers instanceof Headers) {
    const value = headers.get(name);
    if (value === null) return { headers, value: undefined };
    const copy = new Headers(headers);
    copy.delete(name);
    return { headers: copy, value };
  }
  if (Array.isArray(headers)) {
    const pair = headers.find((p) => p[0]?.toLowerCase() === name);
    if (!pair) return { headers, value: undefined };
    return { headers: headers.filter((p) => p[0]?.toLowerCase() !== name), value: String(pair[1] ?? "") };
  }
  const record = headers as Record<string, string | readonly string[]>;
  let value: string | undefined;
  for (const k in record) if (k.toLowerCase() === name) value = String(record[k]);
  if (value === undefined) return { headers, value };
  const copy: Record<string, string | readonly string[]> = {};
  for (const k in record) if (k.toLowerCase() !== name) copy[k] = record[k]!;
  return { headers: copy, value };
}

/**
 * bodyOf says whether body can be sent again (all but a stream), its size
 * in bytes when known (a stream's from content-length), and its text when
 * it may be a JSON object of at most MAX_MODEL_BODY_BYTES.
 */
function bodyOf(
  body: RequestInit["body"],
  headers: Headers_ | undefined,
): { replayable: boolean; bytes: number | undefined; text: string | undefined } {
  if (body === null || body === undefined) return { replayable: true, bytes: 0, text: undefined };
  if (typeof body === "string") {
    const bytes = Buffer.byteLength(body);
    return { replayable: true, bytes, text: bytes <= MAX_MODEL_BODY_BYTES ? body : undefined };
  }
  if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) {
    const view =
      body instanceof ArrayBuffer
        ? new Uint8Array(body)
        : new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
    const json = view.byteLength <= MAX_MODEL_BODY_BYTES && startsWithBrace(view);
    return { replayable: true, bytes: view.byteLength, text: json ? new TextDecoder().decode(view) : undefined };
  }
  if (body instanceof URLSearchParams)
    return { replayable: true, bytes: Buffer.byteLength(body.toString()), text: undefined };
  if (body instanceof Blob) return { replayable: true, bytes: body.size, text: undefined };
  if (body instanceof FormData) return { replayable: true, bytes: undefined, text: undefined };
  // A stream (or an async iterable): read as it is sent, once.
  const length = Number(new Headers(headers).get("content-length") ?? NaN);
  return {
    replayable: false,
    bytes: Number.isSafeInteger(length) && length >= 0 ? length : undefined,
    text: undefined,
  };
}

/** Whether bytes start, past JSON white space, with "{". */
function startsWithBrace(bytes: Uint8Array): boolean {
  for (const b of bytes) {
    if (b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09) continue;
    return b === 0x7b;
  }
  return false;
}

/** A signal that aborts when any of signals does (with its reason); it holds them strongly. */
function joined(...signals: (AbortSignal | undefined)[]): AbortSignal {
  const ac = new AbortController();
  for (const s of signals) {
    if (!s) continue;
    if (s.aborted) {
      ac.abort(s.reason);
      break;
    }
    s.addEventListener("abort", () => ac.abort(s.reason), { once: true });
  }
  return ac.signal;
}

/**
 * The limit headers the providers send on every response (OpenAI's, and
 * those who copy it, and Anthropic's): a response without any of them has
 * none to hand over, and is not scanned.
 */
const LIMIT_HEADERS = [
  "x-ratelimit-limit-requests",
  "x-ratelimit-limit-tokens",
  "x-ratelimit-remaining-requests",
  "x-ratelimit-remaining-tokens",
  "anthropic-ratelimit-requests-limit",
  "anthropic-ratelimit-tokens-limit",
  "anthropic-ratelimit-input-tokens-limit",
  "anthropic-ratelimit-output-tokens-limit",
];

const LIMIT_NAMES: ReadonlySet<string> = new Set(LIMIT_HEADERS);

function hasRateLimits(headers: Headers): boolean {
  // One pass over the names (lower case, as Headers keeps them), not a has() a name: each has() validates its name.
  for (const name of headers.keys()) if (LIMIT_NAMES.has(name)) return true;
  return false;
}

function isEventStream(res: Response): boolean {
  return (res.headers.get("content-type") ?? "").toLowerCase().includes("text/event-stream");
}

/** Whether res is a success whose body may say what the call used: JSON, or an event stream. */
function scannable(res: Response): boolean {
  if (!res.body || res.status < 200 || res.status >= 300) return false;
  const type = (res.headers.get("content-type") ?? "").toLowerCase();
  return type.includes("json") || type.includes("text/event-stream");
}
