// clients/testdata/gate.json, the fleet gate's shared vectors (docs/clients.md,
// "The fleet gate"), replayed as internal/refgate/gate_vectors_test.go does:
// each case is one target's gate over a monotonic ms clock.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  type BreakerState,
  budgetText,
  Gate,
  type GateAssignment,
  type GateFallback,
  gateDecision,
  type Parked,
  type PriorityClass,
} from "@policyd/client";
import { readTestdata, targetOf, type VectorAssignment, type VectorFallback, type VectorTarget } from "./testdata.js";

interface Step {
  at_ms: number;
  assign?: VectorAssignment;
  abandon?: boolean;
  outcome?: "success" | "failure";
  retry?: Record<string, never>;
  gate?: {
    deadline_ms?: number;
    can_fall_back: boolean;
    draw: number;
    max_park_ms?: number;
    call?: string;
    class?: PriorityClass;
    in_flight?: number;
  };
  resume?: { call: string; draw: number; in_flight?: number };
  want?: {
    action: string;
    wait_ms?: number;
    probe?: boolean;
    stop_reason?: string;
    fallback?: VectorFallback;
    text?: string;
    waited_ms?: number;
    reason?: string;
    fleet?: {
      breaker: string;
      stopped: boolean;
      hold_remaining_ms: number;
      open_remaining_ms: number;
      reason: string;
    };
  };
}

interface Case {
  id: string;
  requires?: string;
  steps: Step[];
  counts?: { admitted: number; shed: number; parked?: number; batch_first_attempts?: number; fell_back?: number };
}

const vectors = readTestdata<{ cases: Case[]; target: VectorTarget }>("gate.json");
const TARGET = targetOf(vectors.target);
/** The requirements (a case's "requires") this gate meets. */
const MEETS = new Set(["park", "classes", "lease", "grants"]);
const BREAKERS = new Set<BreakerState>(["CLOSED", "OPEN", "HALF_OPEN"]);
const KINDS = new Set(["LARGER_CONTEXT_MODEL", "OTHER_PROVIDER", "OTHER_MODEL"]);

function fallbackOf(f: VectorFallback | null | undefined): GateFallback | undefined {
  if (!f) return undefined;
  assert.ok(KINDS.has(f.kind), `fallback kind ${f.kind}`);
  return { kind: f.kind as GateFallback["kind"], provider: f.provider, model: f.model, reason: f.reason };
}

