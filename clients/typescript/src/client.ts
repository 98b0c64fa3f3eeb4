// Client: the retry loop an agent wraps around a call that may fail. Run
// the call; on failure map the error to a Failure, ask policyd (NextDelay),
// then wait (abortably, never past the deadline), stop with the original
// error and the decision's reason, or hand the fallback hint to the
// caller's fallback function. Journaled calls are recorded (journal.ts).

import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { basename } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  Code,
  type Client as ConnectClient,
  ConnectError,
  createClient as createConnectClient,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { bearerInterceptor, isUnauthenticated, PolicydAuthError, resolveSecurity } from "./auth.js";
import { type Clock, type Random, systemClock } from "./clock.js";
import { Coordinator, gateFirstAttempt, streamTransport, type Target } from "./coordinate.js";
import {
  type Classification,
  classificationFromProto,
  type Decision,
  decisionFromProto,
  durationOf,
  explain,
  type Safety,
  values,
} from "./decision.js";
import { type FailOpenOptions, FailOpenPolicy } from "./fail_open.js";
import { clipLabel, emptyFailure, type Failure, failureFromError, failureToProto } from "./failure.js";
import { GATE_GRACE_MS } from "./gate.js";
import { JournalService } from "./gen/policyd/v1/journal_pb.js";
import {
  type ClassifyOptions,
  ClassifyOptionsSchema,
  type Decision as PbDecision,
  PolicyService,
} from "./gen/policyd/v1/policy_pb.js";
import { HttpError } from "./http_error.js";
import { Journal } from "./journal.js";
import { PolicydError } from "./policyd_error.js";
import { JOURNAL_OFF, REFUSED, type RpcOptions, type RpcResult } from "./rpc.js";

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
  /** The daemon's host:port (or http://host:port); unset: $POLICYD_ADDR, else 127.0.0.1:7433. */
  address?: string;
  /** The profile of calls that name none; unset: policyd's "default" (LLM provider calls). */
  profile?: string;
  /** Journal every call (default false). A journaled call that fails at least once becomes a RetryContext. */
  journal?: boolean;
  /** Bounds each RPC to policyd (default 1000 ms); past it the client decides with its fail-open policy. */
  daemonTimeoutMs?: number;
  /** Where the client warns (once per outage) and logs decisions (debug); default: warnings to console.warn. */
  logger?: Logger;
  /** The agent named in journaled contexts; default the script's file name. */
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

/**
 * createClient returns a policyd client. It does not connect: a daemon that
 * is down (now or later) makes the client fail open, not fail. It throws
 * for a TLS file that cannot be read, or a token that would go in
 * plaintext beyond loopback.
 */
export function createClient(options: ClientOptions = {}): PolicydClient {
  return new PolicydClient(options);
}

/** @internal What the rest of the client needs from it. */
export interface ClientInternals {
  readonly clock: Clock;
  readonly logger: Logger;
  readonly daemonTimeoutMs: number;
  readonly journalService: ConnectClient<typeof JournalService>;
  rpc<R>(
    method: string,
    signal: AbortSignal | undefined,
    deadlineMs: number | undefined,
    call: (opts: RpcOptions) => Promise<R>,
  ): Promise<RpcResult<R>>;
  warnOnce(key: string, message: string, ...fields: unknown[]): void;
  track(p: Promise<void>): void;
}

/**
 * PolicydClient runs operations under policyd's retry policy. Make one per
 * process; it is safe to share between concurrent calls.
 */
export class PolicydClient {
  /** The daemon's address, host:port. */
  readonly address: string;
  /** The client id sent with every NextDelay (ClientOptions.clientId). */
  readonly clientId: string;
  readonly #profile: string;
  readonly #journal: boolean;
  readonly #agent: string;
  readonly #failOpen: FailOpenPolicy;
  readonly #random: Random;
  readonly #onDecision: ClientOptions["onDecision"];
  readonly #policy: ConnectClient<typeof PolicyService>;
  readonly #internals: ClientInternals;
  readonly #tokenSet: boolean;
  #degraded = false;
  readonly #warned = new Set<string>();
  readonly #pending = new Set<Promise<void>>();
  readonly #coordinator: Coordinator | undefined;

