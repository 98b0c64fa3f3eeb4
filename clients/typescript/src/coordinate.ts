// Coordinator: the client's side of fleet memory's Coordinate stream
// (docs/clients.md, "The fleet gate"): the gate table (one Gate per target:
// provider, model, key id) with the counts not yet reported, and the one
// background stream per client that reports them and applies the
// assignments: opened at the first gated call, a report about every second,
// reopened with backoff after it breaks (at once when a call to policyd
// gets through), given up when the daemon runs without fleet memory. The
// fleet side's other parts: the gate (gate.ts), the texts the caller sees
// (texts.ts), the stream's I/O (stream.ts), and a call's passage through
// the gate (first_attempt.ts). It never keeps Node running.

import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient as createConnectClient, type Transport } from "@connectrpc/connect";
import type { Random } from "./clock.js";
import { type Decision, durationMs, durationOf, type FailureType, names } from "./decision.js";
import { headersOf } from "./failure.js";
import { CallUsage } from "./bucket_usage.js";
import { Gate, type GateAssignment, type GateVerdict, type Parked, type PriorityClass, type Target } from "./gate.js";
import { FLEET_LIMITS } from "./limits.js";
import {
  type Assignment,
  type BucketUsageSchema,
  type CoordinateRequestSchema,
  type CoordinateResponse,
  FleetService,
} from "./gen/policyd/v1/fleet_pb.js";
import { pause, waitFor } from "./stream.js";
import { gateDecision, targetName } from "./texts.js";

/** The failures decided locally that a report counts: the types the daemon's breakers count. */
export const BREAKER_COUNTED: ReadonlySet<FailureType> = new Set<FailureType>([
  "OVERLOADED",
  "SERVER_ERROR",
  "TIMEOUT",
  "CONNECTION_ERROR",
]);

/** @internal What the coordinator needs from its client. */
export interface CoordinatorDeps {
  transport: Transport;
  clientId: string;
  profile: string;
  /** Milliseconds of a monotonic clock (the gate's time). */
  now: () => number;
  /** The gate's draws (the client's random source). */
  random: Random;
  graceMs: number;
  /** How long a call without a deadline may park (undefined: PARK_LIMIT_MS; 0: parking off). */
  parkLimitMs?: number | undefined;
  /** Bounds the wait for the daemon to end the stream at close. */
  closeTimeoutMs: number;
  debug: (message: string) => void;
  warnOnce: (key: string, message: string) => void;
  /** Releases the stream's own connection, if it has one. */
  release?: () => void;
}

/** A gate's answer, and the decision a PolicydError or a fallback hint carries when it did not admit. */
export interface Gated {
  verdict: GateVerdict;
  decision(v: GateVerdict): Decision;
}

// The limits and timing of clients/testdata/limits.json (limits.ts).
const { protocol: P, client: C } = FLEET_LIMITS;
const REPORT_EVERY_MS = C.reportIntervalMs;
const FIRST_ANSWER_WAIT_MS = C.firstAssignmentWaitMs;
const REPORT_JITTER = C.reportJitter;
const MAX_USAGES = P.usagesPerMessage;
const MAX_ELAPSED_MS = P.elapsedMaxMs;
const MAX_COUNT = P.countMax; // per count and report; the rest waits for the next
const BACKOFF_FIRST_MS = C.reconnectInitialMs;
const BACKOFF_MAX_MS = C.reconnectMaxMs;
// The table: at most this many targets (more are not gated); one unused this
// long with nothing to report is forgotten.
const MAX_TARGETS = P.targetsPerStream;
const FORGET_AFTER_MS = 10 * 60_000;
const RATE_LIMIT_PREFIXES = P.rateLimitHeaderPrefixes;
const MAX_RATE_LIMIT_HEADERS = P.rateLimitHeadersMax;
const MAX_RATE_LIMIT_VALUE_BYTES = P.rateLimitValueBytesMax;
// A target field longer than the daemon accepts is not gated.
const MAX_FIELD_BYTES = P.targetFieldBytesMax;
const MAX_KEY_ID_BYTES = P.keyIdBytesMax;

