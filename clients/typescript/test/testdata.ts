// The shared client vectors (clients/testdata, docs/clients.md), which the
// Go and Python suites read too: reading a file, and the shapes the fleet's
// files (gate.json, coordinate.json) have in common.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Target } from "@policyd/client";

// The tests run from build/test/; the vectors sit in clients/testdata.
const TESTDATA = fileURLToPath(new URL("../../../testdata/", import.meta.url));

/** The vector file name, parsed (its shape is the caller's to check). */
export function readTestdata<T>(name: string): T {
  return JSON.parse(readFileSync(TESTDATA + name, "utf8")) as T;
}

/** The target a fleet vector file's cases name. */
export interface VectorTarget {
  provider: string;
  model: string;
  key_id: string;
}

export function targetOf(t: VectorTarget): Target {
  return { provider: t.provider, model: t.model, keyId: t.key_id };
}

export interface VectorFallback {
  kind: string;
  provider: string;
  model: string;
  reason: string;
}

/** An assignment in the fleet vectors: durations in ms from its receipt. */
export interface VectorAssignment {
  ttl_ms: number;
  breaker: string;
  hold_ms: number;
  stop_ms: number;
  admit_fraction: number;
  batch_admit_fraction?: number | null;
  in_flight_lease?: number | null;
  pace_permits?: number | null;
  probe_permits: number;
  reason: string;
  fallback?: VectorFallback | null;
  park_hint_ms?: number;
}
