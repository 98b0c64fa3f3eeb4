// The context ids the client makes: time-ordered UUIDv7 (RFC 9562), not
// random v4, so that the journal's B-tree primary keys grow at their right
// edge (see newContextId in src/journal.ts). A unit test: no daemon.

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, test } from "node:test";
import { newContextId } from "@policyd/client";

// Version 7 (the 13th hex digit) and the RFC 9562 variant (10xx: 8, 9, a, b).
const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** unix_ts_ms, the first 48 bits. */
function millisOf(id: string): number {
  return parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
}

describe("newContextId", () => {
  test("is a UUIDv7 with the RFC 9562 variant and the current time", () => {
    const before = Date.now();
    const ids = Array.from({ length: 100 }, () => newContextId());
    const after = Date.now();
    assert.equal(new Set(ids).size, ids.length);
    for (const id of ids) {
      assert.match(id, UUID_V7);
      const ms = millisOf(id);
      // The uuid package keeps ids monotonic: a clock stepping back can leave
      // the timestamp a little ahead of it.
      assert.ok(before <= ms && ms <= after + 1000, `${id}: timestamp ${ms}, want within [${before}, ${after + 1000}]`);
    }
  });

  test("ids made across milliseconds sort in creation order", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      if (i > 0) await sleep(2);
      ids.push(newContextId());
    }
    assert.deepEqual([...ids].sort(), ids, "ids made 2 ms apart do not sort (as strings) in creation order");
  });
});
