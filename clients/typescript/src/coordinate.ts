// Coordinator: one client's side of fleet memory (docs/clients.md, "The
// fleet gate"): its table (fleet.ts) and the Coordinate stream over it
// (stream.ts), put together for a call's passage through the gate
// (first_attempt.ts, run.ts). Each method is the table's answer, plus
// opening the stream at a target's first use or sending a report at once
// when the table says so. It never keeps Node running.

import type { Transport } from "@connectrpc/connect";
import type { Random } from "./clock.js";
import type { FailureType } from "./decision.js";
import { type FirstAnswer, FleetTable, type GateCall, type Gated, type Usage } from "./fleet.js";
import type { GateVerdict, Parked, Target } from "./gate.js";
import type { CoordinateResponse } from "./gen/policyd/v1/fleet_pb.js";
import { FleetStream, waitFor } from "./stream.js";
import { gateDecision } from "./texts.js";

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

/** @internal The gate table and the Coordinate stream of one client. */
export class Coordinator {
  readonly #table: FleetTable;
  readonly #stream: FleetStream;

  constructor(deps: CoordinatorDeps) {
    const { now, random, graceMs, parkLimitMs, debug } = deps;
    this.#table = new FleetTable({ now, random, graceMs, parkLimitMs, debug });
    this.#stream = new FleetStream(this.#table, deps);
  }

  /** Whether the daemon said it has no fleet memory (the stream is given up). */
  get off(): boolean {
    return this.#table.off;
  }

  /**
   * firstAnswer says whether a first attempt to target should wait for the
   * target's first assignment, and how long at most: at the target's first
   * call (and calls within 100 ms of it), while the stream is up or being
   * opened. It opens the stream, and sends the report that subscribes the
   * target at once.
   */
  firstAnswer(target: Target): FirstAnswer | undefined {
    const first = this.#table.firstAnswer(target, this.#stream.reachable);
    if (!first) return undefined;
    this.#stream.start();
    if (first.subscribe) this.#stream.flush();
    return first.wait;
  }

  /**
   * check gates a first attempt of call (its priority class and
   * input-token estimate) to target: remainingMs is the time left before
   * the caller's deadline (undefined: none). It counts the attempt as
   * admitted or shed and opens the stream at the first use.
   */
  check(target: Target, remainingMs: number | undefined, canFallBack: boolean, call: GateCall = {}): Gated {
    const gated = this.#table.check(target, remainingMs, canFallBack, call);
    if (!gated) return notGated(target);
    this.#stream.start();
    return gated;
  }

  /**
   * allowRetry says whether a retry to target that the fail-open policy
   * decided may go: the process's own budget for it allows one (policyd
   * away limits retries, never first attempts).
   */
  allowRetry(target: Target): boolean {
    return this.#table.allowRetry(target);
  }

  /**
   * daemonAnswered: a unary call got through, so policyd is back; a broken
   * stream reopens now rather than after its backoff.
   */
  daemonAnswered(): void {
    this.#stream.daemonAnswered();
  }

  /**
   * resume re-checks a call parked on target (Gate.resume), counting it as
   * check does once it leaves the park.
   */
  resume(target: Target, p: Parked): Gated {
    return this.#table.resume(target, p) ?? notGated(target);
  }

  /** checkRetry gates a retry to target (Gate.checkRetry); remainingMs as check's. */
  checkRetry(target: Target, remainingMs: number | undefined): Gated {
    return this.#table.checkRetry(target, remainingMs) ?? notGated(target);
  }

  /**
   * parkWait resolves at target's next assignment, at the parked call's
   * next re-check or end, or when signal aborts.
   */
  parkWait(target: Target, p: Parked, signal: AbortSignal): Promise<void> {
    const wake = this.#table.parkWake(target, p);
    if (!wake) return Promise.resolve();
    return waitFor(wake.woken, Math.max(1, wake.ms), signal);
  }

  /** A call parked on target was cancelled by its caller. */
  parkCancelled(target: Target, p: Parked): void {
    this.#table.parkCancelled(target, p);
  }

  /**
   * @internal takeReport takes the next report's usages out of the table,
   * as the stream does when it sends one (for the shared vectors,
   * clients/testdata/coordinate.json).
   */
  takeReport(): Usage[] {
    return this.#table.report();
  }

  /** @internal apply applies a CoordinateResponse as the stream does (for the shared vectors). */
  applyResponse(res: CoordinateResponse): void {
    this.#table.apply(res);
  }

  /** A retry of a call to target, carrying inputTokens (an estimate), is being sent. */
  retry(target: Target, inputTokens?: number): void {
    this.#table.retry(target, inputTokens);
  }

  /**
   * A request to target was sent: it is in flight until the returned
   * function is called (an admitted first attempt is, from its admission:
   * Gated.ended).
   */
  began(target: Target): () => void {
    return this.#table.began(target);
  }

  /** An attempt (first or retry) to target ended: ok, or failed. */
  outcome(target: Target, ok: boolean): void {
    if (this.#table.outcome(target, ok)) this.#stream.flush(); // a probe's answer: the fleet waits for it
  }

  /**
   * A response of a call to target said the call used `used` input tokens;
   * `estimated` is the estimate its attempt was counted at. Both go in the
   * next report that counts attempts (the daemon bounds them by those).
   */
  usage(target: Target, used: number, estimated: number): void {
    this.#table.usage(target, used, estimated);
  }

  /**
   * A response of a call to target said the call produced `tokens` output
   * tokens (the last count its body said). It goes in the next report that
   * counts attempts, as one call's.
   */
  output(target: Target, tokens: number): void {
    this.#table.output(target, tokens);
  }

  /**
   * A failure to target was decided locally (the fail-open policy). Only the
   * types the daemon's breakers count are reported (docs/clients.md).
   */
  failedLocally(target: Target, failureType: FailureType): void {
    this.#table.failedLocally(target, failureType);
  }

  /** Keeps the rate-limit headers of a success to target for its next report. */
  observeRateLimits(target: Target, headers: unknown): void {
    if (this.#table.observe(target, headers)) this.#stream.start();
  }

  /**
   * close sends what is left to report, half-closes the stream and waits
   * (at most closeTimeoutMs) for the daemon to end it, then cancels it.
   * The gate keeps answering from the table; nothing reopens the stream.
   */
  close(): Promise<void> {
    return this.#stream.close();
  }
}

/** The answer for a target the table does not gate (no provider, a full table, the fleet off): admit. */
function notGated(target: Target): Gated {
  const verdict: GateVerdict = { action: "admit", waitMs: 0, probe: false, stopReason: "", reason: "" };
  return { verdict, decision: (v) => gateDecision(v, target, undefined, 0) };
}
