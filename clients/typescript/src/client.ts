// PolicydClient: the client's public class, the retry loop an agent wraps
// around a call that may fail. It wires the parts together and keeps the
// public methods thin: options.ts reads the options and holds the public
// option types, transport.ts opens the connection and bounds every RPC,
// coordinate.ts runs the fleet gate (its table and stream), and run.ts is
// the loop of one call (run the call; on failure ask policyd, then wait,
// stop or fall back).

import { create } from "@bufbuild/protobuf";
import { Coordinator } from "./coordinate.js";
import { type Classification, classificationFromProto } from "./decision.js";
import { clipLabel, emptyFailure, type Failure, failureFromError, failureToProto } from "./failure.js";
import { fetchThrough, type FetchOptions } from "./fetch.js";
import { type ClassifyOptions, ClassifyOptionsSchema } from "./gen/policyd/v1/policy_pb.js";
import { type Attempt, type CallOptions, type ClientOptions, type Settings, settingsOf } from "./options.js";
import { run, type RunContext } from "./run.js";
import { Daemon, openTransports } from "./transport.js";

/**
 * createClient returns a policyd client. It does not connect: a daemon that
 * is down (now or later) makes the client fail open, not fail. It throws
 * for a TLS file that cannot be read, or a token that would go in
 * plaintext beyond loopback.
 */
export function createClient(options: ClientOptions = {}): PolicydClient {
  return new PolicydClient(options);
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
  readonly #settings: Settings;
  readonly #daemon: Daemon;
  readonly #coordinator: Coordinator | undefined;
  readonly #run: RunContext;

  constructor(options: ClientOptions = {}) {
    const s = settingsOf(options);
    this.address = s.address;
    this.clientId = s.clientId;
    const transports = openTransports(s.addressGiven, options, s.fleetGate);
    const daemon = new Daemon(s.address, transports, s);
    this.#settings = s;
    this.#daemon = daemon;
    if (s.fleetGate) {
      const own = transports.stream;
      this.#coordinator = new Coordinator({
        transport: own ? own.transport : transports.transport,
        ...(own ? { release: own.release } : {}),
        clientId: s.clientId,
        profile: s.profile,
        now: s.fleetNow,
        random: s.random,
        graceMs: s.fleetGraceMs,
        parkLimitMs: s.parkLimitMs,
        closeTimeoutMs: s.daemonTimeoutMs,
        debug: (m) => s.logger.debug?.(m),
        warnOnce: (key, m) => daemon.warnOnce(key, m),
      });
    }
    this.#run = { settings: s, daemon, coordinator: this.#coordinator, onDecision: options.onDecision };
  }

  /** The profile of calls that name none ("" means policyd's "default"). */
  get profile(): string {
    return this.#settings.profile;
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
    return run(this.#run, fn, options);
  }

  /**
   * fetch returns a function with fetch's signature that sends every
   * request as call runs an operation (docs/clients.md, "The transport"):
   * `new OpenAI({ fetch: client.fetch({ provider: "openai" }), maxRetries: 0 })`.
   * A success passes through untouched, streams included, with no RPC; a
   * failure status or a connection error is decided as call decides it;
   * when policyd stops, the last response is returned as it came, so that
   * the SDK raises its own error. The fleet gate's stop (nothing was sent)
   * rejects with a PolicydError, as call does. It throws a TypeError for
   * a class that is neither "interactive" nor "batch".
   */
  fetch(options: FetchOptions = {}): typeof globalThis.fetch {
    return fetchThrough(this.#run, options);
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
      profile: options.profile ?? this.#settings.profile,
    };
    if (options.retryFetchErrors) req.options = create(ClassifyOptionsSchema, { retryFetchErrors: true });
    const callOpts: { timeoutMs: number; signal?: AbortSignal } = { timeoutMs: this.#daemon.daemonTimeoutMs };
    if (options.signal) callOpts.signal = options.signal;
    try {
      const res = await this.#daemon.policy.classify(req, callOpts);
      return classificationFromProto(res.classification);
    } catch (err) {
      throw this.#daemon.refusal("Classify", err) ?? err;
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
   * background (after an aborted call), each bounded by the daemon timeout;
   * retries waiting for policyd to come back are dropped.
   */
  async close(): Promise<void> {
    await this.#coordinator?.close();
    this.#daemon.close(); // contexts still waiting for policyd to come back are left to its --abandon-after
    await this.#daemon.drain();
  }
}

function isFailure(v: unknown): v is Failure {
  if (typeof v !== "object" || v === null || v instanceof Error) return false;
  const keys = Object.keys(emptyFailure());
  return keys.every((k) => k in v);
}
