// clients/testdata/limits.json: the fleet protocol's limits, which the
// daemon's validation and the Go and Python clients check too.

import assert from "node:assert/strict";
import { test } from "node:test";
import { FLEET_LIMITS } from "@policyd/client";
import { readTestdata } from "./testdata.js";

function camel(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(o).map(([k, v]) => [k.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()), v]),
  );
}

test("vectors: limits.json", () => {
  const v = readTestdata<{ protocol: Record<string, unknown>; client: Record<string, unknown> }>("limits.json");
  const protocol = camel(v.protocol);
  delete protocol.clientIdBytesMax; // the daemon's; the client sends its own id within it
  assert.deepEqual(
    { ...FLEET_LIMITS.protocol, rateLimitHeaderPrefixes: [...FLEET_LIMITS.protocol.rateLimitHeaderPrefixes] },
    protocol,
  );
  assert.deepEqual({ ...FLEET_LIMITS.client }, camel(v.client));
});
