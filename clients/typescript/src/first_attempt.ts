// A call's passage through the fleet gate (docs/clients.md, "The fleet
// gate", "Parking"): its first attempt checked, waited out, parked, sent
// elsewhere or stopped, and a retry's check — through the coordinator
// (coordinate.ts) on its table (fleet.ts), with the texts of texts.ts. No
// RPC.

import type { Clock } from "./clock.js";
import type { Coordinator } from "./coordinate.js";
import type { Decision } from "./decision.js";
import { emptyFailure } from "./failure.js";
import type { FirstAnswer, Gated } from "./fleet.js";
import type { GateVerdict, PriorityClass, Target } from "./gate.js";
import type { FallbackHint } from "./options.js";
import { PolicydError } from "./policyd_error.js";
import { waitFor } from "./stream.js";

/**
 * @internal park holds a call the gate parked (docs/clients.md, "Parking"):
 * no attempt, no RPC, until a re-check at the target's next assignment,
 * every second, or at the call's end admits or stops it. The decision hook
 * sees it park and leave (decision.parked; waitedMs when it leaves). The
 * call's signal ends the wait: the caller's abort rejects with its reason;
 * the deadline's stops the call (DEADLINE).
 */
export async function park(
  c: Coordinator,
  target: Target,
  gated: Gated,
  signal: AbortSignal,
  callerSignal: AbortSignal | undefined,
  onDecision: ((event: { attempt: number; error: unknown; decision: Decision }) => void) | undefined,
): Promise<Gated> {
  const p = gated.verdict.parked!;
  onDecision?.({ attempt: 0, error: undefined, decision: parkDecision(gated) });
  while (gated.verdict.action === "park") {
    await c.parkWait(target, p, signal);
    if (signal.aborted) {
      c.parkCancelled(target, p);
      if (callerSignal?.aborted) throw callerSignal.reason;
      const late: GateVerdict = { ...gated.verdict, action: "stop", stopReason: "DEADLINE", parked: undefined };
      return { verdict: late, decision: gated.decision };
    }
    gated = c.resume(target, p);
  }
  onDecision?.({ attempt: 0, error: undefined, decision: parkDecision(gated) });
  return gated;
}

/** The decision the hook sees as a call parks ("waiting for the fleet: …") and as it leaves (waitedMs). */
function parkDecision(gated: Gated): Decision {
  const v = gated.verdict;
  const leaving = v.action !== "park";
  const admitted = v.action === "admit" || v.action === "wait";
  const base = gated.decision(leaving && !admitted ? v : { ...v, action: "stop" });
  return {
    ...base,
    action: admitted || !leaving ? "RETRY" : base.action,
    delayMs: v.waitMs,
    stopReason: admitted ? "" : v.stopReason,
    stopText: admitted ? `released by the fleet after ${v.waitedMs ?? 0}ms` : leaving ? base.stopText : v.reason,
    parked: true,
    waitedMs: v.waitedMs ?? 0,
  };
}

/** @internal What gating a call's first attempt needs from the call. */
export interface FirstAttempt<T> {
  target: Target;
  /** The call's priority class and input-token estimate. */
  cls: PriorityClass;
  inputTokens: number | undefined;
  deadlineMs: number | undefined;
  clock: Clock;
  /** The call's signal (the caller's and the deadline's). */
  signal: AbortSignal;
  callerSignal: AbortSignal | undefined;
  fallback: ((hint: FallbackHint) => T | Promise<T>) | undefined;
  operation: string;
  onDecision: ((event: { attempt: number; error: unknown; decision: Decision }) => void) | undefined;
}

/**
 * What the gate made of a first attempt: send it (ended ends its count in
 * flight, which began at its admission: call it when the request ends), or
 * the call fell back (value, the fallback function's result).
 */
export type FirstGated<T> = { send: true; ended: () => void } | { send: false; value: T };

/**
 * gateFirstAttempt runs the gate before a call's first attempt: it returns
 * send (after waiting out a hold) or the fallback's value, and throws a
 * PolicydError (attempts 0) when the gate stopped it, or signal.reason when
 * the caller aborted during the wait. It makes no RPC. The common answer,
 * admitted at once, comes back as it is, not as a promise: a call that
 * succeeds at once then waits for nothing but its attempt.
 */
export function gateFirstAttempt<T>(c: Coordinator, f: FirstAttempt<T>): FirstGated<T> | Promise<FirstGated<T>> {
  const first = c.firstAnswer(f.target);
  if (first) return firstAnswered(c, f, first);
  const gated = checkFirst(c, f);
  if (gated.verdict.action === "admit") return { send: true, ended: gated.ended ?? noop };
  return gated_(c, f, gated);
}

const noop = () => {};

/** The target's first call: its first assignment is on the way (100 ms at most, never past the deadline). */
async function firstAnswered<T>(c: Coordinator, f: FirstAttempt<T>, first: FirstAnswer): Promise<FirstGated<T>> {
  const left = f.deadlineMs === undefined ? Infinity : f.deadlineMs - f.clock.now();
  await waitFor(first.answered, Math.min(first.waitMs, left), f.signal);
  if (f.callerSignal?.aborted) throw f.callerSignal.reason;
  return gated_(c, f, checkFirst(c, f));
}

function checkFirst<T>(c: Coordinator, f: FirstAttempt<T>): Gated {
  const remaining = f.deadlineMs === undefined ? undefined : Math.max(0, f.deadlineMs - f.clock.now());
  return c.check(f.target, remaining, f.fallback !== undefined, { cls: f.cls, inputTokens: f.inputTokens });
}

/** What the gate's answer to a first attempt makes of the call: send it, after a park or a wait; fall back; stop. */
async function gated_<T>(c: Coordinator, f: FirstAttempt<T>, gated: Gated): Promise<FirstGated<T>> {
  if (gated.verdict.action === "park") gated = await park(c, f.target, gated, f.signal, f.callerSignal, f.onDecision);
  const verdict = gated.verdict;
  const ended = gated.ended ?? noop;
  if (verdict.action === "admit") return { send: true, ended };
  const failure = emptyFailure();
  failure.provider = f.target.provider;
  failure.model = f.target.model;
  failure.keyId = f.target.keyId;
  failure.operation = f.operation;
  if (verdict.action === "wait") {
    try {
      await f.clock.sleep(verdict.waitMs, f.signal);
      return { send: true, ended };
    } catch {
      ended();
      if (f.callerSignal?.aborted) throw f.callerSignal.reason;
      const late: GateVerdict = { ...verdict, action: "stop", stopReason: "DEADLINE" };
      throw new PolicydError({ cause: undefined, attempts: 0, decision: gated.decision(late), failure });
    }
  }
  const d = gated.decision(verdict);
  f.onDecision?.({ attempt: 0, error: undefined, decision: d });
  if (verdict.action === "fall_back" && f.fallback) {
    const { kind, reason, provider, model } = d.fallback;
    const hint = { kind, reason, provider, model, error: undefined, attempt: 0, decision: d, signal: f.signal };
    return { send: false, value: await f.fallback(hint) };
  }
  throw new PolicydError({ cause: undefined, attempts: 0, decision: d, failure });
}
