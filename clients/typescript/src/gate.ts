// Gate: one target's entry in the fleet gate (docs/clients.md, "The fleet
// gate"; clients/testdata/gate.json pins it; internal/refgate/gate.go is the
// reference). Pure: time comes in as milliseconds of a monotonic clock, the
// uniform draw as an argument. The client keeps one per target (fleet.ts).

import type { BreakerState, FallbackKind, StopReason } from "./decision.js";

/** How long an assignment is kept past its ttl when no refresh came (policyd unreachable), in ms. */
export const GATE_GRACE_MS = 10_000;

// The process's own budget: gRPC A6's retry throttling per target, with a
// refill by time so that a process whose budget is spent tries again.
const OWN_MAX_TOKENS = 10;
const OWN_THRESHOLD = OWN_MAX_TOKENS / 2;
const OWN_SUCCESS_GAIN = 0.1;
const OWN_REFILL_PER_S = 0.1;

/**
 * A first attempt's priority class: "interactive" (the default) or "batch".
 * When the fleet paces a target, batch yields first: it draws against the
 * assignment's batchAdmitFraction, interactive calls against admitFraction.
 */
export type PriorityClass = "interactive" | "batch";

/** What a call names: the gate's key. */
export interface Target {
  provider: string;
  model: string;
  keyId: string;
}

/** Where an assignment sends a first attempt the gate did not admit. */
export interface GateFallback {
  kind: FallbackKind;
  provider: string;
  model: string;
  reason: string;
}

/** An assignment as the gate keeps it: durations in ms, counted from its receipt. */
export interface GateAssignment {
  ttlMs: number;
  breaker: BreakerState;
  holdMs: number;
  stopMs: number;
  /** The share of first attempts to admit, in [0, 1]. */
  admitFraction: number;
  /** The share of batch-class first attempts to admit, in [0, 1]; undefined: admitFraction for both classes. */
  batchAdmitFraction?: number | undefined;
  /**
   * The most requests this process may have in flight on the target, its
   * lease of the fleet's cap; undefined: no cap. A first attempt at it parks
   * until a request ends.
   */
  inFlightLease?: number | undefined;
  /**
   * While a pace binds: the running count of first attempts the daemon
   * granted this process (docs/clients.md, "Grants"); the gate admits a
   * first attempt only against a grant it has not used, whatever its draw.
   * undefined: a pace admits admitFraction of first attempts by draws.
   */
  pacePermits?: bigint | undefined;
  /** Half-open: first attempts this process may send as the fleet's probes. */
  probePermits: number;
  /** Why, for a human. */
  reason: string;
  fallback?: GateFallback | undefined;
  /** The daemon's estimate of how long until the gate admits again, in ms (0: unknown). */
  parkHintMs?: number | undefined;
}

/** What the gate does with a first attempt ("park": hold it in the client until a re-check admits it). */
export type GateAction = "admit" | "wait" | "fall_back" | "stop" | "park";

/**
 * The longest a call without a deadline parks, in ms: two of the breaker's
 * longest open periods (60 s), so that a call outlives an open period that
 * doubled once, and a caller that gave no deadline still gets an answer
 * within two minutes.
 */
export const PARK_LIMIT_MS = 120_000;
/** How often a parked call is checked again without an assignment, and a paced one draws again, in ms. */
export const PARK_RECHECK_MS = 1000;

/** A call the gate holds: when it parked, and when it must have an answer by (ms). */
export interface Parked {
  at: number;
  until: number;
  canFallBack: boolean;
  drawAt: number;
  /** A retry, not a first attempt: not counted as one. */
  retry: boolean;
  /** A batch-class first attempt: it re-draws against the batch share. */
  batch: boolean;
}

/** The gate's answer for one first attempt. */
export interface GateVerdict {
  action: GateAction;
  /** wait: how long before sending, in ms. */
  waitMs: number;
  /** admit: a half-open probe permit was spent. */
  probe: boolean;
  /** fall_back and stop: why the attempt was not admitted. */
  stopReason: StopReason;
  /** fall_back: the assignment's fallback. */
  fallback?: GateFallback | undefined;
  /** fall_back and stop: the assignment's reason; park: the text the caller sees ("waiting for the fleet: …"). */
  reason: string;
  /** park: the call to resume. */
  parked?: Parked | undefined;
  /** How long the call was parked before this verdict (resume), in ms. */
  waitedMs?: number | undefined;
  /** The batch class's own share (batchAdmitFraction) decided the draw, not admitFraction. */
  batchShare?: boolean | undefined;
  /** FLEET_SHED: the process was at its lease, with inFlight requests in flight. */
  atLease?: boolean | undefined;
  inFlight?: number | undefined;
  /** A pace with grants parked the call for want of one. */
  ungranted?: boolean | undefined;
}