/** One target's row: its gate and what has not been reported yet. */
interface Entry {
  target: Target;
  gate: Gate;
  admitted: number;
  shed: number;
  succeeded: number;
  failed: number;
  retries: number;
  /** Token estimates, the batch class's counts, calls in flight. */
  usage: CallUsage;
  headers: Record<string, string> | undefined;
  /** The target must be (re)subscribed: a new stream, or a use after an abandon. */
  subscribe: boolean;
  reportedAt: number;
  usedAt: number;
  /**
   * Until the target's first assignment (or the stream's end): resolves
   * when it comes; windowEnd (performance.now) ends the first calls' wait.
   */
  firstAnswer: { promise: Promise<void>; resolve: () => void; windowEnd?: number } | undefined;
  /** Resolved at the target's next assignment (or abandon): parked calls check again then. */
  parkWake: { promise: Promise<void>; resolve: () => void } | undefined;
}

type Usage = MessageInitShape<typeof BucketUsageSchema>;
type Request = MessageInitShape<typeof CoordinateRequestSchema>;

/** @internal The gate table and the Coordinate stream of one client. */
export class Coordinator {
  readonly #d: CoordinatorDeps;
  readonly #entries = new Map<string, Entry>();
  /** The stream loop, once started. */
  #loop: Promise<void> | undefined;
  /** The daemon runs without fleet memory (or without the stream): the gate admits everything. */
  #off = false;
  #closed = false;
  /** Aborted by close: ends the pauses between streams and reports. */
  readonly #closing = new AbortController();
  /** The running stream's controller, and whether the daemon answered on it. */
  #stream: AbortController | undefined;
  #heard = false;
  /** The stream is down, between a break and the next try: first calls do not wait. */
  #down = false;
  /** Ends the wait for the next report: send one now. */
  #wake: AbortController | undefined;
  #flushWanted = false;
  /** Ends the pause before the stream reopens: policyd answered a call. */
  #reconnect: AbortController | undefined;

  constructor(deps: CoordinatorDeps) {
    this.#d = deps;
  }

  /** Whether the daemon said it has no fleet memory (the stream is given up). */
  get off(): boolean {
    return this.#off;
  }

  /**
   * firstAnswer says whether a first attempt to target should wait for the
   * target's first assignment, and how long at most: at the target's first
   * call (and calls within 100 ms of it), while the stream is up or being
   * opened. It opens the stream, and sends the report that subscribes the
   * target at once.
   */
  firstAnswer(target: Target): { answered: Promise<void>; waitMs: number } | undefined {
    const e = this.#entry(target);
    if (!e) return undefined;
    this.#start();
    const first = e.firstAnswer;
    if (!first) return undefined;
    const now = performance.now();
    if (this.#down || this.#off || this.#closed) {
      first.windowEnd ??= now; // the first call went without waiting: later ones do not wait either
      return undefined;
    }
    if (first.windowEnd === undefined) {
      first.windowEnd = now + FIRST_ANSWER_WAIT_MS;
      this.#flush();
    }
    const waitMs = first.windowEnd - now;
    return waitMs > 0 ? { answered: first.promise, waitMs } : undefined;
  }

