// The journal side of a call. A journaled call becomes a RetryContext at
// its first failure: begin starts it (so that the agent and labels are
// recorded), NextDelay records each attempt with its decision, and finish
// ends it with the outcome. Attempts policyd could not record at once
// (journaled=false, or decided while it was unreachable) are recorded again
// when the call ends; every journal write is idempotent, so a repeat is
// harmless. A call that succeeds at once records nothing, even with a
// contextId of the caller's: no RPC on the success path.

import { create } from "@bufbuild/protobuf";
import type { Code } from "@connectrpc/connect";
import { v7 as uuidv7 } from "uuid";
import { type Decision, decisionToProto, durationOf } from "./decision.js";
import { type Failure, failureToProto } from "./failure.js";
import { Outcome, type RecordAttemptRequest, RecordAttemptRequestSchema } from "./gen/policyd/v1/journal_pb.js";
import type { ClassifyOptions } from "./gen/policyd/v1/policy_pb.js";
import { JOURNAL_OFF, REFUSED } from "./rpc.js";
import type { ClientInternals } from "./transport.js";

/**
 * A new RetryContext id, as the client makes one for a journaled call without
 * a `contextId`: a time-ordered UUIDv7 (RFC 9562), not a random v4. The
 * journal's primary keys are B-trees on the context id, and random ids land on
 * random pages of a large table, which costs full-page images in the WAL after
 * each checkpoint (+60 % WAL bytes measured on a 6M-row table), buffer misses
 * and ~6-7 µs more per row; v7 ids are appended at the right edge of the
 * index. Use it for a `contextId` of your own too.
 */
export function newContextId(): string {
  return uuidv7();
}

/** How a journaled call ended. */
export type JournalOutcome = "RESOLVED" | "FAILED" | "ABANDONED";

/** @internal What a call tells its journal. */
export interface JournalCall {
  on: boolean;
  contextId: string;
  agent: string;
  provider: string;
  model: string;
  operation: string;
  profile: string;
  labels: Record<string, string>;
}

/** @internal One call's RetryContext. */
export class Journal {
  readonly #c: ClientInternals;
  readonly #call: JournalCall;
  #on: boolean;
  #contextId: string;
  #begun = false;
  /** An attempt failed: the context exists, or will. */
  #failed = false;
  #finished = false;
  #pending: RecordAttemptRequest[] = [];

  constructor(c: ClientInternals, call: JournalCall) {
    this.#c = c;
    this.#call = call;
    this.#on = call.on;
    this.#contextId = call.contextId;
  }

  /** The context id to send with NextDelay; "" when the call is not journaled. */
  get id(): string {
    return this.#on ? this.#contextId : "";
  }

  /** The context id for PolicydError; "" when not journaled or never begun. */
  get contextId(): string {
    return this.id;
  }

