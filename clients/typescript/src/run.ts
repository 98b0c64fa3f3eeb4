// The retry loop of one call (PolicydClient.call): gate the first attempt
// (coordinate.ts), run the attempts, map each failure to a Failure, decide
// (policyd's NextDelay, else the fail-open policy), then wait (abortably,
// never past the deadline), stop with the original error and the decision's
// reason, or hand the fallback hint to the caller's fallback function;
// journaled calls are recorded as it goes (journal.ts). It exists apart from
// client.ts so that the loop reads top to bottom in one place, with all it
// needs from its client named in RunContext.

import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { PolicydAuthError, PolicydOptionsError } from "./auth.js";
import type { Coordinator } from "./coordinate.js";
import { gateFirstAttempt, park } from "./first_attempt.js";
import { type Decision, decisionFromProto, durationOf, explain, values } from "./decision.js";
import { type Failure, failureFromError, failureToProto } from "./failure.js";
import { callTelemetry } from "./otel.js";
import type { ClassifyOptions, Decision as PbDecision } from "./gen/policyd/v1/policy_pb.js";
import { HttpError } from "./http_error.js";
import { Journal } from "./journal.js";
import {
  type Attempt,
  type CallOptions,
  type ClientOptions,
  classifyOptionsOf,
  deadlineOf,
  gateCallOf,
  type Settings,
  targetOf,
} from "./options.js";
import { PolicydError } from "./policyd_error.js";
import { budgetStop } from "./texts.js";
import type { RpcResult } from "./rpc.js";
import { AttemptSignal, Budget } from "./signals.js";
import type { Daemon } from "./transport.js";

/** @internal What the retry loop needs from its client. */
export interface RunContext {
  readonly settings: Settings;
  readonly daemon: Daemon;
  /** The fleet gate; undefined when it is off. */
  readonly coordinator: Coordinator | undefined;
  readonly onDecision: ClientOptions["onDecision"];
}

/** What a call fixed before its first attempt, for decide. */
interface CallState {
  options: CallOptions<unknown>;
  profile: string;
  classifyOptions: ClassifyOptions | undefined;
  journal: Journal;
  start: number;
  deadlineMs: number | undefined;
  /** The call's signal: the caller's, and the deadline's. */
  signal: AbortSignal;
}