describe("vectors: gate.json", () => {
  test("has cases", () => assert.ok(vectors.cases.length > 0));

  for (const c of vectors.cases) {
    test(c.id, { skip: c.requires && !MEETS.has(c.requires) ? `requires ${c.requires}` : false }, () => {
      const g = new Gate();
      g.target = `${TARGET.provider}/${TARGET.model}`;
      const parked = new Map<string, Parked>();
      c.steps.forEach((s, i) => {
        const now = s.at_ms;
        if (s.assign) {
          const a = s.assign;
          assert.ok(BREAKERS.has(a.breaker as BreakerState), `step ${i}: breaker ${a.breaker}`);
          const assignment: GateAssignment = {
            ttlMs: a.ttl_ms,
            breaker: a.breaker as BreakerState,
            holdMs: a.hold_ms,
            stopMs: a.stop_ms,
            admitFraction: a.admit_fraction,
            batchAdmitFraction: a.batch_admit_fraction ?? undefined,
            inFlightLease: a.in_flight_lease ?? undefined,
            pacePermits: a.pace_permits === undefined || a.pace_permits === null ? undefined : BigInt(a.pace_permits),
            probePermits: a.probe_permits,
            reason: a.reason,
            fallback: fallbackOf(a.fallback),
            parkHintMs: a.park_hint_ms ?? 0,
          };
          g.assign(now, assignment);
        } else if (s.abandon) {
          g.assign(now, undefined);
        } else if (s.outcome) {
          g.record(now, s.outcome === "success");
        } else if (s.retry) {
          const w = s.want!;
          assert.equal(g.allowRetry(now), w.action === "admit", `step ${i} at ${s.at_ms}ms: retry`);
          if (w.action === "stop") assert.equal(budgetText(TARGET), w.text, `step ${i}: text`);
        } else if (s.gate || s.resume) {
          let got;
          if (s.gate) {
            const { deadline_ms, can_fall_back, draw, max_park_ms } = s.gate;
            g.inFlight = s.gate.in_flight ?? 0;
            got = g.check(now, deadline_ms, can_fall_back, draw, max_park_ms, s.gate.class);
            if (got.parked) parked.set(s.gate.call ?? "", got.parked);
          } else {
            const p = parked.get(s.resume!.call);
            assert.ok(p, `step ${i}: no parked call ${s.resume!.call}`);
            g.inFlight = s.resume!.in_flight ?? 0;
            got = g.resume(now, p, s.resume!.draw);
          }
          const w = s.want!;
          const where = `step ${i} at ${s.at_ms}ms`;
          if (w.waited_ms !== undefined) assert.equal(got.waitedMs, w.waited_ms, `${where}: waited`);
          if (w.reason) assert.equal(got.reason, w.reason, `${where}: reason`);
          if (w.action === "park") assert.equal(got.stopReason, w.stop_reason, `${where}: stop reason`);
          assert.equal(got.action, w.action, `${where}: ${JSON.stringify(got)}`);
          assert.equal(got.waitMs, w.wait_ms ?? 0, `${where}: wait`);
          assert.equal(got.probe, w.probe ?? false, `${where}: probe`);
          if (w.action === "stop" || w.action === "fall_back") {
            assert.equal(got.stopReason, w.stop_reason, `${where}: stop reason`);
            // What the caller sees: the decision the call's error carries.
            const d = gateDecision(got, TARGET, g.assignment, now - g.receivedAt);
            assert.equal(d.stopText, w.text, `${where}: text`);
            const f = d.fleet!;
            assert.deepEqual(
              {
                breaker: f.breaker,
                stopped: f.stopped,
                hold_remaining_ms: f.holdRemainingMs,
                open_remaining_ms: f.openRemainingMs,
                reason: f.reason,
              },
              w.fleet,
              `${where}: fleet`,
            );
          }
          if (w.action === "fall_back") assert.deepEqual(got.fallback, fallbackOf(w.fallback), `${where}: fallback`);
        } else {
          assert.fail(`step ${i} does nothing`);
        }
      });
      if (c.counts) {
        const got: Record<string, number> = {
          admitted: g.admitted,
          shed: g.shed,
          parked: g.parks,
          fell_back: g.fellBack,
        };
        if (c.counts.batch_first_attempts !== undefined) got["batch_first_attempts"] = g.batchFirst;
        assert.deepEqual(got, { parked: 0, fell_back: 0, ...c.counts });
      }
    });
  }
});

describe("gate: beyond the vectors", () => {
  const open: GateAssignment = {
    ttlMs: 1000,
    breaker: "OPEN",
    holdMs: 0,
    stopMs: 0,
    admitFraction: 1,
    probePermits: 0,
    reason: "breaker open",
  };

  test("the grace is the constructor's", () => {
    const g = new Gate(500);
    g.assign(0, open);
    assert.equal(g.check(1499, undefined, false, 0.5).stopReason, "CIRCUIT_OPEN");
    assert.equal(g.check(1500, undefined, false, 0.5).action, "admit");
    assert.equal(new Gate(-1).expired(0), false, "a negative grace is the default");
  });

  test("a draw function is called only when the assignment admits a share", () => {
    const g = new Gate();
    let draws = 0;
    const draw = () => {
      draws++;
      return 0.9;
    };
    g.assign(0, { ...open, breaker: "CLOSED" });
    assert.equal(g.check(1, undefined, false, draw).action, "admit");
    assert.equal(draws, 0);
    g.assign(2, { ...open, breaker: "CLOSED", admitFraction: 0.5 });
    assert.equal(g.check(3, undefined, false, draw).stopReason, "FLEET_SHED");
    assert.equal(draws, 1);
  });

  test("a clock going backwards neither refills nor spends the budget", () => {
    const g = new Gate();
    g.record(10_000, false);
    assert.equal(g.tokens(5_000), 9);
    assert.equal(g.tokens(10_000), 9);
    assert.ok(Math.abs(g.tokens(20_000) - 10) < 1e-9);
  });
});
