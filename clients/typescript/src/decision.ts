// Decision and Classification: policyd's answers, as plain objects with
// string enum names, and their conversion from and to the generated
// messages. The names are the proto enum value names without their prefix
// ("RATE_LIMIT" for FAILURE_TYPE_RATE_LIMIT); "" stands for *_UNSPECIFIED.

import { create } from "@bufbuild/protobuf";
import type { Duration } from "@bufbuild/protobuf/wkt";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import {
  ClassificationSchema,
  DecisionSchema,
  FallbackSchema,
  Action as PbAction,
  BreakerState as PbBreakerState,
  type Classification as PbClassification,
  type Decision as PbDecision,
  FailureType as PbFailureType,
  FallbackKind as PbFallbackKind,
  type FleetState as PbFleetState,
  OperationSafety as PbOperationSafety,
  StopReason as PbStopReason,
} from "./gen/policyd/v1/policy_pb.js";

/** What kind of failure happened, independent of provider. */
export type FailureType =
  | ""
  | "RATE_LIMIT"
  | "QUOTA_EXHAUSTED"
  | "OVERLOADED"
  | "SERVER_ERROR"
  | "TIMEOUT"
  | "CONNECTION_ERROR"
  | "STREAM_INTERRUPTED"
  | "INVALID_STREAM"
  | "AUTH_INVALID"
  | "PERMISSION_DENIED"
  | "CONTEXT_TOO_LONG"
  | "INVALID_REQUEST"
  | "CONTENT_POLICY"
  | "NOT_FOUND"
  | "UNSUPPORTED"
  | "CANCELED"
  | "TASK_TRANSIENT"
  | "TASK_FATAL"
  | "UNKNOWN";

/** What to do after a failed attempt. */
export type Action = "" | "RETRY" | "STOP" | "FALL_BACK";

/** Why the answer is not to retry. */
export type StopReason =
  | ""
  | "NOT_RETRYABLE"
  | "ATTEMPTS_EXHAUSTED"
  | "DEADLINE"
  | "SERVER_DELAY_ABOVE_CEILING"
  | "IRREVERSIBLE_OPERATION"
  | "CONTINUATION_OFF"
  | "STREAM_PHASE"
  // Fleet memory: the breaker for this provider and model is open, its retry
  // budget is spent, or another agent's failure stopped every agent on this key.
  | "CIRCUIT_OPEN"
  | "RETRY_BUDGET_EXHAUSTED"
  | "FLEET_STOP"
  // The fleet gate: the fleet admits only a share of first attempts to the target.
  | "FLEET_SHED";

/** What to fall back to. */
export type FallbackKind = "" | "LARGER_CONTEXT_MODEL" | "OTHER_PROVIDER" | "OTHER_MODEL";

/**
 * Whether an operation may be repeated. "" lets policyd derive it from the
 * operation and method: model calls and GET, HEAD, OPTIONS are safe; other
 * methods and shell, exec, deploy operations are irreversible; file writes
 * are conditional.
 */
export type Safety = "" | "SAFE" | "CONDITIONAL" | "IRREVERSIBLE";

/** The state of a fleet circuit breaker; "" when policyd did not say. */
export type BreakerState = "" | "CLOSED" | "OPEN" | "HALF_OPEN";

/**
 * What policyd's fleet memory knows about a failure's bucket: the failures
 * of every agent on the same provider, model and key.
 */
export interface FleetState {
  /** The bucket's name, e.g. "availability:openai/gpt-4o" or "rate_limit:openai/gpt-4o@prod-key". */
  bucket: string;
  /** The bucket's circuit breaker. */
  breaker: BreakerState;
  /** The shared cooldown left, in milliseconds. */
  holdRemainingMs: number;
  /** How much longer the breaker stays open or the key stopped, in milliseconds. */
  openRemainingMs: number;
  /** The retry budget left (negative while retries are paced). */
  budgetTokens: number;
  /** Whether the retry budget is spent. */
  budgetExhausted: boolean;
  /** Another agent's failure stopped this key. */
  stopped: boolean;
  /** The fleet changed this decision (a longer wait, a stop or a fallback). */
  changed: boolean;
  /** Why, for a human, e.g. "24 failures in 10s from 6 clients (OVERLOADED); open for 5s". */
  reason: string;
}