const ADMIT: Readonly<GateVerdict> = Object.freeze({
  action: "admit",
  waitMs: 0,
  probe: false,
  stopReason: "",
  reason: "",
});

/**
 * Gate is one target's gate: the last assignment, the half-open probe
 * permits left, the process's own budget, and the first attempts admitted
 * and shed. Not for concurrent use (JavaScript's one thread is enough).
 */
export class Gate {
  #a: GateAssignment | undefined;
  #receivedAt = 0;
  #permits = 0;
  #tokens = OWN_MAX_TOKENS;
  #tokensAt: number | undefined;
  /** The pace's grants not yet used, and the last running count an assignment carried. */
  #grants = 0n;
  #grantCount: bigint | undefined;
  readonly #graceMs: number;
  /** First attempts admitted (admit and wait) and shed (stop and fall back) so far; of shed, those that fell back. */
  admitted = 0;
  shed = 0;
  fellBack = 0;
  /** The batch class's first attempts at their first check (admitted, shed or parked). */
  batchFirst = 0;
  /** The process's requests in flight to the target now (a gauge its table keeps). */
  inFlight = 0;
  /** First attempts admitted past an expired assignment (policyd unreachable). */
  ownAdmitted = 0;
  /** Checks that parked a call (re-checks included); first attempts parked; parked calls admitted. */
  parks = 0;
  /** The calls (first attempts and retries) parked now: a gauge. */
  parked = 0;
  parkedNew = 0;
  released = 0;
  /** The target as the park text names it ("openai/gpt-4o"). */
  target = "";

  /** graceMs: how long an expired assignment is kept (default GATE_GRACE_MS). */
  constructor(graceMs: number = GATE_GRACE_MS) {
    this.#graceMs = graceMs >= 0 ? graceMs : GATE_GRACE_MS;
  }

  /** assign receives an assignment at nowMs; undefined abandons the target (no assignment). */
  assign(nowMs: number, a: GateAssignment | undefined): void {
    this.#a = a;
    this.#receivedAt = nowMs;
    if (a) this.#permits = a.probePermits;
    this.#takeGrants(a);
  }

