// PolicydError: what client.call rejects with when it gives up.

import { type Decision, explain } from "./decision.js";
import type { Failure } from "./failure.js";

/** What PolicydError is made of. */
export interface PolicydErrorInit {
  /** The last attempt's error. */
  cause: unknown;
  attempts: number;
  decision: Decision;
  failure: Failure;
  contextId?: string | undefined;
}

/**
 * PolicydError is the last attempt's error (its `cause`, as thrown) with
 * why policyd gave up: the decision that stopped the call (STOP, or
 * FALL_BACK without a fallback function) and its recovery action. When the
 * fleet gate stopped the call before its first attempt, `attempts` is 0,
 * `cause` undefined and the decision's rule "fleet.gate". Its
 * message is the attempt's message followed by the reason, e.g.
 * `HTTP 401 Unauthorized (POST http://…) (policyd: stopped after 1 attempt:
 * not retryable: Fix the API credentials … [AUTH_INVALID, rule auth.invalid])`.
 */
export class PolicydError extends Error {
  override name = "PolicydError";
  /** The last attempt's error, as the operation threw it; undefined when no attempt ran (the fleet gate). */
  declare readonly cause: unknown;
  /** How many attempts ran: 0 when the fleet gate stopped the call. */
  readonly attempts: number;
  /** The decision that ended the call. */
  readonly decision: Decision;
  /** The last failure as policyd was told it. */
  readonly failure: Failure;
  /** The journal's RetryContext id; "" when the call was not journaled. */
  readonly contextId: string;

  constructor(init: PolicydErrorInit) {
    const d = init.decision;
    if (init.attempts === 0) {
      // The fleet gate did not send the first attempt: no attempt, no cause.
      super(`policyd: first attempt not sent (${d.stopReason}): ${explain(d)}`, { cause: init.cause });
    } else {
      const inner = init.cause instanceof Error ? init.cause.message : String(init.cause);
      const n = `${init.attempts} attempt${init.attempts === 1 ? "" : "s"}`;
      // Not "fall back to …": the call did not fall back, it stopped.
      const why =
        d.action === "FALL_BACK"
          ? `policyd advised a fallback to ${fallbackTarget(d)}, and the call has no fallback function: ${explain(d)}`
          : explain(d);
      super(`${inner} (policyd: stopped after ${n}: ${why})`, { cause: init.cause });
    }
    this.attempts = init.attempts;
    this.decision = init.decision;
    this.failure = init.failure;
    this.contextId = init.contextId ?? "";
  }

  /** What to do about the failure, as policyd said it (the decision's recovery action). */
  get recoveryAction(): string {
    return this.decision.classification.recoveryAction;
  }
}

/**
 * fallbackTarget names where a FALL_BACK decision points: its kind and,
 * when the profile's chain names them, the provider and model, e.g.
 * "OTHER_PROVIDER (anthropic/claude-haiku-4-5)".
 */
function fallbackTarget(d: Decision): string {
  const kind = d.fallback.kind || "UNSPECIFIED";
  const named = [d.fallback.provider, d.fallback.model].filter(Boolean).join("/");
  return named ? `${kind} (${named})` : kind;
}
