// The client's options: what a caller can set (ClientOptions for a client,
// CallOptions for one call), what an attempt and a fallback function are
// given, the defaults, and how options are read into the values the rest of
// the client uses. It exists so that the public shapes and their defaults
// are in one place, apart from the code that acts on them: client.ts (the
// public class), transport.ts (the connection), run.ts (the retry loop).

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { create } from "@bufbuild/protobuf";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { defaultAgent, parseAddress } from "./address.js";
import { type Clock, type Random, systemClock } from "./clock.js";
import type { Decision, Safety } from "./decision.js";
import { type FailOpenOptions, FailOpenPolicy } from "./fail_open.js";
import { clipLabel } from "./failure.js";
import { GATE_GRACE_MS, type PriorityClass, type Target } from "./gate.js";
import { type ClassifyOptions, ClassifyOptionsSchema } from "./gen/policyd/v1/policy_pb.js";

/** The daemon address used when none is given and POLICYD_ADDR is unset: `make run`'s listen address. */
export const DEFAULT_ADDRESS = "127.0.0.1:7433";

/**
 * The bound on every RPC to policyd unless daemonTimeoutMs says otherwise:
 * long enough for a journaled NextDelay (the daemon waits up to 250 ms for
 * its commit), short enough that a hung daemon costs an agent little
 * before the client fails open.
 */
export const DEFAULT_DAEMON_TIMEOUT_MS = 1000;

/**
 * A logger: console fits, and so do pino and winston. Only warn is
 * required; the client logs every decision at debug level.
 */
export interface Logger {
  warn(message: string, ...fields: unknown[]): void;
  info?(message: string, ...fields: unknown[]): void;
  debug?(message: string, ...fields: unknown[]): void;
}

/** The default logger: warnings to stderr (console.warn), nothing else. */
const DEFAULT_LOGGER: Logger = { warn: (message, ...fields) => console.warn(message, ...fields) };

/** What an operation's attempt is given. */
export interface Attempt {
  /** The attempt's number, from 1. */
  attempt: number;
  /**
   * Aborts when the caller's signal aborts or the call's deadline passes:
   * pass it to fetch and the SDKs.
   */
  signal: AbortSignal;
  /** The previous attempt's error; undefined on the first attempt. */
  lastError?: unknown;
  /**
   * The decision taken after the previous attempt. For an invalid stream,
   * `lastDecision.classification.continuationPrompt` is the prompt that
   * continues the response ("Please continue.").
   */
  lastDecision?: Decision;
}

/** The hint a fallback function gets when policyd answers FALL_BACK. */
export interface FallbackHint {
  /** What to fall back to: "LARGER_CONTEXT_MODEL", "OTHER_PROVIDER" or "OTHER_MODEL". */
  kind: Decision["fallback"]["kind"];
  /** Why, e.g. "2 attempts failed; fall back to OTHER_PROVIDER". */
  reason: string;
  /** The target's provider from policyd's fallback chains (the policy file's fallbacks); "" when the policy names none. */
  provider: string;
  /** The target's model from policyd's fallback chains; "" when the policy names none. */
  model: string;
  /** The failed attempt's error; undefined when the fleet gate fell back before the first attempt. */
  error: unknown;
  /** The failed attempt's number; 0 when the fleet gate fell back before the first attempt. */
  attempt: number;
  /** policyd's whole answer. */
  decision: Decision;
  /** The call's signal, to pass on. */
  signal: AbortSignal;
}

/** Describes one call; every field is optional. */
export interface CallOptions<T> {
  /** The provider, e.g. "openai", "anthropic", "google", "web". */
  provider?: string;
  /** The model, e.g. "gpt-4o". */
  model?: string;
  /**
   * A label of the credential or account the call uses (at most 128 bytes),
   * e.g. "prod-key" or a hash of the key — never the key itself. policyd's
   * fleet memory shares rate limits, quotas and auth failures per key: one
   * agent's revoked key or exhausted quota stops the others on the same
   * key, not everyone.
   */
  keyId?: string;
  /** What is being done: "chat", "chat.stream", "web_fetch", "task", "shell.exec", ...; it decides operation safety. */
  operation?: string;
  /** The HTTP method; when unset, the one an HttpError carries. GET, HEAD and OPTIONS may be repeated. */
  method?: string;
  /** The policyd profile; unset: the client's, else "default". */
  profile?: string;
  /** Overrides the operation safety policyd derives. */
  safety?: Safety;
  /** Aborting it stops the call at once — mid-attempt or mid-wait — and the call rejects with signal.reason. */
  signal?: AbortSignal;
  /** One time budget for the whole call, all attempts and waits included (ms). */
  timeoutMs?: number;
  /**
   * Bounds each attempt (ms): the attempt's signal aborts with a
   * TimeoutError, which policyd reads as a TIMEOUT (retried). Prefer it to
   * AbortSignal.any([signal, AbortSignal.timeout(ms)]), which Node 20 may
   * garbage-collect before it fires.
   */
  attemptTimeoutMs?: number;
  /** An absolute deadline (a Date or ms since the epoch); the earlier of it and timeoutMs applies. */
  deadline?: Date | number;
  /** Retry a generic `fetch failed` with no network code, and (agent_cli) mid-stream network failures (seed 000). */
  retryFetchErrors?: boolean;
  /** Continue an invalid stream once with the continuation prompt (seed 001); default true. */
  continueInvalidStream?: boolean;
  /** Journal this call (default: the client's journal option). */
  journal?: boolean;
  /** The RetryContext id, a UUID; setting it journals the call. Unset: made when journaled. */
  contextId?: string;
  /** The agent named in the journal; unset: the client's. */
  agent?: string;
  /** Free-form journal labels, e.g. { run: "nightly" }. */
  labels?: Record<string, string>;
  /**
   * The call's priority class: "interactive" (default) or "batch". When the
   * fleet paces the target, batch first attempts yield first (they are
   * admitted at the assignment's batch share).
   */
  class?: PriorityClass;
  /**
   * The call's input tokens (an estimate, or the exact count), reported to
   * the fleet with its first attempt and each retry, for pacing by tokens.
   */
  inputTokens?: number;
  /**
   * Called when policyd answers FALL_BACK (e.g. a larger-context model, or
   * another provider), or when the fleet gate does not send the first
   * attempt and the fleet's assignment names a fallback; its result is the
   * call's result, and what it throws is what the call throws. Unset:
   * FALL_BACK stops the call like STOP.
   */
  fallback?: (hint: FallbackHint) => T | Promise<T>;
}

