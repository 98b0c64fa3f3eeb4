// FleetTable: the fleet gate's table (docs/clients.md, "The fleet gate"):
// one Gate per target (provider, model, key id), the counts each target's
// next report carries, the reports, and the assignments received. No I/O:
// the stream (stream.ts) takes the reports and hands over the assignments,
// and the coordinator (coordinate.ts) opens or hurries the stream when a
// method here says so. The fleet side has four parts, as in the Go and
// Python clients: the gate (gate.ts), this table, the texts the caller sees
// (texts.ts) and the stream's I/O (stream.ts).

import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Random } from "./clock.js";
import { type Decision, durationMs, durationOf, type FailureType, names } from "./decision.js";
import { headersOf } from "./failure.js";
import { Gate, type GateAssignment, type GateVerdict, type Parked, type PriorityClass, type Target } from "./gate.js";
import type { Assignment, BucketUsageSchema, CoordinateResponse } from "./gen/policyd/v1/fleet_pb.js";
import { FLEET_LIMITS } from "./limits.js";
import { gateDecision, targetName } from "./texts.js";

/** The failures decided locally that a report counts: the types the daemon's breakers count. */
export const BREAKER_COUNTED: ReadonlySet<FailureType> = new Set<FailureType>([
  "OVERLOADED",
  "SERVER_ERROR",
  "TIMEOUT",
  "CONNECTION_ERROR",
]);

/** @internal What the table needs from its client. */
export interface TableDeps {
  /** Milliseconds of a monotonic clock (the gate's time). */
  now: () => number;
  /** The gate's draws (the client's random source). */
  random: Random;
  graceMs: number;
  /** How long a call without a deadline may park (undefined: PARK_LIMIT_MS; 0: parking off). */
  parkLimitMs?: number | undefined;
  debug: (message: string) => void;
}

/** A gate's answer, and the decision a PolicydError or a fallback hint carries when it did not admit. */
export interface Gated {
  verdict: GateVerdict;
  decision(v: GateVerdict): Decision;
  /**
   * An admitted first attempt (admit, wait) is in flight from its admission
   * on, so that the checks that follow at once (the calls a request's end
   * or an assignment woke together) count it against the lease before its
   * request starts: ended ends it (once), when its request ends.
   */
  ended?: (() => void) | undefined;
}

/** A first call's wait for its target's first assignment: until answered resolves, waitMs at most. */
export interface FirstAnswer {
  answered: Promise<void>;
  waitMs: number;
}

/** The usage of one target in a report. */
export type Usage = MessageInitShape<typeof BucketUsageSchema>;

/** What the gate knows of a first attempt's call: its priority class and input-token estimate. */
export interface GateCall {
  cls?: PriorityClass | undefined;
  inputTokens?: number | undefined;
}

// The limits of clients/testdata/limits.json (limits.ts).
const { protocol: P, client: C } = FLEET_LIMITS;
const FIRST_ANSWER_WAIT_MS = C.firstAssignmentWaitMs;
const MAX_USAGES = P.usagesPerMessage;
const MAX_ELAPSED_MS = P.elapsedMaxMs;
const MAX_COUNT = P.countMax; // per count and report; the rest waits for the next
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
// A report's input tokens for each call it counts; a larger estimate is cut to it.
const MAX_TOKENS_PER_CALL = P.inputTokensPerCallMax;

/** One target's row: its gate and what has not been reported yet. */
interface Entry {
  target: Target;
  gate: Gate;
  admitted: number;
  shed: number;
  /** Of shed, the first attempts sent to the assignment's fallback. */
  fellBack: number;
  succeeded: number;
  failed: number;
  retries: number;
  /** First attempts parked at their first check; parked first attempts admitted (also in admitted). */
  parkedNew: number;
  released: number;
  /** The batch class's first attempts at their first check (admitted, shed or parked). */
  batchFirst: number;
  /** Input-token estimates: of first attempts at their first check, of retries sent. */
  firstTokens: number;
  retryTokens: number;
  /** What the responses said their calls used (input tokens), and those calls' estimates. */
  usedTokens: number;
  usedEstimated: number;
  /** What the responses said their calls produced (output tokens), and how many calls. */
  outputTokens: number;
  outputCalls: number;
  /** The gate's gauges, the calls in flight and parked, as the last report said. */
  inFlightSent: number;
  parkedSent: number;
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

/** firstAnswer's answer once the target's first assignment came (every call but its first ones'). */
const NO_WAIT = Object.freeze({ wait: undefined, subscribe: false });

/** @internal The gate table of one client: its rows, their counts and assignments. */
export class FleetTable {
  readonly #d: TableDeps;
  readonly #entries = new Map<string, Entry>();
  /** The row #entry found last: a call's every step, and most calls after it, name the same target. */
  #last: Entry | undefined;
  /** The daemon runs without fleet memory (or without the stream): the gate admits everything. */
  #off = false;