  constructor(options: ClientOptions = {}) {
    const address = (options.address || process.env["POLICYD_ADDR"] || DEFAULT_ADDRESS).trim();
    this.address = address.replace(/^https?:\/\//, "").replace(/\/+$/, "");
    this.clientId = clipLabel(options.clientId || newClientId());
    const explicit = options.token || options.tls || options.tlsCaFile || options.tlsCertFile || options.tlsKeyFile;
    if (options.transport && explicit) {
      throw new Error("policyd: give token and TLS options or a transport, not both (the transport carries its own)");
    }
    const sec = options.transport ? undefined : resolveSecurity(address, options);
    this.#tokenSet = Boolean(sec?.token);
    const transport =
      options.transport ??
      createGrpcTransport({
        baseUrl: sec!.baseUrl,
        ...(sec!.nodeOptions ? { nodeOptions: sec!.nodeOptions } : {}),
        interceptors: transportInterceptors(sec!.token, options),
      });
    this.#policy = createConnectClient(PolicyService, transport);
    const clock = options.clock ?? systemClock;
    this.#profile = options.profile ?? "";
    this.#journal = options.journal ?? false;
    this.#agent = options.agent ?? (process.argv[1] ? basename(process.argv[1]) : "node");
    this.#failOpen =
      options.failOpen instanceof FailOpenPolicy ? options.failOpen : new FailOpenPolicy(options.failOpen ?? {});
    this.#random = options.random ?? Math.random;
    this.#onDecision = options.onDecision;
    const logger = options.logger ?? DEFAULT_LOGGER;
    const daemonTimeoutMs =
      options.daemonTimeoutMs && options.daemonTimeoutMs > 0 ? options.daemonTimeoutMs : DEFAULT_DAEMON_TIMEOUT_MS;
    this.#internals = {
      clock,
      logger,
      daemonTimeoutMs,
      journalService: createConnectClient(JournalService, transport),
      rpc: (method, signal, deadlineMs, call) => this.#rpc(method, signal, deadlineMs, call),
      warnOnce: (key, message, ...fields) => this.#warnOnce(key, message, ...fields),
      track: (p) => {
        this.#pending.add(p);
        void p.finally(() => this.#pending.delete(p));
      },
    };
    if (options.fleetGate !== false) {
      // The stream's own connection, which never keeps Node running (a transport of the caller's is used as is).
      const own = sec && streamTransport(sec.baseUrl, sec.nodeOptions, transportInterceptors(sec.token, options));
      this.#coordinator = new Coordinator({
        transport: own ? own.transport : transport,
        ...(own ? { release: own.release } : {}),
        clientId: this.clientId,
        profile: this.#profile,
        // Assignments are timed by a monotonic clock, unless a clock is injected.
        now: options.clock ? () => clock.now() : () => performance.now(),
        random: this.#random,
        graceMs: options.fleetGraceMs !== undefined && options.fleetGraceMs >= 0 ? options.fleetGraceMs : GATE_GRACE_MS,
        closeTimeoutMs: daemonTimeoutMs,
        debug: (m) => logger.debug?.(m),
        warnOnce: (key, m) => this.#warnOnce(key, m),
      });
    }
  }

  /** The profile of calls that name none ("" means policyd's "default"). */
  get profile(): string {
    return this.#profile;
  }

  /**
   * call runs fn until it succeeds or policyd says to stop, and returns
   * what fn returned. After a failure it maps the error
   * (failureFromError), asks policyd's NextDelay — or, when policyd is
   * unreachable or slow, the fail-open policy — and then waits the delay
   * and tries again, stops, or calls options.fallback.
   *
   * It rejects with a PolicydError (the last attempt's error as `cause`,
   * the decision, its recovery action) when it stops; with signal.reason at
   * once when options.signal aborts (no RPC: there is nothing to decide);
   * with what the fallback function threw. On success it makes no RPC at
   * all, except to finish a journaled context that saw failures.
   */
  async call<T>(fn: (attempt: Attempt) => T | Promise<T>, options: CallOptions<T> = {}): Promise<T> {
    const it = this.#internals;
    const clock = it.clock;
    const callerSignal = options.signal;
    callerSignal?.throwIfAborted();
    const start = clock.now();
    let deadlineMs: number | undefined;
    if (options.timeoutMs !== undefined && options.timeoutMs >= 0) deadlineMs = start + options.timeoutMs;
    if (options.deadline !== undefined) {
      const d = typeof options.deadline === "number" ? options.deadline : options.deadline.getTime();
      deadlineMs = deadlineMs === undefined ? d : Math.min(deadlineMs, d);
    }
    const budget = new Budget(callerSignal, deadlineMs === undefined ? undefined : deadlineMs - clock.now());
    const signal = budget.signal;
    const profile = options.profile ?? this.#profile;
    const journal = new Journal(it, {
      on: options.contextId ? true : (options.journal ?? this.#journal),
      contextId: options.contextId ?? "",
      agent: options.agent ?? this.#agent,
      provider: options.provider ?? "",
      model: options.model ?? "",
      operation: options.operation ?? "",
      profile,
      labels: options.labels ?? {},
    });
    const classifyOptions = optionsOf(options);
    let lastError: unknown;
    let lastDecision: Decision | undefined;
    const coord = options.provider ? this.#coordinator : undefined;
    const target: Target = {
      provider: options.provider ?? "",
      model: options.model ?? "",
      keyId: clipLabel(options.keyId ?? ""),
    };
    try {
      if (coord) {
        const gated = await gateFirstAttempt(coord, {
          target,
          deadlineMs,
          clock,
          signal,
          callerSignal,
          fallback: options.fallback,
          operation: options.operation ?? "",
          onDecision: this.#onDecision,
        });
        if (gated) return gated.value;
      }
      for (let attempt = 1; ; attempt++) {
        if (attempt > 1) coord?.retry(target);
        const began = clock.now();
        let result: T;
        const attemptSignal = new AttemptSignal(signal, options.attemptTimeoutMs);
        try {
          const a: Attempt = { attempt, signal: attemptSignal.signal };
          if (attempt > 1) a.lastError = lastError;
          if (lastDecision) a.lastDecision = lastDecision;
          result = await fn(a);
          attemptSignal.dispose();
          coord?.outcome(target, true);
        } catch (thrown) {
          attemptSignal.dispose();
          let err = thrown;
          if (typeof Response !== "undefined" && err instanceof Response) {
            err = await HttpError.fromResponse(err, options.method ? { method: options.method } : {});
          }
          lastError = err;
          const took = clock.now() - began;
          const failure = this.#failure(err, options);

          if (callerSignal?.aborted) {
            // The caller aborted while the attempt ran: nothing to decide.
            journal.giveUp(failure, attempt, took, classifyOptions, "ABANDONED", signal);
            throw callerSignal.reason;
          }
          coord?.outcome(target, false);
          if (budget.expired) {
            journal.giveUp(failure, attempt, took, classifyOptions, "FAILED", signal);
            throw new PolicydError({
              cause: err,
              attempts: attempt,
              decision: deadlineDecision(attempt),
              failure,
              contextId: journal.contextId,
            });
          }

          let decision: Decision | undefined;
          try {
            decision = await this.#decide(
              failure,
              attempt,
              took,
              profile,
              options,
              classifyOptions,
              journal,
              start,
              deadlineMs,
              signal,
            );
          } catch (authErr) {
            // A refused token is a configuration error: failing open would hide it.
            if (authErr instanceof PolicydAuthError) authErr.error = err;
            throw authErr;
          }
          if (callerSignal?.aborted) {
            journal.giveUp(failure, attempt, took, classifyOptions, "ABANDONED", signal);
            throw callerSignal.reason;
          }
          if (!decision || budget.expired) {
            journal.giveUp(failure, attempt, took, classifyOptions, "FAILED", signal);
            throw new PolicydError({
              cause: err,
              attempts: attempt,
              decision: deadlineDecision(attempt),
              failure,
              contextId: journal.contextId,
            });
          }
          lastDecision = decision;
          if (decision.failOpen) coord?.failedLocally(target);
          it.logger.debug?.(
            `policyd: attempt ${attempt} failed: ${decision.action}${decision.action === "RETRY" ? ` after ${decision.delayMs}ms` : ""}: ${explain(decision)}`,
          );
          this.#onDecision?.({ attempt, error: err, decision });

          if (decision.action === "RETRY") {
            try {
              await clock.sleep(decision.delayMs, signal);
            } catch {
              void journal.finish(callerSignal?.aborted ? "ABANDONED" : "FAILED", signal);
              if (callerSignal?.aborted) throw callerSignal.reason;
              throw new PolicydError({
                cause: err,
                attempts: attempt,
                decision: deadlineDecision(attempt),
                failure,
                contextId: journal.contextId,
              });
            }
            continue;
          }
          if (decision.action === "FALL_BACK" && options.fallback) {
            let value: T;
            try {
              value = await options.fallback({
                kind: decision.fallback.kind,
                reason: decision.fallback.reason || decision.stopText,
                provider: decision.fallback.provider,
                model: decision.fallback.model,
                error: err,
                attempt,
                decision,
                signal,
              });
            } catch (fbErr) {
              await journal.finish("FAILED", signal);
              throw fbErr;
            }
            await journal.finish("RESOLVED", signal);
            return value;
          }
          await journal.finish("FAILED", signal);
          throw new PolicydError({ cause: err, attempts: attempt, decision, failure, contextId: journal.contextId });
        }
        await journal.finish("RESOLVED", signal);
        return result;
      }
    } finally {
      budget.dispose();
    }
  }

  /**
   * classify asks policyd what err (an error, or a Failure) is, under
   * profile (unset: the client's), without deciding or journaling. Unlike
   * call it does not fail open: an unreachable policyd rejects.
   */
  async classify(
    err: unknown,
    options: { profile?: string; signal?: AbortSignal; retryFetchErrors?: boolean } = {},
  ): Promise<Classification> {
    const failure = isFailure(err) ? err : failureFromError(err);
    const req: { failure: ReturnType<typeof failureToProto>; profile: string; options?: ClassifyOptions } = {
      failure: failureToProto(failure),
      profile: options.profile ?? this.#profile,
    };
    if (options.retryFetchErrors) req.options = create(ClassifyOptionsSchema, { retryFetchErrors: true });
    const callOpts: { timeoutMs: number; signal?: AbortSignal } = { timeoutMs: this.#internals.daemonTimeoutMs };
    if (options.signal) callOpts.signal = options.signal;
    try {
      const res = await this.#policy.classify(req, callOpts);
      return classificationFromProto(res.classification);
    } catch (err) {
      if (isUnauthenticated(err)) throw new PolicydAuthError(this.address, "Classify", err, this.#tokenSet);
      throw err;
    }
  }

  /**
   * observeRateLimits hands over the headers of a successful response to
   * the target a call names (provider, model, keyId): the x-ratelimit-* and
   * anthropic-ratelimit-* ones (at most 16, values up to 64 bytes) go to
   * policyd with the target's next fleet report. headers: a Headers, a
   * Map, pairs or a plain object. It makes no RPC.
   */
  observeRateLimits(call: Pick<CallOptions<unknown>, "provider" | "model" | "keyId">, headers: unknown): void {
    if (!call.provider) return;
    this.#coordinator?.observeRateLimits(
      { provider: call.provider, model: call.model ?? "", keyId: clipLabel(call.keyId ?? "") },
      headers,
    );
  }

  /**
   * close ends the fleet stream (after a last report, at most the daemon
   * timeout) and waits for journal records still being sent in the
   * background (after an aborted call), each bounded by the daemon timeout.
   */
  async close(): Promise<void> {
    await this.#coordinator?.close();
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }

  #failure(err: unknown, options: CallOptions<unknown>): Failure {
    const f = failureFromError(err);
    f.provider = options.provider ?? "";
    f.model = options.model ?? "";
    f.keyId = options.keyId ?? "";
    f.operation = options.operation ?? "";
    if (options.method) f.method = options.method.toUpperCase();
    return f;
  }

  /**
   * decide asks policyd, or the fail-open policy when policyd cannot
   * answer; undefined when the signal ended first.
   */
  async #decide(
    failure: Failure,
    attempt: number,
    took: number,
    profile: string,
    options: CallOptions<unknown>,
    classifyOptions: ClassifyOptions | undefined,
    journal: Journal,
    start: number,
    deadlineMs: number | undefined,
    signal: AbortSignal,
  ): Promise<Decision | undefined> {
    const clock = this.#internals.clock;
    // When BeginContext got no answer, policyd is down or hung: decide at
    // once rather than wait a second daemon timeout for NextDelay.
    const reachable = await journal.begin(signal, deadlineMs);
    if (signal.aborted) return undefined;
    const now = clock.now();
    const req = {
      failure: failureToProto(failure),
      attempt,
      profile,
      elapsed: durationOf(now - start),
      safety: values.safety(options.safety ?? ""),
      contextId: journal.id,
      clientId: this.clientId,
      ...(classifyOptions ? { options: classifyOptions } : {}),
      ...(deadlineMs !== undefined ? { deadline: timestampFromMs(deadlineMs) } : {}),
    };
    const res: RpcResult<{ decision?: PbDecision | undefined }> = reachable
      ? await this.#rpc("NextDelay", signal, deadlineMs, (o) => this.#policy.nextDelay(req, o))
      : { ok: false, code: undefined };
    if (signal.aborted) return undefined;
    if (!res.ok && res.error && isUnauthenticated(res.error)) {
      throw new PolicydAuthError(this.address, "NextDelay", res.error, this.#tokenSet);
    }
    let d: Decision;
    if (res.ok) {
      d = decisionFromProto(res.value.decision);
    } else {
      d = this.#failOpen.decide(failure, {
        attempt,
        nowMs: now,
        deadlineMs,
        safety: options.safety,
        random: this.#random,
      });
    }
    // Whoever decided, never wait past the caller's deadline.
    if (d.action === "RETRY" && deadlineMs !== undefined && clock.now() + d.delayMs > deadlineMs) {
      d.action = "STOP";
      d.stopReason = "DEADLINE";
      d.stopText = `waiting ${d.delayMs}ms would pass the deadline`;
      d.delayMs = 0;
    }
    if (journal.id && !d.journaled) journal.record(failure, attempt, took, classifyOptions, d);
    return d;
  }

  /**
   * rpc calls policyd, bounded by the daemon timeout and the caller's
   * deadline; undefined when it fails. A failure that means policyd is
   * unreachable or slow marks the client degraded and warns once per
   * outage; a request policyd refused warns once per method and code.
   */
  async #rpc<R>(
    method: string,
    signal: AbortSignal | undefined,
    deadlineMs: number | undefined,
    call: (opts: RpcOptions) => Promise<R>,
  ): Promise<RpcResult<R>> {
    const it = this.#internals;
    let timeoutMs = it.daemonTimeoutMs;
    if (deadlineMs !== undefined) timeoutMs = Math.min(timeoutMs, deadlineMs - it.clock.now());
    if (timeoutMs <= 0 || signal?.aborted) return { ok: false, code: undefined };
    try {
      const res = await call(signal ? { signal, timeoutMs } : { timeoutMs });
      if (this.#degraded) {
        this.#degraded = false;
        it.logger.info?.(`policyd: daemon at ${this.address} reachable again; decisions come from policyd`);
      }
      return { ok: true, value: res };
    } catch (err) {
      if (signal?.aborted) return { ok: false, code: undefined }; // the caller ended it: not the daemon's fault
      const ce = ConnectError.from(err);
      if (JOURNAL_OFF.has(ce.code) && method !== "NextDelay") {
        return { ok: false, code: ce.code }; // the journal is off: journal.ts warns once
      }
      if (ce.code === Code.Unauthenticated) {
        // NextDelay's refusal rejects the call (see decide), and BeginContext's
        // is followed by NextDelay's; the journal's others only warn.
        if (method !== "NextDelay" && method !== "BeginContext") {
          this.#warnOnce(
            `${method}/${ce.code}`,
            new PolicydAuthError(this.address, method, ce, this.#tokenSet).message,
          );
        }
      } else if (REFUSED.has(ce.code)) {
        this.#warnOnce(
          `${method}/${ce.code}`,
          `policyd: the daemon refused a ${method} request (${Code[ce.code]}: ${ce.rawMessage}); deciding with the built-in fail-open policy where a decision was needed`,
        );
      } else if (!this.#degraded) {
        this.#degraded = true;
        it.logger.warn(
          `policyd: daemon at ${this.address} unreachable or slow (${method}: ${Code[ce.code]}: ${ce.rawMessage}); ` +
            `deciding with the built-in fail-open policy (retries connection errors, 429 and 5xx) until it answers again`,
        );
      }
      return { ok: false, code: ce.code, error: ce };
    }
  }

  #warnOnce(key: string, message: string, ...fields: unknown[]): void {
    if (this.#warned.has(key)) return;
    this.#warned.add(key);
    this.#internals.logger.warn(message, ...fields);
  }
}