/** Options of createClient; every field is optional. */
export interface ClientOptions {
  /**
   * The daemon's address, `[http://|https://]host[:port]` (port 7433 when
   * none is given; https:// turns TLS on); unset: $POLICYD_ADDR, else
   * 127.0.0.1:7433. Anything else makes the constructor throw.
   */
  address?: string;
  /** The profile of calls that name none; unset: policyd's "default" (LLM provider calls). */
  profile?: string;
  /** Journal every call (default false). A journaled call that fails at least once becomes a RetryContext. */
  journal?: boolean;
  /** Bounds each RPC to policyd (default 1000 ms); past it the client decides with its fail-open policy. */
  daemonTimeoutMs?: number;
  /** Where the client warns (once per outage) and logs decisions (debug); default: warnings to console.warn. */
  logger?: Logger;
  /** The agent named in journaled contexts; default the script's file name without its extension. */
  agent?: string;
  /**
   * Names this client to policyd (at most 128 bytes); default the host
   * name, the process id and 8 random hex digits, new for every client. The
   * fleet's circuit breakers count distinct clients, so two clients must
   * not share one.
   */
  clientId?: string;
  /** The policy used while policyd cannot be asked; default DEFAULT_FAIL_OPEN. */
  failOpen?: FailOpenPolicy | Partial<FailOpenOptions>;
  /** The time source (default the system clock); tests inject one that does not sleep. */
  clock?: Clock;
  /** The fail-open policy's jitter source (default Math.random). */
  random?: Random;
  /**
   * Observes every decision, before the wait (attempt 0: the fleet gate's,
   * before the first attempt); it must not throw.
   */
  onDecision?: (event: { attempt: number; error: unknown; decision: Decision }) => void;
  /** Interceptors for the gRPC transport, e.g. to add metadata or count RPCs. */
  interceptors?: Interceptor[];
  /**
   * A transport to use instead of the client's own gRPC one; it carries its
   * own credentials. The fleet stream uses it too, so call close() before
   * the process should end.
   */
  transport?: Transport;
  /**
   * The fleet gate (default true): check each first attempt of a call that
   * names a provider against the fleet's assignments, kept up to date by a
   * background Coordinate stream that also reports this client's counts.
   * false: no gate, no stream, no counts.
   */
  fleetGate?: boolean;
  /** How long the gate keeps an assignment past its ttl when no refresh came (default 10000 ms). */
  fleetGraceMs?: number;
  /**
   * How long a call without a deadline may wait parked in the fleet gate
   * (default 120000 ms): a first attempt (or a retry) that meets an open
   * breaker or a pace waits in the client, without an attempt or an RPC,
   * until the fleet admits it or its deadline can no longer be met. 0 turns
   * parking off: such a call stops (or falls back) at once.
   */
  parkLimitMs?: number;
  /**
   * The bearer token sent as `authorization: Bearer TOKEN` on every call
   * (a daemon started with --auth-tokens requires one); unset: $POLICYD_TOKEN;
   * "" sends none. In plaintext it goes only to a loopback address.
   */
  token?: string;
  /**
   * TLS to the daemon (1.2 or later), verified against the system roots
   * unless tlsCaFile says otherwise; unset: on when a CA or client
   * certificate is given (or the address is https://).
   */
  tls?: boolean;
  /** A PEM file of CA certificates to verify the daemon with; unset: $POLICYD_TLS_CA. */
  tlsCaFile?: string;
  /** PEM client certificate for mutual TLS; unset: $POLICYD_TLS_CERT (with tlsKeyFile, $POLICYD_TLS_KEY). */
  tlsCertFile?: string;
  /** PEM private key of tlsCertFile; unset: $POLICYD_TLS_KEY. */
  tlsKeyFile?: string;
}