/** What policyd makes of a failure. */
export interface Classification {
  /** The kind of failure. */
  failureType: FailureType;
  /** Whether another attempt can succeed. */
  retryable: boolean;
  /** The id of the rule that decided, e.g. "auth.invalid"; fail-open rules start with "fail_open.". */
  rule: string;
  /** Why the rule decided so. */
  reason: string;
  /** What the user or the model should do; short and deterministic. */
  recoveryAction: string;
  /** The server's delay hint in milliseconds; undefined when it gave none. */
  retryAfterMs?: number;
  /** Where the delay hint came from, e.g. "header retry-after". */
  retryAfterSource: string;
  /** For INVALID_STREAM: the prompt that continues the response, e.g. "Please continue.". */
  continuationPrompt: string;
}

/**
 * What to do after a failed attempt: policyd's answer to NextDelay, or the
 * fail-open policy's when policyd could not be asked (failOpen true).
 */
export interface Decision {
  /** What to do next. */
  action: Action;
  /** How long to wait before the next attempt (RETRY), in milliseconds. */
  delayMs: number;
  /** What the failure is. */
  classification: Classification;
  /** How many attempts are still allowed after this one. */
  attemptsLeft: number;
  /** Why not to retry (STOP, and FALL_BACK when retrying ended). */
  stopReason: StopReason;
  /** The reason in a sentence. */
  stopText: string;
  /**
   * What to fall back to (FALL_BACK); kind "" when nothing. provider and
   * model name the target from policyd's fallback chains (the policy file's
   * fallbacks), "" when the policy names none.
   */
  fallback: { kind: FallbackKind; reason: string; provider: string; model: string };
  /** The strategy applied: name "<profile>/<FAILURE_TYPE>" (e.g. "default/RATE_LIMIT") and a one-line summary. */
  strategy: { name: string; summary: string };
  /** Whether policyd recorded the attempt in its journal. */
  journaled: boolean;
  /** What policyd's fleet memory knew and did; undefined when the failure's bucket had no state (or the fleet is off). */
  fleet?: FleetState;
  /** True when the client decided with its fail-open policy because policyd was unreachable or too slow. */
  failOpen: boolean;
  /**
   * Set on the decisions the hook sees for a call the fleet gate parks
   * (attempt 0): as it parks (stopText "waiting for the fleet: breaker open
   * on openai/gpt-4o, ~4 s") and as it leaves (waitedMs: how long it waited).
   */
  parked?: boolean;
  waitedMs?: number;
}

function nameOf<T extends string>(e: Record<number, string>, v: number): T {
  if (v === 0) return "" as T;
  return (e[v] ?? `UNKNOWN_${v}`) as T;
}

function enumValue(e: Record<string, number | string>, name: string): number {
  if (name === "") return 0;
  const v = e[name];
  return typeof v === "number" ? v : 0;
}

/** @internal */
export const names = {
  failureType: (v: PbFailureType) => nameOf<FailureType>(PbFailureType, v),
  action: (v: PbAction) => nameOf<Action>(PbAction, v),
  stopReason: (v: PbStopReason) => nameOf<StopReason>(PbStopReason, v),
  fallbackKind: (v: PbFallbackKind) => nameOf<FallbackKind>(PbFallbackKind, v),
  breaker: (v: PbBreakerState) => nameOf<BreakerState>(PbBreakerState, v),
};

/** @internal */
export const values = {
  failureType: (n: FailureType) => enumValue(PbFailureType, n) as PbFailureType,
  action: (n: Action) => enumValue(PbAction, n) as PbAction,
  stopReason: (n: StopReason) => enumValue(PbStopReason, n) as PbStopReason,
  fallbackKind: (n: FallbackKind) => enumValue(PbFallbackKind, n) as PbFallbackKind,
  safety: (n: Safety) => enumValue(PbOperationSafety, n) as PbOperationSafety,
};

/** @internal Milliseconds in a protobuf Duration. */
export function durationMs(d: Duration | undefined): number {
  if (!d) return 0;
  return Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6);
}