  /**
   * begin starts the RetryContext, once, at the first failure. It answers
   * false when policyd did not answer (unreachable, slow, or the signal
   * ended first); a refusal (no database, a bad request) turns journaling
   * off for the call and answers true, or throws the PolicydOptionsError
   * (or PolicydAuthError) when the call's own options were refused.
   */
  async begin(signal: AbortSignal | undefined, deadlineMs: number | undefined): Promise<boolean> {
    if (!this.#on || this.#begun) return true;
    this.#failed = true;
    if (!this.#contextId) this.#contextId = newContextId();
    const call = this.#call;
    const res = await this.#c.rpc("BeginContext", signal, deadlineMs, (o) =>
      this.#c.journalService.beginContext(
        {
          contextId: this.#contextId,
          agent: call.agent,
          provider: call.provider,
          model: call.model,
          operation: call.operation,
          profile: call.profile,
          labels: call.labels,
        },
        o,
      ),
    );
    if (res.ok) {
      this.#begun = true;
      return true;
    }
    if (res.code !== undefined && JOURNAL_OFF.has(res.code)) {
      this.#on = false;
      this.#c.warnOnce(
        "journal-off",
        "policyd: the daemon's journal is off; journaled calls are not recorded (start policyd serve with --database-url)",
      );
      return true;
    }
    if (res.code !== undefined && REFUSED.has(res.code)) {
      this.#on = false; // the client's warning names the refusal
      // e.g. a contextId that is not a UUID: the caller's to fix
      const refusal = this.#c.refusal("BeginContext", res.error);
      if (refusal) throw refusal;
      return true;
    }
    // policyd is unreachable: finish begins the context once it answers.
    return false;
  }

  /**
   * record keeps an attempt policyd has not journaled, to record when the
   * call ends; without a decision the attempt is recorded alone.
   */
  record(
    failure: Failure,
    attempt: number,
    tookMs: number,
    options: ClassifyOptions | undefined,
    decision?: Decision,
  ): void {
    if (!this.#on) return;
    if (!this.#contextId) this.#contextId = newContextId();
    const req = create(RecordAttemptRequestSchema, {
      contextId: this.#contextId,
      attempt,
      failure: failureToProto(failure),
      duration: durationOf(tookMs),
      profile: this.#call.profile,
    });
    if (options) req.options = options;
    if (decision && decision.action !== "") req.decision = decisionToProto(decision);
    this.#pending.push(req);
    this.#failed = true;
  }

  /**
   * giveUp ends a call its signal ended during an attempt: the attempt is
   * recorded and the context finished, in the background.
   */
  giveUp(
    failure: Failure,
    attempt: number,
    tookMs: number,
    options: ClassifyOptions | undefined,
    outcome: JournalOutcome,
    signal: AbortSignal,
  ): void {
    this.record(failure, attempt, tookMs, options);
    void this.finish(outcome, signal);
  }

  /** Whether finish has a context to finish: journaled, begun by a failure, not finished yet. */
  get open(): boolean {
    return this.#on && this.#failed && !this.#finished;
  }

  /**
   * finish ends the call's RetryContext, if it has one (an attempt failed).
   * While signal is alive it does so before returning; once signal has
   * aborted (the caller aborted, or the deadline passed) it does so in the
   * background, so that the call returns at once. Either way the caller
   * waits at most the daemon timeout. When policyd does not answer,
   * finishing is retried in the background (FINISH_RETRY_DELAYS_MS; close
   * stops it), so that a run that ended while policyd was away is not left
   * in progress.
   */
  async finish(outcome: JournalOutcome, signal: AbortSignal): Promise<void> {
    if (!this.open) return;
    this.#finished = true;
    if (signal.aborted) {
      this.#c.track(this.#retryFlush(outcome, true));
      return;
    }
    if (!(await this.#flush(outcome))) this.#c.track(this.#retryFlush(outcome, false));
  }

  /** #retryFlush flushes (at once when now), then after each delay while policyd does not answer. */
  async #retryFlush(outcome: JournalOutcome, now: boolean): Promise<void> {
    if (now && (await this.#flush(outcome))) return;
    const closing = this.#c.closing;
    for (const delayMs of FINISH_RETRY_DELAYS_MS) {
      if (!(await sleepUnlessClosed(delayMs, closing))) return;
      if (await this.#flush(outcome)) return;
    }
    this.#c.logger.warn(
      `policyd journal: gave up finishing context ${this.#contextId}; policyd will mark it abandoned`,
    );
  }

  /**
   * #flush begins the context if need be, records the pending attempts and
   * finishes it. It answers false when policyd did not answer, so that
   * finish tries again later (every step is idempotent), and true when it
   * is done, or refused in a way a repeat would not change.
   */
  async #flush(outcome: JournalOutcome): Promise<boolean> {
    const c = this.#c;
    const deadlineMs = c.clock.now() + c.daemonTimeoutMs;
    const signal = AbortSignal.timeout(c.daemonTimeoutMs);
    const answered = (res: { ok: boolean; code?: Code | undefined }) =>
      res.ok || (res.code !== undefined && REFUSED.has(res.code));
    try {
      if (!this.#begun) {
        if (!(await this.begin(signal, deadlineMs))) return false;
        if (!this.#on || !this.#begun) return true;
      }
      while (this.#pending.length > 0) {
        const req = this.#pending[0]!;
        const res = await c.rpc("RecordAttempt", signal, deadlineMs, (o) => c.journalService.recordAttempt(req, o));
        if (!answered(res)) return false;
        this.#pending.shift();
      }
      const res = await c.rpc("FinishContext", signal, deadlineMs, (o) =>
        c.journalService.finishContext({ contextId: this.#contextId, outcome: OUTCOMES[outcome] }, o),
      );
      if (!res.ok) c.logger.debug?.(`policyd: could not finish the journal context ${this.#contextId} (${outcome})`);
      return answered(res);
    } catch (err) {
      // The call is over: a refusal is logged, never thrown at the caller.
      c.logger.debug?.(`policyd: journal error for context ${this.#contextId}: ${String(err)}`);
      return true;
    }
  }
}

/**
 * The waits between background attempts to finish a context policyd did
 * not answer for: about a minute in all, long enough for a daemon restart.
 * policyd marks a context nobody finished abandoned after its
 * --abandon-after.
 */
const FINISH_RETRY_DELAYS_MS = [250, 500, 1000, 2000, 4000, 8000, 15000, 30000];

/** sleepUnlessClosed waits ms; false when closing aborted first. The timer never keeps Node running. */
function sleepUnlessClosed(ms: number, closing: AbortSignal): Promise<boolean> {
  if (closing.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(t);
      closing.removeEventListener("abort", onAbort);
      resolve(ok);
    };
    const onAbort = () => done(false);
    const t = setTimeout(() => done(true), ms);
    t.unref?.();
    closing.addEventListener("abort", onAbort, { once: true });
  });
}

const OUTCOMES: Record<JournalOutcome, Outcome> = {
  RESOLVED: Outcome.RESOLVED,
  FAILED: Outcome.FAILED,
  ABANDONED: Outcome.ABANDONED,
};