  /**
   * check gates a first attempt to target: remainingMs is the time left
   * before the caller's deadline (undefined: none); call, its priority
   * class and input-token estimate. It counts the attempt as admitted or
   * shed and opens the stream at the first use.
   */
  check(
    target: Target,
    remainingMs: number | undefined,
    canFallBack: boolean,
    call: { cls?: PriorityClass | undefined; inputTokens?: number | undefined } = {},
  ): Gated {
    const e = this.#entry(target);
    if (!e) {
      const verdict: GateVerdict = { action: "admit", waitMs: 0, probe: false, stopReason: "", reason: "" };
      return { verdict, decision: (v) => gateDecision(v, target, undefined, 0) };
    }
    const now = this.#d.now();
    e.usedAt = now;
    const a = e.gate.assignment;
    const verdict = e.gate.check(now, remainingMs, canFallBack, this.#d.random, this.#d.parkLimitMs, call.cls);
    e.usage.first(call.inputTokens);
    if (verdict.action === "admit" || verdict.action === "wait") e.admitted++;
    else if (verdict.action !== "park") e.shed++;
    this.#start();
    return { verdict, decision: (v) => gateDecision(v, target, a, now - e.gate.receivedAt) };
  }

  /**
   * allowRetry says whether a retry to target that the fail-open policy
   * decided may go: the process's own budget for it allows one (policyd
   * away limits retries, never first attempts).
   */
  allowRetry(target: Target): boolean {
    const e = this.#entry(target);
    return !e || e.gate.allowRetry(this.#d.now());
  }

  /**
   * daemonAnswered: a unary call got through, so policyd is back; a broken
   * stream reopens now rather than after its backoff.
   */
  daemonAnswered(): void {
    if (this.#down) this.#reconnect?.abort();
  }

  /**
   * resume re-checks a call parked on target (Gate.resume), counting it as
   * check does once it leaves the park.
   */
  resume(target: Target, p: Parked): Gated {
    const e = this.#entry(target);
    const now = this.#d.now();
    if (!e) {
      const verdict: GateVerdict = { action: "admit", waitMs: 0, probe: false, stopReason: "", reason: "" };
      return { verdict, decision: (v) => gateDecision(v, target, undefined, 0) };
    }
    const a = e.gate.assignment;
    const verdict = e.gate.resume(now, p, this.#d.random());
    if (!p.retry && verdict.action !== "park") {
      if (verdict.action === "admit" || verdict.action === "wait") e.admitted++;
      else e.shed++;
    }
    return { verdict, decision: (v) => gateDecision(v, target, a, now - e.gate.receivedAt) };
  }

  /** checkRetry gates a retry to target (Gate.checkRetry); remainingMs as check's. */
  checkRetry(target: Target, remainingMs: number | undefined): Gated {
    const e = this.#entry(target);
    const now = this.#d.now();
    if (!e) {
      const verdict: GateVerdict = { action: "admit", waitMs: 0, probe: false, stopReason: "", reason: "" };
      return { verdict, decision: (v) => gateDecision(v, target, undefined, 0) };
    }
    const a = e.gate.assignment;
    const verdict = e.gate.checkRetry(now, remainingMs, this.#d.parkLimitMs);
    return { verdict, decision: (v) => gateDecision(v, target, a, now - e.gate.receivedAt) };
  }

  /**
   * parkWait resolves at target's next assignment, at the parked call's
   * next re-check or end, or when signal aborts.
   */
  parkWait(target: Target, p: Parked, signal: AbortSignal): Promise<void> {
    const e = this.#entry(target);
    if (!e) return Promise.resolve();
    if (!e.parkWake) {
      let resolve = () => {};
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      e.parkWake = { promise, resolve };
    }
    const ms = Math.max(0, Math.min(p.drawAt, p.until) - this.#d.now());
    return waitFor(e.parkWake.promise, Math.max(1, ms), signal);
  }

  /** A call parked on target was cancelled by its caller. */
  parkCancelled(target: Target, p: Parked): void {
    const e = this.#entry(target);
    if (!e) return;
    e.gate.cancelled(p);
    if (!p.retry) e.shed++;
  }

  /**
   * @internal takeReport takes the next report's usages out of the table,
   * as the stream does when it sends one (for the shared vectors,
   * clients/testdata/coordinate.json).
   */
  takeReport(): Usage[] {
    return this.#report();
  }

  /** @internal apply applies a CoordinateResponse as the stream does (for the shared vectors). */
  applyResponse(res: CoordinateResponse): void {
    this.#apply(res);
  }

  /** A retry of a call to target, carrying inputTokens (an estimate), is being sent. */
  retry(target: Target, inputTokens?: number): void {
    const e = this.#entry(target);
    if (!e) return;
    e.retries++;
    e.usage.retry(inputTokens);
  }

  /** A request to target was sent: it is in flight until the returned function is called. */
  began(target: Target): () => void {
    return this.#entry(target)?.usage.began() ?? (() => {});
  }

  /** An attempt (first or retry) to target ended: ok, or failed. */
  outcome(target: Target, ok: boolean): void {
    const e = this.#entry(target);
    if (!e) return;
    e.gate.record(this.#d.now(), ok);
    if (!ok) return;
    e.succeeded++;
    if (e.gate.assignment?.breaker === "HALF_OPEN") this.#flush(); // a probe's answer: the fleet waits for it
  }

  /**
   * A failure to target was decided locally (the fail-open policy). Only the
   * types the daemon's breakers count are reported (docs/clients.md), so that
   * a bad request or a bad key decided while policyd was away opens none.
   */
  failedLocally(target: Target, failureType: FailureType): void {
    if (!BREAKER_COUNTED.has(failureType)) return;
    const e = this.#entry(target);
    if (e) e.failed++;
  }

  /** Keeps the rate-limit headers of a success to target for its next report. */
  observeRateLimits(target: Target, headers: unknown): void {
    const kept = rateLimitHeaders(headers);
    if (Object.keys(kept).length === 0) return;
    const e = this.#entry(target);
    if (!e) return;
    e.headers = kept;
    e.usedAt = this.#d.now();
    this.#start();
  }

  /**
   * close sends what is left to report, half-closes the stream and waits
   * (at most closeTimeoutMs) for the daemon to end it, then cancels it.
   * The gate keeps answering from the table; nothing reopens the stream.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort();
    if (this.#loop) {
      // This timer keeps Node running while close is awaited (the stream's socket does not).
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<void>((res) => {
        timer = setTimeout(res, this.#d.closeTimeoutMs);
      });
      await Promise.race([this.#loop, timeout]);
      clearTimeout(timer);
      this.#stream?.abort(new ConnectError("client closed", Code.Canceled));
      await this.#loop;
    }
    this.#d.release?.();
  }

  /** The row of target, made at its first use; undefined when it is not gated. */
  #entry(t: Target): Entry | undefined {
    if (this.#off || !t.provider) return undefined;
    const key = `${t.provider}\u0000${t.model}\u0000${t.keyId}`;
    let e = this.#entries.get(key);
    if (e) return e;
    if (this.#entries.size >= MAX_TARGETS) this.#forget(this.#d.now());
    if (this.#entries.size >= MAX_TARGETS || !acceptable(t)) return undefined;
    const now = this.#d.now();
    e = {
      target: { ...t },
      gate: new Gate(this.#d.graceMs),
      admitted: 0,
      shed: 0,
      succeeded: 0,
      failed: 0,
      retries: 0,
      usage: new CallUsage(),
      headers: undefined,
      subscribe: true,
      reportedAt: now,
      usedAt: now,
      firstAnswer: undefined,
      parkWake: undefined,
    };
    e.gate.target = targetName(t);
    let resolve = () => {};
    const promise = new Promise<void>((r) => {
      resolve = r;
    });
    e.firstAnswer = { promise, resolve };
    this.#entries.set(key, e);
    return e;
  }

  /** Drops rows unused for FORGET_AFTER_MS with nothing to report and no live assignment. */
  #forget(now: number): void {
    for (const [key, e] of this.#entries) {
      if (now - e.usedAt < FORGET_AFTER_MS || pending(e) || e.usage.inFlight > 0) continue;
      if (e.gate.assignment && !e.gate.expired(now)) continue;
      this.#entries.delete(key);
    }
  }

  #start(): void {
    if (this.#loop || this.#closed || this.#off) return;
    this.#loop = this.#run();
  }

  /** Sends a report now rather than at the next tick. */
  #flush(): void {
    this.#flushWanted = true;
    this.#wake?.abort();
  }

  /** Ends every wait for a first assignment: the stream broke, or is given up. */
  #answerAll(): void {
    for (const e of this.#entries.values()) {
      e.firstAnswer?.resolve();
      e.firstAnswer = undefined;
    }
  }

  /** The stream loop: a stream, then a pause with backoff, until closed or the daemon says no. */
  async #run(): Promise<void> {
    let breaks = 0;
    for (;;) {
      let heard: boolean;
      try {
        heard = await this.#session();
        if (!this.#closed) this.#d.debug("policyd: the daemon ended the fleet stream; reopening it");
      } catch (err) {
        heard = this.#heard;
        if (!this.#closed) this.#failed(ConnectError.from(err));
      }
      this.#down = true;
      this.#answerAll(); // first calls waiting for this stream go on without it
      if (this.#closed || this.#off) break;
      breaks = heard ? 1 : breaks + 1;
      const cap = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** Math.min(breaks - 1, 10));
      const reconnect = new AbortController();
      this.#reconnect = reconnect;
      // Timing jitter comes from Math.random, not the client's random source, which the gate's draws use.
      await pause(Math.random() * cap, this.#closing.signal, reconnect.signal);
      this.#reconnect = undefined;
      if (reconnect.signal.aborted) breaks = 0; // policyd answered a call: it is back, the backoff starts over
      if (this.#closed) break;
      this.#down = false;
    }
    if (this.#off) this.#entries.clear(); // nothing to gate or report any more
  }

  /** One stream: true when the daemon answered at least once. */
  async #session(): Promise<boolean> {
    const ac = new AbortController();
    this.#stream = ac;
    this.#heard = false;
    for (const e of this.#entries.values()) e.subscribe = true; // a new stream knows no target
    const fleet = createConnectClient(FleetService, this.#d.transport);
    try {
      for await (const res of fleet.coordinate(this.#requests(ac.signal), { signal: ac.signal })) {
        this.#heard = true;
        this.#apply(res);
      }
      return this.#heard;
    } finally {
      ac.abort();
      this.#stream = undefined;
    }
  }

  /**
   * What goes up the stream: the client id and profile, then the reports;
   * a last one at close. A report is made when the transport asks for the
   * next message, which it then sends: its counts are taken out then, and
   * counts made while no stream asks stay for the next report.
   */
  async *#requests(signal: AbortSignal): AsyncGenerator<Request> {
    yield { clientId: this.#d.clientId, profile: this.#d.profile, usage: this.#report() };
    while (!signal.aborted) {
      if (!this.#flushWanted) {
        const wake = new AbortController();
        this.#wake = wake;
        const every = REPORT_EVERY_MS * (1 - REPORT_JITTER + 2 * REPORT_JITTER * Math.random());
        await pause(every, this.#closing.signal, signal, wake.signal);
        this.#wake = undefined;
      }
      this.#flushWanted = false;
      if (signal.aborted) return;
      const usage = this.#report();
      if (usage.length > 0) yield { usage };
      if (this.#closed) return; // half-close: the daemon ends the stream
    }
  }

  /** The usage of the targets with something to report (at most 256), taken out of the table. */
  #report(): Usage[] {
    const now = this.#d.now();
    this.#forget(now);
    const usage: Usage[] = [];
    for (const e of this.#entries.values()) {
      if (usage.length >= MAX_USAGES) break;
      if (!pending(e)) continue;
      const admitted = take(e, "admitted");
      const shed = take(e, "shed", MAX_COUNT - Number(admitted));
      const retries = take(e, "retries");
      const u = {
        target: { ...e.target },
        elapsed: durationOf(Math.min(MAX_ELAPSED_MS, Math.max(1, now - e.reportedAt))),
        admitted,
        shed,
        succeeded: take(e, "succeeded"),
        failed: take(e, "failed"),
        retries,
        rateLimitHeaders: e.headers ?? {},
        ...e.usage.take(e.gate, Number(admitted), Number(shed), Number(retries)),
      };
      e.headers = undefined;
      e.subscribe = false;
      e.reportedAt = now;
      usage.push(u);
    }
    return usage;
  }

  /** Applies the daemon's assignments, timed from now. */
  #apply(res: CoordinateResponse): void {
    const now = this.#d.now();
    for (const a of res.assignments) {
      const t = a.target;
      if (!t) continue;
      const key = `${t.provider}\u0000${t.model}\u0000${t.keyId}`;
      const e = this.#entries.get(key);
      if (!e) continue; // forgotten here: the daemon abandons it in time
      if (a.abandon) {
        wakeParked(e);
        if (hasCounts(e)) {
          // Used since the daemon gave up on it: the next report subscribes it again.
          e.gate.assign(now, undefined);
          e.subscribe = true;
        } else {
          this.#entries.delete(key);
        }
        this.#d.debug(`policyd: fleet abandoned ${targetName(t)}`);
        continue;
      }
      const g = assignmentOf(a);
      e.gate.assign(now, g);
      wakeParked(e);
      e.firstAnswer?.resolve();
      e.firstAnswer = undefined;
      this.#d.debug(`policyd: fleet assignment for ${targetName(t)}: ${describe(g)}`);
    }
  }

  /** A stream failed: give up for good, warn once, or just try again later. */
  #failed(ce: ConnectError): void {
    switch (ce.code) {
      case Code.FailedPrecondition:
      case Code.Unimplemented:
        // --fleet off, or a daemon that predates the stream: stop trying; the gate admits everything.
        this.#off = true;
        this.#d.debug(
          `policyd: no fleet stream (${Code[ce.code]}: ${ce.rawMessage}); the fleet gate admits every call`,
        );
        return;
      case Code.Unauthenticated:
      case Code.PermissionDenied:
      case Code.InvalidArgument:
        this.#d.warnOnce(
          `Coordinate/${ce.code}`,
          `policyd: the daemon refused the fleet stream (${Code[ce.code]}: ${ce.rawMessage}); calls go on without fleet assignments`,
        );
        return;
      default:
        this.#d.debug(
          `policyd: the fleet stream broke (${Code[ce.code]}: ${ce.rawMessage}); reopening it with backoff`,
        );
    }
  }
}

/** Wakes the calls parked on e. */
function wakeParked(e: Entry): void {
  e.parkWake?.resolve();
  e.parkWake = undefined;
}

/** Takes a count out of e for a report: at most cap (MAX_COUNT), the rest stays. */
function take(
  e: Entry,
  field: "admitted" | "shed" | "succeeded" | "failed" | "retries",
  cap: number = MAX_COUNT,
): bigint {
  const n = Math.min(e[field], cap);
  e[field] -= n;
  return BigInt(n);
}

/** Whether e has counts or headers to send. */
function hasCounts(e: Entry): boolean {
  return (
    e.headers !== undefined ||
    e.admitted > 0 ||
    e.shed > 0 ||
    e.succeeded > 0 ||
    e.failed > 0 ||
    e.retries > 0 ||
    e.usage.pending(e.gate)
  );
}

/** Whether e is due in the next report: counts, headers, or a subscription to make. */
function pending(e: Entry): boolean {
  return e.subscribe || hasCounts(e);
}

/** Whether the daemon would accept t as a target (a longer field would end the stream). */
function acceptable(t: Target): boolean {
  return (
    utf8Bytes(t.provider) <= MAX_FIELD_BYTES &&
    utf8Bytes(t.model) <= MAX_FIELD_BYTES &&
    utf8Bytes(t.keyId) <= MAX_KEY_ID_BYTES
  );
}

function utf8Bytes(s: string): number {
  return Buffer.byteLength(s, "utf8");
}

/** The x-ratelimit-* and anthropic-ratelimit-* headers of h (any shape), at most 16, values of at most 64 bytes. */
export function rateLimitHeaders(h: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  let n = 0;
  for (const [name, value] of Object.entries(headersOf(h))) {
    if (n >= MAX_RATE_LIMIT_HEADERS) break;
    if (!RATE_LIMIT_PREFIXES.some((p) => name.startsWith(p) && name.length > p.length)) continue;
    if (utf8Bytes(value) > MAX_RATE_LIMIT_VALUE_BYTES) continue; // a clipped limit would misstate it
    out[name] = value;
    n++;
  }
  return out;
}

/** An Assignment as the gate keeps it. */
function assignmentOf(a: Assignment): GateAssignment {
  const f = a.admitFraction;
  const g: GateAssignment = {
    ttlMs: durationMs(a.ttl),
    breaker: names.breaker(a.breaker),
    holdMs: Math.max(0, durationMs(a.hold)),
    stopMs: Math.max(0, durationMs(a.stop)),
    admitFraction: Number.isNaN(f) ? 1 : Math.min(1, Math.max(0, f)),
    probePermits: a.probePermits,
    reason: a.reason,
  };
  const bf = a.batchAdmitFraction;
  if (bf !== undefined && !Number.isNaN(bf)) g.batchAdmitFraction = Math.min(1, Math.max(0, bf));
  const fb = a.fallback;
  if (fb && (fb.kind !== 0 || fb.provider || fb.model)) {
    g.fallback = { kind: names.fallbackKind(fb.kind), provider: fb.provider, model: fb.model, reason: fb.reason };
  }
  return g;
}

function describe(a: GateAssignment): string {
  const parts = [`ttl ${a.ttlMs}ms`];
  if (a.breaker) parts.push(`breaker ${a.breaker}`);
  if (a.holdMs) parts.push(`hold ${a.holdMs}ms`);
  if (a.stopMs) parts.push(`stop ${a.stopMs}ms`);
  if (a.admitFraction < 1) parts.push(`admit ${a.admitFraction}`);
  if (a.batchAdmitFraction !== undefined) parts.push(`admit batch ${a.batchAdmitFraction}`);
  if (a.probePermits) parts.push(`${a.probePermits} probe permits`);
  if (a.fallback) parts.push(`fallback ${a.fallback.kind || "?"} ${a.fallback.provider}/${a.fallback.model}`);
  if (a.reason) parts.push(a.reason);
  return parts.join(", ");
}