/** The interceptors of the client's own transports: the bearer token's, then the caller's. */
function transportInterceptors(token: string, options: ClientOptions): Interceptor[] {
  return [...(token ? [bearerInterceptor(token)] : []), ...(options.interceptors ?? [])];
}

/** A client id unique per client: host, pid and 8 random hex digits. */
function newClientId(): string {
  return `${hostname()}/${process.pid}/${randomBytes(4).toString("hex")}`;
}

function optionsOf(o: CallOptions<unknown>): ClassifyOptions | undefined {
  if (!o.retryFetchErrors && o.continueInvalidStream === undefined) return undefined;
  const opts = create(ClassifyOptionsSchema, { retryFetchErrors: o.retryFetchErrors ?? false });
  if (o.continueInvalidStream !== undefined) opts.continueOnFailedApiCall = o.continueInvalidStream;
  return opts;
}

function isFailure(v: unknown): v is Failure {
  if (typeof v !== "object" || v === null || v instanceof Error) return false;
  const keys = Object.keys(emptyFailure());
  return keys.every((k) => k in v);
}

/** The client's own decision when the call's deadline passed during an attempt or a wait. */
function deadlineDecision(attempt: number): Decision {
  return {
    action: "STOP",
    delayMs: 0,
    classification: {
      failureType: "TIMEOUT",
      retryable: false,
      rule: "client.deadline",
      reason: "the call's deadline passed",
      recoveryAction: "Give the call a longer deadline (timeoutMs), or make each attempt faster.",
      retryAfterSource: "",
      continuationPrompt: "",
    },
    attemptsLeft: 0,
    stopReason: "DEADLINE",
    stopText: `the call's deadline passed during attempt ${attempt}`,
    fallback: { kind: "", reason: "", provider: "", model: "" },
    strategy: { name: "", summary: "" },
    journaled: false,
    failOpen: false,
  };
}