/** @internal run is PolicydClient.call (see there). */
export async function run<T>(
  ctx: RunContext,
  fn: (attempt: Attempt) => T | Promise<T>,
  options: CallOptions<T>,
): Promise<T> {
  const s = ctx.settings;
  const clock = s.clock;
  const callerSignal = options.signal;
  callerSignal?.throwIfAborted();
  const { cls, inputTokens } = gateCallOf(options);
  const start = clock.now();
  const deadlineMs = deadlineOf(options, start);
  const budget = new Budget(callerSignal, deadlineMs === undefined ? undefined : deadlineMs - clock.now());
  const signal = budget.signal;
  const profile = options.profile ?? s.profile;
  const journal = new Journal(ctx.daemon, {
    on: options.contextId ? true : (options.journal ?? s.journal),
    contextId: options.contextId ?? "",
    agent: options.agent ?? s.agent,
    provider: options.provider ?? "",
    model: options.model ?? "",
    operation: options.operation ?? "",
    profile,
    labels: options.labels ?? {},
  });
  const classifyOptions = classifyOptionsOf(options);
  const call: CallState = { options, profile, classifyOptions, journal, start, deadlineMs, signal };
  let lastError: unknown;
  let lastFailure: Failure | undefined;
  let lastDecision: Decision | undefined;
  const coord = options.provider ? ctx.coordinator : undefined;
  const target = targetOf(options);
  // The first attempt is in flight from its admission by the gate (the lease counts it at once).
  let firstEnded: (() => void) | undefined;
  // OpenTelemetry, when the application has it (otel.ts): every decision goes through its hook.
  const telemetry = callTelemetry(options.provider, options.model);
  const onDecision = telemetry ? telemetry.hook(ctx.onDecision) : ctx.onDecision;
  try {
    if (coord) {
      let gated = gateFirstAttempt(coord, {
        target,
        cls,
        inputTokens,
        deadlineMs,
        clock,
        signal,
        callerSignal,
        fallback: options.fallback,
        operation: options.operation ?? "",
        onDecision,
      });
      if (gated instanceof Promise) gated = await gated;
      if (!gated.send) return gated.value;
      firstEnded = gated.ended;
    }
    for (let attempt = 1; ; attempt++) {
      if (attempt > 1 && coord) {
        // A retry passes the gate too: an open breaker parks it until the fleet sees the provider back.
        const remaining = deadlineMs === undefined ? undefined : Math.max(0, deadlineMs - clock.now());
        let g = coord.checkRetry(target, remaining);
        if (g.verdict.action === "park") g = await park(coord, target, g, signal, callerSignal, onDecision);
        if (g.verdict.action === "stop" || g.verdict.action === "fall_back") {
          void journal.finish("FAILED", signal);
          const stop = g.decision({ ...g.verdict, action: "stop" });
          telemetry?.decision(stop, "gate");
          throw new PolicydError({
            cause: lastError,
            attempts: attempt - 1,
            decision: stop,
            failure: lastFailure ?? failureOf(lastError, options),
            contextId: journal.contextId,
          });
        }
        coord.retry(target, inputTokens);
      }
      telemetry?.attempt(attempt);
      const began = clock.now();
      let result: T;
      const attemptSignal = new AttemptSignal(signal, options.attemptTimeoutMs);
      const settled = firstEnded ?? coord?.began(target); // the attempt is in flight while it runs
      firstEnded = undefined;
      try {
        const a: Attempt = { attempt, signal: attemptSignal.signal };
        if (attempt > 1) a.lastError = lastError;
        if (lastDecision) a.lastDecision = lastDecision;
        result = await fn(a);
        settled?.();
        attemptSignal.dispose();
        coord?.outcome(target, true);
      } catch (thrown) {
        settled?.();
        attemptSignal.dispose();
        let err = thrown;
        if (typeof Response !== "undefined" && err instanceof Response) {
          err = await HttpError.fromResponse(err, options.method ? { method: options.method } : {});
        }
        lastError = err;
        const took = clock.now() - began;
        const failure = failureOf(err, options);
        lastFailure = failure;

        if (callerSignal?.aborted) {
          // The caller aborted while the attempt ran: nothing to decide.
          journal.giveUp(failure, attempt, took, classifyOptions, "ABANDONED", signal);
          throw callerSignal.reason;
        }
        coord?.outcome(target, false);
        // The call's time budget ran out: the error says so, and the journal
        // records the attempt as the last of a failed context.
        const outOfTime = (): PolicydError => {
          journal.giveUp(failure, attempt, took, classifyOptions, "FAILED", signal);
          return new PolicydError({
            cause: err,
            attempts: attempt,
            decision: deadlineDecision(attempt),
            failure,
            contextId: journal.contextId,
          });
        };
        if (budget.expired) throw outOfTime();

        let decision: Decision | undefined;
        try {
          decision = await decide(ctx, call, failure, attempt, took);
        } catch (refusal) {
          // A refused token or option is a configuration error: failing open would hide it.
          if (refusal instanceof PolicydAuthError || refusal instanceof PolicydOptionsError) {
            refusal.error = err;
            void journal.finish("FAILED", signal);
          }
          throw refusal;
        }
        if (callerSignal?.aborted) {
          journal.giveUp(failure, attempt, took, classifyOptions, "ABANDONED", signal);
          throw callerSignal.reason;
        }
        if (!decision || budget.expired) throw outOfTime();
        lastDecision = decision;
        if (decision.failOpen) {
          coord?.failedLocally(target, decision.classification.failureType);
          // policyd away: the process's own budget limits retries, never first attempts.
          if (decision.action === "RETRY" && coord && !coord.allowRetry(target)) {
            decision = budgetStop(decision, target);
            lastDecision = decision;
          }
        }
        s.logger.debug?.(
          `policyd: attempt ${attempt} failed: ${decision.action}${decision.action === "RETRY" ? ` after ${decision.delayMs}ms` : ""}: ${explain(decision)}`,
        );
        onDecision?.({ attempt, error: err, decision });

        if (decision.action === "RETRY") {
          try {
            await clock.sleep(decision.delayMs, signal);
          } catch {
            void journal.finish(callerSignal?.aborted ? "ABANDONED" : "FAILED", signal);
            if (callerSignal?.aborted) throw callerSignal.reason;
            throw new PolicydError({
              cause: err,
              attempts: attempt,
              decision: deadlineDecision(attempt),
              failure,
              contextId: journal.contextId,
            });
          }
          continue;
        }
        if (decision.action === "FALL_BACK" && options.fallback) {
          return await fallBack(options.fallback, decision, err, attempt, journal, signal);
        }
        await journal.finish("FAILED", signal);
        throw new PolicydError({ cause: err, attempts: attempt, decision, failure, contextId: journal.contextId });
      }
      if (journal.open) await journal.finish("RESOLVED", signal);
      return result;
    }
  } finally {
    telemetry?.end();
    budget.dispose();
  }
}

