// What the caller sees of the fleet gate (docs/clients.md, "What the caller
// sees"; clients/testdata/gate.json pins it): the sentence of a first
// attempt the gate did not admit, the decision it carries with its fleet
// fields, and the stop of a retry the process's own budget refused. The Go
// and Python clients and the daemon's reference gate (internal/refgate)
// render the same.

import type { Decision, FleetState, StopReason } from "./decision.js";
import type { GateAssignment, GateVerdict, Target } from "./gate.js";

/** targetName is a target as the texts name it: provider/model@key. */
export function targetName(t: { provider: string; model: string; keyId: string }): string {
  return `${t.provider}${t.model ? `/${t.model}` : ""}${t.keyId ? `@${t.keyId}` : ""}`;
}

const RECOVERY: Partial<Record<StopReason, string>> = {
  FLEET_STOP:
    "Another agent's failure stopped this key for the fleet (a revoked key, an exhausted quota): fix the key or wait for the stop to end.",
  CIRCUIT_OPEN:
    "The target is failing for the fleet: fall back to another model or provider (a fallback function), or try again in a few seconds.",
  FLEET_SHED: "The fleet is pacing first attempts to this target: try again shortly, or fall back.",
  DEADLINE: "Give the call a longer deadline, or fall back.",
  RETRY_BUDGET_EXHAUSTED:
    "Recent attempts to this target failed while policyd was unreachable: try again in a few seconds, or bring policyd back.",
};

/**
 * gateDecision is the decision a gate that did not admit gives the caller
 * (in a PolicydError, or a fallback hint): action STOP or FALL_BACK, the
 * stop reason, a sentence naming the reason and the assignment's own, and
 * what the assignment said (as FleetState, bucket "").
 */
export function gateDecision(v: GateVerdict, t: Target, a: GateAssignment | undefined, ageMs: number): Decision {
  const what = gateText(v, t, a, ageMs);
  const gaveUp = v.stopReason === "DEADLINE" && (v.waitedMs ?? 0) > 0 && v.reason.startsWith("gave up waiting");
  const stopText = gaveUp ? v.reason : v.reason ? `${what}: ${v.reason}` : what;
  const fb = v.fallback;
  const fleet: FleetState = {
    bucket: "",
    breaker: a?.breaker ?? "",
    holdRemainingMs: Math.max(0, (a?.holdMs ?? 0) - ageMs),
    openRemainingMs: Math.max(0, (a?.stopMs ?? 0) - ageMs),
    budgetTokens: 0,
    budgetExhausted: false,
    stopped: v.stopReason === "FLEET_STOP",
    changed: true,
    reason: a?.reason ?? "",
  };
  return {
    action: v.action === "fall_back" ? "FALL_BACK" : "STOP",
    delayMs: 0,
    classification: {
      failureType: "",
      retryable: false,
      rule: "fleet.gate",
      reason: what,
      recoveryAction: RECOVERY[v.stopReason] ?? "",
      retryAfterSource: "",
      continuationPrompt: "",
    },
    attemptsLeft: 0,
    stopReason: v.stopReason,
    stopText,
    fallback: fb
      ? { kind: fb.kind, reason: fb.reason || stopText, provider: fb.provider, model: fb.model }
      : { kind: "", reason: "", provider: "", model: "" },
    strategy: { name: "", summary: "" },
    journaled: false,
    fleet,
    failOpen: false,
  };
}

/** The seconds a text names: one decimal ("4.0 s"). */
function seconds(ms: number): string {
  return `${(Math.max(0, ms) / 1000).toFixed(1)} s`;
}

/** gateText is what the fleet does to a first attempt it did not admit, without the assignment's reason. */
function gateText(v: GateVerdict, t: Target, a: GateAssignment | undefined, ageMs: number): string {
  const name = targetName(t);
  switch (v.stopReason) {
    case "FLEET_STOP":
      return `the fleet stopped calls to ${name} for another ${seconds((a?.stopMs ?? 0) - ageMs)}`;
    case "CIRCUIT_OPEN":
      return a?.breaker === "HALF_OPEN"
        ? `the fleet's circuit breaker for ${name} is half-open and this process has no probe permit left`
        : `the fleet's circuit breaker for ${name} is open`;
    case "FLEET_SHED": {
      if (v.atLease)
        return `this process has ${v.inFlight ?? 0} requests in flight to ${name}, its lease of the fleet's cap`;
      const share = (v.batchShare ? a?.batchAdmitFraction : a?.admitFraction) ?? 0;
      const which = v.batchShare ? "batch first attempts" : "first attempts";
      return `the fleet admits ${Math.floor(share * 100 + 0.5)}% of ${which} to ${name}, not this one`;
    }
    case "DEADLINE":
      return `the fleet holds first attempts to ${name} for another ${seconds((a?.holdMs ?? 0) - ageMs)}, past the deadline`;
    default:
      return `the fleet did not admit a first attempt to ${name}`;
  }
}

/** budgetText is the stop text of a retry the process's own budget refused (policyd unreachable). */
export function budgetText(t: Target): string {
  return `policyd is unreachable and this process's own retry budget for ${targetName(t)} is spent`;
}

/**
 * budgetStop turns the fail-open policy's RETRY into a STOP: without
 * policyd, the process's own budget limits retries (never first attempts).
 */
export function budgetStop(d: Decision, t: Target): Decision {
  const text = budgetText(t);
  return {
    ...d,
    action: "STOP",
    delayMs: 0,
    attemptsLeft: 0,
    stopReason: "RETRY_BUDGET_EXHAUSTED",
    stopText: text,
    fleet: {
      bucket: "",
      breaker: "",
      holdRemainingMs: 0,
      openRemainingMs: 0,
      budgetTokens: 0,
      budgetExhausted: true,
      stopped: false,
      changed: true,
      reason: text,
    },
  };
}