  constructor(deps: TableDeps) {
    this.#d = deps;
  }

  /** Whether the daemon said it has no fleet memory. */
  get off(): boolean {
    return this.#off;
  }

  /** The daemon has no fleet memory: first calls stop waiting, the rows go, every call is admitted from now on. */
  disable(): void {
    this.#off = true;
    this.answerAll();
    this.#entries.clear(); // nothing to gate or report any more
    this.#last = undefined;
  }

  /**
   * firstAnswer says whether a first attempt to target waits for the
   * target's first assignment, and how long at most (wait): at the target's
   * first call (and calls within 100 ms of it), while the stream is
   * reachable (up or being opened). subscribe: this call opened the wait,
   * so the report that subscribes the target goes at once. undefined: the
   * target is not gated.
   */
  firstAnswer(target: Target, reachable: boolean): { wait: FirstAnswer | undefined; subscribe: boolean } | undefined {
    const e = this.#entry(target);
    if (!e) return undefined;
    const first = e.firstAnswer;
    if (!first) return NO_WAIT;
    const now = performance.now();
    if (!reachable) {
      first.windowEnd ??= now; // the first call went without waiting: later ones do not wait either
      return NO_WAIT;
    }
    const subscribe = first.windowEnd === undefined;
    first.windowEnd ??= now + FIRST_ANSWER_WAIT_MS;
    const waitMs = first.windowEnd - now;
    return { wait: waitMs > 0 ? { answered: first.promise, waitMs } : undefined, subscribe };
  }