/** failureOf maps an attempt's error to a Failure, with what the call names. */
function failureOf(err: unknown, options: CallOptions<unknown>): Failure {
  const f = failureFromError(err);
  f.provider = options.provider ?? "";
  f.model = options.model ?? "";
  f.keyId = options.keyId ?? "";
  f.operation = options.operation ?? "";
  if (options.method) f.method = options.method.toUpperCase();
  return f;
}

/**
 * decide asks policyd, or the fail-open policy when policyd cannot
 * answer; undefined when the signal ended first.
 */
async function decide(
  ctx: RunContext,
  call: CallState,
  failure: Failure,
  attempt: number,
  took: number,
): Promise<Decision | undefined> {
  const { settings: s, daemon } = ctx;
  const { options, journal, deadlineMs, signal, classifyOptions } = call;
  const clock = s.clock;
  // When BeginContext got no answer, policyd is down or hung: decide at
  // once rather than wait a second daemon timeout for NextDelay.
  const reachable = await journal.begin(signal, deadlineMs);
  if (signal.aborted) return undefined;
  const now = clock.now();
  const req = {
    failure: failureToProto(failure),
    attempt,
    profile: call.profile,
    elapsed: durationOf(now - call.start),
    safety: values.safety(options.safety ?? ""),
    contextId: journal.id,
    clientId: s.clientId,
    ...(classifyOptions ? { options: classifyOptions } : {}),
    ...(deadlineMs !== undefined ? { deadline: timestampFromMs(deadlineMs) } : {}),
  };
  const res: RpcResult<{ decision?: PbDecision | undefined }> = reachable
    ? await daemon.rpc("NextDelay", signal, deadlineMs, (o) => daemon.policy.nextDelay(req, o))
    : { ok: false, code: undefined };
  if (signal.aborted) return undefined;
  const refusal = res.ok ? undefined : daemon.refusal("NextDelay", res.error);
  if (refusal) throw refusal;
  let d: Decision;
  if (res.ok) {
    ctx.coordinator?.daemonAnswered(); // a broken fleet stream reopens now
    d = decisionFromProto(res.value.decision);
  } else {
    d = s.failOpen.decide(failure, {
      attempt,
      nowMs: now,
      deadlineMs,
      safety: options.safety,
      random: s.random,
    });
  }
  // Whoever decided, never wait past the caller's deadline.
  if (d.action === "RETRY" && deadlineMs !== undefined && clock.now() + d.delayMs > deadlineMs) {
    d.action = "STOP";
    d.stopReason = "DEADLINE";
    d.stopText = `waiting ${d.delayMs}ms would pass the deadline`;
    d.delayMs = 0;
  }
  if (journal.id && !d.journaled) journal.record(failure, attempt, took, classifyOptions, d);
  return d;
}

/**
 * fallBack hands a FALL_BACK decision to the call's fallback function: its
 * result is the call's, what it throws is what the call throws, and the
 * journal records the outcome either way.
 */
async function fallBack<T>(
  fallback: NonNullable<CallOptions<T>["fallback"]>,
  decision: Decision,
  err: unknown,
  attempt: number,
  journal: Journal,
  signal: AbortSignal,
): Promise<T> {
  let value: T;
  try {
    value = await fallback({
      kind: decision.fallback.kind,
      reason: decision.fallback.reason || decision.stopText,
      provider: decision.fallback.provider,
      model: decision.fallback.model,
      error: err,
      attempt,
      decision,
      signal,
    });
  } catch (fbErr) {
    await journal.finish("FAILED", signal);
    throw fbErr;
  }
  await journal.finish("RESOLVED", signal);
  return value;
}

/** The client's own decision when the call's deadline passed during an attempt or a wait. */
function deadlineDecision(attempt: number): Decision {
  return {
    action: "STOP",
    delayMs: 0,
    classification: {
      failureType: "TIMEOUT",
      retryable: false,
      rule: "client.deadline",
      reason: "the call's deadline passed",
      recoveryAction: "Give the call a longer deadline (timeoutMs), or make each attempt faster.",
      retryAfterSource: "",
      continuationPrompt: "",
    },
    attemptsLeft: 0,
    stopReason: "DEADLINE",
    stopText: `the call's deadline passed during attempt ${attempt}`,
    fallback: { kind: "", reason: "", provider: "", model: "" },
    strategy: { name: "", summary: "" },
    journaled: false,
    failOpen: false,
  };
}
