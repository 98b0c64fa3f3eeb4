// The client's connection to policyd: the transports it opens (TLS, the
// bearer token, the caller's interceptors; the fleet stream's own
// connection), and Daemon, through which every RPC goes: bounded by the
// daemon timeout and the call's deadline, it turns the daemon's failures
// into "decide with the fail-open policy" and warns once per outage. It
// exists so that the retry loop (run.ts) and the journal (journal.ts) see
// one object, ClientInternals, and neither knows how the daemon is reached.

import {
  Code,
  type Client as ConnectClient,
  ConnectError,
  createClient as createConnectClient,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { bearerInterceptor, PolicydAuthError, PolicydOptionsError, resolveSecurity } from "./auth.js";
import type { Clock } from "./clock.js";
import { streamTransport } from "./stream.js";
import { JournalService } from "./gen/policyd/v1/journal_pb.js";
import { PolicyService } from "./gen/policyd/v1/policy_pb.js";
import type { ClientOptions, Logger } from "./options.js";
import { callerMistake, JOURNAL_OFF, REFUSED, type RpcOptions, type RpcResult } from "./rpc.js";

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
  refusal(method: string, err: unknown): PolicydAuthError | PolicydOptionsError | undefined;
  /** Aborts when the client is closed. */
  readonly closing: AbortSignal;
}

/** @internal The transports a client talks to policyd over. */
export interface Transports {
  /** The unary RPCs' transport: the caller's, or the client's own gRPC one. */
  transport: Transport;
  /**
   * The fleet stream's own connection, which never keeps Node running;
   * undefined when the caller gave a transport (the stream uses it as is)
   * or the stream is not wanted.
   */
  stream: { transport: Transport; release: () => void } | undefined;
  /** Whether a bearer token is sent, for PolicydAuthError's advice. */
  tokenSet: boolean;
}

/**
 * @internal openTransports makes the client's transports (it does not
 * connect). It throws when both a transport and token or TLS options are
 * given, for a TLS file that cannot be read, or a token that would go in
 * plaintext beyond loopback. address is the address as given: its scheme
 * asks for TLS or plaintext.
 */
export function openTransports(address: string, options: ClientOptions, stream: boolean): Transports {
  const explicit = options.token || options.tls || options.tlsCaFile || options.tlsCertFile || options.tlsKeyFile;
  if (options.transport && explicit) {
    throw new Error("policyd: give token and TLS options or a transport, not both (the transport carries its own)");
  }
  if (options.transport) return { transport: options.transport, stream: undefined, tokenSet: false };
  const sec = resolveSecurity(address, options);
  const transport = createGrpcTransport({
    baseUrl: sec.baseUrl,
    ...(sec.nodeOptions ? { nodeOptions: sec.nodeOptions } : {}),
    interceptors: transportInterceptors(sec.token, options),
  });
  return {
    transport,
    stream: stream
      ? streamTransport(sec.baseUrl, sec.nodeOptions, transportInterceptors(sec.token, options))
      : undefined,
    tokenSet: Boolean(sec.token),
  };
}

/** The interceptors of the client's own transports: the bearer token's, then the caller's. */
function transportInterceptors(token: string, options: ClientOptions): Interceptor[] {
  return [...(token ? [bearerInterceptor(token)] : []), ...(options.interceptors ?? [])];
}

/**
 * @internal Daemon is a client's link to policyd: its services, the
 * bounded RPC, the degraded state and its warnings, and the journal
 * records still being sent in the background.
 */
export class Daemon implements ClientInternals {
  /** The daemon's address, host:port, for messages. */
  readonly address: string;
  /** Whether a bearer token is sent. */
  readonly tokenSet: boolean;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly daemonTimeoutMs: number;
  readonly policy: ConnectClient<typeof PolicyService>;
  readonly journalService: ConnectClient<typeof JournalService>;
  #degraded = false;
  readonly #warned = new Set<string>();
  readonly #pending = new Set<Promise<void>>();
  readonly #closing = new AbortController();