/**
 * AttemptSignal is one attempt's signal: the call's, and the attempt's own
 * timeout when there is one. It holds its parts strongly, so that none is
 * collected before it fires.
 */
class AttemptSignal {
  readonly #controller: AbortController | undefined;
  readonly #parent: AbortSignal;
  readonly #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #onAbort = () => this.#controller?.abort(this.#parent.reason);

  constructor(parent: AbortSignal, timeoutMs: number | undefined) {
    this.#parent = parent;
    if (timeoutMs === undefined || timeoutMs <= 0 || parent.aborted) return;
    this.#controller = new AbortController();
    parent.addEventListener("abort", this.#onAbort, { once: true });
    const controller = this.#controller;
    this.#timer = setTimeout(
      () => controller.abort(new DOMException(`the attempt timed out after ${timeoutMs}ms`, "TimeoutError")),
      timeoutMs,
    );
  }

  get signal(): AbortSignal {
    return this.#controller?.signal ?? this.#parent;
  }

  dispose(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#parent.removeEventListener("abort", this.#onAbort);
  }
}

/**
 * Budget is the call's signal: it aborts when the caller's signal aborts
 * (with its reason) or when the deadline passes (with a TimeoutError).
 */
class Budget {
  readonly #controller = new AbortController();
  readonly #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #caller: AbortSignal | undefined;
  readonly #onAbort = () => this.#controller.abort(this.#caller?.reason);
  #expired = false;

  constructor(caller: AbortSignal | undefined, remainingMs: number | undefined) {
    this.#caller = caller;
    if (caller) {
      if (caller.aborted) this.#controller.abort(caller.reason);
      else caller.addEventListener("abort", this.#onAbort, { once: true });
    }
    if (remainingMs !== undefined) {
      const fire = () => {
        this.#expired = true;
        this.#controller.abort(new DOMException("the call's deadline passed", "TimeoutError"));
      };
      if (remainingMs <= 0) fire();
      else this.#timer = setTimeout(fire, remainingMs);
    }
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Whether the deadline (not the caller) ended the call. */
  get expired(): boolean {
    return this.#expired;
  }

  dispose(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#caller?.removeEventListener("abort", this.#onAbort);
  }
}
