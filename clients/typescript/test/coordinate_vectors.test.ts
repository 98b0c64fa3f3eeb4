// clients/testdata/coordinate.json: scripts of calls, outcomes and clock
// steps on one client's table, and the reports the stream sends; the Go and
// Python clients replay the same file.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { createRouterTransport } from "@connectrpc/connect";
import { Coordinator } from "@policyd/client";
import { BreakerState, CoordinateResponseSchema, FallbackKind } from "@policyd/client/proto";
import { readTestdata, targetOf, type VectorAssignment, type VectorTarget } from "./testdata.js";

interface Usage {
  elapsed_ms: number;
  admitted: number;
  shed: number;
  fell_back: number;
  succeeded: number;
  failed: number;
  retries: number;
  rate_limit_headers: Record<string, string>;
  /** 0 when absent. */
  first_attempt_input_tokens?: number;
  input_tokens_used?: number;
  input_tokens_estimated_for_used?: number;
  output_tokens_used?: number;
  output_tokens_used_calls?: number;
}

interface Step {
  at_ms: number;
  first_attempt?: { draw: number; can_fall_back?: boolean; input_tokens?: number };
  outcome?: "success" | "failure";
  /** A success's usage: what the response said the call used, the call's estimate, and its output. */
  usage?: { input_tokens_used?: number; estimated?: number; output_tokens_used?: number };
  failed_locally?: boolean;
  retry?: boolean;
  observe?: Record<string, string>;
  assign?: VectorAssignment;
  report?: Usage[];
}

const vectors = readTestdata<{ target: VectorTarget; cases: { id: string; steps: Step[] }[] }>("coordinate.json");
const target = targetOf(vectors.target);
const duration = (ms: number) => ({ seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1_000_000 });

describe("vectors: coordinate.json", () => {
  for (const c of vectors.cases) {
    test(c.id, async () => {
      let now = 0;
      let draw = 0.5;
      const co = new Coordinator({
        transport: createRouterTransport(() => {}),
        clientId: "vectors",
        profile: "",
        now: () => now,
        random: () => draw,
        graceMs: 10_000,
        parkLimitMs: 0,
        closeTimeoutMs: 0,
        debug: () => {},
        warnOnce: () => {},
      });
      await co.close(); // no stream: the script takes the reports
      c.steps.forEach((s, i) => {
        now = s.at_ms;
        const where = `step ${i} at ${s.at_ms}ms`;
        if (s.first_attempt) {
          draw = s.first_attempt.draw;
          co.check(target, undefined, s.first_attempt.can_fall_back ?? false, {
            inputTokens: s.first_attempt.input_tokens ?? 0,
          });
        } else if (s.outcome) {
          co.outcome(target, s.outcome === "success");
          if (s.usage?.estimated) co.usage(target, s.usage.input_tokens_used ?? 0, s.usage.estimated);
          if (s.usage?.output_tokens_used) co.output(target, s.usage.output_tokens_used);
        } else if (s.failed_locally) {
          co.failedLocally(target, "OVERLOADED");
        } else if (s.retry) {
          co.retry(target);
        } else if (s.observe) {
          co.observeRateLimits(target, s.observe);
        } else if (s.assign) {
          const a = s.assign;
          co.applyResponse(
            create(CoordinateResponseSchema, {
              assignments: [
                {
                  target,
                  ttl: duration(a.ttl_ms),
                  breaker: BreakerState[a.breaker as keyof typeof BreakerState],
                  hold: duration(a.hold_ms),
                  stop: duration(a.stop_ms),
                  admitFraction: a.admit_fraction,
                  probePermits: a.probe_permits,
                  reason: a.reason,
                  fallback: a.fallback
                    ? { ...a.fallback, kind: FallbackKind[a.fallback.kind as keyof typeof FallbackKind] }
                    : undefined,
                },
              ],
            }),
          );
        } else if (s.report) {
          const got = co.takeReport().map((u) => ({
            elapsed_ms: Number(u.elapsed?.seconds ?? 0n) * 1000 + (u.elapsed?.nanos ?? 0) / 1e6,
            admitted: Number(u.admitted),
            shed: Number(u.shed),
            fell_back: Number(u.fellBack),
            succeeded: Number(u.succeeded),
            failed: Number(u.failed),
            retries: Number(u.retries),
            rate_limit_headers: { ...(u.rateLimitHeaders ?? {}) },
            first_attempt_input_tokens: Number(u.firstAttemptInputTokens ?? 0n),
            input_tokens_used: Number(u.inputTokensUsed ?? 0n),
            input_tokens_estimated_for_used: Number(u.inputTokensEstimatedForUsed ?? 0n),
            output_tokens_used: Number(u.outputTokensUsed ?? 0n),
            output_tokens_used_calls: Number(u.outputTokensUsedCalls ?? 0n),
          }));
          const want = s.report.map((u) => ({
            ...u,
            first_attempt_input_tokens: u.first_attempt_input_tokens ?? 0,
            input_tokens_used: u.input_tokens_used ?? 0,
            input_tokens_estimated_for_used: u.input_tokens_estimated_for_used ?? 0,
            output_tokens_used: u.output_tokens_used ?? 0,
            output_tokens_used_calls: u.output_tokens_used_calls ?? 0,
          }));
          assert.deepEqual(got, want, where);
        } else {
          assert.fail(`${where} does nothing`);
        }
      });
    });
  }
});