  /**
   * Adds the grants a's running count gives: its rise since the last count
   * seen, or all of it when it went down (a new count, from another replica
   * or a restarted one). The first count the gate sees grants nothing: it is
   * what the daemon gave this client before (an entry made anew). A pace
   * that ends takes the unused grants with it.
   */
  #takeGrants(a: GateAssignment | undefined): void {
    const n = a?.pacePermits;
    if (n === undefined) {
      this.#grants = 0n;
      return;
    }
    const last = this.#grantCount;
    if (last !== undefined) this.#grants += n >= last ? n - last : n;
    this.#grantCount = n;
  }

  /** The assignment held, if any. */
  get assignment(): GateAssignment | undefined {
    return this.#a;
  }

  /** When the assignment (or the abandon) was received, in ms of the caller's clock. */
  get receivedAt(): number {
    return this.#receivedAt;
  }

  /** Whether the assignment is held past its ttl + grace at nowMs (the gate then uses the own budget). */
  expired(nowMs: number): boolean {
    return this.#a !== undefined && nowMs - this.#receivedAt >= this.#a.ttlMs + this.#graceMs;
  }

  /** The process's own budget for the target at nowMs. */
  tokens(nowMs: number): number {
    this.#refill(nowMs);
    return this.#tokens;
  }

  /** record counts an attempt's outcome (first or retry) in the process's own budget. */
  record(nowMs: number, ok: boolean): void {
    this.#refill(nowMs);
    this.#tokens = ok ? Math.min(OWN_MAX_TOKENS, this.#tokens + OWN_SUCCESS_GAIN) : Math.max(0, this.#tokens - 1);
  }

  /**
   * allowRetry says whether a retry the fail-open policy decided (policyd
   * unreachable) may be sent at nowMs: the process's own budget has more
   * than half its tokens, as gRPC A6's retry throttling.
   */
  allowRetry(nowMs: number): boolean {
    this.#refill(nowMs);
    return this.#tokens > OWN_THRESHOLD;
  }

  /**
   * check gates a first attempt at nowMs. deadlineMs is the time left before
   * the caller's deadline (undefined: none); draw is uniform in [0, 1) (a
   * function is called only when the assignment admits a share);
   * parkLimitMs bounds parking for a call without a deadline (undefined:
   * PARK_LIMIT_MS; 0: parking off); cls is the call's priority class
   * (default interactive).
   */
  check(
    nowMs: number,
    deadlineMs: number | undefined,
    canFallBack: boolean,
    draw: number | (() => number),
    parkLimitMs?: number,
    cls: PriorityClass = "interactive",
  ): GateVerdict {
    const batch = cls === "batch";
    if (batch) this.batchFirst++;
    let v = this.#check(nowMs, deadlineMs, draw, false, batch);
    if (v.action === "park") {
      const a = this.#a!;
      const limit = parkLimitMs ?? PARK_LIMIT_MS;
      const until = nowMs + (deadlineMs ?? limit);
      if ((canFallBack && a.fallback) || limit <= 0 || until <= nowMs + this.#hintLeft(nowMs)) {
        // Somewhere else to go, parking off, or no wait can fit: the answer is now. A call that
        // will not park is never granted (grants go to parked calls): it draws against the pace's
        // share, as without grants.
        if (v.ungranted) {
          v = this.#check(nowMs, deadlineMs, draw, false, batch, true);
          if (v.action !== "park") return this.#count(v, canFallBack);
        }
        return this.#count({ ...v, action: "stop", reason: a.reason }, canFallBack);
      }
      this.parks++;
      this.parkedNew++;
      this.parked++;
      const parked = { at: nowMs, until, canFallBack, drawAt: nowMs + PARK_RECHECK_MS, retry: false, batch };
      return { ...v, parked };
    }
    return this.#count(v, canFallBack);
  }

  /**
   * checkRetry gates a retry that NextDelay allowed, before it is sent: a
   * stopped key stops it, an open breaker (or a probing one without a
   * permit) parks it; otherwise it goes. Not counted as a first attempt.
   */
  checkRetry(nowMs: number, deadlineMs: number | undefined, parkLimitMs?: number): GateVerdict {
    const v = this.#check(nowMs, deadlineMs, 0, true, false);
    if (v.action === "wait" || (v.action === "park" && v.stopReason === "FLEET_SHED")) return { ...ADMIT };
    if (v.action !== "park") return v;
    const limit = parkLimitMs ?? PARK_LIMIT_MS;
    const until = nowMs + (deadlineMs ?? limit);
    if (limit <= 0 || until <= nowMs + this.#hintLeft(nowMs)) return { ...v, action: "stop", reason: this.#a!.reason };
    this.parks++;
    this.parked++;
    const parked = { at: nowMs, until, canFallBack: false, drawAt: nowMs + PARK_RECHECK_MS, retry: true, batch: false };
    return { ...v, parked };
  }

  /**
   * resume checks a parked call again at nowMs: admitted (waitedMs says how
   * long it was parked), parked again, or stopped (DEADLINE) as soon as the
   * time it has left is no longer than the fleet's estimate of the wait.
   */
  resume(nowMs: number, p: Parked, draw: number): GateVerdict {
    if (nowMs < p.drawAt)
      draw = 1; // a pace's draw is not due: only a full share admits
    else p.drawAt = nowMs + PARK_RECHECK_MS;
    let v: GateVerdict = { ...this.#check(nowMs, undefined, draw, true, p.batch), waitedMs: nowMs - p.at };
    const left = p.until - nowMs;
    const reason = this.#a?.reason ?? "";
    if (v.action === "park") {
      if (left <= this.#hintLeft(nowMs) || left <= 0) {
        const text = `gave up waiting for the fleet after ${goSeconds(v.waitedMs!)}: ${reason}`;
        return this.#countParked({ ...v, action: "stop", stopReason: "DEADLINE", reason: text, parked: undefined }, p);
      }
      this.parks++;
      return { ...v, parked: p };
    }
    if (v.action === "wait" && v.waitMs > left) {
      v = { action: "stop", waitMs: 0, probe: false, stopReason: "DEADLINE", reason, waitedMs: v.waitedMs };
    }
    v = this.#countParked(v, p);
    if (!p.retry && (v.action === "admit" || v.action === "wait")) this.released++;
    return v;
  }

  /** cancelled counts a parked call its caller cancelled: out of the park, and a first attempt as shed. */
  cancelled(p: Parked): void {
    this.#unpark();
    if (!p.retry) this.shed++;
  }

  #unpark(): void {
    if (this.parked > 0) this.parked--;
  }

  /** Counts a parked call leaving the park: a first attempt's verdict as check counts it, a retry's not at all. */
  #countParked(v: GateVerdict, p: Parked): GateVerdict {
    this.#unpark();
    if (p.retry) return v.action === "wait" ? { ...v, action: "admit", waitMs: 0 } : v;
    return this.#count(v, p.canFallBack);
  }

  #count(v: GateVerdict, canFallBack: boolean): GateVerdict {
    if (v.action === "stop") {
      this.shed++;
      const fb = this.#a?.fallback;
      if (canFallBack && fb) {
        this.fellBack++;
        return { ...v, action: "fall_back", fallback: fb };
      }
    } else {
      this.admitted++;
      // A first attempt admitted spends one of the pace's grants.
      if (this.#a?.pacePermits !== undefined && this.#grants > 0n) this.#grants--;
    }
    return v;
  }

  #hintLeft(nowMs: number): number {
    const a = this.#a;
    return a ? Math.max(0, (a.parkHintMs ?? 0) - (nowMs - this.#receivedAt)) : 0;
  }

  #park(nowMs: number, stopReason: StopReason, cause: string): GateVerdict {
    let reason = `waiting for the fleet: ${cause} on ${this.target}`;
    const hint = this.#hintLeft(nowMs);
    if (hint > 0) reason += `, ~${Math.floor(hint / 1000 + 0.5)} s`;
    return { action: "park", waitMs: 0, probe: false, stopReason, reason };
  }

  #check(
    nowMs: number,
    deadlineMs: number | undefined,
    draw: number | (() => number),
    resumed: boolean,
    batch: boolean,
    drawPace = false,
  ): GateVerdict {
    this.#refill(nowMs);
    const a = this.#a;
    if (!a) return { ...ADMIT };
    const stop = (stopReason: StopReason): GateVerdict => ({
      action: "stop",
      waitMs: 0,
      probe: false,
      stopReason,
      reason: a.reason,
    });
    const age = nowMs - this.#receivedAt;
    if (age >= a.ttlMs + this.#graceMs) {
      // policyd away never stops an agent: the process's own budget limits its retries (allowRetry),
      // never its first attempts; a parked call goes (the daemon that would wake it is away).
      if (!resumed) this.ownAdmitted++;
      return { ...ADMIT };
    }
    const drawn = () => (typeof draw === "function" ? draw() : draw);
    // A batch call draws against the batch class's share when the assignment gives one.
    const batchShare = batch && a.batchAdmitFraction !== undefined;
    const share = batchShare ? a.batchAdmitFraction! : a.admitFraction;
    if (a.stopMs > age) return stop("FLEET_STOP");
    if (a.breaker === "OPEN") return this.#park(nowMs, "CIRCUIT_OPEN", "breaker open");
    if (a.breaker === "HALF_OPEN") {
      // A permit, else the draws below the admit fraction (about one probe a second fleet-wide);
      // a parked call probes only with a permit.
      if (this.#permits > 0) {
        this.#permits--;
        return { ...ADMIT, probe: true };
      }
      if (!resumed && drawn() < share) return { ...ADMIT, probe: true };
      return this.#park(nowMs, "CIRCUIT_OPEN", "breaker probing");
    }
    if (a.pacePermits !== undefined && !drawPace) {
      // Granted, not drawn: no grant left parks the call whatever its draw.
      if (this.#grants === 0n) return { ...this.#park(nowMs, "FLEET_SHED", "paced"), ungranted: true };
    } else if (share < 1 && drawn() >= share) {
      return { ...this.#park(nowMs, "FLEET_SHED", "paced"), batchShare };
    }
    if (a.inFlightLease !== undefined && this.inFlight >= a.inFlightLease) {
      const v = this.#park(nowMs, "FLEET_SHED", "at its lease of requests in flight");
      return { ...v, atLease: true, inFlight: this.inFlight };
    }
    if (a.holdMs > age) {
      const left = a.holdMs - age;
      if (deadlineMs !== undefined && left > deadlineMs) return stop("DEADLINE");
      return { ...ADMIT, action: "wait", waitMs: left };
    }
    return { ...ADMIT };
  }

  #refill(nowMs: number): void {
    if (this.#tokensAt !== undefined && nowMs > this.#tokensAt) {
      const dt = nowMs - this.#tokensAt;
      // Seconds as Go's Duration.Seconds computes them, so that the vectors' boundaries agree bit for bit.
      const seconds = Math.trunc(dt / 1000) + ((dt % 1000) * 1e6) / 1e9;
      this.#tokens = Math.min(OWN_MAX_TOKENS, this.#tokens + OWN_REFILL_PER_S * seconds);
    }
    if (this.#tokensAt === undefined || nowMs > this.#tokensAt) this.#tokensAt = nowMs;
  }
}

/** Whole seconds as Go's Duration prints them ("5s", "2m0s"), as the shared texts do. */
function goSeconds(ms: number): string {
  const total = Math.floor(ms / 1000 + 0.5);
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const sec = total % 60;
  if (h) return `${h}h${m}m${sec}s`;
  if (m) return `${m}m${sec}s`;
  return `${sec}s`;
}