/** @internal A client's options with their defaults applied. */
export interface Settings {
  /** The address with "https://" when its scheme asked for TLS: what the transport is made from. */
  addressGiven: string;
  /** The daemon's host:port. */
  address: string;
  clientId: string;
  /** The profile of calls that name none ("": policyd's "default"). */
  profile: string;
  journal: boolean;
  agent: string;
  failOpen: FailOpenPolicy;
  clock: Clock;
  random: Random;
  logger: Logger;
  daemonTimeoutMs: number;
  fleetGate: boolean;
  fleetGraceMs: number;
  parkLimitMs: number | undefined;
  /** The fleet gate's time: a monotonic clock's ms, unless a clock is injected. */
  fleetNow: () => number;
}

/**
 * @internal settingsOf applies the defaults to a client's options. It throws
 * only for an address outside the grammar (parseAddress), naming where it
 * came from.
 */
export function settingsOf(options: ClientOptions): Settings {
  let addr;
  try {
    addr = parseAddress(options.address || process.env["POLICYD_ADDR"] || DEFAULT_ADDRESS);
  } catch (err) {
    throw new Error(`policyd: ${options.address ? "address" : "POLICYD_ADDR"}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const clock = options.clock ?? systemClock;
  return {
    addressGiven: (addr.tls ? "https://" : "") + addr.target,
    address: addr.target,
    clientId: clipLabel(options.clientId || newClientId()),
    profile: options.profile ?? "",
    journal: options.journal ?? false,
    agent: options.agent ?? (defaultAgent(process.argv[1] ?? "") || "node"),
    failOpen:
      options.failOpen instanceof FailOpenPolicy ? options.failOpen : new FailOpenPolicy(options.failOpen ?? {}),
    clock,
    random: options.random ?? Math.random,
    logger: options.logger ?? DEFAULT_LOGGER,
    daemonTimeoutMs:
      options.daemonTimeoutMs && options.daemonTimeoutMs > 0 ? options.daemonTimeoutMs : DEFAULT_DAEMON_TIMEOUT_MS,
    fleetGate: options.fleetGate !== false,
    parkLimitMs: options.parkLimitMs !== undefined && options.parkLimitMs >= 0 ? options.parkLimitMs : undefined,
    fleetGraceMs:
      options.fleetGraceMs !== undefined && options.fleetGraceMs >= 0 ? options.fleetGraceMs : GATE_GRACE_MS,
    // Assignments are timed by a monotonic clock, unless a clock is injected.
    fleetNow: options.clock ? () => clock.now() : () => performance.now(),
  };
}

/** A client id unique per client: host, pid and 8 random hex digits. */
function newClientId(): string {
  return `${hostname()}/${process.pid}/${randomBytes(4).toString("hex")}`;
}

/**
 * @internal deadlineOf is a call's deadline in ms since the epoch: the
 * earlier of start + timeoutMs and the absolute deadline; undefined: none.
 */
export function deadlineOf(o: CallOptions<unknown>, start: number): number | undefined {
  let deadlineMs: number | undefined;
  if (o.timeoutMs !== undefined && o.timeoutMs >= 0) deadlineMs = start + o.timeoutMs;
  if (o.deadline !== undefined) {
    const d = typeof o.deadline === "number" ? o.deadline : o.deadline.getTime();
    deadlineMs = deadlineMs === undefined ? d : Math.min(deadlineMs, d);
  }
  return deadlineMs;
}

/** @internal targetOf is what a call names: the fleet gate's key. */
export function targetOf(o: CallOptions<unknown>): Target {
  return {
    provider: o.provider ?? "",
    model: o.model ?? "",
    keyId: clipLabel(o.keyId ?? ""),
  };
}

/**
 * @internal gateCallOf is what the fleet gate needs of a call beyond its
 * target: its priority class and input tokens. It throws a TypeError naming
 * the option for a class other than "interactive" or "batch", and for
 * inputTokens that is not a number of at least 0.
 */
export function gateCallOf(o: CallOptions<unknown>): { cls: PriorityClass; inputTokens: number | undefined } {
  const cls = o.class ?? "interactive";
  if (cls !== "interactive" && cls !== "batch") {
    throw new TypeError(`policyd: class: ${JSON.stringify(cls)} is not "interactive" or "batch"`);
  }
  const n = o.inputTokens;
  if (n !== undefined && (typeof n !== "number" || !Number.isFinite(n) || n < 0)) {
    throw new TypeError(`policyd: inputTokens: ${String(n)} is not a number of tokens (0 or more)`);
  }
  return { cls, inputTokens: n };
}

/** @internal classifyOptionsOf is what a call asks of the classifier; undefined: policyd's defaults. */
export function classifyOptionsOf(o: CallOptions<unknown>): ClassifyOptions | undefined {
  if (!o.retryFetchErrors && o.continueInvalidStream === undefined) return undefined;
  const opts = create(ClassifyOptionsSchema, { retryFetchErrors: o.retryFetchErrors ?? false });
  if (o.continueInvalidStream !== undefined) opts.continueOnFailedApiCall = o.continueInvalidStream;
  return opts;
}
