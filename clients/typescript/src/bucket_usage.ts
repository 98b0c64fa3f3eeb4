// What a target's report says of its calls beyond the gate's counts
// (proto/policyd/v1/fleet.proto, BucketUsage): the input-token estimates of
// first attempts and retries, the batch class's share of the first attempts
// admitted and shed, and the calls in flight now. The coordinator
// (coordinate.ts) keeps one per target and adds its fields to each report.

import type { Gate } from "./gate.js";
import { FLEET_LIMITS } from "./limits.js";

/**
 * The most input tokens a report may carry for each call it counts (first
 * attempts admitted and shed, retries; clients/testdata/limits.json); a
 * larger estimate is cut to it.
 */
const MAX_TOKENS_PER_CALL = FLEET_LIMITS.protocol.inputTokensPerCallMax;

/** @internal The fields CallUsage adds to a report. */
export interface UsageFields {
  firstAttemptInputTokens: bigint;
  retryInputTokens: bigint;
  batchAdmitted: bigint;
  batchShed: bigint;
  inFlight: bigint;
}

/** @internal One target's token estimates, batch counts and calls in flight, not yet reported. */
export class CallUsage {
  #firstTokens = 0;
  #retryTokens = 0;
  /** The gate's batch counts (cumulative) that reports have carried so far. */
  #batchAdmittedSent = 0;
  #batchShedSent = 0;
  /** Calls in flight now, and as the last report said. */
  inFlight = 0;
  #inFlightSent = 0;

  /** A first attempt carrying tokens reached the gate's first check (admitted, shed or parked). */
  first(tokens: number | undefined): void {
    this.#firstTokens += tokensOf(tokens);
  }

  /** A retry carrying tokens is being sent. */
  retry(tokens: number | undefined): void {
    this.#retryTokens += tokensOf(tokens);
  }

  /** A call was sent: it is in flight until the returned function is called (once). */
  began(): () => void {
    this.inFlight++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.inFlight--;
    };
  }

  /** Whether the next report has something of this to say. */
  pending(gate: Gate): boolean {
    return (
      this.#firstTokens > 0 ||
      this.#retryTokens > 0 ||
      gate.batchAdmitted > this.#batchAdmittedSent ||
      gate.batchShed > this.#batchShedSent ||
      this.inFlight !== this.#inFlightSent
    );
  }

  /**
   * take takes the report's fields out: admitted, shed and retries are the
   * counts the same report carries, which bound the batch counts and the
   * tokens (the rest waits for the next report).
   */
  take(gate: Gate, admitted: number, shed: number, retries: number): UsageFields {
    const batchAdmitted = Math.min(gate.batchAdmitted - this.#batchAdmittedSent, admitted);
    const batchShed = Math.min(gate.batchShed - this.#batchShedSent, shed);
    this.#batchAdmittedSent += batchAdmitted;
    this.#batchShedSent += batchShed;
    const first = Math.min(this.#firstTokens, (admitted + shed) * MAX_TOKENS_PER_CALL);
    const retry = Math.min(this.#retryTokens, retries * MAX_TOKENS_PER_CALL);
    this.#firstTokens -= first;
    this.#retryTokens -= retry;
    this.#inFlightSent = this.inFlight;
    return {
      firstAttemptInputTokens: BigInt(first),
      retryInputTokens: BigInt(retry),
      batchAdmitted: BigInt(batchAdmitted),
      batchShed: BigInt(batchShed),
      inFlight: BigInt(this.inFlight),
    };
  }
}

/** A call's token estimate as a report counts it: a whole number in [0, MAX_TOKENS_PER_CALL]. */
function tokensOf(n: number | undefined): number {
  if (n === undefined || !Number.isFinite(n) || n <= 0) return 0;
  return Math.min(MAX_TOKENS_PER_CALL, Math.ceil(n));
}
