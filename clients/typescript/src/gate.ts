// Gate: one target's entry in the fleet gate (docs/clients.md, "The fleet
// gate"; clients/testdata/gate.json pins it; internal/refgate/gate.go is the
// reference). Pure: time comes in as milliseconds of a monotonic clock, the
// uniform draw as an argument. The client keeps one per target (coordinate.ts).

import type { BreakerState, FallbackKind, StopReason } from "./decision.js";

/** How long an assignment is kept past its ttl when no refresh came (policyd unreachable), in ms. */
export const GATE_GRACE_MS = 10_000;

// The process's own budget: gRPC A6's retry throttling per target, with a
// refill by time so that a process whose budget is spent tries again.
const OWN_MAX_TOKENS = 10;
const OWN_THRESHOLD = OWN_MAX_TOKENS / 2;
const OWN_SUCCESS_GAIN = 0.1;
const OWN_REFILL_PER_S = 0.1;

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
  /** Half-open: first attempts this process may send as the fleet's probes. */
  probePermits: number;
  /** Why, for a human. */
  reason: string;
  fallback?: GateFallback | undefined;
}

/** What the gate does with a first attempt. */
export type GateAction = "admit" | "wait" | "fall_back" | "stop";

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
  /** fall_back and stop: the assignment's reason. */
  reason: string;
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
  readonly #graceMs: number;
  /** First attempts admitted (admit and wait) and shed (stop and fall back) so far. */
  admitted = 0;
  shed = 0;
  /** First attempts admitted past an expired assignment (policyd unreachable). */
  ownAdmitted = 0;

  /** graceMs: how long an expired assignment is kept (default GATE_GRACE_MS). */
  constructor(graceMs: number = GATE_GRACE_MS) {
    this.#graceMs = graceMs >= 0 ? graceMs : GATE_GRACE_MS;
  }

  /** assign receives an assignment at nowMs; undefined abandons the target (no assignment). */
  assign(nowMs: number, a: GateAssignment | undefined): void {
    this.#a = a;
    this.#receivedAt = nowMs;
    if (a) this.#permits = a.probePermits;
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
   * function is called only when the assignment admits a share).
   */
  check(
    nowMs: number,
    deadlineMs: number | undefined,
    canFallBack: boolean,
    draw: number | (() => number),
  ): GateVerdict {
    const v = this.#check(nowMs, deadlineMs, draw);
    if (v.action === "stop") {
      this.shed++;
      const fb = this.#a?.fallback;
      if (canFallBack && fb) return { ...v, action: "fall_back", fallback: fb };
    } else {
      this.admitted++;
    }
    return v;
  }

  #check(nowMs: number, deadlineMs: number | undefined, draw: number | (() => number)): GateVerdict {
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
      // policyd away never stops an agent: the process's own budget limits its retries (allowRetry), never its first attempts.
      this.ownAdmitted++;
      return { ...ADMIT };
    }
    const drawn = () => (typeof draw === "function" ? draw() : draw);
    if (a.stopMs > age) return stop("FLEET_STOP");
    if (a.breaker === "OPEN") return stop("CIRCUIT_OPEN");
    if (a.breaker === "HALF_OPEN") {
      // A permit, else the draws below the admit fraction (about one probe a second fleet-wide).
      if (this.#permits > 0) {
        this.#permits--;
        return { ...ADMIT, probe: true };
      }
      return drawn() < a.admitFraction ? { ...ADMIT, probe: true } : stop("CIRCUIT_OPEN");
    }
    if (a.admitFraction < 1 && drawn() >= a.admitFraction) return stop("FLEET_SHED");
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