  /**
   * check gates a first attempt of call to target: remainingMs is the time
   * left before the caller's deadline (undefined: none). It counts the
   * attempt as admitted or shed, and its class and tokens at this, its first
   * check. undefined: the target is not gated.
   */
  check(target: Target, remainingMs: number | undefined, canFallBack: boolean, call: GateCall = {}): Gated | undefined {
    const e = this.#entry(target);
    if (!e) return undefined;
    const now = this.#d.now();
    e.usedAt = now;
    const a = e.gate.assignment;
    const verdict = e.gate.check(now, remainingMs, canFallBack, this.#d.random, this.#d.parkLimitMs, call.cls);
    e.firstTokens += tokensOf(call.inputTokens);
    if (call.cls === "batch") e.batchFirst++;
    let ended: (() => void) | undefined;
    if (verdict.action === "admit" || verdict.action === "wait") {
      e.admitted++;
      ended = this.#began(e);
    } else if (verdict.action === "park") {
      e.parkedNew++;
    } else {
      countShed(e, verdict);
    }
    return { verdict, decision: (v) => gateDecision(v, target, a, now - e.gate.receivedAt), ended };
  }

  /**
   * resume re-checks a call parked on target (Gate.resume), counting it as
   * check does once it leaves the park. undefined: the target is not gated.
   */
  resume(target: Target, p: Parked): Gated | undefined {
    const e = this.#entry(target);
    const now = this.#d.now();
    if (!e) return undefined;
    const a = e.gate.assignment;
    const verdict = e.gate.resume(now, p, this.#d.random());
    let ended: (() => void) | undefined;
    if (!p.retry && verdict.action !== "park") {
      if (verdict.action === "admit" || verdict.action === "wait") {
        e.admitted++;
        e.released++;
        ended = this.#began(e);
      } else {
        countShed(e, verdict);
      }
    }
    return { verdict, decision: (v) => gateDecision(v, target, a, now - e.gate.receivedAt), ended };
  }

  /** checkRetry gates a retry to target (Gate.checkRetry); remainingMs as check's. */
  checkRetry(target: Target, remainingMs: number | undefined): Gated | undefined {
    const e = this.#entry(target);
    const now = this.#d.now();
    if (!e) return undefined;
    const a = e.gate.assignment;
    const verdict = e.gate.checkRetry(now, remainingMs, this.#d.parkLimitMs);
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
   * parkWake is what a call parked on target waits for: woken resolves at
   * the target's next assignment (or abandon), ms is the time to the call's
   * next re-check or end. undefined: the target is not gated.
   */
  parkWake(target: Target, p: Parked): { woken: Promise<void>; ms: number } | undefined {
    const e = this.#entry(target);
    if (!e) return undefined;
    if (!e.parkWake) {
      let resolve = () => {};
      const promise = new Promise<void>((r) => {
        resolve = r;
      });
      e.parkWake = { promise, resolve };
    }
    return { woken: e.parkWake.promise, ms: Math.max(0, Math.min(p.drawAt, p.until) - this.#d.now()) };
  }

  /** A call parked on target was cancelled by its caller. */
  parkCancelled(target: Target, p: Parked): void {
    const e = this.#entry(target);
    if (!e) return;
    e.gate.cancelled(p);
    if (!p.retry) e.shed++;
  }

  /** A retry of a call to target, carrying inputTokens (an estimate), is being sent. */
  retry(target: Target, inputTokens?: number): void {
    const e = this.#entry(target);
    if (!e) return;
    e.retries++;
    e.retryTokens += tokensOf(inputTokens);
  }

  /**
   * A request to target was sent: it is in flight (the reports' gauge, and
   * what the assignment's lease caps) until the returned function is
   * called. (An admitted first attempt is counted from its admission:
   * Gated.ended.)
   */
  began(target: Target): () => void {
    const e = this.#entry(target);
    return e ? this.#began(e) : () => {};
  }

  /**
   * Counts a request to e in flight until the returned function is called;
   * a second call does nothing. Its end wakes the calls parked at the lease
   * to check again.
   */
  #began(e: Entry): () => void {
    e.gate.inFlight++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      e.gate.inFlight--;
      if (e.gate.assignment?.inFlightLease !== undefined) wakeParked(e);
    };
  }

  /**
   * An attempt (first or retry) to target ended: ok, or failed. It returns
   * true for a half-open breaker's probe that succeeded: the fleet waits
   * for that answer, so the report goes at once.
   */
  outcome(target: Target, ok: boolean): boolean {
    const e = this.#entry(target);
    if (!e) return false;
    e.gate.record(this.#d.now(), ok);
    if (!ok) return false;
    e.succeeded++;
    return e.gate.assignment?.breaker === "HALF_OPEN";
  }

  /**
   * A response of a call to target said the call used `used` input tokens;
   * `estimated` is the estimate its attempt was counted at. Each is cut to
   * MAX_TOKENS_PER_CALL, as the estimates are.
   */
  usage(target: Target, used: number, estimated: number): void {
    const e = this.#entry(target);
    if (!e) return;
    e.usedTokens += tokensOf(used);
    e.usedEstimated += tokensOf(estimated);
  }

  /**
   * A response of a call to target said the call produced `tokens` output
   * tokens, cut to MAX_TOKENS_PER_CALL: one call's.
   */
  output(target: Target, tokens: number): void {
    const e = this.#entry(target);
    if (!e) return;
    e.outputTokens += tokensOf(tokens);
    e.outputCalls++;
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

  /**
   * Keeps the rate-limit headers of a success to target for its next
   * report; it returns whether it kept any (the stream must then run).
   */
  observe(target: Target, headers: unknown): boolean {
    const kept = rateLimitHeaders(headers);
    if (Object.keys(kept).length === 0) return false;
    const e = this.#entry(target);
    if (!e) return false;
    e.headers = kept;
    e.usedAt = this.#d.now();
    return true;
  }

  /** Ends every wait for a first assignment: the stream broke, or is given up. */
  answerAll(): void {
    for (const e of this.#entries.values()) {
      e.firstAnswer?.resolve();
      e.firstAnswer = undefined;
    }
  }

  /** A new stream knows no target: every row is subscribed again by the next report. */
  resubscribe(): void {
    for (const e of this.#entries.values()) e.subscribe = true;
  }

  /** The usage of the targets with something to report (at most 256), taken out of the table. */
  report(): Usage[] {
    const now = this.#d.now();
    this.#forget(now);
    const usage: Usage[] = [];
    for (const e of this.#entries.values()) {
      if (usage.length >= MAX_USAGES) break;
      if (!pending(e)) continue;
      const admitted = take(e, "admitted");
      const shed = take(e, "shed", MAX_COUNT - Number(admitted));
      const fellBack = take(e, "fellBack", Number(shed));
      const retries = take(e, "retries");
      const parkedNew = take(e, "parkedNew");
      // The class and the tokens are bounded by the first attempts (admitted,
      // shed, parked) and the retries the same report counts, released by
      // admitted (the rest waits for the next).
      const firstCalls = Number(admitted + shed + parkedNew);
      // What the responses said was used, by the attempts (admitted, retries) the same report counts.
      const attemptTokens = Number(admitted + retries) * MAX_TOKENS_PER_CALL;
      // The calls whose output is counted, at most those attempts, with their
      // share of the output (the average a call is what the daemon reads).
      const outputCalls = Math.min(e.outputCalls, Number(admitted + retries));
      const outputTokens = Math.min(
        outputCalls < e.outputCalls ? Math.floor((e.outputTokens * outputCalls) / e.outputCalls) : e.outputTokens,
        outputCalls * MAX_TOKENS_PER_CALL,
      );
      e.outputCalls -= outputCalls;
      e.outputTokens -= outputTokens;
      const u = {
        target: { ...e.target },
        elapsed: durationOf(Math.min(MAX_ELAPSED_MS, Math.max(1, now - e.reportedAt))),
        admitted,
        shed,
        fellBack,
        succeeded: take(e, "succeeded"),
        failed: take(e, "failed"),
        retries,
        rateLimitHeaders: e.headers ?? {},
        parked: BigInt(e.gate.parked),
        parkedNew,
        released: take(e, "released", Number(admitted)),
        batchFirstAttempts: take(e, "batchFirst", firstCalls),
        firstAttemptInputTokens: take(e, "firstTokens", firstCalls * MAX_TOKENS_PER_CALL),
        retryInputTokens: take(e, "retryTokens", Number(retries) * MAX_TOKENS_PER_CALL),
        inputTokensUsed: take(e, "usedTokens", attemptTokens),
        inputTokensEstimatedForUsed: take(e, "usedEstimated", attemptTokens),
        outputTokensUsed: BigInt(outputTokens),
        outputTokensUsedCalls: BigInt(outputCalls),
        inFlight: BigInt(e.gate.inFlight),
      };
      e.inFlightSent = e.gate.inFlight;
      e.parkedSent = e.gate.parked;
      e.headers = undefined;
      e.subscribe = false;
      e.reportedAt = now;
      usage.push(u);
    }
    return usage;
  }

  /** Applies the daemon's assignments, timed from now. */
  apply(res: CoordinateResponse): void {
    const now = this.#d.now();
    for (const a of res.assignments) {
      const t = a.target;
      if (!t) continue;
      const key = keyOf(t);
      const e = this.#entries.get(key);
      if (!e) continue; // forgotten here: the daemon abandons it in time
      if (a.abandon) {
        wakeParked(e);
        if (hasCounts(e) || busy(e)) {
          // Used since the daemon gave up on it: the next report subscribes it again.
          e.gate.assign(now, undefined);
          e.subscribe = true;
        } else {
          this.#delete(key, e);
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

  /** The row of target, made at its first use; undefined when it is not gated. */
  #entry(t: Target): Entry | undefined {
    if (this.#off || !t.provider) return undefined;
    const last = this.#last;
    if (last && sameTarget(last.target, t)) return last; // no key to build and look up
    const key = keyOf(t);
    let e = this.#entries.get(key);
    if (e) {
      this.#last = e;
      return e;
    }
    if (this.#entries.size >= MAX_TARGETS) this.#forget(this.#d.now());
    if (this.#entries.size >= MAX_TARGETS || !acceptable(t)) return undefined;
    const now = this.#d.now();
    e = {
      target: { ...t },
      gate: new Gate(this.#d.graceMs),
      admitted: 0,
      shed: 0,
      fellBack: 0,
      succeeded: 0,
      failed: 0,
      retries: 0,
      parkedNew: 0,
      released: 0,
      batchFirst: 0,
      firstTokens: 0,
      retryTokens: 0,
      usedTokens: 0,
      usedEstimated: 0,
      outputTokens: 0,
      outputCalls: 0,
      inFlightSent: 0,
      parkedSent: 0,
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
    this.#last = e;
    return e;
  }

  /** Drops rows unused for FORGET_AFTER_MS with nothing to report and no live assignment. */
  #forget(now: number): void {
    for (const [key, e] of this.#entries) {
      if (now - e.usedAt < FORGET_AFTER_MS || pending(e) || busy(e)) continue;
      if (e.gate.assignment && !e.gate.expired(now)) continue;
      this.#delete(key, e);
    }
  }

  #delete(key: string, e: Entry): void {
    this.#entries.delete(key);
    if (this.#last === e) this.#last = undefined;
  }
}

function sameTarget(a: Target, b: Target): boolean {
  return a.provider === b.provider && a.model === b.model && a.keyId === b.keyId;
}

/** The table's key of a target. */
function keyOf(t: Target): string {
  return `${t.provider}\u0000${t.model}\u0000${t.keyId}`;
}

/** Wakes the calls parked on e. */
function wakeParked(e: Entry): void {
  e.parkWake?.resolve();
  e.parkWake = undefined;
}

/** The counts a report takes out of a row. */
type Counted =
  | "admitted"
  | "shed"
  | "fellBack"
  | "succeeded"
  | "failed"
  | "retries"
  | "parkedNew"
  | "released"
  | "batchFirst"
  | "firstTokens"
  | "retryTokens"
  | "usedTokens"
  | "usedEstimated";

/** Takes a count out of e for a report: at most cap (MAX_COUNT), the rest stays. */
function take(e: Entry, field: Counted, cap: number = MAX_COUNT): bigint {
  const n = Math.min(e[field], cap);
  e[field] -= n;
  return BigInt(n);
}

/** Whether e has counts, headers or a changed gauge to send. */
function hasCounts(e: Entry): boolean {
  return (
    e.headers !== undefined ||
    e.admitted > 0 ||
    e.shed > 0 ||
    e.fellBack > 0 ||
    e.succeeded > 0 ||
    e.failed > 0 ||
    e.retries > 0 ||
    e.parkedNew > 0 ||
    e.released > 0 ||
    e.batchFirst > 0 ||
    e.firstTokens > 0 ||
    e.retryTokens > 0 ||
    e.gate.inFlight !== e.inFlightSent ||
    e.gate.parked !== e.parkedSent
  );
}

/** Counts a first attempt the gate did not admit: shed, and fell back when it went to the fallback. */
function countShed(e: Entry, v: GateVerdict): void {
  e.shed++;
  if (v.action === "fall_back") e.fellBack++;
}

/** Whether e has calls in flight or parked: its row must stay. */
function busy(e: Entry): boolean {
  return e.gate.inFlight > 0 || e.gate.parked > 0;
}

/** A call's token estimate as a report counts it: a whole number in [0, MAX_TOKENS_PER_CALL]. */
function tokensOf(n: number | undefined): number {
  if (n === undefined || !Number.isFinite(n) || n <= 0) return 0;
  return Math.min(MAX_TOKENS_PER_CALL, Math.ceil(n));
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
    parkHintMs: Math.max(0, durationMs(a.parkHint)),
  };
  const bf = a.batchAdmitFraction;
  if (bf !== undefined && !Number.isNaN(bf)) g.batchAdmitFraction = Math.min(1, Math.max(0, bf));
  if (a.inFlightLease !== undefined) g.inFlightLease = a.inFlightLease;
  if (a.pacePermits !== undefined) g.pacePermits = a.pacePermits;
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
  if (a.inFlightLease !== undefined) parts.push(`lease ${a.inFlightLease} in flight`);
  if (a.pacePermits !== undefined) parts.push(`${a.pacePermits} pace permits`);
  if (a.probePermits) parts.push(`${a.probePermits} probe permits`);
  if (a.parkHintMs) parts.push(`park hint ${a.parkHintMs}ms`);
  if (a.fallback) parts.push(`fallback ${a.fallback.kind || "?"} ${a.fallback.provider}/${a.fallback.model}`);
  if (a.reason) parts.push(a.reason);
  return parts.join(", ");
}