  constructor(address: string, t: Transports, o: { clock: Clock; logger: Logger; daemonTimeoutMs: number }) {
    this.address = address;
    this.tokenSet = t.tokenSet;
    this.clock = o.clock;
    this.logger = o.logger;
    this.daemonTimeoutMs = o.daemonTimeoutMs;
    this.policy = createConnectClient(PolicyService, t.transport);
    this.journalService = createConnectClient(JournalService, t.transport);
  }

  /** authError is the error that says policyd refused the client's credentials for method. */
  authError(method: string, err: ConnectError): PolicydAuthError {
    return new PolicydAuthError(this.address, method, err, this.tokenSet);
  }

  /**
   * refusal is the configuration error in policyd's answer to method
   * (callerMistake): a PolicydAuthError or a PolicydOptionsError; undefined
   * for any other answer.
   */
  refusal(method: string, err: unknown): PolicydAuthError | PolicydOptionsError | undefined {
    if (!(err instanceof ConnectError) || !callerMistake(err.code, err.rawMessage)) return undefined;
    if (err.code === Code.Unauthenticated) return this.authError(method, err);
    return new PolicydOptionsError(this.address, method, err);
  }

  /** closing aborts when the client is closed: background retries stop. */
  get closing(): AbortSignal {
    return this.#closing.signal;
  }

  /** close stops what waits in the background to try again (see closing). */
  close(): void {
    this.#closing.abort();
  }

  /**
   * rpc calls policyd, bounded by the daemon timeout and the caller's
   * deadline; undefined when it fails. A failure that means policyd is
   * unreachable or slow marks the client degraded and warns once per
   * outage; a request policyd refused warns once per method and code.
   */
  async rpc<R>(
    method: string,
    signal: AbortSignal | undefined,
    deadlineMs: number | undefined,
    call: (opts: RpcOptions) => Promise<R>,
  ): Promise<RpcResult<R>> {
    let timeoutMs = this.daemonTimeoutMs;
    if (deadlineMs !== undefined) timeoutMs = Math.min(timeoutMs, deadlineMs - this.clock.now());
    if (timeoutMs <= 0 || signal?.aborted) return { ok: false, code: undefined };
    try {
      const res = await call(signal ? { signal, timeoutMs } : { timeoutMs });
      if (this.#degraded) {
        this.#degraded = false;
        this.logger.info?.(`policyd: daemon at ${this.address} reachable again; decisions come from policyd`);
      }
      return { ok: true, value: res };
    } catch (err) {
      if (signal?.aborted) return { ok: false, code: undefined }; // the caller ended it: not the daemon's fault
      const ce = ConnectError.from(err);
      if (JOURNAL_OFF.has(ce.code) && method !== "NextDelay") {
        return { ok: false, code: ce.code }; // the journal is off: journal.ts warns once
      }
      if (callerMistake(ce.code, ce.rawMessage)) {
        // NextDelay's and BeginContext's refusals reject the call (see
        // run.ts, decide); the journal's others only warn.
        if (method !== "NextDelay" && method !== "BeginContext") {
          this.warnOnce(`${method}/${ce.code}`, this.refusal(method, ce)?.message ?? ce.message);
        }
      } else if (REFUSED.has(ce.code)) {
        this.warnOnce(
          `${method}/${ce.code}`,
          `policyd: the daemon refused a ${method} request (${Code[ce.code]}: ${ce.rawMessage}); deciding with the built-in fail-open policy where a decision was needed`,
        );
      } else if (!this.#degraded) {
        this.#degraded = true;
        this.logger.warn(
          `policyd: daemon at ${this.address} unreachable or slow (${method}: ${Code[ce.code]}: ${ce.rawMessage}); ` +
            `deciding with the built-in fail-open policy (retries connection errors, 429 and 5xx) until it answers again`,
        );
      }
      return { ok: false, code: ce.code, error: ce };
    }
  }

  warnOnce(key: string, message: string, ...fields: unknown[]): void {
    if (this.#warned.has(key)) return;
    this.#warned.add(key);
    this.logger.warn(message, ...fields);
  }

  /** track keeps p (journal records sent in the background) until it settles, for drain. */
  track(p: Promise<void>): void {
    this.#pending.add(p);
    void p.finally(() => this.#pending.delete(p));
  }

  /** drain waits for what track keeps, including what is tracked meanwhile. */
  async drain(): Promise<void> {
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }
}
