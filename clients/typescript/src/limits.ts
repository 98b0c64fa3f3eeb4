// The fleet protocol's limits and the stream's timing, in one place
// (clients/testdata/limits.json holds the same numbers, which the daemon's
// validation and the Go and Python clients check too).

import { GATE_GRACE_MS } from "./gate.js";

/** @internal The fleet protocol's limits (ms, bytes, counts). */
export const FLEET_LIMITS = Object.freeze({
  protocol: Object.freeze({
    /** Targets in one report message. */
    usagesPerMessage: 256,
    /** Each count of one report, and admitted and shed together (policyd: 1,000 a second of it, at least a second); the rest waits for the next. */
    countMax: 1000,
    /** A report's elapsed time. */
    elapsedMaxMs: 10 * 60_000,
    /** Rate-limit headers of one target's report, and each value's bytes. */
    rateLimitHeadersMax: 16,
    rateLimitValueBytesMax: 64,
    rateLimitHeaderPrefixes: Object.freeze(["x-ratelimit-", "anthropic-ratelimit-"]),
    /** Targets one stream subscribes to: more are not gated. */
    targetsPerStream: 1024,
    /** A target's provider and model, and its key id (validate.MaxFieldBytes, MaxLabelBytes). */
    targetFieldBytesMax: 8 << 10,
    keyIdBytesMax: 128,
    /** A report's input tokens for each call it counts (first attempts, retries): a larger estimate is cut to it. */
    inputTokensPerCallMax: 2_000_000,
  }),
  client: Object.freeze({
    elapsedMinMs: 1,
    /** Reports: about once a second, ± 10 %. */
    reportIntervalMs: 1000,
    reportJitter: 0.1,
    /** A target's first call waits this long at most for its first assignment. */
    firstAssignmentWaitMs: 100,
    gateGraceMs: GATE_GRACE_MS,
    /** Reconnects: 1 s doubling to 30 s, full jitter. */
    reconnectInitialMs: 1000,
    reconnectMaxMs: 30_000,
  }),
});