/** @internal A protobuf Duration of ms milliseconds (negative: 0). */
export function durationOf(ms: number): Duration {
  const total = Math.max(0, Math.round(ms));
  const seconds = Math.floor(total / 1000);
  return create(DurationSchema, { seconds: BigInt(seconds), nanos: (total - seconds * 1000) * 1e6 });
}

/** @internal */
export function classificationFromProto(c: PbClassification | undefined): Classification {
  const out: Classification = {
    failureType: names.failureType(c?.failureType ?? 0),
    retryable: c?.retryable ?? false,
    rule: c?.rule ?? "",
    reason: c?.reason ?? "",
    recoveryAction: c?.recoveryAction ?? "",
    retryAfterSource: c?.retryAfterSource ?? "",
    continuationPrompt: c?.continuationPrompt ?? "",
  };
  if (c?.retryAfter) out.retryAfterMs = durationMs(c.retryAfter);
  return out;
}

/** @internal */
export function fleetFromProto(f: PbFleetState): FleetState {
  return {
    bucket: f.bucket,
    breaker: names.breaker(f.breaker),
    holdRemainingMs: durationMs(f.holdRemaining),
    openRemainingMs: durationMs(f.openRemaining),
    budgetTokens: f.budgetTokens,
    budgetExhausted: f.budgetExhausted,
    stopped: f.stopped,
    changed: f.changed,
    reason: f.reason,
  };
}

/** @internal */
export function decisionFromProto(d: PbDecision | undefined): Decision {
  const out: Decision = {
    action: names.action(d?.action ?? 0),
    delayMs: durationMs(d?.delay),
    classification: classificationFromProto(d?.classification),
    attemptsLeft: d?.attemptsLeft ?? 0,
    stopReason: names.stopReason(d?.stopReason ?? 0),
    stopText: d?.stopText ?? "",
    fallback: {
      kind: names.fallbackKind(d?.fallback?.kind ?? 0),
      reason: d?.fallback?.reason ?? "",
      provider: d?.fallback?.provider ?? "",
      model: d?.fallback?.model ?? "",
    },
    strategy: { name: d?.strategy?.name ?? "", summary: d?.strategy?.summary ?? "" },
    journaled: d?.journaled ?? false,
    failOpen: false,
  };
  if (d?.fleet) out.fleet = fleetFromProto(d.fleet);
  return out;
}

/** @internal A client-side (fail-open) decision, for RecordAttempt. */
export function decisionToProto(d: Decision): PbDecision {
  const c = d.classification;
  const pb = create(DecisionSchema, {
    action: values.action(d.action),
    classification: create(ClassificationSchema, {
      failureType: values.failureType(c.failureType),
      retryable: c.retryable,
      rule: c.rule,
      reason: c.reason,
      recoveryAction: c.recoveryAction,
    }),
    attemptsLeft: d.attemptsLeft,
    stopReason: values.stopReason(d.stopReason),
    stopText: d.stopText,
    strategy: { name: d.strategy.name, summary: d.strategy.summary },
  });
  if (c.retryAfterMs !== undefined && pb.classification) pb.classification.retryAfter = durationOf(c.retryAfterMs);
  if (d.action === "RETRY") pb.delay = durationOf(d.delayMs);
  if (d.fallback.kind !== "") {
    const { reason, provider, model } = d.fallback;
    pb.fallback = create(FallbackSchema, { kind: values.fallbackKind(d.fallback.kind), reason, provider, model });
  }
  return pb;
}

/** The decision's reason for not retrying, in a sentence, with its failure type and rule. */
export function explain(d: Decision): string {
  const c = d.classification;
  let s = d.stopText || d.fallback.reason || c.reason || d.action.toLowerCase() || "no decision";
  if (c.recoveryAction && !s.includes(c.recoveryAction)) s += `; ${c.recoveryAction}`;
  // The fleet gate's decisions have a rule and no failure type (no attempt failed).
  const tags = c.failureType || !c.rule ? [c.failureType || "UNSPECIFIED"] : [];
  if (c.rule) tags.push(`rule ${c.rule}`);
  if (d.failOpen) tags.push("fail-open");
  return `${s} [${tags.join(", ")}]`;
}
